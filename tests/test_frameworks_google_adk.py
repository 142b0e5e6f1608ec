"""google-adk, GenAI convention, read right in its default schema and in its legacy one.

google-adk 2.13 needs `opentelemetry-sdk<=1.44` and is not installed beside the other test dependencies,
so its runs are recorded by ADK itself in a separate environment (record_frameworks.py: an `LlmAgent`
named support_agent run by ADK's `InMemoryRunner`, its model a scripted `BaseLlm`, ADK's model
interface) and replayed here through a real SDK TracerProvider (recorded_spans.py).

What ADK writes (google/adk/telemetry/tracing.py, trace_tool_call):

- by default (schema 2, `otel_semconv_1_44`): `execute_tool` spans without arguments (those need
  OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY), under `invoke_agent support_agent` under
  `invoke_workflow support_agent`; one `generate_content` span per model call, token counts as strings;
- with ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1 (legacy, supported until 2027-03-31): the arguments in
  `gcp.vertex.agent.tool_call_args` (ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS defaults on) and `call_llm`
  spans beside the `generate_content` ones, with the same usage but no operation name;
- legacy with ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false: `tool_call_args` and `tool_response` are the
  placeholder "{}", which is no empty call: unknown.
"""
from __future__ import annotations

import pytest

import genai_frameworks as gf
import recorded_google_adk
from genai_frameworks import AGENT_NAME, INPUT_TOKENS, MODEL, OUTPUT_TOKENS
from otel_agent_eval import tool_call_from_span
from recorded_spans import replay
from spans import finished_span

VARIANTS = {"default": recorded_google_adk.SPANS, "legacy": recorded_google_adk.SPANS_LEGACY,
            "legacy_no_content": recorded_google_adk.SPANS_LEGACY_NO_CONTENT}
CAPTURED = {"default": False, "legacy": True, "legacy_no_content": False}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def captured(request) -> tuple[str, gf.Capture]:
    with gf.Capture() as captured:
        replay(VARIANTS[request.param], captured.provider)
    return request.param, captured


def test_the_recording_is_what_adk_writes(captured):
    variant, captured = captured
    tools = [s for s in captured.spans if s.name.startswith("execute_tool")]
    assert all("gen_ai.tool.call.arguments" not in s.attributes for s in tools)
    legacy_args = [s.attributes.get("gcp.vertex.agent.tool_call_args") for s in tools]
    if variant == "default":
        assert legacy_args == [None] * len(gf.RUN)
    elif variant == "legacy_no_content":
        assert legacy_args == ["{}"] * len(gf.RUN)
        assert [s.attributes["gcp.vertex.agent.tool_response"] for s in tools] == ["{}"] * len(gf.RUN)
    else:
        assert all(arguments not in (None, "{}") for arguments in legacy_args)


def test_each_tool_span_is_read_once_with_its_arguments_where_adk_puts_them(captured):
    variant, captured = captured
    records = [r for r in map(tool_call_from_span, captured.spans) if r is not None]
    assert [r.name for r in records] == gf.TOOL_NAMES
    assert [r.call_id for r in records] == [s.call_id for s in gf.RUN]
    expected = [a for _, a in gf.CALLS] if CAPTURED[variant] else [None] * len(gf.RUN)
    assert [r.arguments for r in records] == expected  # never the placeholder {}
    for record in records:
        assert record.arguments_captured is CAPTURED[variant]
        assert record.convention == "gen_ai" and record.problems == [] and record.error is None
        assert record.agent == AGENT_NAME  # ADK names the agent on its tool spans too


def test_every_call_is_scored_once_under_the_agent_label(captured):
    _, captured = captured
    assert [(r.name, r.agent) for r, _ in captured.scored] == [(t, AGENT_NAME) for t in gf.TOOL_NAMES]
    gf.assert_calls_counted_once(captured, AGENT_NAME)


def test_one_run_and_one_llm_call_per_model_call(captured):
    _, captured = captured
    (run,) = captured.runs
    assert (run.agent, run.kind, run.status, run.task) == (AGENT_NAME, "agent", "ok", "faq")
    assert [r.name for r in run.tool_calls] == gf.TOOL_NAMES
    # generate_content spans only: legacy call_llm spans repeat the usage without an operation name
    assert len(run.llm_calls) == gf.MODEL_CALLS
    assert {(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls} == {(MODEL, INPUT_TOKENS, OUTPUT_TOKENS)}


def test_arguments_are_checked_where_captured_and_unknown_elsewhere(captured):
    variant, captured = captured
    (run,) = captured.runs
    e = run.evaluation
    assert e.completed and e.invalid_calls == () and e.redundant_calls == () and e.unpriced_models == ()
    if CAPTURED[variant]:
        assert e.argument_validity == 1.0 and e.arguments_not_captured == ()
    else:
        assert e.argument_validity is None and e.arguments_not_captured == tuple(gf.TOOL_NAMES)
    assert e.spurious_calls == ("web_search",)


def test_no_self_errors(captured):
    variant, captured = captured
    assert gf.self_errors(captured.registry) == {}
    tools = [s for s in captured.forwarded if "agent_eval.outcome" in (s.attributes or {})]
    flags = [s.attributes.get("agent_eval.arguments_captured") for s in tools]
    assert flags == [None if CAPTURED[variant] else False] * len(gf.RUN)


# Spans shaped as google/adk/telemetry/tracing.py (google-adk 2.13) writes them where the recorded run does not
# reach: trace_merged_tool_calls, on the span `execute_tool (merged)` that _batch_executor.py opens when one
# model reply calls several tools in parallel (each call has its own execute_tool span besides).
MERGED_DEFAULT = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "(merged tools)",
                  "gen_ai.tool.description": "(merged tools)", "gen_ai.tool.call.id": "evt-1",
                  "gcp.vertex.agent.event_id": "evt-1"}
MERGED_LEGACY = {**MERGED_DEFAULT, "gcp.vertex.agent.tool_call_args": "N/A",
                 "gcp.vertex.agent.tool_response": '[{"id": "call_1", "name": "local_index"}]',
                 "gcp.vertex.agent.llm_request": "{}", "gcp.vertex.agent.llm_response": "{}"}


@pytest.mark.parametrize("attributes", [MERGED_DEFAULT, MERGED_LEGACY], ids=["default", "legacy"])
def test_the_merged_span_of_parallel_calls_is_no_tool_call(attributes):
    assert tool_call_from_span(finished_span(attributes, name="execute_tool (merged)")) is None


def test_an_empty_call_with_content_on_is_captured_empty():
    """The placeholder is "{}" for both arguments and response; a real response makes "{}" a real empty call."""
    legacy = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_time", "gcp.vertex.agent.llm_request": "{}",
              "gcp.vertex.agent.llm_response": "{}", "gcp.vertex.agent.tool_call_args": "{}",
              "gcp.vertex.agent.tool_response": '{"result": "12:00"}'}
    record = tool_call_from_span(finished_span(legacy, name="execute_tool get_time"))
    assert record.arguments == {} and record.arguments_captured
    record = tool_call_from_span(finished_span({**legacy, "gcp.vertex.agent.tool_response": "{}"}))
    assert record.arguments is None and not record.arguments_captured

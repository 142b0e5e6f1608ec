"""strands-agents, GenAI convention, in its default telemetry settings, read right.

strands-agents cannot be installed beside the other test dependencies (it needs `mcp<2.2`, and
`opentelemetry-instrumentation-threading`, which has no release for the SDK used here), so its run is
recorded by strands itself in a separate environment (record_frameworks.py: an `Agent` named
support_agent over strands' real `OpenAIModel`, its AsyncOpenAI client served canned streamed chat
completions in process) and replayed here through a real SDK TracerProvider (recorded_spans.py).

By default strands writes a tool's input only in the tool span's `gen_ai.tool.message` event
(`content`, JSON) and the tool's input schema in `gen_ai.tool.json_schema`; no
`gen_ai.tool.call.arguments`. Its `invoke_agent` span repeats the summed token usage of its `chat`
spans, which must not count as another model call.
"""
from __future__ import annotations

import json

import pytest

import genai_frameworks as gf
import recorded_strands
from genai_frameworks import AGENT_NAME, INPUT_TOKENS, MODEL, OUTPUT_TOKENS
from otel_agent_eval import tool_call_from_span
from otel_agent_eval.core.recognize import attribute_dict, llm_call_of
from recorded_spans import record, replay

SCHEMA = {"properties": {"query": {"description": "What to look for.", "type": "string"}}, "required": ["query"],
          "type": "object"}


@pytest.fixture(scope="module")
def captured() -> gf.Capture:
    with gf.Capture() as captured:
        replay(recorded_strands.SPANS, captured.provider)
    return captured


def test_the_recording_is_strands_default_output(captured):
    tools = [s for s in captured.spans if s.name.startswith("execute_tool")]
    assert [s.attributes["gen_ai.tool.name"] for s in tools] == gf.TOOL_NAMES
    for span, (_, arguments) in zip(tools, gf.CALLS):
        assert "gen_ai.tool.call.arguments" not in span.attributes  # not on the span by default
        (message,) = [e for e in span.events if e.name == "gen_ai.tool.message"]
        assert json.loads(message.attributes["content"]) == arguments and message.attributes["role"] == "tool"
        assert json.loads(span.attributes["gen_ai.tool.json_schema"]) == SCHEMA


def test_the_replay_gives_back_the_recording(captured):
    def shape(recording):
        return [{k: v for k, v in s.items() if k not in ("start", "end", "events")} | {
            "events": [{k: v for k, v in e.items() if k != "at"} for e in s["events"]]} for s in recording]

    assert shape(record(captured.spans)) == shape(recorded_strands.SPANS)
    durations = [(s["end"] - s["start"]) for s in recorded_strands.SPANS]
    assert [s.end_time - s.start_time for s in captured.spans] == durations


def test_each_tool_span_is_read_once_with_its_arguments_from_the_event(captured):
    records = [r for r in map(tool_call_from_span, captured.spans) if r is not None]
    assert [(r.name, r.arguments) for r in records] == gf.CALLS
    assert [r.call_id for r in records] == [s.call_id for s in gf.RUN]
    for record_ in records:
        assert record_.convention == "gen_ai" and record_.arguments_captured and record_.problems == []
        assert record_.error is None and record_.tool_call.input_parameters == record_.arguments
        assert record_.parameters_schema == SCHEMA  # gen_ai.tool.json_schema


def test_every_call_is_scored_once_under_the_agent_label(captured):
    assert [(r.name, r.arguments, r.agent) for r, _ in captured.scored] == [(*call, AGENT_NAME) for call in gf.CALLS]
    gf.assert_calls_counted_once(captured, AGENT_NAME)


def test_one_run_with_its_calls_in_order_and_one_llm_call_per_model_call(captured):
    (run,) = captured.runs
    assert (run.agent, run.kind, run.status, run.task) == (AGENT_NAME, "agent", "ok", "faq")
    assert [(r.name, r.arguments) for r in run.tool_calls] == gf.CALLS
    assert len(run.llm_calls) == gf.MODEL_CALLS
    assert {(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls} == {(MODEL, INPUT_TOKENS, OUTPUT_TOKENS)}
    (root,) = [s for s in captured.spans if s.parent is None]
    assert root.attributes["gen_ai.usage.input_tokens"] == gf.MODEL_CALLS * INPUT_TOKENS  # the run's sum
    assert llm_call_of(attribute_dict(root)) is None


def test_the_arguments_are_checked_and_no_call_is_a_repeat(captured):
    (run,) = captured.runs
    e = run.evaluation
    assert e.completed and e.argument_validity == 1.0 and e.invalid_calls == ()
    assert e.arguments_not_captured == () and e.redundant_calls == () and e.unpriced_models == ()
    assert e.spurious_calls == ("web_search",)  # routed by its agent name to the faq task


def test_no_self_errors(captured):
    assert gf.self_errors(captured.registry) == {}
    tools = [s for s in captured.forwarded if "agent_eval.outcome" in (s.attributes or {})]
    assert [s.attributes["agent_eval.agent"] for s in tools] == [AGENT_NAME] * len(gf.RUN)
    assert all("agent_eval.arguments_captured" not in s.attributes for s in tools)  # set only when not captured


def test_wrong_arguments_in_the_event_fail_the_tools_schema():
    """The event's content is the arguments: a call without `query` fails local_index's schema."""
    spans = [json.loads(json.dumps(s)) for s in recorded_strands.SPANS]
    (first,) = [s for s in spans if s["attributes"].get("gen_ai.tool.call.id") == "call_1"]
    (message,) = [e for e in first["events"] if e["name"] == "gen_ai.tool.message"]
    message["attributes"]["content"] = json.dumps({"q": "return policy"})
    with gf.Capture() as captured:
        replay(spans, captured.provider)
    (run,) = captured.runs
    assert run.tool_calls[0].arguments == {"q": "return policy"}
    assert run.evaluation.argument_validity == pytest.approx(2 / 3)
    assert "'query' is a required property" in run.evaluation.invalid_calls[0]


def test_arguments_masked_by_strands_redaction_are_unknown_not_invalid():
    """strands' opt-in redaction leaves `[REDACTED]` in the tool message: the arguments are not captured
    (left out of argument validity, listed as such), not plain input that fails the tool's schema."""
    masked = [{**s, "events": [{**e, "attributes": {**e["attributes"], "content": "[REDACTED]"}}
                               if e["name"] == "gen_ai.tool.message" else e for e in s["events"]]}
              for s in recorded_strands.SPANS]
    with gf.Capture() as captured:
        replay(masked, captured.provider)
    records = [r for r in map(tool_call_from_span, captured.spans) if r is not None]
    assert records and all(r.arguments is None and not r.arguments_captured for r in records)
    (run,) = captured.runs
    assert run.evaluation.argument_validity is None and run.evaluation.invalid_calls == ()
    assert len(run.evaluation.arguments_not_captured) == len(records)

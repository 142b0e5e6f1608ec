"""autogen-agentchat, GenAI convention, in its default settings, read right: arguments are never captured.

autogen-core cannot be installed beside the other test dependencies (it needs `protobuf~=5.29`; the OTLP
exporters here need 7), so its run is recorded by autogen itself in a separate environment
(record_frameworks.py: an `AssistantAgent` named support_agent over autogen's own test model,
`ReplayChatCompletionClient`) and replayed here through a real SDK TracerProvider (recorded_spans.py).

autogen writes a `create_agent support_agent` span (a trace of its own, with no calls), then
`invoke_agent support_agent` with one `execute_tool` span per call: `gen_ai.tool.name` and
`gen_ai.tool.call.id`, never the arguments. Its model clients write no model spans (only an
instrumentation of the model's SDK would), so the run has no LLM calls.
"""
from __future__ import annotations

import pytest

import genai_frameworks as gf
import recorded_autogen
from genai_frameworks import AGENT_NAME
from otel_agent_eval import tool_call_from_span
from recorded_spans import replay


@pytest.fixture(scope="module")
def captured() -> gf.Capture:
    with gf.Capture() as captured:
        replay(recorded_autogen.SPANS, captured.provider)
    return captured


def test_the_recording_is_what_autogen_writes(captured):
    operations = [s.attributes["gen_ai.operation.name"] for s in captured.spans]
    assert sorted(operations) == sorted(["create_agent", "invoke_agent"] + ["execute_tool"] * len(gf.RUN))
    tools = [s for s in captured.spans if s.name.startswith("execute_tool")]
    assert all("gen_ai.tool.call.arguments" not in s.attributes and not s.events for s in tools)


def test_each_tool_span_is_read_once_its_arguments_unknown(captured):
    records = [r for r in map(tool_call_from_span, captured.spans) if r is not None]
    assert [r.name for r in records] == gf.TOOL_NAMES
    assert [r.call_id for r in records] == [s.call_id for s in gf.RUN]
    for record in records:
        assert record.convention == "gen_ai" and record.problems == [] and record.error is None
        assert record.arguments is None and not record.arguments_captured


def test_every_call_is_scored_once_under_the_agent_label(captured):
    # the tool spans name no agent: the label comes from the invoke_agent span above them
    assert [(r.name, r.agent) for r, _ in captured.scored] == [(t, AGENT_NAME) for t in gf.TOOL_NAMES]
    gf.assert_calls_counted_once(captured, AGENT_NAME)


def test_one_run_and_the_create_agent_span_is_none(captured):
    (run,) = captured.runs
    assert (run.agent, run.kind, run.status, run.task) == (AGENT_NAME, "agent", "ok", "faq")
    (root,) = [s for s in captured.spans if s.context.span_id == run.root_span_id]
    assert root.name == f"invoke_agent {AGENT_NAME}"
    assert [r.name for r in run.tool_calls] == gf.TOOL_NAMES
    assert run.llm_calls == []  # autogen writes no model spans
    (runs,) = captured.samples("agent_eval_runs_total")
    assert runs.value == 1


def test_unknown_arguments_are_neither_valid_nor_invalid_nor_repeats(captured):
    (run,) = captured.runs
    e = run.evaluation
    assert e.completed and e.argument_validity is None and e.invalid_calls == ()
    assert e.arguments_not_captured == tuple(gf.TOOL_NAMES) and e.redundant_calls == ()
    assert e.spurious_calls == ("web_search",)


def test_no_self_errors(captured):
    assert gf.self_errors(captured.registry) == {}
    tools = [s for s in captured.forwarded if "agent_eval.outcome" in (s.attributes or {})]
    assert [s.attributes["agent_eval.agent"] for s in tools] == [AGENT_NAME] * len(gf.RUN)
    assert [s.attributes["agent_eval.arguments_captured"] for s in tools] == [False] * len(gf.RUN)

"""Arguments a span does not carry are unknown, not empty: neither valid nor invalid, never a repeat.

google-adk, semantic-kernel and Microsoft agent-framework (default settings), autogen-agentchat and
strands-agents leave `gen_ai.tool.call.arguments` out of their tool spans. Read as `{}`, every such
call failed its tool's JSON Schema ("'query' is a required property") and two different calls of
one tool looked like a repeat.
"""
from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import use_span
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, tool_call_from_span
from spans import finished_span

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}
QUERY = json.dumps({"query": "return policy"})


@pytest.mark.parametrize("attributes", [
    TOOL,  # GenAI, content capture off
    {"openinference.span.kind": "TOOL", "tool.name": "local_index"},  # OpenInference, hide_inputs
    {"traceloop.span.kind": "tool", "traceloop.entity.name": "local_index"},  # OpenLLMetry, TRACELOOP_TRACE_CONTENT=false
], ids=["gen_ai", "openinference", "openllmetry"])
def test_a_span_without_arguments_says_they_were_not_captured(attributes):
    record = tool_call_from_span(finished_span(attributes))
    assert record.arguments is None and not record.arguments_captured
    assert record.tool_call.input_parameters is None and record.problems == []


def test_captured_empty_arguments_stay_empty():
    record = tool_call_from_span(finished_span({**TOOL, "gen_ai.tool.call.arguments": "{}"}))
    assert record.arguments == {} and record.arguments_captured
    assert record.tool_call.input_parameters == {}


class Agent:
    """A support agent on the real SDK, scored live by the processor, its run root forwarded enriched."""

    def __init__(self) -> None:
        self.exported, self.runs, self.registry = InMemorySpanExporter(), [], CollectorRegistry()
        processor = AgentEvalSpanProcessor(registry=self.registry, forward_to=SimpleSpanProcessor(self.exported),
                                           on_run=self.runs.append)
        self.provider = TracerProvider()
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("support")

    def run(self, *arguments: str | None):
        """One `invoke_agent support_agent` calling local_index once per item (None: not captured)."""
        with self.tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}) as agent:
            for value in arguments:
                attrs = dict(TOOL) if value is None else {**TOOL, "gen_ai.tool.call.arguments": value}
                with use_span(self.tracer.start_span("execute_tool local_index", attributes=attrs), end_on_exit=True):
                    pass
        self.provider.force_flush()
        (run,) = self.runs
        root = next(s for s in self.exported.get_finished_spans() if s.context.span_id == agent.context.span_id)
        return run, root.attributes


def test_calls_without_arguments_are_neither_valid_nor_invalid_nor_redundant():
    run, root = Agent().run(None, None)
    e = run.evaluation
    assert e.argument_validity is None and e.invalid_calls == ()
    assert e.redundant_calls == () and e.call_precision == 1.0
    assert e.arguments_not_captured == ("local_index", "local_index")
    assert root["agent_eval.run.arguments_not_captured"] == 2 and "agent_eval.run.argument_validity" not in root


def test_unknown_arguments_cost_no_health():
    """The same run, arguments captured and valid or not captured: the same health (validity is left out,
    not counted as a failure)."""
    captured, _ = Agent().run(QUERY)
    unknown, _ = Agent().run(None)
    assert captured.evaluation.argument_validity == 1.0 and unknown.evaluation.argument_validity is None
    assert unknown.evaluation.health == pytest.approx(captured.evaluation.health, abs=0.01)  # runs differ by microseconds


def test_only_the_captured_calls_are_checked():
    run, root = Agent().run(QUERY, None, json.dumps({"q": "typo"}))
    e = run.evaluation
    assert e.argument_validity == 0.5 and len(e.invalid_calls) == 1 and "'query' is a required property" in e.invalid_calls[0]
    assert e.arguments_not_captured == ("local_index",)
    assert root["agent_eval.run.argument_validity"] == 0.5


def test_a_captured_repeat_is_still_redundant_and_an_unknown_call_between_changes_nothing():
    run, _ = Agent().run(QUERY, None, QUERY)
    assert run.evaluation.redundant_calls == ("local_index",)


def test_the_forwarded_tool_span_says_its_arguments_were_not_captured():
    agent = Agent()
    agent.run(None, QUERY)
    tools = [s for s in agent.exported.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [s.attributes.get("agent_eval.arguments_captured") for s in tools] == [False, None]  # set only when unknown


def test_a_catalogs_own_ignore_tools_decides_which_calls_are_scored(tmp_path):
    """The catalog's list replaces the default: `think` is ignored, `final_answer` scored (as an unknown tool)."""
    packaged = _packaged_text()
    default = "ignore_tools: [final_answer, final_output, Delegate work to coworker, Ask question to coworker]"
    assert default in packaged
    path = tmp_path / "catalog.yaml"
    path.write_text(packaged.replace(default, "ignore_tools: [think]"))
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(str(path), registry=registry, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for name in ("think", "final_answer", "local_index"):
        tracer.start_span(f"execute_tool {name}", attributes={**TOOL, "gen_ai.tool.name": name}).end()
    scored = {dict(k)["gen_ai_tool_name"] for k in _series(registry, "agent_eval_tool_calls_total")}
    assert scored == {"final_answer", "local_index"}
    assert registry.get_sample_value("agent_eval_processor_spans_ignored_total") == 1
    provider.shutdown()


def _packaged_text() -> str:
    from importlib.resources import files

    return files("otel_agent_eval.config").joinpath("default_catalog.yaml").read_text()


def _series(registry, name):
    return {tuple(sorted(s.labels.items())): s.value for f in registry.collect() for s in f.samples if s.name == name}

"""An MCP `tools/call` span inside the framework's own tool span is one call, not two.

The GenAI conventions for MCP give the client's `tools/call {tool}` span
`gen_ai.operation.name=execute_tool` too; frameworks that call tools over MCP (openai-agents,
pydantic-ai, strands) wrap it in their own `execute_tool {tool}` span. Counted twice, every MCP
call would double the tool's cost and calls, and the run would hold a "redundant" repeat.
"""
from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import use_span
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}
ARGS = json.dumps({"query": "return policy"})


def tool(name: str) -> dict[str, str]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.arguments": ARGS}


def mcp_call(name: str) -> dict[str, str]:
    return {**tool(name), "mcp.method.name": "tools/call", "mcp.session.id": "s-1"}


class App:
    def __init__(self) -> None:
        self.exported, self.runs, self.calls, self.registry = InMemorySpanExporter(), [], [], CollectorRegistry()
        processor = AgentEvalSpanProcessor(registry=self.registry, forward_to=SimpleSpanProcessor(self.exported),
                                           on_run=self.runs.append, on_call=lambda record, score: self.calls.append(record))
        self.provider = TracerProvider()
        self.provider.add_span_processor(processor)
        self.tracer = self.provider.get_tracer("app")

    def span(self, name: str, attributes: dict[str, str]):
        return use_span(self.tracer.start_span(name, attributes=attributes), end_on_exit=True)

    def counter(self, name: str) -> float:
        self.provider.force_flush()
        return self.registry.get_sample_value(f"agent_eval_processor_{name}_total") or 0.0


def test_an_mcp_call_inside_the_framework_tool_span_is_scored_once():
    app = App()
    with app.span("invoke_agent support_agent", AGENT):
        with app.span("execute_tool local_index", tool("local_index")):
            with app.span("tools/call local_index", mcp_call("local_index")):
                pass
    app.provider.force_flush()
    assert [r.name for r in app.calls] == ["local_index"]
    (run,) = app.runs
    assert [r.name for r in run.tool_calls] == ["local_index"] and run.evaluation.redundant_calls == ()
    assert app.counter("nested_tool_spans") == 1 and app.counter("spans_scored") == 1
    assert app.registry.get_sample_value("agent_eval_tool_calls_total", {
        "gen_ai_tool_name": "local_index", "gen_ai_agent_name": "support_agent", "task": "faq",
        "outcome": "optimal", "verdict": "pass", "optimal_tool": "local_index"}) == 1
    # every span still leaves; the call's scores travel on the MCP span, where it was scored
    spans = {s.name: s for s in app.exported.get_finished_spans()}
    assert set(spans) == {"invoke_agent support_agent", "execute_tool local_index", "tools/call local_index"}
    assert "agent_eval.efficiency_score" in spans["tools/call local_index"].attributes
    assert "agent_eval.efficiency_score" not in spans["execute_tool local_index"].attributes


def test_an_alias_or_qualified_name_of_the_same_tool_is_the_same_call():
    app = App()
    with app.span("invoke_agent support_agent", AGENT):
        with app.span("execute_tool support-local_index", tool("support-local_index")):  # semantic-kernel's plugin-function
            with app.span("tools/call local_index", mcp_call("local_index")):
                pass
    app.provider.force_flush()
    assert [r.name for r in app.calls] == ["local_index"] and app.counter("nested_tool_spans") == 1


def test_a_tool_that_calls_another_tool_is_two_calls():
    app = App()
    with app.span("invoke_agent support_agent", AGENT):
        with app.span("execute_tool web_search", tool("web_search")):
            with app.span("tools/call local_index", mcp_call("local_index")):
                pass
    app.provider.force_flush()
    assert sorted(r.name for r in app.calls) == ["local_index", "web_search"]
    assert app.counter("nested_tool_spans") == 0 and len(app.runs[0].tool_calls) == 2


def test_two_calls_of_one_tool_side_by_side_are_two_calls():
    app = App()
    with app.span("invoke_agent support_agent", AGENT):
        for _ in range(2):
            with app.span("execute_tool local_index", tool("local_index")):
                pass
    app.provider.force_flush()
    assert len(app.calls) == 2 and app.counter("nested_tool_spans") == 0
    assert app.runs[0].evaluation.redundant_calls == ("local_index",)


def test_nesting_under_a_trace_without_agent_span_is_one_call_too():
    app = App()
    with app.span("handle_request", {}):
        with app.span("execute_tool local_index", tool("local_index")):
            with app.span("tools/call local_index", mcp_call("local_index")):
                pass
    app.provider.force_flush()
    assert [r.name for r in app.calls] == ["local_index"] and app.counter("nested_tool_spans") == 1
    (run,) = app.runs
    assert len(run.tool_calls) == 1

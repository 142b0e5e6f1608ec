"""Agent and workflow spans recognised at their start by one rule (`agent_at_start`), with real SDK spans.

strands-agents, agent-framework and google-adk start `invoke_agent <name>` spans with no attributes
and set `gen_ai.operation.name` and `gen_ai.agent.name` later: the span name announces the run, so
the agent's tool spans are scored and forwarded as they end, not held until the agent span ends.
GenAI `invoke_workflow` spans are run roots like `invoke_agent`.
"""
from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.core.recognize import agent_at_start
from otel_agent_eval.offline.score import agent_start_reader

from spans import finished_span


def tool(name: str) -> dict:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}


class App:
    def __init__(self) -> None:
        self.runs = []
        self.exported = InMemorySpanExporter()
        self.processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(self.exported),
                                                background=False, on_run=self.runs.append)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("app")

    def exported_tools(self) -> dict:
        return {s.attributes["gen_ai.tool.name"]: s for s in self.exported.get_finished_spans() if "gen_ai.tool.name" in s.attributes}


def test_an_agent_span_named_at_start_with_attributes_set_later_scores_its_tools_as_they_end():
    app = App()
    with app.tracer.start_as_current_span("invoke_agent support_agent") as agent:  # no attributes yet (strands, ADK)
        with app.tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index")):
            pass
        exported = app.exported_tools()  # before the agent span ends
        assert app.processor.runs.held_back == 0
        assert exported["local_index"].attributes["agent_eval.agent"] == "support_agent"
        assert exported["local_index"].attributes["agent_eval.task"] == "faq"
        assert exported["local_index"].attributes["agent_eval.outcome"] == "optimal"
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
    (run,) = app.runs
    assert (run.agent, run.task, run.kind, [r.name for r in run.tool_calls]) == ("support_agent", "faq", "agent", ["local_index"])


def test_a_span_not_named_as_an_agent_still_holds_its_tools_until_its_end():
    app = App()
    with app.tracer.start_as_current_span("support run") as agent:  # becomes an agent span only at its end
        with app.tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index")):
            pass
        assert app.exported_tools() == {}
        assert app.processor.runs.held_back == 1
        agent.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
    assert app.exported_tools()["local_index"].attributes["agent_eval.agent"] == "support_agent"
    assert [(r.agent, r.task) for r in app.runs] == [("support_agent", "faq")]


def test_invoke_workflow_spans_are_run_roots_and_a_workflow_wrapping_agents_is_no_run_of_its_own():
    app = App()
    workflow = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "support_agent"}
    with app.tracer.start_as_current_span("invoke_workflow support_agent", attributes=workflow):
        with app.tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index")):
            pass
    assert [(r.agent, r.task, r.kind) for r in app.runs] == [("support_agent", "faq", "agent")]
    app.runs.clear()
    with app.tracer.start_as_current_span("invoke_workflow crew"):  # attributes set later, as for agents
        with app.tracer.start_as_current_span("invoke_agent math_agent",
                                              attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "math_agent"}):
            with app.tracer.start_as_current_span("execute_tool basic_calculator", attributes=tool("basic_calculator")):
                pass
        assert app.exported_tools()["basic_calculator"].attributes["agent_eval.agent"] == "math_agent"
    assert [(r.agent, r.task) for r in app.runs] == [("math_agent", "arithmetic")]  # the crew only wraps it


def test_the_replay_hints_use_the_same_rule():
    app = App()
    agent_of = agent_start_reader(app.processor.pipeline)
    assert agent_of(finished_span({}, name="invoke_agent support_agent")) == "support_agent"
    assert agent_of(finished_span({}, name="invoke_workflow triage")) == "triage"
    assert agent_of(finished_span({}, name="invoke_agent Answer the customer's question")) is None  # free text
    assert agent_of(finished_span({"gen_ai.operation.name": "chat"}, name="invoke_agent x")) is None  # typed: attributes decide
    assert agent_of(finished_span({}, name="chat gpt-4o")) is None
    assert agent_at_start({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a1"}, "invoke_agent a2", True) == "a1"


def test_a_tool_span_is_no_agent_span_whatever_kind_it_also_claims():
    """The processor's on_start skips tool spans by their operation alone; the replays and span ends agree."""
    claims_both = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search",
                   "openinference.span.kind": "AGENT", "gen_ai.agent.name": "support_agent"}
    assert agent_at_start(claims_both, "invoke_agent support_agent", True) is None
    assert agent_start_reader(App().processor.pipeline)(finished_span(claims_both, name="invoke_agent support_agent")) is None
    app = App()
    with app.tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        with app.tracer.start_as_current_span("execute_tool web_search", attributes=claims_both):
            pass
    assert [(run.agent, [c.name for c in run.tool_calls]) for run in app.runs] == [("support_agent", ["web_search"])]

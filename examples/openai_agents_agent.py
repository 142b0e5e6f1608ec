"""An openai-agents agent, traced by OpenInference, scored live.

    python examples/openai_agents_agent.py

Offline: the SDK's own `agents.testing.ScriptedModel` plays the LLM, so no API key is used.
`support_agent` matches the packaged catalog's `faq` task: `local_index` (free, 30 ms) is the
optimal tool, and the scripted model also calls `web_search` ($0.003, 400 ms), which is
scored suboptimal and reported as a spurious call in the run.
"""
from __future__ import annotations

from agents import Agent, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tracing import set_trace_processors
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_eval import AgentEvalSpanProcessor, AgentRun, CallScore, ToolCallRecord


def print_score(record: ToolCallRecord, score: CallScore) -> None:
    """Called as each tool span ends."""
    print(f"call {record.name}: {score.outcome}, efficiency {score.efficiency:.2f} ({score.verdict}), "
          f"optimal tool {score.optimal_tool}, cost ${score.cost_usd:.3f} (wasted ${score.excess_cost_usd:.3f})")


def print_run(run: AgentRun) -> None:
    """Called when the agent span ends."""
    e = run.evaluation
    print(f"run {run.agent} (task {run.task}): {e.outcome}, cost ${e.cost_usd:.3f}, health {e.health:.0f}/100")
    print(f"    tool correctness {e.tool_correctness}, redundant {list(e.redundant_calls)}, "
          f"spurious {list(e.spurious_calls)}, over budget {e.over_budget}")


@function_tool
def local_index(query: str) -> str:
    """Search the local FAQ index."""
    return "Returns are accepted within 30 days."


@function_tool
def web_search(query: str) -> str:
    """Search the web (paid API)."""
    return "Most shops accept returns within 30 days."


provider = TracerProvider()
provider.add_span_processor(AgentEvalSpanProcessor(on_call=print_score, on_run=print_run))

model = ScriptedModel([  # one model reply per step: two tool calls, then the answer
    [function_call("local_index", {"query": "return policy"}, call_id="call_1")],
    [function_call("web_search", {"query": "return policy"}, call_id="call_2")],
    [assistant_message("Returns are accepted within 30 days.")],
])
support_agent = Agent(name="support_agent", instructions="Answer customer questions.", model=model,
                      tools=[local_index, web_search])

set_trace_processors([])  # first: else the SDK also uploads its own traces to OpenAI
instrumentor = OpenAIAgentsInstrumentor()
instrumentor.instrument(tracer_provider=provider)
try:
    result = Runner.run_sync(support_agent, "What is your return policy?")
    provider.force_flush()  # the scores are printed on the processor's thread: let them finish first
    print("answer:", result.final_output)
finally:
    instrumentor.uninstrument()
    provider.shutdown()

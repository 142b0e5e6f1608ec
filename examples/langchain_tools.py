"""A LangChain tool loop, traced by OpenInference, scored live.

    python examples/langchain_tools.py

Offline, with langchain-core only: a fake chat model replays scripted tool calls. The loop is
a runnable named `analytics_agent` (OpenInference marks a LangChain run as an AGENT when its
name contains "agent"), which matches the packaged catalog's `analytics` task: filtering orders
is a job for `simple_filter` (free, 100 ms); `ml_pipeline` ($0.10, 8 s, advanced) is
over-engineering and is scored suboptimal.
"""
from __future__ import annotations

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from openinference.instrumentation.langchain import LangChainInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from otel_agent_eval import AgentEvalSpanProcessor, AgentRun, CallScore, ToolCallRecord


def print_score(record: ToolCallRecord, score: CallScore) -> None:
    """Called as each tool span ends."""
    print(f"call {record.name}: {score.outcome}, efficiency {score.efficiency:.2f} ({score.verdict}), "
          f"optimal tool {score.optimal_tool}, cost ${score.cost_usd:.3f} (wasted ${score.excess_cost_usd:.3f})")
    print(f"    {score.reason}")


def print_run(run: AgentRun) -> None:
    """Called when the agent's span ends."""
    e = run.evaluation
    print(f"run {run.agent} (task {run.task}): {e.outcome}, cost ${e.cost_usd:.3f}, health {e.health:.0f}/100")
    print(f"    tool correctness {e.tool_correctness}, redundant {list(e.redundant_calls)}, "
          f"spurious {list(e.spurious_calls)}, over budget {e.over_budget}")


@tool
def simple_filter(predicate: str) -> str:
    """Filter order rows by a simple predicate."""
    return "47 orders"


@tool
def ml_pipeline(dataset: str) -> str:
    """Run the managed ML pipeline on a dataset."""
    return "47 orders (predicted)"


TOOLS = {t.name: t for t in (simple_filter, ml_pipeline)}
# Stands in for e.g. ChatOpenAI(...).bind_tools(list(TOOLS.values())): one scripted reply per call.
llm = FakeMessagesListChatModel(responses=[
    AIMessage("", tool_calls=[{"name": "simple_filter", "args": {"predicate": "date >= last_week"}, "id": "call_1"}]),
    AIMessage("", tool_calls=[{"name": "ml_pipeline", "args": {"dataset": "orders"}, "id": "call_2"}]),
    AIMessage("Here are the 47 orders from last week."),
])


def run_agent(question: str) -> str:
    """Ask the model, run the tools it calls, repeat until it answers."""
    messages: list[BaseMessage] = [HumanMessage(question)]
    while (reply := llm.invoke(messages)).tool_calls:
        messages.append(reply)
        messages.extend(TOOLS[call["name"]].invoke(call) for call in reply.tool_calls)
    return str(reply.content)


analytics_agent = RunnableLambda(run_agent, name="analytics_agent")

provider = TracerProvider()
provider.add_span_processor(AgentEvalSpanProcessor(on_call=print_score, on_run=print_run))
instrumentor = LangChainInstrumentor()
instrumentor.instrument(tracer_provider=provider)
try:
    answer = analytics_agent.invoke("Show me orders from last week")
    provider.force_flush()  # the scores are printed on the processor's thread: let them finish first
    print("answer:", answer)
finally:
    instrumentor.uninstrument()
    provider.shutdown()

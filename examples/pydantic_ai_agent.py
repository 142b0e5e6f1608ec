"""A pydantic-ai agent scored live: each tool call as it ends, the whole run when the agent answers.

    python examples/pydantic_ai_agent.py

Offline: `TestModel` stands in for the LLM. It calls every tool the agent has, which here
shows one good choice and one bad one: `math_agent` matches the packaged catalog's
`arithmetic` task, where `basic_calculator` (free, 50 ms) is optimal and `wolfram_alpha`
($0.01, 800 ms) is a premium API wasted on arithmetic.
"""
from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.test import TestModel

from otel_agent_eval import AgentEvalSpanProcessor, AgentRun, CallScore, ToolCallRecord


def print_score(record: ToolCallRecord, score: CallScore) -> None:
    """Called as each tool span ends."""
    print(f"call {record.name}: {score.outcome}, efficiency {score.efficiency:.2f} ({score.verdict}), "
          f"optimal tool {score.optimal_tool}, cost ${score.cost_usd:.3f} (wasted ${score.excess_cost_usd:.3f})")


def print_run(run: AgentRun) -> None:
    """Called when the agent span ends."""
    e = run.evaluation
    print(f"run {run.agent} (task {run.task}): {e.outcome}, cost ${e.cost_usd:.5f} "
          f"(tools ${e.tool_cost_usd:.3f}, LLM ${e.llm_cost_usd:.5f}), health {e.health:.0f}/100")
    print(f"    tool correctness {e.tool_correctness}, redundant {list(e.redundant_calls)}, "
          f"spurious {list(e.spurious_calls)}, over budget {e.over_budget}")


# Your provider; in production also pass forward_to=BatchSpanProcessor(OTLPSpanExporter()).
provider = TracerProvider()
provider.add_span_processor(AgentEvalSpanProcessor(on_call=print_score, on_run=print_run))

math_agent = Agent(
    # Offline stand-in for "openai:gpt-4o-mini"; the name is priced by the catalog's `models`.
    TestModel(model_name="gpt-4o-mini", custom_output_text="15% of 240 is 36."),
    name="math_agent",
    instructions="Answer arithmetic questions with the cheapest tool that can.",
    capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))],
)


@math_agent.tool_plain
def basic_calculator(expression: str) -> str:
    """Evaluate simple arithmetic locally."""
    return "36"


@math_agent.tool_plain
def wolfram_alpha(query: str) -> str:
    """Ask the premium symbolic-math API."""
    return "36"


result = math_agent.run_sync("What is 15% of 240?")
provider.force_flush()  # the scores are printed on the processor's thread: let them finish first
print("answer:", result.output)
provider.shutdown()

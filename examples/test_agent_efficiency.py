"""Agent efficiency in CI: run the real agent, check which tools it chose, fail the build on waste.

    pytest examples/test_agent_efficiency.py

The pattern of "Beyond Tool Correctness" (LLMTestCase + ToolCorrectnessMetric +
ToolEfficiencyMetric, measure and assert), except that the test case is not written by hand:
`capture_runs` collects the run from the agent's own OpenTelemetry spans and `run_to_test_case`
turns it into an `LLMTestCase` with `tools_called` and, from the catalog's task route,
`expected_tools`. The metric's costs, latencies, optimal tool and threshold come from the same
catalog the live span processor uses (`from_catalog(task=...)`).

`DeterministicToolCorrectnessMetric` scores like deepeval's `ToolCorrectnessMetric` without an
LLM or API key. Offline, a pydantic-ai `FunctionModel` plays the LLM and picks the tool; in your
suite, drive your agent with its real model (or keep a scripted one for tool-choice tests).
"""
from __future__ import annotations

import ast
import operator
import os

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")  # before deepeval is imported

import pytest
from deepeval import assert_test
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from otel_agent_eval import DeterministicToolCorrectnessMetric, ToolEfficiencyMetric
from otel_agent_eval.testing import capture_runs, run_to_test_case

# --- the agent under test (in your project: import it) ---------------------------------------

provider = TracerProvider()  # or your app's provider; capture_runs adds a scoring processor to it
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def basic_calculator(expression: str) -> str:
    """Evaluate + - * / arithmetic locally."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        raise ValueError(f"not simple arithmetic: {expression!r}")
    return f"{value(ast.parse(expression, mode='eval').body):g}"


def wolfram_alpha(query: str) -> str:
    """Ask the premium symbolic-math API (stubbed here)."""
    return basic_calculator(query)


def math_agent(llm: FunctionModel) -> Agent:
    return Agent(llm, name="math_agent", tools=[basic_calculator, wolfram_alpha],
                 capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))])


def scripted_llm(tool: str, arguments: dict[str, str]) -> FunctionModel:
    """An LLM that calls `tool` once, then answers with what the tool returned."""
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returned:
            return ModelResponse(parts=[TextPart(str(returned[-1].content))])
        return ModelResponse(parts=[ToolCallPart(tool, arguments)])
    return FunctionModel(reply, model_name="gpt-4o-mini")


def run_agent(llm: FunctionModel, question: str):
    """Run the agent once; return its scored run."""
    with capture_runs(tracer_provider=provider) as runs:
        math_agent(llm).run_sync(question)
    (run,) = runs
    return run


# --- the tests ----------------------------------------------------------------------------------

@pytest.mark.parametrize("question, expression, answer", [
    ("What is 25 + 37?", "25 + 37", "62"),
    ("Calculate 15% of 240", "240 * 15 / 100", "36"),
])
def test_basic_math_uses_efficient_tool(question, expression, answer):
    run = run_agent(scripted_llm("basic_calculator", {"expression": expression}), question)
    test_case = run_to_test_case(run)
    assert test_case.actual_output == answer
    assert run.task == "arithmetic"  # the catalog route for math_agent

    correctness = DeterministicToolCorrectnessMetric()
    efficiency = ToolEfficiencyMetric.from_catalog(task=run.task)
    assert_test(test_case, [correctness, efficiency])  # or measure() each and assert is_successful()
    assert run.evaluation.cost_usd < 0.001  # a budget per run: tools plus LLM tokens


def test_premium_api_for_arithmetic_is_caught():
    run = run_agent(scripted_llm("wolfram_alpha", {"query": "240 * 15 / 100"}), "Calculate 15% of 240")
    test_case = run_to_test_case(run)
    assert test_case.actual_output == "36"  # the answer is right: correctness alone would not notice

    efficiency = ToolEfficiencyMetric.from_catalog(task=run.task)
    efficiency.measure(test_case)
    assert not efficiency.is_successful()
    assert "Suboptimal tool 'wolfram_alpha'" in efficiency.reason
    assert "Optimal tool: 'basic_calculator'" in efficiency.reason
    with pytest.raises(AssertionError):
        assert_test(test_case, [DeterministicToolCorrectnessMetric(), ToolEfficiencyMetric.from_catalog(task=run.task)])
    assert run.evaluation.spurious_calls == ("wolfram_alpha",)

"""deepeval's ToolCorrectnessMetric with both its parts, for the test cases of recorded agent runs.

`DeterministicToolCorrectnessMetric` is the first part alone (no model). This one is the whole metric:
it runs deepeval's own `ToolCorrectnessMetric` with `available_tools` and a judge model, through
`judge.DeepEvalJudge`, so the score is deepeval's (the minimum of both parts, seed 001) and the
result also says which part gave it, what it cost and which judge, deepeval and prompt gave it.

    >>> from otel_agent_eval.judge.models import judge_model
    >>> metric = JudgedToolCorrectnessMetric(judge_model("qwen2.5:7b", base_url="http://localhost:11434/v1"))
    >>> assert_test(run_to_test_case(run), [metric])      # available_tools from the test case's metadata

`available_tools` given here are used for every test case; otherwise each test case's
`metadata["available_tools"]` (what `run_to_test_case` writes: the run's declared tools, else the
catalog's), else the tools it called. A test case without `expected_tools` is judged on tool
selection alone (deepeval would score it 0 against an empty list).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deepeval.metrics.utils import construct_verbose_logs, prepare_measure
from deepeval.test_case import LLMTestCase, SingleTurnParams, ToolCall, ToolCallParams

from ..judge.deepeval_judge import DeepEvalJudge
from ..judge.request import JudgeRequest
from ..judge.result import JudgeResult
from .deepeval_metrics import metadata_field
from .measured_metric import MeasuredMetric

__all__ = ["AVAILABLE_TOOLS_KEY", "JudgedToolCorrectnessMetric", "available_tools_of_case"]

AVAILABLE_TOOLS_KEY = "available_tools"  # in a test case's metadata: the tools as dicts (ToolCall fields)


class JudgedToolCorrectnessMetric(MeasuredMetric):
    """deepeval's ToolCorrectnessMetric, deterministic part and LLM tool-selection part, on any deepeval model.

    `model` is a deepeval `DeepEvalBaseLLM` (`judge.models.judge_model(...)` for OpenAI or any
    OpenAI-compatible server). The other arguments are deepeval's. After `measure`, `judge_result` holds
    the whole `JudgeResult` (both parts, argument score when `arguments=True` and the calls carry
    arguments, tokens, cost, provenance); `evaluation_cost` is the judge's cost (None when unpriced).
    """

    _required_params: list[SingleTurnParams] = [SingleTurnParams.INPUT, SingleTurnParams.TOOLS_CALLED]

    def __init__(
        self,
        model: Any,
        available_tools: Sequence[ToolCall] | None = None,
        threshold: float = 0.5,
        evaluation_params: Sequence[ToolCallParams] = (),
        include_reason: bool = True,
        strict_mode: bool = False,
        verbose_mode: bool = False,
        should_exact_match: bool = False,
        should_consider_ordering: bool = False,
        arguments: bool = False,
    ) -> None:
        self.model = model
        self.available_tools = list(available_tools) if available_tools is not None else None
        self.threshold = 1 if strict_mode else threshold
        self.evaluation_params = list(evaluation_params)
        self.include_reason = include_reason
        self.strict_mode = strict_mode
        self.verbose_mode = verbose_mode
        self.should_exact_match = should_exact_match
        self.should_consider_ordering = should_consider_ordering
        self.arguments = arguments
        self.judge = DeepEvalJudge(model, threshold=threshold, evaluation_params=evaluation_params,
                                   strict_mode=strict_mode, should_exact_match=should_exact_match,
                                   should_consider_ordering=should_consider_ordering, arguments=arguments)
        self.evaluation_model = self.judge.model_name
        self.async_mode = False  # the judge calls the model synchronously
        self.using_native_model = True  # cost and tokens are reported (None when unknown)
        self.judge_result: JudgeResult | None = None

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return "Tool Correctness (judged)"

    def _measure(self, test_case: LLMTestCase) -> float:
        prepare_measure(self, test_case)
        available = self.available_tools if self.available_tools is not None else available_tools_of_case(test_case)
        request = JudgeRequest(
            trace_id=0, span_id=0, agent=None, task=None, input=test_case.input,
            tools_called=tuple(test_case.tools_called or ()), available_tools=tuple(available),
            expected_tools=tuple(test_case.expected_tools or ()), actual_output=test_case.actual_output,
            arguments_recorded=any(t.input_parameters is not None for t in test_case.tools_called or ()))
        result = self.judge.judge(request)
        self.judge_result = result
        self.score = result.score
        self.reason = result.reason if self.include_reason else None
        self.evaluation_cost = result.cost_usd
        self.input_tokens, self.output_tokens = result.input_tokens, result.output_tokens
        self.success = self.is_successful()
        self.verbose_logs = construct_verbose_logs(self, steps=[
            f"Available Tools: {[t.name for t in available]!r}",
            f"Tool Calling Score: {result.deterministic_score}",
            f"Tool Selection Score: {result.selection_score}\nTool Selection Reason: {result.selection_reason}",
            f"Final Score: {self.score} (from the {result.part} part)\nFinal Reason: {self.reason}",
        ])
        return self.score


def available_tools_of_case(test_case: LLMTestCase) -> list[ToolCall]:
    """The test case's `metadata["available_tools"]` as deepeval `ToolCall`s, else the tools it called."""
    metadata = getattr(test_case, metadata_field(LLMTestCase), None)
    listed = metadata.get(AVAILABLE_TOOLS_KEY) if isinstance(metadata, Mapping) else None
    if isinstance(listed, list) and listed:
        return [item if isinstance(item, ToolCall) else ToolCall(**item) for item in listed
                if isinstance(item, (ToolCall, Mapping))]
    seen: dict[str, ToolCall] = {}
    for call in test_case.tools_called or ():
        seen.setdefault(call.name, ToolCall(name=call.name, description=call.description))
    return list(seen.values())

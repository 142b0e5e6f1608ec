"""deepeval metric wrapping :mod:`otel_agent_eval.core.correctness`: no model, no API key."""
from __future__ import annotations

import inspect
from collections.abc import Sequence

from deepeval.metrics.utils import construct_verbose_logs, prepare_measure
from deepeval.test_case import LLMTestCase, SingleTurnParams, ToolCallParams

from ..core.correctness import tool_correctness
from .measured_metric import MeasuredMetric

__all__ = ["DeterministicToolCorrectnessMetric"]

#: Shown where deepeval prints the judge model ("using ... strict=...").
EVALUATION_MODEL = "none (deterministic)"
#: deepeval takes min(tool-calling score, tool-selection score); without
#: ``available_tools`` (no judge) the selection score is this constant.
_TOOL_SELECTION_SCORE = 1.0
#: deepeval 4.x refuses a multimodal test case (an input with ``MLLMImage``s) in any metric
#: without a multimodal judge model; this one reads only tool calls, so it says "not multimodal".
_PREPARE_TAKES_MULTIMODAL = "multimodal" in inspect.signature(prepare_measure).parameters


class DeterministicToolCorrectnessMetric(MeasuredMetric):
    """deepeval's ``ToolCorrectnessMetric`` without its LLM: same scores, no model or key.

    >>> from deepeval.test_case import LLMTestCase, ToolCall
    >>> metric = DeterministicToolCorrectnessMetric(should_consider_ordering=True)
    >>> case = LLMTestCase(
    ...     input="Find the docs",
    ...     expected_tools=[ToolCall(name="WebSearch"), ToolCall(name="ToolQuery"), ToolCall(name="WebSearch")],
    ...     tools_called=[ToolCall(name="WebSearch"), ToolCall(name="WebSearch"), ToolCall(name="ToolQuery")],
    ... )
    >>> round(metric.measure(case, _show_indicator=False), 4), metric.is_successful()
    (0.6667, True)

    Multimodal test cases (an ``input`` carrying ``MLLMImage``s, deepeval's successor of the
    ``MLLMTestCase`` its ``MultimodalToolCorrectnessMetric`` took) score exactly as their text
    twins: like that metric, this one is "not calculated using any models", so no judge has
    to read the images.

    It scores only ``tools_called`` against ``expected_tools``: deepeval's second part, an LLM
    judging the tool selection against ``available_tools``, is
    :class:`~otel_agent_eval.offline.judged_metric.JudgedToolCorrectnessMetric` (deepeval's own
    metric with a judge model; docs/judge.md). Constructor arguments are stored under their own
    names because ``deepeval.evaluate`` copies a metric by passing its attributes back to ``__init__``.
    """

    _required_params: list[SingleTurnParams] = [
        SingleTurnParams.INPUT,
        SingleTurnParams.TOOLS_CALLED,
        SingleTurnParams.EXPECTED_TOOLS,
    ]

    def __init__(
        self,
        threshold: float = 0.5,
        evaluation_params: Sequence[ToolCallParams] = (),
        include_reason: bool = True,
        strict_mode: bool = False,
        verbose_mode: bool = False,
        should_exact_match: bool = False,
        should_consider_ordering: bool = False,
    ) -> None:
        self.threshold = 1 if strict_mode else threshold
        self.evaluation_params = list(evaluation_params)
        self.include_reason = include_reason
        self.strict_mode = strict_mode
        self.verbose_mode = verbose_mode
        self.should_exact_match = should_exact_match
        self.should_consider_ordering = should_consider_ordering
        self.evaluation_model = EVALUATION_MODEL
        self.async_mode = False  # nothing to await; deepeval runs it inline
        self.using_native_model = False  # no model: cost and tokens stay None

    @property
    def __name__(self) -> str:  # type: ignore[override]
        return "Tool Correctness (deterministic)"

    def _measure(self, test_case: LLMTestCase) -> float:
        """Validate like deepeval, score, then apply its tool-selection min and strict mode."""
        # MissingTestCaseParamsError when tools are None. Images in the input are no business of a metric
        # that compares tool calls by exact matching: a multimodal test case scores as its text twin.
        if _PREPARE_TAKES_MULTIMODAL:
            prepare_measure(self, test_case, multimodal=False)
        else:
            prepare_measure(self, test_case)
        result = tool_correctness(
            test_case.tools_called,
            test_case.expected_tools,
            exact_match=self.should_exact_match,
            consider_ordering=self.should_consider_ordering,
            input_parameters=ToolCallParams.INPUT_PARAMETERS in self.evaluation_params,
            output=ToolCallParams.OUTPUT in self.evaluation_params,
        )
        score = min(result.score, _TOOL_SELECTION_SCORE)
        strict_fail = self.strict_mode and score < self.threshold
        self.score = 0 if strict_fail else score
        self.reason = None
        if self.include_reason:
            self.reason = result.reason + (" Strict mode: below 1, so scored 0." if strict_fail else "")
        self.success = self.is_successful()
        self.verbose_logs = construct_verbose_logs(
            self,
            steps=[
                f"Expected Tools: {test_case.expected_tools!r}",
                f"Tools Called: {test_case.tools_called!r}",
                f"Final Score: {self.score}\nFinal Reason: {self.reason}",
            ],
        )
        return self.score

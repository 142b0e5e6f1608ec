"""deepeval's ToolCorrectnessMetric with `available_tools`, run as deepeval runs it, on one request.

The score is deepeval's: the minimum of the deterministic comparison of `tools_called` with
`expected_tools` and the judge model's tool-selection score given the `available_tools` (seed 001).
A run with no expected tools (an unrouted run, or a route that names none) has no deterministic part:
deepeval would score it 0 against an empty list, so it is compared with itself (1) and the judge's
score is the result, recorded as the judge's part with `deterministic_score` None.

Where the run's calls carry their arguments, deepeval's ArgumentCorrectnessMetric judges them too
(a metric of its own in deepeval: its score is kept apart as `argument_score`, not folded into `score`).

    >>> judge = DeepEvalJudge(judge_model("qwen2.5:7b", base_url="http://localhost:11434/v1"))
    >>> result = judge.judge(request_of(run, route, catalog, redactor=redactor))
    >>> result.score, result.part, result.cost_usd
    (0.5, 'judge', None)
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from .models import model_name_of, quiet_deepeval
from .request import JudgeRequest
from .result import PART_DETERMINISTIC, PART_JUDGE, JudgeResult

__all__ = ["INPUT_NOT_RECORDED", "METRIC", "DeepEvalJudge", "prompt_version"]

logger = logging.getLogger(__name__)

METRIC = "ToolCorrectnessMetric"
ARGUMENT_METRIC = "ArgumentCorrectnessMetric"
#: The task input the judge reads when the run recorded none (deepeval needs some text).
INPUT_NOT_RECORDED = "(the task input was not recorded)"
_PROMPT_PLACEHOLDERS = {"user_input": "{input}", "tools_called": "{tools_called}",
                        "available_tools": "{available_tools}", "multimodal": False}


class DeepEvalJudge:
    """Judges requests with deepeval's own metrics and `model` (any deepeval `DeepEvalBaseLLM`).

    The metric options are deepeval's (`threshold`, `evaluation_params`, `strict_mode`,
    `should_exact_match`, `should_consider_ordering`); `arguments=False` skips the argument judge (one
    model call fewer per run). `sample_rate` is recorded on each result (the caller samples). `clock`
    times each judgement.
    """

    def __init__(self, model: Any, *, threshold: float = 0.5, evaluation_params: Sequence[Any] = (),
                 strict_mode: bool = False, should_exact_match: bool = False,
                 should_consider_ordering: bool = False, arguments: bool = True, sample_rate: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        quiet_deepeval()
        self.model = model
        self.threshold = threshold
        self.evaluation_params = list(evaluation_params)
        self.strict_mode = strict_mode
        self.should_exact_match = should_exact_match
        self.should_consider_ordering = should_consider_ordering
        self.arguments = arguments
        self.sample_rate = sample_rate
        self.clock = clock
        self.model_name = model_name_of(model)
        self._prompt_version: str | None = None

    @property
    def prompt_version(self) -> str:
        """A hash of the judge's prompts as deepeval renders them (computed once)."""
        if self._prompt_version is None:
            self._prompt_version = prompt_version(self._metric(()), self._argument_metric() if self.arguments else None)
        return self._prompt_version

    def judge(self, request: JudgeRequest) -> JudgeResult:
        """Judge one request; raises what deepeval or the model client raise (an unreachable model, bad JSON)."""
        from deepeval import __version__ as deepeval_version
        from deepeval.test_case import LLMTestCase

        started = self.clock()
        tools_called = list(request.tools_called)
        referenced = bool(request.expected_tools)
        case = LLMTestCase(input=request.input or INPUT_NOT_RECORDED, actual_output=request.actual_output,
                           tools_called=tools_called,
                           expected_tools=list(request.expected_tools) if referenced else list(tools_called))
        metric = self._metric(request.available_tools)
        metric.measure(case, _show_indicator=False)
        selection = metric.selection
        deterministic = metric.tool_calling_score if referenced else None
        selection_score = float(selection.score) if selection is not None else None
        part = PART_JUDGE if deterministic is None or (
            selection_score is not None and selection_score < deterministic) else PART_DETERMINISTIC
        cost, input_tokens, output_tokens = metric.evaluation_cost, metric.input_tokens or 0, metric.output_tokens or 0
        argument_score, argument_reason = None, ""
        recorded = [call for call in tools_called if call.input_parameters is not None]
        if self.arguments and request.arguments_recorded and recorded:
            # only the calls whose arguments were recorded: deepeval's prompt says "no" to a call without any
            arguments = self._argument_metric()
            arguments.measure(LLMTestCase(input=case.input, actual_output=case.actual_output, tools_called=recorded),
                              _show_indicator=False)
            argument_score, argument_reason = float(arguments.score), arguments.reason or ""
            cost = None if cost is None or arguments.evaluation_cost is None else cost + arguments.evaluation_cost
            input_tokens += arguments.input_tokens or 0
            output_tokens += arguments.output_tokens or 0
        return JudgeResult(
            score=float(metric.score),
            reason=metric.reason or "",
            part=part,
            success=bool(metric.success),
            threshold=float(metric.threshold),
            judge_model=self.model_name,
            metric=METRIC,
            metric_version=f"deepeval {deepeval_version}",
            prompt_version=self.prompt_version,
            sample_rate=self.sample_rate,
            input_tokens=int(input_tokens),
            output_tokens=int(output_tokens),
            cost_usd=float(cost) if cost is not None else None,
            latency_s=max(0.0, self.clock() - started),
            deterministic_score=deterministic,
            selection_score=selection_score,
            selection_reason=selection.reason if selection is not None else "",
            argument_score=argument_score,
            argument_reason=argument_reason,
        )

    def _metric(self, available_tools: Sequence[Any]) -> Any:
        return _recording_class()(
            available_tools=list(available_tools), threshold=self.threshold,
            evaluation_params=list(self.evaluation_params), model=self.model, eval_mode="llm",
            include_reason=True, async_mode=False, strict_mode=self.strict_mode,
            should_exact_match=self.should_exact_match, should_consider_ordering=self.should_consider_ordering)

    def _argument_metric(self) -> Any:
        from deepeval.metrics import ArgumentCorrectnessMetric

        return ArgumentCorrectnessMetric(threshold=self.threshold, model=self.model, eval_mode="llm",
                                         include_reason=True, async_mode=False, strict_mode=self.strict_mode)


def prompt_version(metric: Any, argument_metric: Any = None) -> str:
    """`sha256:` and 12 hex digits of the judge's prompts as deepeval's metrics render them (placeholders for
    the run's content), the argument judge's too when given: a new deepeval prompt, or a custom
    `evaluation_template`, gives a new version."""
    digest = hashlib.sha256()
    digest.update(metric._get_prompt("get_tool_selection_score", **_PROMPT_PLACEHOLDERS).encode())
    if argument_metric is not None:
        digest.update(argument_metric._get_prompt("generate_verdicts", input="{input}",
                                                  stringified_tools_called="{tools_called}").encode())
        digest.update(argument_metric._get_prompt("generate_reason", incorrect_tool_calls_reasons="{reasons}",
                                                  input="{input}", score="{score}").encode())
    return "sha256:" + digest.hexdigest()[:12]


_RECORDING: type | None = None


def _recording_class() -> type:
    """deepeval's ToolCorrectnessMetric, keeping its two parts apart (it reports only their minimum)."""
    global _RECORDING
    if _RECORDING is not None:
        return _RECORDING
    from deepeval.metrics import ToolCorrectnessMetric

    class RecordingToolCorrectnessMetric(ToolCorrectnessMetric):
        selection: Any = None
        tool_calling_score: float | None = None

        def _calculate_score(self) -> float:
            score = super()._calculate_score()
            self.tool_calling_score = float(score)
            return score

        def _get_tool_selection_score(self, *args: Any, **kwargs: Any) -> Any:
            self.selection = super()._get_tool_selection_score(*args, **kwargs)
            return self.selection

        async def _a_get_tool_selection_score(self, *args: Any, **kwargs: Any) -> Any:
            self.selection = await super()._a_get_tool_selection_score(*args, **kwargs)
            return self.selection

    # deepeval finds a metric's templates (and a user's template set) by its class name: keep deepeval's.
    RecordingToolCorrectnessMetric.__name__ = RecordingToolCorrectnessMetric.__qualname__ = "ToolCorrectnessMetric"
    _RECORDING = RecordingToolCorrectnessMetric
    return RecordingToolCorrectnessMetric

"""What one judgement gives back, with the provenance that makes it reproducible.

A judge's score changes when the agent changes and when the judge changes (another model, another
deepeval, another prompt); `judge_model`, `metric_version`, `prompt_version` and `sample_rate` on
every result tell the two apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .request import JudgeRequest

__all__ = ["PART_DETERMINISTIC", "PART_JUDGE", "Judge", "JudgeResult", "describe_error"]

#: Which part of deepeval's ToolCorrectnessMetric gave the combined score (the minimum of both).
PART_DETERMINISTIC = "deterministic"  # tools_called against expected_tools
PART_JUDGE = "judge"  # the LLM's tool selection, given the available tools


@dataclass(frozen=True)
class JudgeResult:
    """One judgement of a run's tool selection.

    `score` is deepeval's ToolCorrectnessMetric score: the minimum of the deterministic comparison with
    the expected tools and the judge's tool-selection score (seed 001); `part` says which one gave it
    (a tie is the deterministic part's). Where the run's calls carry arguments, deepeval's
    ArgumentCorrectnessMetric judges them too: `argument_score` and `argument_reason`, kept apart (not
    in `score`, so `score` stays what deepeval's own metric gives).
    """

    score: float  # the combined score: min of the deterministic part and the judge's, per seed 001
    reason: str
    part: str  # which part gave the minimum: "deterministic" | "judge"
    success: bool
    threshold: float
    judge_model: str
    metric: str  # e.g. "ToolCorrectnessMetric"
    metric_version: str  # deepeval's version
    prompt_version: str  # a hash of the judge's prompt template, so a change of judge is visible
    sample_rate: float
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None when the judge's model has no price
    latency_s: float = 0.0
    # additive: the two parts apart, and the argument judge where arguments were recorded
    deterministic_score: float | None = None  # None: the run had no expected tools (the judge's score alone)
    selection_score: float | None = None  # the judge's tool-selection score
    selection_reason: str = ""
    argument_score: float | None = None  # deepeval's ArgumentCorrectnessMetric; None when no arguments recorded
    argument_reason: str = ""

    def as_dict(self) -> dict[str, object]:
        """The result as JSON-ready fields (the order of the dataclass)."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


class Judge(Protocol):
    """Judges one request; raises on failure (the online worker times it out and counts the outcome)."""

    def judge(self, request: JudgeRequest) -> JudgeResult: ...


def describe_error(error: BaseException, limit: int = 300) -> str:
    """A judgement's failure in one line: `InternalServerError: Error code: 500 - ...`, looking through deepeval's
    retry wrapper (tenacity's `RetryError`) to the error of the last attempt."""
    attempt = getattr(error, "last_attempt", None)
    if attempt is not None:
        try:
            error = attempt.exception() or error
        except Exception:  # noqa: BLE001 - a cancelled attempt: keep the wrapper
            pass
    lines = str(error).splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:limit]

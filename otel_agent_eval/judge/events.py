"""A judgement as a GenAI `gen_ai.evaluation.result` event, parented to the judged run's span.

The run's span has usually been exported by the time its judgement returns (an ended span cannot
take events, and its copy has left), so the event is a log record through the Logs API (the form
the GenAI conventions give events), in the run's trace and span context: a backend that joins logs
to traces shows it under the run. Provenance goes with every result (`agent_eval.judge.*`: judge
model, metric and its version, prompt version, sample rate, which part gave the score), so a change
of score can be told apart from a change of judge. The explanation is the judge's reason as it came: the judge
saw only the redacted request, so it can quote nothing redaction kept back (masking it again would fail
closed on deepeval's bracketed reasons and blank them).

    >>> events = JudgeEvents(logger_provider)        # default: the global LoggerProvider
    >>> events.emit(request, result)
"""
from __future__ import annotations

import time
from typing import Any

from ..core import conventions as c

__all__ = ["EVALUATION_NAME", "JudgeEvents", "evaluation_attributes"]

EVALUATION_NAME = "agent_eval.judge.tool_selection"  # gen_ai.evaluation.name of the judge's results
J = "agent_eval.judge."
JUDGE_MODEL, METRIC, METRIC_VERSION, PROMPT_VERSION = J + "model", J + "metric", J + "metric_version", J + "prompt_version"
SAMPLE_RATE, PART, THRESHOLD = J + "sample_rate", J + "part", J + "threshold"
INPUT_TOKENS, OUTPUT_TOKENS, COST_USD, LATENCY_S = J + "input_tokens", J + "output_tokens", J + "cost_usd", J + "latency_s"
TASK = J + "task"


def evaluation_attributes(request: Any, result: Any) -> dict[str, Any]:
    """The event's attributes: the GenAI evaluation attributes, then the provenance."""
    attrs: dict[str, Any] = {
        c.GEN_AI_EVALUATION_NAME: EVALUATION_NAME,
        c.GEN_AI_EVALUATION_SCORE_VALUE: float(result.score),
        c.GEN_AI_EVALUATION_SCORE_LABEL: "pass" if result.success else "fail",
        c.GEN_AI_EVALUATION_EXPLANATION: str(result.reason),
        JUDGE_MODEL: str(result.judge_model),
        METRIC: str(result.metric),
        METRIC_VERSION: str(result.metric_version),
        PROMPT_VERSION: str(result.prompt_version),
        SAMPLE_RATE: float(result.sample_rate),
        PART: str(result.part),
        THRESHOLD: float(result.threshold),
        INPUT_TOKENS: int(result.input_tokens),
        OUTPUT_TOKENS: int(result.output_tokens),
        LATENCY_S: float(result.latency_s),
    }
    if result.cost_usd is not None:
        attrs[COST_USD] = float(result.cost_usd)
    if getattr(request, "agent", None):
        attrs[c.GEN_AI_AGENT_NAME] = str(request.agent)
    if getattr(request, "task", None):
        attrs[TASK] = str(request.task)
    return attrs


class JudgeEvents:
    """Emits each judgement as a log record parented to the run's span (`request.trace_id`, `request.span_id`)."""

    def __init__(self, logger_provider: Any = None) -> None:
        from opentelemetry._logs import get_logger_provider

        self._logger = (logger_provider or get_logger_provider()).get_logger("otel_agent_eval.judge")

    def emit(self, request: Any, result: Any) -> None:
        from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

        parent = SpanContext(request.trace_id, request.span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        self._logger.emit(timestamp=time.time_ns(), context=set_span_in_context(NonRecordingSpan(parent)),
                          event_name=c.GEN_AI_EVALUATION_RESULT,
                          attributes=evaluation_attributes(request, result))

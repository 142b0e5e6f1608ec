"""Scores on the exported span: an enriched copy for the next processor or exporter.

opentelemetry-sdk freezes a span's attributes in `Span.end()` before any processor
sees it, so the scores cannot be set on the span itself. `EnrichedSpan` is a
`ReadableSpan` sharing everything with the original except its attributes (the
original's plus `agent_eval.*`) and events (plus a GenAI `gen_ai.evaluation.result`),
and, with redaction on, its name, status, links and resource (masked copies).
The attributes that only depend on the catalog are built once per `StaticScore`.
"""
from __future__ import annotations

import math

import threading
from collections.abc import Mapping, Sequence
from operator import itemgetter
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanKind, Status, StatusCode

from . import conventions as c
from .context_attributes import RUN_CONTEXT_ATTRIBUTES, TRUE_COST_EVALUATION, context_evaluations, run_context_attributes
from .recognize import attribute_dict, span_events
from .redact import MASK, Redactor
from .runs import AgentRun
from .scoring import CallScore, StaticScore

EVALUATION_NAME = "agent_eval.tool_efficiency"
RUN = c.AGENT_EVAL_PREFIX + "run."
TOOL_CORRECTNESS_PASS = 0.5  # deepeval ToolCorrectnessMetric's default threshold
A = c.AGENT_EVAL_PREFIX
# The agent_eval.* attributes an enriched tool span carries.
EFFICIENCY_SCORE, COST_SCORE, LATENCY_SCORE, COMPLEXITY_SCORE = A + "efficiency_score", A + "cost_score", A + "latency_score", A + "complexity_score"
OPTIMAL_TOOL, OUTCOME, VERDICT, PASSED, THRESHOLD = A + "optimal_tool", A + "outcome", A + "verdict", A + "passed", A + "threshold"
PROFILE, TASK, REASON, COST_USD, EXCESS_COST_USD = A + "profile", A + "task", A + "reason", A + "cost_usd", A + "excess_cost_usd"
EXCESS_LATENCY_S, SLO_EXCEEDED, AGENT = A + "excess_latency_s", A + "slo_exceeded", A + "agent"
ARGUMENTS_CAPTURED = A + "arguments_captured"  # set (to false) only when the span carries no arguments
TOOL_ATTRIBUTES = frozenset((EFFICIENCY_SCORE, COST_SCORE, LATENCY_SCORE, COMPLEXITY_SCORE, OPTIMAL_TOOL, OUTCOME, VERDICT,
                             PASSED, THRESHOLD, PROFILE, TASK, REASON, COST_USD, EXCESS_COST_USD, EXCESS_LATENCY_S,
                             SLO_EXCEEDED, AGENT, ARGUMENTS_CAPTURED))
# The names of the evaluations a run's root carries (`run_evaluations`).
TASK_COMPLETION, RUN_HEALTH, TOOL_CORRECTNESS = A + "task_completion", A + "run_health", A + "tool_correctness"


_SHARED_FIELDS = ("_name", "_context", "_kind", "_instrumentation_info", "_instrumentation_scope", "_parent",
                  "_start_time", "_end_time", "_links", "_resource", "_status")
_shared_values = itemgetter(*_SHARED_FIELDS)


class EnrichedSpan(ReadableSpan):
    """A finished span with extra attributes and events; everything else is the original's.

    With a `redactor`, the fields besides attributes and events that may carry secrets are
    masked copies: the name and the status description (as text), the links' attributes and
    the resource (one masked copy per resource object). `attributes` and `events` are taken
    as given: the caller redacts them.

    `appended` is set by this module alone (`Enricher.enrich`, `enrich_run`), when the copy is its original with
    attributes and events only appended (no redactor): the original's counts of both and the (cached, never changed)
    catalog-fixed attributes that come right after the original's (none for a run's root), so that a writer of the
    original's bytes (`otlp/messages.py`) adds the rest without comparing the two. Any other copy has None, a copy
    of a copy too.
    """

    def __init__(self, span: ReadableSpan, attributes: Mapping[str, Any], events: Sequence[Event],
                 redactor: Redactor | None = None, appended: tuple[int, int, Mapping[str, Any]] | None = None) -> None:
        if type(span) is ReadableSpan or type(span) is EnrichedSpan:  # what on_end and exporters get: only fields
            self.__dict__ = {**span.__dict__, "_attributes": attributes, "_events": events, "_original": span}
        else:
            try:  # ReadableSpan.__init__ only stores these: taking them as they are is 5x faster
                values = _shared_values(span.__dict__)
            except (AttributeError, KeyError):  # another ReadableSpan implementation: its public fields
                super().__init__(name=span.name, context=span.context, parent=span.parent, resource=span.resource,
                                 attributes=attributes, events=events, links=span.links, kind=span.kind,
                                 status=span.status, start_time=span.start_time, end_time=span.end_time,
                                 instrumentation_scope=span.instrumentation_scope)
            else:
                self.__dict__.update(zip(_SHARED_FIELDS, values))
                self._attributes, self._events = attributes, events
            self._original = span
        if redactor is not None:
            self._name, self._status, self._links, self._resource = redactor.span_fields(
                self._name, self._status, self._links, self._resource)
            appended = None
        self._appended = appended

    @property
    def dropped_attributes(self) -> int:
        return self._original.dropped_attributes

    @property
    def dropped_events(self) -> int:
        return self._original.dropped_events

    @property
    def dropped_links(self) -> int:
        return self._original.dropped_links


def events_of(span: ReadableSpan) -> tuple[Event, ...]:
    """The span's events as a tuple: `ReadableSpan.events` builds it through a generator, three times slower."""
    events = span_events(span)
    return tuple(events) if events else ()


class Enricher:
    """Builds the exported copies of tool spans: scores added, secrets redacted.

    The catalog-fixed attributes are cached per static score.
    """

    def __init__(self, *, scores: bool = True, redactor: Redactor | None = None, span_events: bool = True) -> None:
        self.scores = scores
        self.redactor = redactor
        self.span_events = span_events  # False when evaluation results go out as log events only
        self._static: dict[int, tuple[StaticScore, dict[str, Any], Mapping[str, Any]]] = {}
        self._lock = threading.Lock()

    def enrich(self, span: ReadableSpan, attrs: Mapping[str, Any], score: CallScore, agent: str | None,
               arguments_captured: bool = True) -> EnrichedSpan:
        """The scored copy of a tool span. A span scored before (by the zero-code exporter of the app that sent it to
        `serve`, say) has its previous evaluation replaced: our attributes dropped, our evaluation event too."""
        if not self.scores:
            merged = dict(attrs)
            self.redactor.apply(merged)
            return EnrichedSpan(span, merged, self.redactor.events(events_of(span)), self.redactor)
        static_attrs, event_attrs = self._for(score)  # redacted once per static score when redaction is on
        redactor = self.redactor
        own_events = events_of(span)
        own_attrs = attrs
        attrs, events = without_previous(attrs, own_events, TOOL_ATTRIBUTES, TOOL_EVALUATIONS)
        appended = None
        if redactor is None:
            if attrs is own_attrs and events is own_events and attrs is span.__dict__.get("_attributes"):
                appended = (len(attrs), len(events), static_attrs)  # the span's own, none of ours: ours come after
            merged = {**attrs, **static_attrs, OUTCOME: score.outcome, SLO_EXCEEDED: score.slo_exceeded,
                      EXCESS_LATENCY_S: score.excess_latency_s}
            if agent:
                merged[AGENT] = agent
        else:  # the same dict, each part redacted: the span's own attributes, the cached part, the per-call part
            merged = dict(attrs)
            redactor.apply(merged)
            merged.update(static_attrs)
            call = {OUTCOME: score.outcome, SLO_EXCEEDED: score.slo_exceeded, EXCESS_LATENCY_S: score.excess_latency_s}
            if agent:
                call[AGENT] = agent
            redactor.apply(call)
            merged.update(call)
            events = redactor.events(events)
        if not arguments_captured:
            merged[ARGUMENTS_CAPTURED] = False
        if not self.span_events:
            return EnrichedSpan(span, merged, events, redactor, appended)
        event = Event(c.GEN_AI_EVALUATION_RESULT, call_evaluation(event_attrs, score, redactor), span.end_time)
        return EnrichedSpan(span, merged, (*events, event), redactor, appended)

    def evaluation(self, score: CallScore) -> Mapping[str, Any]:
        """The `gen_ai.evaluation.result` attributes of a scored call (cached per static score), redacted."""
        return call_evaluation(self._for(score)[1], score, self.redactor)

    def _for(self, score: CallScore) -> tuple[dict[str, Any], Mapping[str, Any]]:
        static = score.static
        cached = self._static.get(id(static))  # by identity: hashing a StaticScore's 19 fields costs more
        if cached is None or cached[0] is not static:
            attrs, event_attrs = static_attributes(static), evaluation_event_attributes(static)
            if self.redactor is not None:  # the reason and task quote the tool's name, which the span chose
                self.redactor.apply(attrs)
                self.redactor.apply(event_attrs)
            cached = (static, attrs, MappingProxyType(event_attrs))
            with self._lock:
                if len(self._static) > 10_000:  # a catalog reload or unknown-name flood; start over
                    self._static.clear()
                self._static[id(static)] = cached
        return cached[1], cached[2]


_RUN_KEYS = {name: RUN + name for name in (
    "outcome", "completion_reason", "task", "tool_calls", "llm_calls", "redundant_calls", "spurious_calls", "over_budget",
    "cost_usd", "tool_cost_usd", "llm_cost_usd", "health_score", "agent", "unpriced_models", "arguments_not_captured", "loops",
    "llm_priced_by")}
_RUN_OPTIONAL = tuple((name, RUN + name) for name in ("duration_s", "tool_correctness", "tool_accuracy", "argument_validity",
                                                      "call_precision"))
RUN_ATTRIBUTES = frozenset((*_RUN_KEYS.values(), *(key for _, key in _RUN_OPTIONAL), *RUN_CONTEXT_ATTRIBUTES))
TOOL_EVALUATIONS = frozenset((EVALUATION_NAME,))
RUN_EVALUATIONS = frozenset((TASK_COMPLETION, RUN_HEALTH, TOOL_CORRECTNESS, TRUE_COST_EVALUATION))


def without_previous(attrs: Mapping[str, Any], events: tuple[Event, ...], names: frozenset[str],
                     evaluations: frozenset[str]) -> tuple[Mapping[str, Any], tuple[Event, ...]]:
    """`attrs` and `events` less a previous evaluation of ours: the attributes in `names` and the
    `gen_ai.evaluation.result` events named in `evaluations` (what enrichment writes, and nothing else),
    so that a span evaluated twice carries one evaluation, the last. Unchanged when there is none."""
    if not names.isdisjoint(attrs):
        attrs = {key: value for key, value in attrs.items() if key not in names}
    if events and any(_is_evaluation(event, evaluations) for event in events):
        events = tuple(event for event in events if not _is_evaluation(event, evaluations))
    return attrs, events


def _is_evaluation(event: Event, evaluations: frozenset[str]) -> bool:
    return event.name == c.GEN_AI_EVALUATION_RESULT and (event.attributes or {}).get(c.GEN_AI_EVALUATION_NAME) in evaluations


def enrich_run(span: ReadableSpan, run: AgentRun, health_pass: float, redactor: Redactor | None = None,
               span_events: bool = True) -> EnrichedSpan:
    """The run's root span with `agent_eval.run.*` attributes and one evaluation event per run metric,
    all of it redacted (a span that is a copy of ours already was: only what is added here is).
    A run evaluation the root carries already (from an evaluation upstream) is replaced."""
    e, k = run.evaluation, _RUN_KEYS
    attrs = {
        k["outcome"]: e.outcome, k["completion_reason"]: e.completion_reason, k["task"]: run.task,
        k["tool_calls"]: len(run.tool_calls) + run.calls_dropped, k["llm_calls"]: len(run.llm_calls),
        k["redundant_calls"]: len(e.redundant_calls), k["spurious_calls"]: len(e.spurious_calls),
        k["over_budget"]: e.over_budget, k["cost_usd"]: e.cost_usd, k["tool_cost_usd"]: e.tool_cost_usd,
        k["llm_cost_usd"]: e.llm_cost_usd, k["health_score"]: e.health,
    }
    if run.agent:
        attrs[k["agent"]] = run.agent
    for name, key in _RUN_OPTIONAL:
        value = getattr(e, name)
        if value is not None:
            attrs[key] = value
    if e.unpriced_models:
        attrs[k["unpriced_models"]] = list(e.unpriced_models)
    if e.llm_price_sources:  # where the LLM calls' prices came from: catalog, reported, genai_prices, unpriced
        attrs[k["llm_priced_by"]] = list(e.llm_priced_by)
    if e.loops:
        attrs[k["loops"]] = len(e.loops)
    if e.arguments_not_captured:  # unknown, so left out of argument validity
        attrs[k["arguments_not_captured"]] = len(e.arguments_not_captured)
    attrs.update(run_context_attributes(e.context))  # its input tokens and cost: what tool results caused, the rest
    end = span.end_time
    events = ([Event(c.GEN_AI_EVALUATION_RESULT, a, end) for a in run_evaluations(run, health_pass, redactor)]
              if span_events else [])
    own_attrs, own_events = attribute_dict(span), events_of(span)  # the span's own dict: never changed in place
    base, own = without_previous(own_attrs, own_events, RUN_ATTRIBUTES, RUN_EVALUATIONS)
    appended = None
    if redactor is None and base is own_attrs and own is own_events and base is span.__dict__.get("_attributes"):
        appended = (len(base), len(own), _NOTHING)  # only appended: no catalog-fixed part, ours after the span's own
    if redactor is not None:
        redactor.apply(attrs)  # the completion reason quotes the root's status description
        if isinstance(span, EnrichedSpan):  # a copy of ours: redacted already, its fields too
            redactor = None
        else:
            base = dict(base)
            redactor.apply(base)
            own = redactor.events(own)
    return EnrichedSpan(span, {**base, **attrs}, (*own, *events), redactor, appended)


_NOTHING: Mapping[str, Any] = MappingProxyType({})


class EvaluationLog:
    """GenAI `gen_ai.evaluation.result` events as log records (the OpenTelemetry Logs API), parented to the
    evaluated span: the form the GenAI conventions give events now that span events are being deprecated.

    >>> log = EvaluationLog(logger_provider)          # default: the global LoggerProvider
    >>> log.emit(tool_span, evaluation_event_attributes(score.static))
    """

    def __init__(self, logger_provider: Any = None) -> None:
        from opentelemetry._logs import get_logger_provider

        self._logger = (logger_provider or get_logger_provider()).get_logger("otel_agent_eval")

    def emit(self, span: ReadableSpan, attributes: Mapping[str, Any]) -> None:
        """One evaluation as a log record; `attributes` as `Enricher.evaluation` / `run_evaluations` give them (redacted)."""
        from opentelemetry.trace import NonRecordingSpan, set_span_in_context

        self._logger.emit(timestamp=span.end_time, context=set_span_in_context(NonRecordingSpan(span.context)),
                          event_name=c.GEN_AI_EVALUATION_RESULT, attributes=dict(attributes))


def redacted(span: ReadableSpan, redactor: Redactor) -> ReadableSpan:
    """A copy of any span with everything in it redacted: attributes, events, name, status, links, resource.
    On any failure, what is left of it is its identity and timing (fail closed)."""
    try:
        attrs = dict(span.attributes or {})
        redactor.apply(attrs)
        return EnrichedSpan(span, attrs, redactor.events(events_of(span)), redactor)
    except Exception:  # noqa: BLE001 - what cannot be masked does not leave
        return _stripped(span)


def _stripped(span: Any) -> ReadableSpan:
    """A span that could not be redacted: its context, parent, kind, times and status code; nothing that holds text."""
    def get(name: str, default: Any = None) -> Any:
        try:
            return getattr(span, name)
        except Exception:  # noqa: BLE001
            return default

    status = get("status")
    kind = get("kind")
    return ReadableSpan(name=MASK, context=get("context"), parent=get("parent"), resource=Resource({}),
                        kind=kind if isinstance(kind, SpanKind) else SpanKind.INTERNAL,
                        status=Status(getattr(status, "status_code", StatusCode.UNSET)),
                        start_time=get("start_time"), end_time=get("end_time"),
                        instrumentation_scope=get("instrumentation_scope"))


def run_evaluations(run: AgentRun, health_pass: float, redactor: Redactor | None = None) -> list[dict[str, Any]]:
    """The `gen_ai.evaluation.result` attributes of an evaluated run: completion, health, and tool correctness when
    known; redacted with `redactor` (the completion reason quotes the root's status description)."""
    out = _run_evaluations(run, health_pass)
    if redactor is not None:
        for attrs in out:
            redactor.apply(attrs)
    return out


def health_text(health: float) -> str:
    """A health score to one decimal, rounded down: 99.96 is "99.9", never a perfect "100" (nor 69.96 a passing
    "70.0"). The epsilon keeps a score that is a tenth in decimal (75.3, stored as 75.29999...) as it is."""
    return f"{math.floor(health * 10 + 1e-9) / 10:.1f}"


def _run_evaluations(run: AgentRun, health_pass: float) -> list[dict[str, Any]]:
    e = run.evaluation
    out = [_evaluation(TASK_COMPLETION, 1.0 if e.completed else 0.0, e.completed, e.completion_reason),
           _evaluation(RUN_HEALTH, e.health, e.health >= health_pass,
                       f"Health {health_text(e.health)}/100 (completion, tool accuracy, latency, cost).")]
    if e.tool_correctness is not None:
        out.append(_evaluation(TOOL_CORRECTNESS, e.tool_correctness, e.tool_correctness >= TOOL_CORRECTNESS_PASS,
                               f"Expected tools called: {e.tool_correctness:.2f}."))
    out += context_evaluations(run)  # a true cost per tool call whose result later model calls paid for
    return out


def call_evaluation(event_attrs: Mapping[str, Any], score: CallScore, redactor: Redactor | None = None) -> Mapping[str, Any]:
    """A call's evaluation from its static part: as it is, or for a failed call the choice's score
    explained with the failure (an error changes the outcome, not the scores). With `redactor`,
    `event_attrs` are redacted already (`Enricher._for`) and the error type is redacted here, as
    the span's `error.type` is."""
    if score.outcome == score.static.outcome:
        return event_attrs
    error = score.error_type if redactor is None else redactor.text(score.error_type)
    return {**event_attrs,
            c.GEN_AI_EVALUATION_EXPLANATION: f"Tool call failed ({error}). {event_attrs[c.GEN_AI_EVALUATION_EXPLANATION]}"}


def _evaluation(name: str, score: float, passed: bool, explanation: str) -> dict[str, Any]:
    return {
        c.GEN_AI_EVALUATION_NAME: name,
        c.GEN_AI_EVALUATION_SCORE_VALUE: score,
        c.GEN_AI_EVALUATION_SCORE_LABEL: "pass" if passed else "fail",
        c.GEN_AI_EVALUATION_EXPLANATION: explanation,
    }


def static_attributes(static: StaticScore) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        EFFICIENCY_SCORE: static.efficiency,
        COST_SCORE: static.cost_score,
        LATENCY_SCORE: static.latency_score,
        OPTIMAL_TOOL: static.optimal_tool,
        VERDICT: static.verdict,
        PASSED: static.verdict != "fail",
        THRESHOLD: static.threshold,
        PROFILE: static.profile,
        TASK: static.task,
        REASON: static.reason,
        COST_USD: static.cost_usd,
        EXCESS_COST_USD: static.excess_cost_usd,
    }
    if static.complexity_score is not None:
        attrs[COMPLEXITY_SCORE] = static.complexity_score
    return attrs


def evaluation_event_attributes(static: StaticScore) -> dict[str, Any]:
    """A GenAI `gen_ai.evaluation.result` event's attributes for this score."""
    return {
        c.GEN_AI_EVALUATION_NAME: EVALUATION_NAME,
        c.GEN_AI_EVALUATION_SCORE_VALUE: static.efficiency,
        c.GEN_AI_EVALUATION_SCORE_LABEL: "fail" if static.verdict == "fail" else "pass",
        c.GEN_AI_EVALUATION_EXPLANATION: static.reason,
    }

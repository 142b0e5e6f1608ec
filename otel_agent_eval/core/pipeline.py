"""The evaluation core: finished spans in; scored calls, evaluated runs and the spans to pass on out.

Every entry point runs this one class: the span processor (on its hand-off thread), the
zero-code exporter (on the batch it is about to export), and the offline tools. It holds
no threads and does no I/O; one caller at a time (the adapters serialise), so its state
needs no locks. What it produces goes to a `Sink` (the Prometheus accumulators, or
nothing) and back to the caller as the list of spans to forward, tool spans and run roots
as enriched copies, in order.

    >>> pipeline = Pipeline(load_catalog(), sink=metrics)
    >>> pipeline.agent_started(agent_span, "support_agent")   # optional: from on_start
    >>> forward = pipeline.ended(tool_span)                    # [enriched copy]
    >>> forward = pipeline.ended(agent_span)                   # [enriched root]

Without `agent_started` hints (the exporter sees only ended spans), a tool span whose
agent is not known yet waits in its trace until an agent span containing it, or the
trace's local root, ends: the same agent, task and scores as with the hints, later.
"""
from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from ..config.catalog import AttributeMapping, Catalog
from ..config.settings import EVALUATION_EVENTS
from . import conventions as c
from .enrich import (EnrichedSpan, Enricher, EvaluationLog, call_evaluation, enrich_run,
                     evaluation_event_attributes, redacted, run_evaluations)
from .recognize import (UNKNOWN_ERROR_TYPE, SpanFacts, ToolCallRecord, _Convention, agent_name_of, attribute_dict,
                        call_error, convention_of, custom_convention, llm_call_of, read_tool_call, span_facts,
                        workflow_agent_of)
from .noise import typed_keys
from .redact import Redactor
from .run_eval import RunEvaluator
from .runs import AgentRun, ClosedRun, Pending, RunTracker
from .scoring import CallScore, Scorer

logger = logging.getLogger(__name__)
_ERROR, _UNSET = StatusCode.ERROR, StatusCode.UNSET

KIND_KEYS = c.KIND_KEYS


class Sink(Protocol):
    """Where results go (the Prometheus accumulators implement it)."""

    def record(self, score: CallScore, agent: str | None, trace_id: int = 0) -> None: ...
    def record_run(self, run: AgentRun) -> None: ...
    def count(self, name: str, n: int = 1) -> None: ...
    def span_ignored(self) -> None: ...
    def catalog_changed(self, catalog: Catalog) -> None: ...


class NoSink:
    """Results kept nowhere (offline use, or `registry=None`)."""

    def record(self, score: CallScore, agent: str | None, trace_id: int = 0) -> None:
        pass

    def record_run(self, run: AgentRun) -> None:
        pass

    def count(self, name: str, n: int = 1) -> None:
        pass

    def span_ignored(self) -> None:
        pass

    def catalog_changed(self, catalog: Catalog) -> None:
        pass


class CatalogState(NamedTuple):
    """Everything derived from the catalog, swapped as one reference on reload."""

    catalog: Catalog
    scorer: Scorer
    evaluator: RunEvaluator
    custom: _Convention | None
    defer_unrouted: bool
    kind_keys: frozenset[str]  # the attribute keys that make a span typed for the core (`Pipeline.is_typed`)
    typed_keys: frozenset[str]  # those that make it one that may matter (core/noise.py's rule 1): these and gen_ai.system


class Failures:
    """Log each kind of failure once, count every one: the host app must never see them. With `mask` (redaction's),
    what a log line quotes is masked as exported values are: a message may quote a span's values."""

    def __init__(self, sink: Sink, mask: Callable[[str], str] | None = None) -> None:
        self.sink = sink
        self._mask = mask
        self._logged: set[tuple[str, type]] = set()

    def __call__(self, stage: str, exc: BaseException, counter: str = "internal_errors") -> None:
        try:
            self.sink.count(counter)
            key = (stage, type(exc))
            if key not in self._logged:
                self._logged.add(key)
                masked = self._mask is not None  # then the traceback's frames, not its last line: it repeats the message
                logger.error("otel-agent-eval: %s failed (%s: %s); the app goes on, further %s errors are only counted%s",
                             stage, type(exc).__name__, self._mask(str(exc)) if masked else exc, type(exc).__name__,
                             "\n" + "".join(traceback.format_tb(exc.__traceback__)) if masked else "",
                             exc_info=None if masked else exc)
        except Exception:  # noqa: BLE001 - the error path itself must not raise
            pass

    def once(self, key: str, message: str, *args: Any) -> None:
        if (key, type(None)) not in self._logged:
            self._logged.add((key, type(None)))
            logger.warning(message, *(args if self._mask is None else (self._mask(str(a)) for a in args)))


class Pipeline:
    """Scores tool calls and agent runs from finished spans; returns the spans to forward.

    `enrich` adds `agent_eval.*` attributes and evaluation events to the copies; `redactor`
    masks what must not leave the process. `on_call(record, score)` and `on_run(run)` are
    the user's callbacks (their exceptions are counted, never raised). `sees_starts` says
    whether `agent_started` hints will come; without them every tool span with an unknown
    agent waits for its run. `evaluation_events` says where `gen_ai.evaluation.result` events go:
    `span` (span events on the enriched copies), `log` (log records through `logger_provider`,
    default the global one, parented to the evaluated span) or `both`.
    """

    def __init__(
        self,
        catalog: Catalog,
        *,
        profile: str | None = None,
        environment: str | None = None,
        attribute_mapping: AttributeMapping | None = None,
        run_validator: Callable[[AgentRun], bool] | None = None,
        sink: Sink | None = None,
        enrich: bool = True,
        redactor: Redactor | None = None,
        on_call: Callable[[ToolCallRecord, CallScore], None] | None = None,
        on_run: Callable[[AgentRun], None] | None = None,
        max_open_traces: int = 10_000,
        max_calls_per_run: int = 1_000,
        run_ttl_s: float = 600.0,
        sees_starts: bool = True,
        clock: Callable[[], float] = time.monotonic,
        evaluation_events: str = "span",
        logger_provider: Any = None,
    ) -> None:
        if evaluation_events not in EVALUATION_EVENTS:
            raise ValueError(f"evaluation_events must be one of {', '.join(EVALUATION_EVENTS)}; got {evaluation_events!r}")
        self._options = dict(profile=profile, environment=environment, attribute_mapping=attribute_mapping,
                             run_validator=run_validator)
        self.state = self.build_state(catalog)
        self.sink: Sink = sink if sink is not None else NoSink()
        self.failed = Failures(self.sink, redactor.text if redactor is not None else None)
        self.on_call = on_call
        self.on_run = on_run
        self.runs = RunTracker(max_open_traces=max_open_traces, max_calls_per_run=max_calls_per_run, ttl_s=run_ttl_s,
                               clock=clock)
        self.enricher = (Enricher(scores=enrich, redactor=redactor, span_events=evaluation_events != "log")
                         if enrich or redactor is not None else None)
        # gen_ai.evaluation.result as log records too (or instead): decided once, None when off
        self.evaluation_log = EvaluationLog(logger_provider) if evaluation_events != "span" else None
        self.redactor = redactor
        self._defer_all = not sees_starts
        self.fallback_for: str | None = None  # the catalog file the packaged catalog stands in for, if any
        self.wanted_names: dict[str, str | None] | None = None  # the profile and environment configured for that file
        # each evaluated run, with its task route and catalog, for the online judge (judge/online.py); it must not block
        self.judge_run: Callable[[AgentRun, Any, Catalog], None] | None = None

    # -- the catalog -----------------------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        return self.state.catalog

    @property
    def scorer(self) -> Scorer:
        return self.state.scorer

    def build_state(self, catalog: Catalog, names: Mapping[str, str | None] | None = None) -> CatalogState:
        """Everything the catalog decides, built before it is swapped in (raises on a bad catalog); `names`: another
        profile and environment than the pipeline's (`swap` keeps them)."""
        o = {**self._options, **names} if names else self._options
        mapping = o["attribute_mapping"] or catalog.attribute_mapping
        custom = custom_convention(mapping) if mapping else None
        tool_key = (custom.tool_name[0],) if custom is not None else ()
        return CatalogState(
            catalog=catalog,
            scorer=Scorer(catalog, profile=o["profile"], environment=o["environment"]),
            evaluator=RunEvaluator(catalog, validator=o["run_validator"]),
            custom=custom,
            defer_unrouted=any(c.GEN_AI_AGENT_NAME in route.match for route in catalog.tasks),
            kind_keys=frozenset(KIND_KEYS + tool_key),
            typed_keys=typed_keys(tool_key[0] if tool_key else None),
        )

    def swap(self, state: CatalogState, names: Mapping[str, str | None] | None = None) -> None:
        self.state = state
        if names:  # the profile and environment it was built with stay for later reloads
            self._options.update(names)
        self.sink.catalog_changed(state.catalog)

    def is_typed(self, attrs: Mapping[str, Any]) -> bool:
        """Whether a span may matter by its own attributes (a kind key, or the custom tool-name key)."""
        custom = self.state.custom
        return (KIND_KEYS[0] in attrs or KIND_KEYS[1] in attrs or KIND_KEYS[2] in attrs or KIND_KEYS[3] in attrs
                or KIND_KEYS[4] in attrs or (custom is not None and custom.tool_name[0] in attrs))

    # -- spans -----------------------------------------------------------------------

    def agent_started(self, span: Any, name: str, facts: SpanFacts | None = None) -> list[ReadableSpan]:
        """An agent span started (a hint from `on_start`); returns spans of runs the bounds closed meanwhile.
        `facts`: its `span_facts`, when the caller has read them already."""
        try:
            if facts is None:
                facts = span_facts(span)
            self.runs.agent_started(facts.trace_id, facts.span_id, name, facts.start_ns)
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self.failed("on_start", exc)
        return self._outgoing(self._release_closed_early()) if self.runs.early_closed else []

    def ended(self, span: ReadableSpan, attrs: Mapping[str, Any] | None = None,
              facts: SpanFacts | None = None) -> list[ReadableSpan]:
        """Everything one finished span does; returns the spans to forward now (never raises).
        `attrs` and `facts` (its `attribute_dict` and `span_facts`) when the caller has read them already."""
        forward: list[ReadableSpan] = [span]
        try:
            if attrs is None:
                attrs = attribute_dict(span)
            if facts is None:
                facts = span_facts(span)
            if facts.parent_id is not None and span.status.status_code is _ERROR:
                self.runs.child_failed(facts.trace_id, facts.parent_id, call_error(span, attrs)[0] or UNKNOWN_ERROR_TYPE,
                                       facts.start_ns)
            state = self.state
            convention = convention_of(attrs, state.custom, state.catalog.ignore_tools)
            if convention is not None:
                forward = self._tool_span(span, attrs, convention, facts)
            else:
                self.sink.span_ignored()
                forward = self._other_span(span, attrs, facts)
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self.failed("on_end", exc)
        if self.runs.early_closed:  # runs the bounds closed while handling this span
            forward = self._release_closed_early() + forward
        return forward if self.redactor is None else self._outgoing(forward)

    def outgoing(self, span: ReadableSpan) -> ReadableSpan:
        """A span about to leave the process: redacted when redaction is on (fail closed), else as it is."""
        if self.redactor is None or isinstance(span, EnrichedSpan):  # our copies were redacted when built
            return span
        return redacted(span, self.redactor)

    def _outgoing(self, spans: list[ReadableSpan]) -> list[ReadableSpan]:
        return spans if self.redactor is None else [self.outgoing(s) for s in spans]

    def expire(self) -> list[ReadableSpan]:
        """Close the runs idle past the TTL (the adapters call this periodically: in a quiet process no new trace
        comes to); evaluate them and return their held-back spans. Cheap when nothing is due."""
        try:
            if not self.runs.expire():
                return []
        except Exception as exc:  # noqa: BLE001
            self.failed("expire runs", exc)
        return self._outgoing(self._release_closed_early())

    def close_all(self) -> list[ReadableSpan]:
        """Close every open run (shutdown): evaluate them and return their held-back spans."""
        released: list[ReadableSpan] = []
        try:
            for closed in self.runs.close_all():
                released += self._finish_run(closed, [])
        except Exception as exc:  # noqa: BLE001
            self.failed("close runs", exc)
        return self._outgoing(released)

    def _release_closed_early(self) -> list[ReadableSpan]:
        released: list[ReadableSpan] = []
        try:
            for item in self.runs.drain_closed_early():
                released += self._finish_run(item, [])
        except Exception as exc:  # noqa: BLE001
            self.failed("close runs early", exc)
        return released

    def _tool_span(self, span: ReadableSpan, attrs: Mapping[str, Any], convention: _Convention,
                   facts: SpanFacts) -> list[ReadableSpan]:
        record = read_tool_call(span, attrs, convention, facts)
        if record.error is None and span.status.status_code is _UNSET:  # the one error rule (`call_error`), last part
            record.error = self.runs.child_error(record.trace_id, record.span_id)
        local_child = not facts.is_root
        inner = self.runs.calls_under(record.trace_id, record.span_id)
        if inner and self._same_tool(record.name, inner):
            self.sink.count("nested_tool_spans")  # the call was scored on its inner span (MCP `tools/call`)
            return [span] if local_child else self._close_runs(span, attrs, facts, [span])
        if local_child and record.trace_id in self.runs.recent_roots:  # its trace's root has ended: late?
            root = self.runs.late(record.trace_id, record.start_ns)
            if root is not None:  # its agent's run is evaluated: scored with that agent, forwarded now, in no run
                self.sink.count("late_tool_spans")
                record.agent = record.agent or root[2]
                return [self._enriched(span, attrs, record, self.score(span, attrs, record))]
        if record.agent is None:
            record.agent = self.runs.agent_of(record.trace_id)
            if (record.agent is None and local_child and (self._defer_all or self.state.defer_unrouted)
                    and self.runs.defer(record.trace_id, Pending(span, attrs, record))):
                return []  # forwarded when its agent is known (at the latest when the trace's root ends)
        score = self.score(span, attrs, record)
        self.runs.add_call(record.trace_id, record, score)
        out = [span if self.enricher is None else self._enriched(span, attrs, record, score)]
        if local_child:  # a tool span closes a run only as a root
            return out
        return self._close_runs(span, attrs, facts, out)

    def _same_tool(self, name: str, others: list[str]) -> bool:
        """Whether one of `others` is this tool: the same name, or the same catalog tool."""
        tool = self.state.catalog.tool
        mine = tool(name)
        return any(other == name or (mine is not None and tool(other) is mine) for other in others)

    def _other_span(self, span: ReadableSpan, attrs: Mapping[str, Any], facts: SpanFacts) -> list[ReadableSpan]:
        llm = llm_call_of(attrs, facts.span_id, facts.start_ns, priced=True)
        if llm is not None:
            if facts.trace_id in self.runs.recent_roots and self.runs.late(facts.trace_id, facts.start_ns) is not None:
                self.sink.count("late_llm_spans")  # its run was evaluated when the root ended: in none
            else:
                self.runs.add_llm(facts.trace_id, llm, facts.parent_id)
        else:
            self.runs.llm_inside(facts.trace_id, facts.span_id, facts.parent_id)
            workflow_agent = workflow_agent_of(attrs, span.name)
            if workflow_agent is not None:
                self.runs.workflow_agent(facts.trace_id, workflow_agent)
        return self._close_runs(span, attrs, facts, [span])

    def _close_runs(self, span: ReadableSpan, attrs: Mapping[str, Any], facts: SpanFacts,
                    out: list[ReadableSpan]) -> list[ReadableSpan]:
        closed = self.runs.span_ended(span, facts, agent_name_of(attrs, span.name))
        if not closed:
            return out
        released: list[ReadableSpan] = []
        for item in closed:
            try:
                released += self._finish_run(item, out)
            except Exception as exc:  # noqa: BLE001 - the run is lost, its held-back spans are not
                self.failed("finish run", exc)
                released += [p.span for p in item.pending if all(p.span is not r for r in released)]
        return released + out

    def _enriched(self, span: ReadableSpan, attrs: Mapping[str, Any], record: ToolCallRecord, score: CallScore) -> ReadableSpan:
        if self.enricher is None:
            return span
        try:
            return self.enricher.enrich(span, attrs, score, record.agent, record.arguments_captured)
        except Exception as exc:  # noqa: BLE001
            self.failed("enrich", exc, "enrichments_dropped")
            return span

    def score(self, span: ReadableSpan, attrs: Mapping[str, Any], record: ToolCallRecord) -> CallScore:
        """Route and score one tool call, account it in the sink and tell `on_call`."""
        record.arguments  # parsed here, off the app's thread, so unreadable arguments are counted too
        if record.problems:
            self.sink.count("malformed_tool_spans")
            self.failed.once("malformed", "otel-agent-eval: tool span %.200r has unreadable values: %.500s (logged once; "
                             "see agent_eval_processor_malformed_tool_spans_total)", record.name, "; ".join(record.problems))
        scorer = self.state.scorer
        resource = getattr(span.resource, "attributes", None) if scorer.uses_resource else None
        score = scorer.score(record, scorer.route(record.agent, attrs, resource))
        self.sink.record(score, record.agent, record.trace_id)
        if self.evaluation_log is not None:
            try:
                enricher = self.enricher  # there is one whenever redaction is on: its evaluations are redacted
                attrs = (enricher.evaluation(score) if enricher is not None
                         else call_evaluation(evaluation_event_attributes(score.static), score))
                self.evaluation_log.emit(span, attrs)
            except Exception as exc:  # noqa: BLE001
                self.failed("evaluation log event", exc)
        if self.on_call is not None:
            try:
                self.on_call(record, score)
            except Exception as exc:  # noqa: BLE001
                self.failed("on_call callback", exc)
        return score

    def _finish_run(self, closed: ClosedRun, out: list[ReadableSpan]) -> list[ReadableSpan]:
        """Score the run's held-back calls, evaluate it, record it; enrich its root if it is in `out`.

        Returns the held-back spans to forward: all of them, whatever fails on the way.
        """
        run, released = closed.run, []
        if closed.pending:
            self.sink.count("deferred_calls_released", len(closed.pending))
        for pending in closed.pending:
            try:
                pending.record.agent = pending.record.agent or run.agent
                score = self.score(pending.span, pending.attrs, pending.record)
                run.tool_calls.append(pending.record)
                run.scores.append(score)
                released.append(self._enriched(pending.span, pending.attrs, pending.record, score))
            except Exception as exc:  # noqa: BLE001 - the score is lost, the span is not
                self.failed("score held-back call", exc)
                released.append(pending.span)
        try:
            self._evaluate_run(run, closed.root, out)
        except Exception as exc:  # noqa: BLE001
            self.failed("evaluate run", exc)
        return released

    def _evaluate_run(self, run: AgentRun, root: ReadableSpan | None, out: list[ReadableSpan]) -> None:
        if len(run.tool_calls) > 1:  # (none or one: nothing to put in order)
            starts = [record.start_ns or 0 for record in run.tool_calls]
            if starts != sorted(starts):  # ended out of start order: put them in order
                order = sorted(range(len(starts)), key=starts.__getitem__)
                run.tool_calls = [run.tool_calls[i] for i in order]
                run.scores = [run.scores[i] for i in order]
        state = self.state
        resource = getattr(root.resource, "attributes", None) if root is not None and state.scorer.uses_resource else None
        route = state.scorer.route(run.agent, run.root_attributes, resource)  # as its calls were routed
        run.task = route.name if route else ""
        run.expected_tools = route.expected_tools if route else ()
        run.evaluation = state.evaluator.evaluate(run, route)
        self.sink.record_run(run)
        if self.evaluation_log is not None and root is not None:
            try:
                for attrs in run_evaluations(run, state.scorer.health_pass, self.redactor):
                    self.evaluation_log.emit(root, attrs)
            except Exception as exc:  # noqa: BLE001
                self.failed("evaluation log event", exc)
        if self.on_run is not None:
            try:
                self.on_run(run)
            except Exception as exc:  # noqa: BLE001
                self.failed("on_run callback", exc)
        if self.judge_run is not None:
            try:
                self.judge_run(run, route, state.catalog)
            except Exception as exc:  # noqa: BLE001
                self.failed("judge run", exc)
        if self.enricher is not None and self.enricher.scores and root is not None:
            for i, span in enumerate(out):
                if span.context.span_id == root.context.span_id:
                    try:
                        out[i] = enrich_run(span, run, state.scorer.health_pass, self.enricher.redactor,
                                            self.enricher.span_events)
                    except Exception as exc:  # noqa: BLE001
                        self.failed("enrich run", exc, "enrichments_dropped")

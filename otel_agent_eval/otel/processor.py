"""The span processor: scores tool calls as their spans end, assembles agent runs, forwards enriched copies.

    >>> provider.add_span_processor(AgentEvalSpanProcessor(
    ...     "catalog.yaml", registry=registry,
    ...     forward_to=BatchSpanProcessor(OTLPSpanExporter())))

It runs inside `span.end()` of someone else's app, so it never raises, never blocks on
I/O, and does no more than a few dict look-ups there: the scoring happens on its own
thread (see `handoff.py`). Failures are logged once per kind and counted.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from prometheus_client import REGISTRY, CollectorRegistry

from ..core import conventions as c
from ..config.catalog import AttributeMapping, Catalog, PathLike, load_catalog
from ..core.enrich import Enricher, Redactor, enrich_run
from .handoff import SpanQueue
from ..metrics.collector import EvalMetrics
from ..core.recognize import (ToolCallRecord, _Convention, agent_name_of, attribute_dict, convention_of, custom_convention,
                        llm_call_of, read_tool_call)
from ..core.run_eval import RunEvaluator
from ..core.runs import AgentRun, ClosedRun, Pending, RunTracker
from ..core.scoring import CallScore, Scorer

logger = logging.getLogger(__name__)

COLLECT_WAIT_S = 2.0  # a scrape waits this long for the processor's thread, never longer (it may be stuck forwarding)
_START, _TYPED, _PLAIN = 0, 1, 2  # what a queued item is: an agent start, a span with a kind, any other span
_KIND_KEYS = (c.GEN_AI_OPERATION_NAME, c.OPENINFERENCE_SPAN_KIND, c.TRACELOOP_SPAN_KIND)


class _CatalogState(NamedTuple):
    """Everything derived from the catalog, swapped as one reference on reload."""

    catalog: Catalog
    scorer: Scorer
    evaluator: RunEvaluator
    custom: _Convention | None
    defer_unrouted: bool


class AgentEvalSpanProcessor(SpanProcessor):
    """Scores every tool-call span against a catalog and every agent run; exports Prometheus metrics
    and enriched spans.

    `catalog` is a `Catalog`, a path to a catalog file, or None for the packaged default
    (a broken file raises `CatalogError` here, before the app runs). `forward_to` is the
    processor that should export spans (e.g. `BatchSpanProcessor(OTLPSpanExporter())`):
    it receives every span, tool spans as enriched copies with `agent_eval.*` attributes
    and a `gen_ai.evaluation.result` event, run roots with `agent_eval.run.*`.
    `on_call(record, score)` and `on_run(run)` are called for each scored call and finished
    run (on the processor's thread, in span order; their exceptions are caught and counted).
    `run_validator(run) -> bool` adds your own task-completion check. `redact_keys` (a regular
    expression, e.g. ``"password|token|secret|api_key"``) replaces matching attribute values
    and keys inside tool arguments/results of forwarded tool spans with ``[REDACTED]``;
    `drop_tool_io=True` drops tool arguments and results from them altogether.

    Like `BatchSpanProcessor`, it hands spans off: `span.end()` only classifies the span with
    a few dict look-ups and queues it when it matters (tool, LLM and agent spans, and spans of
    their traces); a daemon thread scores them in batches and forwards them. A scrape,
    `force_flush()` and `shutdown()` process whatever is queued first, so metrics are current
    when read. `background=False` processes every span on the ending thread instead.
    """

    metrics_address: tuple[str, int] | None = None  # (host, port) of the /metrics endpoint, once install() serves one

    def __init__(
        self,
        catalog: Catalog | PathLike | None = None,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        forward_to: SpanProcessor | None = None,
        profile: str | None = None,
        environment: str | None = None,
        enrich: bool = True,
        attribute_mapping: AttributeMapping | None = None,
        window_s: float = 300.0,
        max_unknown_tools: int = 20,
        max_agents: int = 100,
        max_open_traces: int = 10_000,
        max_calls_per_run: int = 1_000,
        run_ttl_s: float = 600.0,
        on_call: Callable[[ToolCallRecord, CallScore], None] | None = None,
        on_run: Callable[[AgentRun], None] | None = None,
        run_validator: Callable[[AgentRun], bool] | None = None,
        redact_keys: str | None = None,
        drop_tool_io: bool = False,
        background: bool = True,
        queue_limit: int = 65_536,
    ) -> None:
        self._options = dict(profile=profile, environment=environment, attribute_mapping=attribute_mapping, run_validator=run_validator)
        self._state = self._build_state(catalog if isinstance(catalog, Catalog) else load_catalog(catalog))
        self.metrics = EvalMetrics(registry=registry, catalog=self.catalog, window_s=window_s,
                                   max_unknown_tools=max_unknown_tools, max_agents=max_agents)
        self.runs = RunTracker(max_open_traces=max_open_traces, max_calls_per_run=max_calls_per_run, ttl_s=run_ttl_s)
        self.metrics.closed_early = self.runs.closed_early
        self.forward_to = forward_to
        self.on_call = on_call
        self.on_run = on_run
        redactor = Redactor(redact_keys, drop_tool_io) if redact_keys or drop_tool_io else None
        self._enricher = Enricher(scores=enrich, redactor=redactor) if forward_to is not None and (enrich or redactor) else None
        self._seen = self.metrics.seen.bump
        self._ignored = self.metrics.ignored.bump
        self._logged: set[tuple[str, type]] = set()
        self._shutdown = False
        self._closers: list[Callable[[], Any]] = []  # resources this processor owns, e.g. the metrics server
        self._active: dict[int, None] = {}  # traces with spans handed off: their other spans follow them
        self._active_limit = 4 * max_open_traces
        self._queue = SpanQueue(self._consume, background=background, limit=queue_limit)
        self.metrics.before_collect = lambda: self._queue.drain(timeout_s=COLLECT_WAIT_S)
        self.metrics.gauges = {
            "queued_spans": ("Spans handed off and not processed yet.", lambda: len(self._queue)),
            "open_runs": ("Traces with agent runs open.", lambda: len(self.runs)),
            "held_back_calls": ("Tool spans held until their agent is known.", lambda: self.runs.held_back),
            "queue_backpressure_drains_total": ("Times an app thread found the hand-off queue full and processed it itself.",
                                                lambda: self._queue.backpressure_drains),
        }
        _reset_in_forked_children(self)

    @property
    def catalog(self) -> Catalog:
        return self._state.catalog

    @property
    def scorer(self) -> Scorer:
        return self._state.scorer

    @property
    def evaluator(self) -> RunEvaluator:
        return self._state.evaluator

    def _build_state(self, catalog: Catalog) -> _CatalogState:
        o = self._options
        mapping = o["attribute_mapping"] or catalog.attribute_mapping
        return _CatalogState(
            catalog=catalog,
            scorer=Scorer(catalog, profile=o["profile"], environment=o["environment"]),
            evaluator=RunEvaluator(catalog, validator=o["run_validator"]),
            custom=custom_convention(mapping) if mapping else None,
            defer_unrouted=any(c.GEN_AI_AGENT_NAME in route.match for route in catalog.tasks),
        )

    def reload_catalog(self, catalog: Catalog | PathLike | None = None) -> bool:
        """Swap in a new catalog (by default: re-read the file given at construction) atomically.

        A broken catalog is rejected with one log line and `agent_eval_processor_catalog_reloads_rejected_total`;
        the last good catalog keeps scoring. Calls in flight finish with the catalog they started with.
        """
        try:
            if catalog is None:  # the file the current catalog came from (None: the packaged default)
                source = self.catalog.source
                catalog = None if source.startswith("<") else source
            new = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
            state = self._build_state(new)
        except (ValueError, OSError) as exc:  # CatalogError is a ValueError
            self.metrics.count("catalog_reloads_rejected")
            logger.error("otel-agent-eval: catalog reload rejected, still scoring with %s: %s", self.catalog.source, exc)
            return False
        self._state = state
        self.metrics.catalog_changed(new)
        self.metrics.count("catalog_reloads")
        logger.info("otel-agent-eval: catalog reloaded from %s (%d tools, %d tasks)", new.source, len(new.tools), len(new.tasks))
        return True

    def _after_fork_in_child(self) -> None:
        """A forked child (e.g. a gunicorn worker after preload) starts with its own counts and locks.

        The parent's metrics endpoint and watcher threads do not exist here, so this process
        does not try to stop them; the child's counts reach Prometheus through its own
        endpoint or, under PROMETHEUS_MULTIPROC_DIR, through the shared files.
        """
        self.metrics.reset_after_fork()
        self._seen, self._ignored = self.metrics.seen.bump, self.metrics.ignored.bump
        self.runs.reset_after_fork()
        self._queue.reset_after_fork()
        self._active = {}
        if self._enricher is not None:
            self._enricher._lock = threading.Lock()
        self._closers = []
        self.metrics_address = None

    # -- SpanProcessor: the app's thread does only this ----------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            attrs = attribute_dict(span)
            if _KIND_KEYS[0] in attrs or _KIND_KEYS[1] in attrs or _KIND_KEYS[2] in attrs:
                name = agent_name_of(attrs, span.name)
                if name is not None:
                    self._active[span.context.trace_id] = None
                    self._queue.put((_START, span, name))
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self._failed("on_start", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.on_start(span, parent_context=parent_context)
            except Exception as exc:  # noqa: BLE001
                self._failed("forward on_start", exc, "forward_errors")

    def on_end(self, span: ReadableSpan) -> None:
        self._seen()
        try:
            attrs = attribute_dict(span)
            custom = self._state.custom
            if (_KIND_KEYS[0] in attrs or _KIND_KEYS[1] in attrs or _KIND_KEYS[2] in attrs
                    or (custom is not None and custom.tool_name[0] in attrs)):
                self._active[span.context.trace_id] = None
                self._queue.put((_TYPED, span, attrs))
                return
            self._ignored()
            if self._active and span.context.trace_id in self._active:  # may close a run
                self._queue.put((_PLAIN, span, attrs))
                return
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self._failed("on_end", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.on_end(span)
            except Exception as exc:  # noqa: BLE001
                self._failed("forward on_end", exc, "forward_errors")

    def _trim_active(self) -> None:
        """Forget the oldest half of the traces marked active but no longer tracked (their roots never
        ended here); their later spans are then forwarded directly. Keeps `_active` bounded."""
        tracked = self.runs.tracked
        stale = [t for t in list(self._active)[: len(self._active) // 2] if t not in tracked]
        for trace_id in stale:
            self._active.pop(trace_id, None)

    def drain(self) -> None:
        """Process every span handed off so far (a scrape, `force_flush` and `shutdown` do this)."""
        self._queue.drain()

    # -- the consumer: one thread at a time, in span order ---------------------------

    def _consume(self, item: tuple[int, Any, Any]) -> None:
        kind, span, extra = item
        forward: list[ReadableSpan] = [] if kind == _START else [span]
        try:
            if kind == _START:
                context = span.context
                self.runs.agent_started(context.trace_id, context.span_id, extra, span.start_time)
            else:
                forward = self._ended(kind, span, extra)
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self._failed("on_end", exc)
        if self.runs.closed_early_waiting:  # runs the bounds closed while handling this item
            forward = self._release_closed_early() + forward
        self._forward(forward)

    def _ended(self, kind: int, span: ReadableSpan, attrs: Mapping[str, Any]) -> list[ReadableSpan]:
        convention = convention_of(attrs, self._state.custom) if kind == _TYPED else None
        if convention is not None:
            forward = self._tool_span(span, attrs, convention)
        else:
            if kind == _TYPED:
                self._ignored()
            forward = self._other_span(span, attrs)
        parent = span.parent
        if parent is None or parent.is_remote:  # a local root: its trace is done here
            self._active.pop(span.context.trace_id, None)
        if len(self._active) > self._active_limit:
            self._trim_active()
        return forward

    def _release_closed_early(self) -> list[ReadableSpan]:
        released: list[ReadableSpan] = []
        try:
            for item in self.runs.drain_closed_early():
                released += self._finish_run(item, [])
                self._active.pop(item.run.trace_id, None)
        except Exception as exc:  # noqa: BLE001
            self._failed("close runs early", exc)
        return released

    def _tool_span(self, span: ReadableSpan, attrs: Mapping[str, Any], convention: Any) -> list[ReadableSpan]:
        record = read_tool_call(span, attrs, convention)
        parent = span.parent
        local_child = parent is not None and not parent.is_remote
        if record.agent is None:
            record.agent = self.runs.agent_of(record.trace_id)
            if (record.agent is None and local_child and self._state.defer_unrouted
                    and self.runs.defer(record.trace_id, Pending(span, attrs, record))):
                return []  # forwarded when its agent is known (at the latest when the trace's root ends)
        score = self.score_record(span, attrs, record)
        self.runs.add_call(record.trace_id, record, score)
        out = [self._enriched(span, attrs, record, score)]
        if local_child:  # a tool span closes a run only as a root
            return out
        return self._close_runs(span, attrs, out)

    def _other_span(self, span: ReadableSpan, attrs: Mapping[str, Any]) -> list[ReadableSpan]:
        llm = llm_call_of(attrs)
        if llm is not None:
            self.runs.add_llm(span.context.trace_id, llm._replace(span_id=span.context.span_id))
        return self._close_runs(span, attrs, [span])

    def _close_runs(self, span: ReadableSpan, attrs: Mapping[str, Any], out: list[ReadableSpan]) -> list[ReadableSpan]:
        closed = self.runs.span_ended(span, agent_name_of(attrs, span.name))
        if not closed:
            return out
        released: list[ReadableSpan] = []
        for item in closed:
            try:
                released += self._finish_run(item, out)
            except Exception as exc:  # noqa: BLE001 - the run is lost, its held-back spans are not
                self._failed("finish run", exc)
                released += [p.span for p in item.pending if all(p.span is not r for r in released)]
            if item.run.closed_by != "end":
                self._active.pop(item.run.trace_id, None)
        return released + out

    def _enriched(self, span: ReadableSpan, attrs: Mapping[str, Any], record: ToolCallRecord, score: CallScore) -> ReadableSpan:
        if self._enricher is None:
            return span
        try:
            return self._enricher.enrich(span, attrs, score, record.agent)
        except Exception as exc:  # noqa: BLE001
            self._failed("enrich", exc, "enrichments_dropped")
            return span

    def score_record(self, span: ReadableSpan, attrs: Mapping[str, Any], record: ToolCallRecord) -> CallScore:
        """Route and score one tool call, account it in the metrics and tell `on_call`."""
        record.arguments  # parsed here, off the app's thread, so unreadable arguments are counted too
        if record.problems:
            self.metrics.count("malformed_tool_spans")
            self._log_problem(record.name, record.problems)
        scorer = self._state.scorer
        resource = getattr(span.resource, "attributes", None) if scorer.uses_resource else None
        score = scorer.score(record, scorer.route(record.agent, attrs, resource))
        self.metrics.record(score, record.agent, record.trace_id)
        if self.on_call is not None:
            try:
                self.on_call(record, score)
            except Exception as exc:  # noqa: BLE001
                self._failed("on_call callback", exc)
        return score

    def score_tool_span(self, span: ReadableSpan, attrs: Mapping[str, Any], convention: Any) -> tuple[ToolCallRecord, CallScore]:
        """Read and score a tool span outside the span-end path (used by the exporter)."""
        record = read_tool_call(span, attrs, convention)
        return record, self.score_record(span, attrs, record)

    def _finish_run(self, closed: ClosedRun, out: list[ReadableSpan]) -> list[ReadableSpan]:
        """Score the run's held-back calls, evaluate it, record it; enrich its root if it is in `out`.

        Returns the held-back spans to forward: all of them, whatever fails on the way.
        """
        run, released = closed.run, []
        if closed.pending:
            self.metrics.count("deferred_calls_released", len(closed.pending))
        for pending in closed.pending:
            try:
                pending.record.agent = pending.record.agent or run.agent
                score = self.score_record(pending.span, pending.attrs, pending.record)
                run.tool_calls.append(pending.record)
                run.scores.append(score)
                released.append(self._enriched(pending.span, pending.attrs, pending.record, score))
            except Exception as exc:  # noqa: BLE001 - the score is lost, the span is not
                self._failed("score held-back call", exc)
                released.append(pending.span)
        try:
            self._evaluate_run(run, closed.root, out)
        except Exception as exc:  # noqa: BLE001
            self._failed("evaluate run", exc)
        return released

    def _evaluate_run(self, run: AgentRun, root: ReadableSpan | None, out: list[ReadableSpan]) -> None:
        run.tool_calls.sort(key=lambda r: r.start_ns or 0)
        state = self._state
        route = state.scorer.route(run.agent, run.root_attributes)
        run.task = route.name if route else ""
        run.expected_tools = route.expected_tools if route else ()
        run.evaluation = state.evaluator.evaluate(run, route)
        self.metrics.record_run(run)
        if self.on_run is not None:
            try:
                self.on_run(run)
            except Exception as exc:  # noqa: BLE001
                self._failed("on_run callback", exc)
        if self._enricher is not None and self._enricher.scores and root is not None:
            for i, span in enumerate(out):
                if span.context.span_id == root.context.span_id:
                    try:
                        out[i] = enrich_run(span, run, state.scorer.health_pass)
                    except Exception as exc:  # noqa: BLE001
                        self._failed("enrich run", exc, "enrichments_dropped")

    def _forward(self, spans: list[ReadableSpan]) -> None:
        if self.forward_to is None:
            return
        for span in spans:
            try:
                self.forward_to.on_end(span)
            except Exception as exc:  # noqa: BLE001
                self._failed("forward on_end", exc, "forward_errors")

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        try:
            self._queue.stop()
            released: list[ReadableSpan] = []
            for closed in self.runs.close_all():
                released += self._finish_run(closed, [])
            self._forward(released)
        except Exception as exc:  # noqa: BLE001
            self._failed("shutdown", exc)
        for close in self._closers:
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                self._failed("shutdown", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.shutdown()
            except Exception as exc:  # noqa: BLE001
                self._failed("forward shutdown", exc, "forward_errors")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Process what is queued and flush the forwarded processor, within `timeout_millis` in all."""
        deadline = time.monotonic() + timeout_millis / 1000
        try:
            if not self._queue.drain(timeout_s=timeout_millis / 1000):
                return False
        except Exception as exc:  # noqa: BLE001
            self._failed("force_flush", exc)
        if self.forward_to is None:
            return True
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        result: list[bool] = []

        def flush() -> None:  # BatchSpanProcessor ignores its timeout while an export hangs; we do not
            try:
                result.append(bool(self.forward_to.force_flush(remaining_ms)))
            except Exception as exc:  # noqa: BLE001
                self._failed("forward force_flush", exc, "forward_errors")
                result.append(False)

        flusher = threading.Thread(target=flush, name="otel-agent-eval-flush", daemon=True)
        flusher.start()
        flusher.join(remaining_ms / 1000)
        return bool(result and result[0])

    def close_on_shutdown(self, close: Callable[[], Any]) -> None:
        """Have `shutdown()` also release a resource tied to this processor (e.g. its metrics server)."""
        self._closers.append(close)

    # -- self-observation -------------------------------------------------------------

    def _failed(self, stage: str, exc: Exception, counter: str = "internal_errors") -> None:
        try:
            self.metrics.count(counter)
            key = (stage, type(exc))
            if key not in self._logged:
                self._logged.add(key)
                logger.error("otel-agent-eval: %s failed (%s: %s); the app goes on, further %s errors are only counted",
                             stage, type(exc).__name__, exc, type(exc).__name__, exc_info=exc)
        except Exception:  # noqa: BLE001 - the error path itself must not raise
            pass

    def _log_problem(self, tool: str, problems: list[str]) -> None:
        key = ("malformed", type(None))
        if key not in self._logged:
            self._logged.add(key)
            logger.warning("otel-agent-eval: tool span %.200r has unreadable values: %.500s (logged once; see "
                           "agent_eval_processor_malformed_tool_spans_total)", tool, "; ".join(problems))


def _reset_in_forked_children(processor: AgentEvalSpanProcessor) -> None:
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(processor)

    def in_child() -> None:
        alive = ref()
        if alive is not None:
            alive._after_fork_in_child()

    os.register_at_fork(after_in_child=in_child)

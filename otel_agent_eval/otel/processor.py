"""The span processor: a thin adapter that hands spans to the evaluation core and forwards what it returns.

    >>> provider.add_span_processor(AgentEvalSpanProcessor(
    ...     "catalog.yaml", registry=registry,
    ...     forward_to=BatchSpanProcessor(OTLPSpanExporter())))

It runs inside `span.end()` of someone else's app, so it never raises, never blocks on
I/O, and does no more than a few dict look-ups there; the core (`core/pipeline.py`) runs on
the hand-off thread (`handoff.py`), as `BatchSpanProcessor` runs its exporter on its worker.
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import SpanContext
from prometheus_client import REGISTRY, CollectorRegistry

from ..config.catalog import Catalog, PathLike
from ..config.settings import Settings, check_arguments
from ..core import conventions as c
from ..core.noise import RUN_NAME_PREFIXES, RUN_NAME_STEM, sdk_span_may_matter
from ..core.recognize import agent_at_start, attribute_dict, convention_of, span_facts
from .active_traces import ActiveTraces
from .exit_flush import flush_at_exit
from .handoff import DEFAULT_LIMIT, SpanQueue, TimedCall
from .reload import reload_catalog
from .otlp_metrics import histograms_setting
from .wiring import build_pipeline, link_otlp_metrics, resolve, show_fallback, stop_judging_on_shutdown

COLLECT_WAIT_S = 0.1  # a scrape waits this long for queued spans, then shows the last consistent state
_START, _SPAN, _NOISE = 0, 1, 2  # what a queued item is: an agent start, an ended span, a span to redact only


class AgentEvalSpanProcessor(SpanProcessor):
    """Scores every tool-call span against a catalog and every agent run; exports Prometheus metrics and enriched spans.

    Settings not given as arguments (None is not given) come from `settings` or `OTEL_AGENT_EVAL_*`, by `install()`'s
    rules (`wiring.resolve`); serving /metrics and reloading the catalog stay `install()`'s. `catalog` is a
    `Catalog`, a path, or None for `OTEL_AGENT_EVAL_CATALOG` or the packaged one, which also scores, logged and
    with `agent_eval_catalog_fallback` at 1, when the file cannot be used: a deployment can break a file, and that
    never stops the app. `forward_to` is the processor that should export spans (e.g.
    `BatchSpanProcessor(OTLPSpanExporter())`): it receives every span, tool spans as enriched copies with
    `agent_eval.*` attributes and a `gen_ai.evaluation.result` event, run roots with `agent_eval.run.*`.
    `on_call(record, score)` and `on_run(run)` are called for each scored call and finished run (on the
    processor's thread, in span order; their exceptions are caught and counted). `run_validator(run) -> bool` adds
    your own task-completion check. `redact_keys` (a regular expression, e.g. ``"password|secret|token(?!s|_count)"``)
    masks matching values of forwarded spans, tool arguments and results included (one that cannot be used fails
    closed, logged); `drop_tool_io=True` drops tool arguments and results. `otlp_metrics` (an `OTLPMetricExporter`,
    a `MeterProvider` or True) and `otlp_histograms` send the metrics over OTLP too (docs/otlp-metrics.md). Other
    options are those of `wiring.build_pipeline`; a bad one raises ValueError naming it.

    `span.end()` only classifies the span with a few dict look-ups and queues it when it matters (tool, LLM and agent
    spans, and the spans of their traces that `core/noise.py`'s rule cannot rule out: roots, failures, run names,
    spans holding others that matter); a daemon thread runs the core on them in batches and forwards them. The rest
    (HTTP and database clients, framework internals) are counted ignored and forwarded at once. A scrape,
    `force_flush()` and `shutdown()` process what is queued first. `background=False` processes every span on the
    ending thread: less and steadier CPU where spans end on a CPU-bound thread, but a slow downstream then stalls it.
    """

    metrics_address: tuple[str, int] | None = None  # (host, port) of the /metrics endpoint, once install() serves one

    def __init__(self, catalog: Catalog | PathLike | None = None, *, registry: CollectorRegistry | None = REGISTRY,
                 forward_to: SpanProcessor | None = None, enrich: bool | None = None, max_open_traces: int = 10_000,
                 background: bool = True, queue_limit: int = DEFAULT_LIMIT, otlp_metrics: Any = None,
                 otlp_histograms: str | None = None, settings: Settings | None = None, **options: Any) -> None:
        check_arguments(queue_limit=queue_limit)
        histograms = histograms_setting(otlp_histograms)  # bad values raise here and in build_pipeline: nothing registered
        # every scoring setting not given here comes from OTEL_AGENT_EVAL_* (redaction too), by install()'s rules
        settings = settings or Settings.from_env()
        given = {name: value for name, value in dict(options, enrich=enrich).items() if value is not None}
        resolved = resolve(settings, catalog=catalog, **given)
        resolved["enrich"] = resolved["enrich"] and forward_to is not None
        self.pipeline, self.metrics = build_pipeline(registry=registry, max_open_traces=max_open_traces, **resolved)
        show_fallback(self, settings, catalog)
        if forward_to is None:  # nothing to forward copies to: keep scoring, skip building copies
            self.pipeline.enricher = None
        self.forward_to = forward_to
        self._downstream_full = _queue_full_check(forward_to)
        self._shutdown = False
        self._closers: list[Callable[[], Any]] = []  # resources this processor owns, e.g. the metrics server
        self._active = ActiveTraces(4 * max_open_traces)  # traces with spans handed off, rule 5's marks (core/noise.py)
        self._passed = self.metrics.passed.bump  # a span seen and ignored at once: the fast path's one counter
        self._flush_forwarded = TimedCall(self._forward_flush)
        self._queue = SpanQueue(self._consume, background=background, limit=queue_limit,
                                tick=lambda: self._forward(self.pipeline.expire()))  # runs idle past the TTL
        self.metrics.before_collect = lambda: self._queue.drain(timeout_s=COLLECT_WAIT_S)
        self.metrics.gauges = {
            "queued_spans": ("Spans handed off and not processed yet.", lambda: len(self._queue)),
            "open_runs": ("Traces with agent runs open.", lambda: len(self.runs)),
            "held_back_calls": ("Tool spans held until their agent is known.", lambda: self.runs.held_back),
        }
        _reset_in_forked_children(self)
        stop_judging_on_shutdown(self)  # after the runs its shutdown closes were offered to the judge
        self.otlp_metrics = link_otlp_metrics(self, otlp_metrics, histograms)
        flush_at_exit(self)

    catalog = property(lambda self: self.pipeline.catalog)
    scorer = property(lambda self: self.pipeline.scorer)
    runs = property(lambda self: self.pipeline.runs)
    on_call = property(lambda self: self.pipeline.on_call, lambda self, f: setattr(self.pipeline, "on_call", f))
    on_run = property(lambda self: self.pipeline.on_run, lambda self, f: setattr(self.pipeline, "on_run", f))

    def reload_catalog(self, catalog: Catalog | PathLike | None = None) -> bool:
        """Swap in a new catalog (default: re-read the file given at construction) atomically; a broken one is
        rejected with one log line and a counter, and the last good one keeps scoring (see reload.py)."""
        return reload_catalog(self.pipeline, catalog)

    def _after_fork_in_child(self) -> None:
        """A forked child (a gunicorn worker after preload) starts with its own counts and locks; its counts reach
        Prometheus through its own endpoint or, under PROMETHEUS_MULTIPROC_DIR, the shared files."""
        self.metrics.reset_after_fork()
        self.runs.reset_after_fork()
        self._queue.reset_after_fork()
        self._flush_forwarded = TimedCall(self._forward_flush)  # its thread, if one ran, is not in the child
        self._active.reset()
        self._passed = self.metrics.passed.bump
        if self.pipeline.enricher is not None:
            self.pipeline.enricher._lock = threading.Lock()
        self._closers = []
        self.metrics_address = None

    # -- SpanProcessor: the app's thread does only this ----------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            if type(span) is Span:  # the SDK's: its fields read directly, as in on_end
                attrs, name = span._attributes, span._name
                attrs = attrs._dict if type(attrs) is BoundedAttributes else attribute_dict(span)
            else:
                attrs, name = attribute_dict(span), span.name
            if self.pipeline.state.kind_keys.isdisjoint(attrs):  # untyped: only a run's name announces an agent
                name = (agent_at_start(attrs, name, False) if type(name) is str and RUN_NAME_STEM in name
                        and name.startswith(RUN_NAME_PREFIXES) else None)
            else:
                name = (None if attrs.get(c.GEN_AI_OPERATION_NAME) == c.OP_EXECUTE_TOOL  # agent_name_of's first rule, sooner
                        else agent_at_start(attrs, span.name, True))
            if name is not None:
                context = span.context
                self._active.mark(context.trace_id, context.span_id)  # its end matters (core/noise.py, rule 5)
                self._queue.put((_START, span, name))  # if refused, the agent is found when its span ends
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self.pipeline.failed("on_start", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.on_start(span, parent_context=parent_context)
            except Exception as exc:  # noqa: BLE001
                self.pipeline.failed("forward on_start", exc, "forward_errors")

    def on_end(self, span: ReadableSpan) -> None:
        try:
            pipeline = self.pipeline
            if type(span) is ReadableSpan:  # the SDK's: its fields read directly (`attribute_dict`'s way, without its call)
                attrs = span._attributes
                attrs = attrs._dict if type(attrs) is BoundedAttributes else attribute_dict(span)
            else:
                attrs = attribute_dict(span)
            if pipeline.state.typed_keys.isdisjoint(attrs):  # untyped: noise unless rules 2-5 (core/noise.py) say not
                may_matter = sdk_span_may_matter(span, self._active.held)
                if not may_matter or _trace_id(span) not in self._active:  # nothing of its trace handed off: as always
                    if pipeline.redactor is None:  # the fast path: counted seen and ignored, passed on as it is
                        self._passed()
                        if self.forward_to is not None:
                            self._forward([span])
                        return
                    self.metrics.seen.bump()
                    self._redacted_later(span, may_matter)
                    return
            self.metrics.seen.bump()
            self._hand_off(span, attrs)
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self.pipeline.failed("on_end", exc)
            self._forward([span] if self.pipeline.redactor is None else [])  # one that may not be redacted stays

    def _hand_off(self, span: ReadableSpan, attrs: Any) -> None:
        """A span that may matter: queued to the processor's thread; it makes its parent matter (rule 5)."""
        parent, trace_id = span._parent if type(span) is ReadableSpan else span.parent, _trace_id(span)
        if parent is not None:
            self._active.mark(trace_id, parent[1] if type(parent) is SpanContext else parent.span_id)
        else:
            self._active.enter(trace_id)
        if self._queue.put((_SPAN, span, attrs)):
            return
        self.metrics.unscored.bump()  # the queue is full: pass it on unscored, as if we were not here
        state = self.pipeline.state
        if convention_of(attrs, state.custom, state.catalog.ignore_tools) is not None:
            self.metrics.tool_calls_unscored.bump()
        self._forward([self.pipeline.outgoing(span)])

    def _redacted_later(self, span: ReadableSpan, may_matter: bool) -> None:
        """With redaction on, every span leaves through the pipeline's thread: one of a trace with nothing handed off
        that the rule cannot rule out through the core, noise to be redacted only (the core would only count it)."""
        if may_matter and self._queue.put((_SPAN, span, None)):
            return
        self.metrics.ignored.bump()
        if may_matter or not self._queue.put((_NOISE, span, None)):
            self._forward([self.pipeline.outgoing(span)])  # redacted here when it could not be queued: fail closed

    def drain(self) -> None:
        """Process every span handed off so far (a scrape, `force_flush` and `shutdown` do this)."""
        self._queue.drain()

    def _consume(self, item: tuple[int, Any, Any]) -> None:
        """The hand-off thread: one item at a time, in span order."""
        kind, span, extra = item
        if kind == _START:
            out = self.pipeline.agent_started(span, extra)
        elif kind == _NOISE:
            out = [self.pipeline.outgoing(span)]  # noise with redaction on: redacted, not evaluated
        else:
            facts = span_facts(span)
            out = self.pipeline.ended(span, extra, facts)
            if facts.is_root:  # a local root: its trace is done here
                self._active.done(facts.trace_id)
        self._forward(out)
        self._active.bound(self.runs.tracked)

    def _forward(self, spans: list[ReadableSpan]) -> None:
        if self.forward_to is None:
            return
        full = self._downstream_full
        for span in spans:
            try:
                if full is not None and full():  # it will drop its oldest span to take this one
                    self.metrics.dropped_downstream.bump()
                self.forward_to.on_end(span)
            except Exception as exc:  # noqa: BLE001
                self.pipeline.failed("forward on_end", exc, "forward_errors")

    is_shut_down = property(lambda self: self._shutdown)

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        try:
            self._queue.stop()
            self._forward(self.pipeline.close_all())
        except Exception as exc:  # noqa: BLE001
            self.pipeline.failed("shutdown", exc)
        for close in (*self._closers, self.metrics.close):
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                self.pipeline.failed("shutdown", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.shutdown()
            except Exception as exc:  # noqa: BLE001
                self.pipeline.failed("forward shutdown", exc, "forward_errors")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Process what is queued and flush the forwarded processor, within `timeout_millis` in all."""
        deadline = time.monotonic() + timeout_millis / 1000
        try:
            if not self._queue.drain(timeout_s=timeout_millis / 1000):
                return False
        except Exception as exc:  # noqa: BLE001
            self.pipeline.failed("force_flush", exc)
        if self.forward_to is None:
            return True
        try:
            return self._flush_forwarded(max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - e.g. no thread could be started
            self.pipeline.failed("force_flush", exc)
            return False

    def flush_for_exit(self, timeout_s: float, close_runs: bool = True) -> bool:
        """Before the last metrics export (at exit: `exit_flush.py`; a metric reader's shutdown: `otlp_metrics.py`):
        evaluate what is queued and (`close_runs`) close the open runs, forwarding what they held."""
        if not self._queue.drain(timeout_s=timeout_s):
            return False  # the worker is stuck downstream: shutdown() closes the runs after it
        if close_runs:
            self._forward(self.pipeline.close_all())
        return True

    def _forward_flush(self, timeout_s: float) -> bool:
        """On `TimedCall`'s thread: BatchSpanProcessor ignores its timeout while an export hangs; we do not."""
        try:
            return bool(self.forward_to.force_flush(int(timeout_s * 1000)))
        except Exception as exc:  # noqa: BLE001
            self.pipeline.failed("forward force_flush", exc, "forward_errors")
            return False

    def close_on_shutdown(self, close: Callable[[], Any]) -> None:
        """Have `shutdown()` also release a resource tied to this processor (e.g. its metrics server)."""
        self._closers.append(close)


def _trace_id(span: ReadableSpan) -> int:
    context = span._context if type(span) is ReadableSpan else span.context
    return context[0] if type(context) is SpanContext else context.trace_id


def _queue_full_check(forward_to: SpanProcessor | None) -> Callable[[], bool] | None:
    """For a forwarded `BatchSpanProcessor`: whether its queue is full, so the next span costs it one.

    The SDK counts those drops only in its own metrics (when a MeterProvider is set); its queue
    is internal (`_batch_processor._queue`, a bounded deque in opentelemetry-sdk 1.45), so this
    is decided once here and None (not counted) when the SDK keeps it otherwise.
    """
    queue = getattr(getattr(forward_to, "_batch_processor", None), "_queue", None)
    if not isinstance(queue, deque) or not queue.maxlen:
        return None
    maxlen = queue.maxlen
    return lambda: len(queue) >= maxlen


def _reset_in_forked_children(processor: AgentEvalSpanProcessor) -> None:
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(processor)

    def in_child() -> None:
        alive = ref()
        if alive is not None:
            alive._after_fork_in_child()

    os.register_at_fork(after_in_child=in_child)

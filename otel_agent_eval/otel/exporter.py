"""Zero-code set-up under `opentelemetry-instrument`: `OTEL_TRACES_EXPORTER=agent_eval`.

The SDK has no entry-point group for span processors, so otel-agent-eval ships a trace
exporter. The SDK puts it behind a `BatchSpanProcessor`; each batch goes through the same
evaluation core as the span processor's (`core/pipeline.py`) before it is exported, so the
spans it exports are the ones it scored: tool spans and run roots enriched, secrets
redacted, as the same `OTEL_AGENT_EVAL_*` settings say (`wiring.py`). The real exporter
behind it is OTLP, chosen by `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` /
`OTEL_EXPORTER_OTLP_PROTOCOL` as the SDK's own `otlp` exporter does.

    $ OTEL_TRACES_EXPORTER=agent_eval OTEL_AGENT_EVAL_CATALOG=catalog.yaml \\
      opentelemetry-instrument python app.py

An exporter sees spans only when they end, so a tool span whose agent is not known yet
waits (bounded) until its agent span or its trace's root reaches the exporter, and
is exported with that later batch; metrics follow the batches (every 5 s by default).
With `OTEL_METRICS_EXPORTER=otlp` the metrics also go out over OTLP, on the SDK's own metric
reader (docs/otlp-metrics.md). At exit, the spans its `BatchSpanProcessor` still holds are
evaluated before any provider shuts down (`exit_flush.py`): an app that just ends loses nothing.
"""
from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import REGISTRY, CollectorRegistry

from ..config.catalog import Catalog, PathLike
from ..config.settings import Settings
from .exit_flush import flush_at_exit
from .reload import reload_catalog
from .otlp_metrics import histograms_setting
from .wiring import AUTO, attach, build_pipeline, link_otlp_metrics, resolve, stop_judging_on_shutdown


EXPIRE_INTERVAL_S = 0.05  # how often held tool spans of runs past run_ttl_s are looked for, as the processor's tick


def otlp_exporter() -> SpanExporter:
    """The OTLP span exporter the SDK's `otlp` exporter name would pick (gRPC unless told http)."""
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


class AgentEvalSpanExporter(SpanExporter):
    """Scores each batch with the evaluation core, then exports it through `inner` (default: OTLP)."""

    metrics_address: tuple[str, int] | None = None

    def __init__(self, inner: SpanExporter | None = None, *, settings: Settings | None = None,
                 registry: CollectorRegistry | None = REGISTRY, otlp_metrics: Any = AUTO, otlp_histograms: str | None = None,
                 **options: Any) -> None:
        settings = settings or Settings.from_env()
        histograms = histograms_setting(otlp_histograms)
        self.inner = inner or otlp_exporter()
        self.pipeline, self.metrics = build_pipeline(registry=registry, sees_starts=False, **resolve(settings, **options))
        self._lock = threading.Lock()  # the batch worker and a force_flush may export at once
        self._closers: list[Callable[[], Any]] = []
        stop_judging_on_shutdown(self)
        attach(self, settings, options.get("catalog"))
        # the SDK's configurator sets the MeterProvider up after the tracing (this exporter): until it is there,
        # each batch and each TTL tick (50 ms) look for it once more (one isinstance check), then never again
        self.otlp_metrics = link_otlp_metrics(self, otlp_metrics, histograms)
        self._otlp_waiting = self.otlp_metrics is not None and not self.otlp_metrics.readers and otlp_metrics == AUTO
        self.metrics.gauges = {
            "open_runs": ("Traces with agent runs open.", lambda: len(self.pipeline.runs)),
            "held_back_calls": ("Tool spans held until their agent is known.", lambda: self.pipeline.runs.held_back),
        }
        self.is_shut_down = False
        self._stop = threading.Event()
        self._start_expiring()
        _restart_in_forked_children(self)
        flush_at_exit(self)

    catalog = property(lambda self: self.pipeline.catalog)

    def _start_expiring(self) -> None:
        """A daemon thread that closes runs idle past `run_ttl_s` and exports their held tool spans, as the
        processor's hand-off tick does: batches arrive only when spans end, and a quiet process ends none."""
        self._expirer = threading.Thread(target=_expire_until_stopped, args=(weakref.ref(self), self._stop),
                                         name="otel-agent-eval-exporter-ttl", daemon=True)
        self._expirer.start()

    def expire(self) -> None:
        """Close the runs idle past the TTL (counted under `runs_closed_early_total{reason="ttl"}`) and export their
        held-back spans now; link to the SDK's MeterProvider once it is there. Never raises: a failure is counted
        and logged as the pipeline's."""
        try:
            self._link_otlp_metrics()
            with self._lock:
                out = self.pipeline.expire()
            if out:
                self.inner.export(out)
        except Exception as exc:  # noqa: BLE001 - the timer goes on
            self.pipeline.failed("export expired runs", exc, "forward_errors")

    def _link_otlp_metrics(self) -> None:
        """While the SDK's MeterProvider is not there yet (its configurator sets it up after this exporter): look again."""
        if self._otlp_waiting and self.otlp_metrics is not None:
            self._otlp_waiting = self.otlp_metrics.to_provider() is None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        out: list[ReadableSpan] = []
        self._link_otlp_metrics()
        with self._lock:
            for span in spans:
                self.metrics.seen.bump()
                out += self.pipeline.ended(span)
        return self.inner.export(out) if out else SpanExportResult.SUCCESS

    def reload_catalog(self, catalog: Catalog | PathLike | None = None) -> bool:
        return reload_catalog(self.pipeline, catalog)

    def close_on_shutdown(self, close: Callable[[], Any]) -> None:
        self._closers.append(close)

    def shutdown(self) -> None:
        if self.is_shut_down:
            return
        self.is_shut_down = True
        self._stop.set()
        self._expirer.join(timeout=5)
        with self._lock:
            rest = self.pipeline.close_all()
        if rest:
            try:
                self.inner.export(rest)
            except Exception as exc:  # noqa: BLE001 - shutdown goes on
                self.pipeline.failed("export at shutdown", exc, "forward_errors")
        for close in self._closers:
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                self.pipeline.failed("shutdown", exc)
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def flush_for_exit(self, timeout_s: float, close_runs: bool = True) -> bool:
        """Before the last metrics export (at exit: `exit_flush.py`; a metric reader's shutdown: `otlp_metrics.py`):
        the spans still queued in the global TracerProvider's batch processors that feed this exporter are exported
        (so evaluated) now and (`close_runs`) the open runs closed."""
        self._link_otlp_metrics()
        done = all(processor.force_flush(int(timeout_s * 1000)) is not False for processor in processors_feeding(self))
        if not close_runs:
            return done
        with self._lock:
            rest = self.pipeline.close_all()
        if rest:
            try:
                self.inner.export(rest)
            except Exception as exc:  # noqa: BLE001 - the exit goes on
                self.pipeline.failed("export at exit", exc, "forward_errors")
        return done


def exporter_behind(processor: Any) -> Any:
    """The exporter a span processor exports through: `span_exporter` (SimpleSpanProcessor) or, for the SDK's
    `BatchSpanProcessor`, `_batch_processor._exporter` (private in 1.45: any other layout reads as None)."""
    return (getattr(processor, "span_exporter", None)
            or getattr(getattr(processor, "_batch_processor", None), "_exporter", None))


def processors_feeding(exporter: SpanExporter, provider: Any = None) -> list[SpanProcessor]:
    """The span processors of `provider` (default: the global TracerProvider) that export through `exporter`."""
    provider = provider if provider is not None else trace.get_tracer_provider()
    processors = getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ())
    return [p for p in (processors if isinstance(processors, tuple) else ()) if exporter_behind(p) is exporter]


def _restart_in_forked_children(exporter: AgentEvalSpanExporter) -> None:
    """A forked child (a gunicorn worker after preload) has no TTL thread: start its own."""
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(exporter)

    def in_child() -> None:
        alive = ref()
        if alive is not None and not alive.is_shut_down:
            alive._lock = threading.Lock()
            alive._start_expiring()

    os.register_at_fork(after_in_child=in_child)


def _expire_until_stopped(ref: weakref.ref[AgentEvalSpanExporter], stop: threading.Event) -> None:
    """The TTL thread; it holds the exporter weakly, so one never shut down can still be collected (the thread ends)."""
    while not stop.wait(EXPIRE_INTERVAL_S):
        exporter = ref()
        if exporter is None:
            return
        exporter.expire()
        del exporter

"""Our metrics over OTLP too: on the app's OTLP metric readers, or on a reader of our own.

The SDK (1.45) has no MetricProducer a reader could be given, so a reader's collect
callback (`MetricReader._set_collect_callback`, what the MeterProvider itself sets) is
chained: the app's own metrics first, then ours (`metrics/otlp.py`) as one more scope
(`otel_agent_eval`) of the same resource, in the same export, with the reader's temporality
(`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`: Counter and Histogram classes) and
interval. Only readers that export OTLP are chained, never a Prometheus or console one.
`serve`, or a processor given an exporter, gets a `PeriodicExportingMetricReader` of its own
whose only callback is ours. A reader's last collection (its shutdown, e.g. the MeterProvider's
at exit) first has each owner evaluate the spans it still holds (`before_last_export`), so a
MeterProvider shut down before the TracerProvider still exports their metrics.

    >>> link = OtlpMetricsLink(metrics.collect)
    >>> link.to_provider(get_meter_provider())          # the app's OTLP readers
    >>> link.to_exporter(OTLPMetricExporter())          # or a reader of our own
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    MetricExporter,
    MetricReader,
    MetricsData,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ..metrics.otlp import EXPLICIT, EXPONENTIAL, HISTOGRAMS, OtlpMetrics
from .exit_flush import EXIT_TIMEOUT_S, within

__all__ = ["OtlpMetricsLink", "histograms_setting", "otlp_metric_exporter"]

logger = logging.getLogger(__name__)

SCOPE = InstrumentationScope("otel_agent_eval")
_AGGREGATION_VAR = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
_AGGREGATIONS = {"base2_exponential_bucket_histogram": EXPONENTIAL, "explicit_bucket_histogram": EXPLICIT}


def histograms_setting(given: str | None = None) -> str:
    """`exponential` or `explicit`: the argument, else the OTLP exporters' own variable
    (`OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION`), else exponential (p99 within 1 %)."""
    if given is not None:
        if given not in HISTOGRAMS:
            raise ValueError(f"otel-agent-eval: otlp_histograms={given!r}: expected one of {', '.join(HISTOGRAMS)}")
        return given
    text = os.environ.get(_AGGREGATION_VAR, "").strip().lower()
    if text and text not in _AGGREGATIONS:
        logger.warning("otel-agent-eval: ignoring %s=%r (expected %s); sending exponential histograms", _AGGREGATION_VAR,
                       text, " or ".join(_AGGREGATIONS))
    return _AGGREGATIONS.get(text, EXPONENTIAL)


def otlp_metric_exporter() -> MetricExporter:
    """The OTLP metric exporter the SDK's `otlp` name would pick (gRPC unless the protocol variables say http)."""
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "grpc").strip()
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    return OTLPMetricExporter()


def _exports_otlp(reader: MetricReader) -> bool:
    exporter = getattr(reader, "_exporter", None)
    return isinstance(reader, PeriodicExportingMetricReader) and type(exporter).__module__.startswith("opentelemetry.exporter.otlp")


def _temporality(reader: MetricReader, kind: str) -> AggregationTemporality:
    """The reader's temporality for the SDK instrument class `kind` (Counter, Histogram)."""
    for cls, temporality in getattr(reader, "_instrument_class_temporality", {}).items():
        if cls.__name__.lstrip("_") == kind:
            return temporality
    return AggregationTemporality.CUMULATIVE


class _Chain:
    """A reader's collect callback: the app's (if any), then each attached source as one scope."""

    def __init__(self, app_collect: Callable[..., MetricsData | None] | None, resource: Resource) -> None:
        self.app_collect = app_collect
        self.resource = resource
        self.sources: list[tuple[OtlpMetricsLink, OtlpMetrics]] = []
        self._failed = False

    def __call__(self, reader: MetricReader, timeout_millis: float = 10_000) -> MetricsData | None:
        if getattr(reader, "_shutdown", False) is True:  # its last collection (SDK 1.45: set before the ticker's last)
            self._before_last_export(timeout_millis / 1000)
        data = self.app_collect(reader, timeout_millis=timeout_millis) if self.app_collect is not None else None
        sums, histograms = _temporality(reader, "Counter"), _temporality(reader, "Histogram")
        ours = []
        for _, source in list(self.sources):
            try:
                ours += source.metrics(sums, histograms)
            except Exception:  # noqa: BLE001 - the app's metrics still go out
                if not self._failed:
                    logger.exception("otel-agent-eval: building OTLP metrics failed; the app's metrics are exported without ours")
                self._failed = True
        if not ours:
            return data
        scope = ScopeMetrics(scope=SCOPE, metrics=ours, schema_url="")
        if data is None or not data.resource_metrics:
            return MetricsData(resource_metrics=[ResourceMetrics(resource=self.resource, scope_metrics=[scope], schema_url="")])
        first, *rest = data.resource_metrics
        return MetricsData(resource_metrics=[
            ResourceMetrics(resource=first.resource, scope_metrics=[*first.scope_metrics, scope], schema_url=first.schema_url),
            *rest])

    def _before_last_export(self, timeout_s: float) -> None:
        """Each live owner evaluates what it holds, within `timeout_s` and `EXIT_TIMEOUT_S` in all; never raises."""
        deadline = time.monotonic() + min(timeout_s, EXIT_TIMEOUT_S)
        for link, _ in list(self.sources):
            if link.closed or link.before_last_export is None:
                continue
            try:
                within(link.before_last_export, max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - the last export still goes out
                logger.exception("otel-agent-eval: evaluating the held spans before the last metrics export failed")


_chaining = threading.Lock()


class OtlpMetricsLink:
    """The families of `collect` on OTLP metric readers, each reader with its own delta state."""

    def __init__(self, collect: Callable[[], Iterable[Any]], *, histograms: str | None = None,
                 before_last_export: Callable[[float], Any] | None = None) -> None:
        self.collect = collect
        self.before_last_export = before_last_export  # (timeout_s): the owner evaluates what it holds
        self.histograms = histograms_setting(histograms)
        self.readers: list[MetricReader] = []  # the readers our families go out on
        self._own: PeriodicExportingMetricReader | None = None

    def to_provider(self, provider: Any = None) -> bool | None:
        """Chain onto the OTLP readers of `provider` (default: the global one). True: done; False: it is an SDK
        MeterProvider without an OTLP reader; None: no SDK MeterProvider (yet: the global one may come later)."""
        provider = provider if provider is not None else otel_metrics.get_meter_provider()
        if not isinstance(provider, MeterProvider):
            return None
        readers = [r for r in getattr(provider, "_metric_readers", ()) if _exports_otlp(r)]
        config = getattr(provider, "_sdk_config", None)
        resource = getattr(config, "resource", None) or Resource.create()
        for reader in readers:
            self._chain(reader, resource)
        if readers:
            logger.info("otel-agent-eval: metrics also over OTLP, on %d metric reader(s) of the app's MeterProvider", len(readers))
        return bool(readers)

    def to_exporter(self, exporter: MetricExporter, *, interval_ms: float | None = None,
                    resource: Resource | None = None) -> PeriodicExportingMetricReader:
        """A reader of our own exporting through `exporter` every `interval_ms` (default: OTEL_METRIC_EXPORT_INTERVAL)."""
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval_ms)
        self._own = reader
        self._chain(reader, resource or Resource.create(), own=True)
        return reader

    def _chain(self, reader: MetricReader, resource: Resource, *, own: bool = False) -> None:
        with _chaining:
            chain = reader._collect if isinstance(getattr(reader, "_collect", None), _Chain) else None
            if chain is None:
                chain = _Chain(None if own else getattr(reader, "_collect", None), resource)
                reader._set_collect_callback(chain)
            if any(link is self for link, _ in chain.sources):
                return  # on it already: once per reader, or our metrics would go out twice in each export
            # a shut-down owner's last counts made way for this one (as a Prometheus registry does)
            chain.sources = [(link, s) for link, s in chain.sources if not link.closed] + [
                (self, OtlpMetrics(self.collect, histograms=self.histograms))]
            self.readers.append(reader)

    closed = False

    def close(self, timeout_millis: float = 10_000) -> None:
        """The owner shut down: our own reader exports one last time and stops; on the app's readers our last
        counts stay until another owner takes them (the app's MeterProvider exports them at its own shutdown)."""
        self.closed = True
        if self._own is not None:
            try:
                self._own.shutdown(timeout_millis=timeout_millis)
            except Exception:  # noqa: BLE001 - shutdown goes on
                logger.exception("otel-agent-eval: the OTLP metrics reader failed to shut down")

    def force_flush(self, timeout_millis: float = 10_000) -> None:
        """Export now on every reader we are on (tests and `serve`'s shutdown)."""
        for reader in self.readers:
            reader.collect(timeout_millis=timeout_millis)

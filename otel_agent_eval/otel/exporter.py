"""Zero-code set-up under `opentelemetry-instrument`: `OTEL_TRACES_EXPORTER=agent_eval`.

The SDK has no entry-point group for span processors, but it builds each exporter named
in `OTEL_TRACES_EXPORTER` after setting the global TracerProvider and before adding the
exporter's BatchSpanProcessor. `AgentEvalSpanExporter` uses that moment to put an
`AgentEvalSpanProcessor` on the provider first, which scores each tool span inside
`span.end()` (metrics stay live) and remembers the score by span id. The batch thread
then calls `export()`, which swaps tool spans for their enriched copies and hands the
batch to the real OTLP exporter, chosen by `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` /
`OTEL_EXPORTER_OTLP_PROTOCOL` like the SDK's own `otlp` exporter does. So the copy
is built off the app's threads.

    $ OTEL_TRACES_EXPORTER=agent_eval OTEL_AGENT_EVAL_CATALOG=catalog.yaml \\
      opentelemetry-instrument python app.py
"""
from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ..core.enrich import Enricher, enrich_run
from .install import build_processor, start_metrics_endpoint
from .processor import AgentEvalSpanProcessor
from ..core.recognize import ToolCallRecord, attribute_dict, convention_of
from ..core.runs import AgentRun
from ..core.scoring import CallScore
from ..config.settings import Settings

logger = logging.getLogger(__name__)

MAX_PENDING = 100_000  # scores waiting for their span to reach export(); oldest dropped past this


def otlp_exporter() -> SpanExporter:
    """The OTLP span exporter the SDK's `otlp` exporter name would pick (gRPC unless told http)."""
    protocol = (os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc").strip()
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


class AgentEvalSpanExporter(SpanExporter):
    """Exports spans through `inner` (default: OTLP), tool spans enriched with their scores."""

    def __init__(self, inner: SpanExporter | None = None, *, settings: Settings | None = None) -> None:
        settings = settings or Settings.from_env()
        self.inner = inner or otlp_exporter()
        self._pending: OrderedDict[int, tuple[ToolCallRecord, CallScore] | AgentRun] = OrderedDict()
        self._lock = threading.Lock()
        self._enricher = Enricher() if settings.enrich else None
        self.processor: AgentEvalSpanProcessor = build_processor(settings, on_call=self._remember_call, on_run=self._remember_run)
        provider = trace.get_tracer_provider()
        if isinstance(provider, TracerProvider):
            provider.add_span_processor(self.processor)
            self._scored_inline = True
        else:  # no SDK provider yet: score on the export thread instead (no agent tracking)
            logger.warning("otel-agent-eval: no SDK TracerProvider when the exporter was built; scoring at export time")
            self._scored_inline = False
        if settings.metrics_enabled:
            start_metrics_endpoint(self.processor, self.processor.metrics.registry, settings)

    def _remember_call(self, record: ToolCallRecord, score: CallScore) -> None:
        self._remember(record.span_id, (record, score))

    def _remember_run(self, run: AgentRun) -> None:
        if run.root_span_id:
            self._remember(run.root_span_id, run)

    def _remember(self, span_id: int, entry: tuple[ToolCallRecord, CallScore] | AgentRun) -> None:
        if self._enricher is None:
            return
        with self._lock:
            self._pending[span_id] = entry
            if len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
                self.processor.metrics.count("enrichments_dropped")

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._enricher is not None:
            spans = [self._enriched(span) for span in spans]
        return self.inner.export(spans)

    def _enriched(self, span: ReadableSpan) -> ReadableSpan:
        try:
            with self._lock:
                entry = self._pending.pop(span.context.span_id, None)
            attrs = attribute_dict(span)
            if entry is None and not self._scored_inline:
                convention = convention_of(attrs, self.processor._state.custom)
                entry = self.processor.score_tool_span(span, attrs, convention) if convention else None
            if entry is None:
                return span
            if isinstance(entry, AgentRun):
                return enrich_run(span, entry, self.processor.scorer.health_pass)
            record, score = entry
            return self._enricher.enrich(span, attrs, score, record.agent)
        except Exception as exc:  # noqa: BLE001 - a failed enrichment must not lose the span
            self.processor._failed("exporter enrich", exc, "enrichments_dropped")
            return span

    def shutdown(self) -> None:
        self.processor.shutdown()
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

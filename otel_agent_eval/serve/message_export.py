"""The SDK's OTLP exporters, writing each batch from the messages the spans arrived as (`otlp/messages.py`).

Everything else is the SDK exporter's own: the connection, TLS, headers, compression,
timeouts, retries with backoff, its size limit and self-metrics. Only the step that turns
spans into a request changes: `request_of` instead of `encode_spans`. The gRPC exporter has
a hook for that step (`_translate_data`); the HTTP exporter encodes inside `export`, so
its `export` is repeated here around `request_of` (the SDK's own when its internals are
not the ones this was written against, opentelemetry-exporter-otlp-proto-http 1.45).

    >>> exporter = HttpMessageExporter(endpoint="http://collector:4318/v1/traces")
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ..otlp.messages import request_of

__all__ = ["GrpcMessageExporter", "HttpMessageExporter"]

logger = logging.getLogger(__name__)


class GrpcMessageExporter(GrpcExporter):
    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        return ExportTraceServiceRequest.FromString(request_of(data))


class HttpMessageExporter(http_trace.OTLPSpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client, metrics, too_large = (getattr(self, "_client", None), getattr(self, "_metrics", None),
                                      getattr(http_trace, "_is_request_too_large", None))
        if self._shutdown or client is None or metrics is None or too_large is None:
            return super().export(spans)
        with metrics.export_operation(len(spans)) as result:
            try:
                data = request_of(spans)
            except Exception as error:  # noqa: BLE001 - as the SDK's exporter: a batch that cannot be encoded fails
                logger.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if too_large(data, self._max_request_size):
                logger.warning("Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                               len(data), self._max_request_size)
                result.error = http_trace.RequestPayloadTooLargeError(
                    f"Serialized span request size {len(data)} bytes exceeds max_request_size "
                    f"{self._max_request_size} bytes.")
                return SpanExportResult.FAILURE
            outcome = client.export(data)
            if not outcome.success:
                result.error = outcome.error
                result.error_attrs = ({http_trace.HTTP_RESPONSE_STATUS_CODE: outcome.status_code}
                                      if outcome.status_code is not None else None)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

"""The SDK's OTLP exporters, writing each batch from the messages the spans arrived as (`otlp/messages.py`),
and saying why a batch failed (`failure`), so the forwarder can split or retry it (`forward.py`).

Everything else is the SDK exporter's own: the connection, TLS, headers, compression,
timeouts, retries with backoff and self-metrics. Only the step that turns
spans into a request changes: `request_of` instead of `encode_spans` (with `keep_messages`). The gRPC exporter has
a hook for that step (`_translate_data`); the HTTP exporter encodes inside `export`, so
its `export` is repeated here around the encoder (the SDK's own when its internals are
not the ones this was written against, opentelemetry-exporter-otlp-proto-http 1.45).
A request over `max_request_size` is never sent: the next hop would refuse it (gRPC's and
serve's own limit is 4 MiB), and the SDK's gRPC exporter would retry that refusal.

    >>> exporter = HttpMessageExporter(endpoint="http://collector:4318/v1/traces")
    >>> exporter.export(spans), exporter.failure   # (FAILURE, "too_large")
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import requests
from grpc import RpcError, StatusCode
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import trace_exporter as http_trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from ..otlp.messages import request_of

__all__ = ["ENCODE", "MAX_REQUEST_BYTES", "REFUSED", "RETRY", "TOO_LARGE", "GrpcMessageExporter", "HttpMessageExporter",
           "SettledSession"]

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the Collector's gRPC default, and serve's own --max-request-mib
# Why an export failed: the batch's content (ENCODE, TOO_LARGE: split it), the hop for now (RETRY), or for good.
ENCODE, TOO_LARGE, RETRY, REFUSED = "encode", "too_large", "retry", "refused"
_RETRYABLE_HTTP = frozenset({429, 502, 503, 504})


def _reencoded(spans: Sequence[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializePartialToString()


class _Unsendable(Exception):
    def __init__(self, failure: str, error: Any) -> None:
        super().__init__(str(error))
        self.failure = failure


class _Recording:
    """The gRPC stub, remembering the last refusal's code; a refusal as too large ends the export (no retries)."""

    def __init__(self, stub: Any, owner: GrpcMessageExporter) -> None:
        self._stub, self._owner = stub, owner

    def Export(self, **kwargs: Any) -> Any:  # noqa: N802 - the gRPC method name
        try:
            return self._stub.Export(**kwargs)
        except RpcError as error:
            self._owner._last_code = error.code()
            if error.code() == StatusCode.RESOURCE_EXHAUSTED and "larger than max" in (error.details() or ""):
                raise _Unsendable(TOO_LARGE, error.details()) from None
            raise


class GrpcMessageExporter(GrpcExporter):
    def __init__(self, *args: Any, keep_messages: bool = True, max_request_size: int = MAX_REQUEST_BYTES,
                 **kwargs: Any) -> None:
        self._encode: Callable[[Sequence[ReadableSpan]], bytes] = request_of if keep_messages else _reencoded
        self.max_request_size = max_request_size
        self.failure: str | None = None
        self._last_code: Any = None
        super().__init__(*args, **kwargs)

    def _initialize_channel_and_stub(self) -> None:
        super()._initialize_channel_and_stub()
        if self._client is not None:
            self._client = _Recording(self._client, self)

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        try:
            body = self._encode(data)
        except Exception as error:  # noqa: BLE001 - the batch's content: the forwarder splits it
            raise _Unsendable(ENCODE, error) from None
        if len(body) > self.max_request_size:
            raise _Unsendable(TOO_LARGE, f"{len(body)} bytes")
        return ExportTraceServiceRequest.FromString(body)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.failure, self._last_code = None, None
        try:
            result = super().export(spans)
        except _Unsendable as unsendable:
            self.failure = unsendable.failure
            logger.debug("span batch not sent (%s): %s", unsendable.failure, unsendable)
            return SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.failure = RETRY if self._last_code in self._retryable_error_codes else REFUSED
        return result


class SettledSession(requests.Session):
    """A `requests` session that reads its settings from the environment (proxies and `NO_PROXY`, a CA bundle) once
    per URL and request settings instead of on every request: `requests` walks `os.environ` twice a request, a
    quarter of the forward thread's CPU in `serve` (one next hop, one URL). The same settings, read once: the
    environment of a running `serve` does not change."""

    def __init__(self) -> None:
        super().__init__()
        self._settled: dict[Any, dict[str, Any]] = {}

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any) -> dict[str, Any]:
        try:
            key = (url, tuple(sorted((proxies or {}).items())), stream, verify, cert)
            settled = self._settled.get(key)
        except TypeError:  # an unhashable setting: read as requests reads it
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        if settled is None:
            if len(self._settled) >= 64:
                self._settled.clear()
            settled = self._settled[key] = super().merge_environment_settings(url, proxies, stream, verify, cert)
        return {name: dict(value) if isinstance(value, dict) else value for name, value in settled.items()}


class HttpMessageExporter(http_trace.OTLPSpanExporter):
    def __init__(self, *args: Any, keep_messages: bool = True, max_request_size: int = MAX_REQUEST_BYTES,
                 **kwargs: Any) -> None:
        self._encode: Callable[[Sequence[ReadableSpan]], bytes] = request_of if keep_messages else _reencoded
        self.failure: str | None = None
        if len(args) < 8 and kwargs.get("session") is None:  # `session` is the SDK exporter's 8th parameter
            kwargs["session"] = SettledSession()
        super().__init__(*args, max_request_size=max_request_size, **kwargs)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.failure = None
        client, metrics, too_large = (getattr(self, "_client", None), getattr(self, "_metrics", None),
                                      getattr(http_trace, "_is_request_too_large", None))
        if self._shutdown or client is None or metrics is None or too_large is None:
            result = super().export(spans)
            self.failure = None if result is SpanExportResult.SUCCESS else REFUSED
            return result
        with metrics.export_operation(len(spans)) as result:
            try:
                data = self._encode(spans)
            except Exception as error:  # noqa: BLE001 - the batch's content: the forwarder splits it
                logger.debug("span batch not encoded: %s", error)
                result.error, self.failure = error, ENCODE
                return SpanExportResult.FAILURE
            if too_large(data, self._max_request_size):
                result.error = http_trace.RequestPayloadTooLargeError(
                    f"Serialized span request size {len(data)} bytes exceeds max_request_size "
                    f"{self._max_request_size} bytes.")
                self.failure = TOO_LARGE
                return SpanExportResult.FAILURE
            outcome = client.export(data)
            if not outcome.success:
                result.error = outcome.error
                result.error_attrs = ({http_trace.HTTP_RESPONSE_STATUS_CODE: outcome.status_code}
                                      if outcome.status_code is not None else None)
                code = outcome.status_code
                self.failure = (TOO_LARGE if code == 413 else RETRY if code is None or code in _RETRYABLE_HTTP
                                else REFUSED)
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

"""One real OTLP endpoint for traces, metrics and logs on 127.0.0.1, as `OTEL_EXPORTER_OTLP_ENDPOINT` names one.

    >>> with running_endpoint("http") as endpoint:
    ...     env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint.url
    ...     ...
    ...     endpoint.metrics.prometheus_view()     # as otlp_metrics_receiver.MetricsReceiver
    ...     endpoint.traces.spans()                # as otlp_receiver.OtlpReceiver
    ...     endpoint.log_records()                 # flattened log records

HTTP serves `/v1/traces`, `/v1/metrics` and `/v1/logs` on one port (what the SDK's HTTP exporters append to
the endpoint); gRPC serves the three services on one port. Each signal is stored as the single-signal
receivers store it, so their views work unchanged.
"""
from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from otlp_metrics_receiver import MetricsReceiver
from otlp_receiver import HOST, PROTOBUF, OtlpReceiver, attributes, any_value


class LogsStore:
    """Every ExportLogsServiceRequest received."""

    def __init__(self) -> None:
        self._requests: list[logs_service_pb2.ExportLogsServiceRequest] = []
        self._lock = threading.Lock()

    def store(self, request: logs_service_pb2.ExportLogsServiceRequest) -> None:
        with self._lock:
            self._requests.append(request)

    @property
    def requests(self) -> list[logs_service_pb2.ExportLogsServiceRequest]:
        with self._lock:
            return list(self._requests)


class OtlpEndpoint:
    """What both transports share: a store per signal."""

    url: str

    def __init__(self) -> None:
        self.traces = OtlpReceiver()
        self.metrics = MetricsReceiver()
        self.logs = LogsStore()

    def log_records(self) -> list[dict[str, Any]]:
        """Every log record received, as {event_name, attributes, trace_id, span_id, scope, body}."""
        out = []
        for request in self.logs.requests:
            for resource_logs in request.resource_logs:
                for scope_logs in resource_logs.scope_logs:
                    for record in scope_logs.log_records:
                        out.append({
                            "event_name": record.event_name,
                            "attributes": attributes(record.attributes),
                            "trace_id": int.from_bytes(record.trace_id, "big"),
                            "span_id": int.from_bytes(record.span_id, "big"),
                            "scope": scope_logs.scope.name,
                            "body": any_value(record.body),
                        })
        return out

    def start(self) -> OtlpEndpoint:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


# -- HTTP/protobuf -----------------------------------------------------------------------

_HTTP_SIGNALS = {
    "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse, "traces"),
    "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse,
                    "metrics"),
    "/v1/logs": (logs_service_pb2.ExportLogsServiceRequest, logs_service_pb2.ExportLogsServiceResponse, "logs"),
}


class _Handler(BaseHTTPRequestHandler):
    endpoint: HttpEndpoint

    def do_POST(self) -> None:  # noqa: N802 - http.server name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        signal = _HTTP_SIGNALS.get(self.path)
        if signal is None:
            return self._reply(404, b"")
        request_type, response_type, name = signal
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)
        getattr(self.endpoint, name).store(request_type.FromString(body))
        self._reply(200, response_type().SerializeToString())

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", PROTOBUF)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass


class HttpEndpoint(OtlpEndpoint):
    """OTLP/HTTP (protobuf) for the three signals; `url` is `http://127.0.0.1:PORT` (no path)."""

    def __init__(self) -> None:
        super().__init__()
        self._server = ThreadingHTTPServer((HOST, 0), type("Handler", (_Handler,), {"endpoint": self}))
        self._server.daemon_threads = True
        self.url = f"http://{HOST}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="otlp-http-endpoint", daemon=True)

    def start(self) -> HttpEndpoint:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# -- gRPC --------------------------------------------------------------------------------

class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, endpoint: OtlpEndpoint) -> None:
        self.endpoint = endpoint

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - the gRPC method name
        self.endpoint.traces.store(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, endpoint: OtlpEndpoint) -> None:
        self.endpoint = endpoint

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.endpoint.metrics.store(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class _Logs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, endpoint: OtlpEndpoint) -> None:
        self.endpoint = endpoint

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.endpoint.logs.store(request)
        return logs_service_pb2.ExportLogsServiceResponse()


class GrpcEndpoint(OtlpEndpoint):
    """OTLP/gRPC for the three signals; `url` is `http://127.0.0.1:PORT` (plain text: the exporters' insecure)."""

    def __init__(self) -> None:
        super().__init__()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(self), self._server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_Logs(self), self._server)
        self.url = f"http://{HOST}:{self._server.add_insecure_port(f'{HOST}:0')}"

    def start(self) -> GrpcEndpoint:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait(timeout=5)


@contextmanager
def running_endpoint(protocol: str) -> Iterator[OtlpEndpoint]:
    """A started endpoint for "grpc" or "http", stopped on exit."""
    endpoint: OtlpEndpoint = {"grpc": GrpcEndpoint, "http": HttpEndpoint}[protocol]()
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()

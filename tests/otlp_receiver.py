"""A real OTLP trace receiver inside the test process: gRPC and HTTP/protobuf on 127.0.0.1.

    >>> with running_receiver("grpc") as receiver:
    ...     exporter = OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True)
    ...     ...  # export spans
    ...     spans = receiver.wait_for_spans(3)  # flattened dicts, see `flatten`

Both servers bind a free port on 127.0.0.1 and store every `ExportTraceServiceRequest`
they receive; `wait_for_spans` polls with a bounded timeout. Nothing leaves the machine.
"""
from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

PROTOBUF = "application/x-protobuf"
TRACES_PATH = "/v1/traces"
HOST = "127.0.0.1"


# -- flattening received requests into plain dicts --------------------------------------

def any_value(value: AnyValue) -> Any:
    """The Python value of an OTLP `AnyValue` (arrays as lists, kvlists as dicts)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)  # string_value, bool_value, int_value, double_value, bytes_value


def attributes(key_values: Iterable[KeyValue]) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in key_values}


def flatten(requests: Iterable[trace_service_pb2.ExportTraceServiceRequest]) -> list[dict[str, Any]]:
    """Every span of these requests as `{name, attributes, events, trace_id, span_id, parent_span_id, ...}`.

    Ids are ints as the SDK holds them (`parent_span_id` is None for a root span), so
    they compare directly with `span.get_span_context().span_id`.
    """
    spans = []
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append({
                        "name": span.name,
                        "attributes": attributes(span.attributes),
                        "events": [{"name": e.name, "attributes": attributes(e.attributes)} for e in span.events],
                        "trace_id": int.from_bytes(span.trace_id, "big"),
                        "span_id": int.from_bytes(span.span_id, "big"),
                        "parent_span_id": int.from_bytes(span.parent_span_id, "big") if span.parent_span_id else None,
                        "status_code": span.status.code,
                        "scope": scope_spans.scope.name,
                        "resource": resource,
                    })
    return spans


# -- the receivers ----------------------------------------------------------------------

class OtlpReceiver:
    """What both receivers share: stored requests and a bounded wait for spans."""

    endpoint: str

    def __init__(self) -> None:
        self._requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._changed = threading.Condition()

    def start(self) -> OtlpReceiver:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def store(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()

    @property
    def requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        with self._changed:
            return list(self._requests)

    def span_count(self) -> int:
        with self._changed:
            return sum(len(ss.spans) for r in self._requests for rs in r.resource_spans for ss in rs.scope_spans)

    def spans(self) -> list[dict[str, Any]]:
        return flatten(self.requests)

    def wait_for_spans(self, count: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        """The flattened spans once at least `count` arrived; AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.span_count() < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"{self.endpoint}: expected {count} spans within {timeout}s, got {self.span_count()}")
                self._changed.wait(remaining)  # woken by `store`; no fixed sleeps
        return self.spans()


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: OtlpReceiver) -> None:
        self._receiver = receiver

    def Export(  # noqa: N802 - the gRPC method name
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self._receiver.store(request)
        return trace_service_pb2.ExportTraceServiceResponse()


class GrpcReceiver(OtlpReceiver):
    """OTLP/gRPC on 127.0.0.1:<free port>; `endpoint` is `127.0.0.1:PORT` (use `insecure=True`)."""

    def __init__(self) -> None:
        super().__init__()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._server)
        self.port = self._server.add_insecure_port(f"{HOST}:0")
        self.endpoint = f"{HOST}:{self.port}"

    def start(self) -> GrpcReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait(timeout=5)


class _TracesHandler(BaseHTTPRequestHandler):
    receiver: HttpReceiver  # set on the per-server subclass

    def do_POST(self) -> None:  # noqa: N802 - http.server name
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.path != TRACES_PATH:
            return self._reply(404, b"", "text/plain")
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != PROTOBUF:
            return self._reply(415, b"", "text/plain")
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        self.receiver.encodings.append(encoding)
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding != "identity":
                return self._reply(415, b"", "text/plain")
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        except (OSError, zlib.error, DecodeError):
            return self._reply(400, b"", "text/plain")
        self.receiver.store(request)
        self._reply(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString(), PROTOBUF)

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass


class HttpReceiver(OtlpReceiver):
    """OTLP/HTTP (protobuf) on 127.0.0.1:<free port>; `endpoint` is the full `/v1/traces` URL."""

    def __init__(self) -> None:
        super().__init__()
        self.encodings: list[str] = []  # Content-Encoding of each POST, "identity" when absent
        handler = type("Handler", (_TracesHandler,), {"receiver": self})
        self._server = ThreadingHTTPServer((HOST, 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://{HOST}:{self.port}{TRACES_PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="otlp-http-receiver", daemon=True)

    def start(self) -> HttpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def running_receiver(protocol: str) -> Iterator[OtlpReceiver]:
    """A started receiver for "grpc" or "http", stopped on exit."""
    receiver: OtlpReceiver = {"grpc": GrpcReceiver, "http": HttpReceiver}[protocol]()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound briefly to pick it, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]

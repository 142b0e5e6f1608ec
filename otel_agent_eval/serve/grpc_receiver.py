"""OTLP/gRPC (`opentelemetry.proto.collector.trace.v1.TraceService/Export`) on grpcio.

The request arrives as raw bytes (no deserializer registered), so a malformed message is
answered INVALID_ARGUMENT with the reason, not grpcio's generic INTERNAL, and is decoded
by the same code as HTTP's. A full queue answers RESOURCE_EXHAUSTED with a RetryInfo
(in `grpc-status-details-bin`, as the Collector and the Go/Java exporters read it, and
in `google.rpc.retryinfo-bin`, as the Python exporter reads it); shutting down answers
UNAVAILABLE. With `tls` (a `tls.ServerTls`) the port speaks only TLS (grpcio's
`ssl_server_credentials`); a plaintext client fails its handshake (UNAVAILABLE on its
side). grpcio itself refuses a message over the size limit and calls beyond
`max_concurrent_rpcs` (RESOURCE_EXHAUSTED), and fails TLS handshakes, before any handler runs: those
are not counted (docs/serve.md says so). The limit is not raised to answer INVALID_ARGUMENT here: past it,
grpcio would inflate a grpc-encoding bomb in full.

    >>> server = GrpcReceiver(receiving, host="127.0.0.1", port=4317).start()
"""
from __future__ import annotations

import logging
import socket
from concurrent import futures

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..metrics.endpoint import host_port
from .auth import BearerToken
from .payload import PROTOBUF
from .receive import ACCEPTED, FULL, NOT_FORWARDED, RETRYABLE, STOPPING, UNAUTHORIZED, Answer, Receiving
from .tls import ServerTls

__all__ = ["GrpcReceiver"]

logger = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
MAX_WORKERS = 8
MAX_CONCURRENT_RPCS = 64
CODES = {FULL: grpc.StatusCode.RESOURCE_EXHAUSTED, STOPPING: grpc.StatusCode.UNAVAILABLE, NOT_FORWARDED: grpc.StatusCode.UNAVAILABLE,
         UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED}


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    """`Export` over raw request bytes; never raises anything but the status it answers with."""

    def __init__(self, receiving: Receiving, token: BearerToken | None) -> None:
        self.receiving = receiving
        self.token = token

    def Export(self, request: bytes, context: grpc.ServicerContext) -> bytes:  # noqa: N802 - the gRPC method name
        receiving = self.receiving
        if self.token is not None:
            metadata = dict(context.invocation_metadata() or ())
            if not self.token.allows(metadata.get("authorization")):
                self._abort(context, receiving.unauthorized("grpc"))
        # grpcio has already undone any grpc-encoding compression
        answer = receiving.take("grpc", request, PROTOBUF)
        if answer.kind != ACCEPTED:
            self._abort(context, answer)
        response = ExportTraceServiceResponse()
        if answer.rejected_spans:
            response.partial_success.rejected_spans = answer.rejected_spans
            response.partial_success.error_message = answer.message
        return response.SerializeToString()

    def _abort(self, context: grpc.ServicerContext, answer: Answer) -> None:
        code = CODES.get(answer.kind, grpc.StatusCode.INVALID_ARGUMENT)
        if answer.kind in RETRYABLE:
            retry = error_details_pb2.RetryInfo(retry_delay=Duration(seconds=self.receiving.retry_after_s))
            details = status_pb2.Status(code=code.value[0], message=answer.message)
            details.details.add().Pack(retry)
            context.set_trailing_metadata((("grpc-status-details-bin", details.SerializeToString()),
                                           ("google.rpc.retryinfo-bin", retry.SerializeToString())))
        context.abort(code, answer.message)


class GrpcReceiver:
    """The OTLP/gRPC server; `endpoint` is `host:port` once built (port 0 picks a free one)."""

    def __init__(self, receiving: Receiving, *, host: str = "127.0.0.1", port: int = 4317, token: BearerToken | None = None,
                 max_workers: int = MAX_WORKERS, max_concurrent_rpcs: int = MAX_CONCURRENT_RPCS,
                 tls: ServerTls | None = None) -> None:
        if port:  # grpcio would only log why it cannot bind, in its own format: try the port ourselves first
            _try_bind(host, port)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="otel-agent-eval-serve-grpc"),
            maximum_concurrent_rpcs=max_concurrent_rpcs,
            options=[("grpc.max_receive_message_length", receiving.max_bytes), ("grpc.so_reuseport", 0)])
        service = TraceService(receiving, token)
        handler = grpc.unary_unary_rpc_method_handler(service.Export)  # bytes in, bytes out
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        address = host_port(host, port)
        try:
            if tls is not None:
                bound = self._server.add_secure_port(address, tls.grpc_credentials())
            else:
                bound = self._server.add_insecure_port(address)
        except RuntimeError:  # grpcio raises when the port is taken
            bound = 0
        if bound == 0:
            raise OSError("grpcio could not bind it")
        self.address: tuple[str, int] = (host, bound)
        self.endpoint = host_port(host, bound)
        self.tls = tls is not None
        # what the SDK's gRPC exporter takes as `endpoint`: https:// means TLS to it
        self.url = ("https://" if self.tls else "http://") + self.endpoint

    def start(self) -> GrpcReceiver:
        self._server.start()
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        """Refuse new calls; calls in flight get `grace_s` to finish."""
        self._server.stop(grace_s).wait(grace_s + 1)


def _try_bind(host: str, port: int) -> None:
    """Bind `host:port` and let go; OSError with the reason (in use, not this machine's) when that fails."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpcio: a port in TIME_WAIT is free
        sock.bind((host, port))

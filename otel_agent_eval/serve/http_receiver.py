"""OTLP/HTTP (`POST /v1/traces`, protobuf or JSON, gzip or deflate) on the standard library's HTTP server.

Bounded like the /metrics endpoint: at most `max_connections` connections are served at
once (one more is answered 503 with `Retry-After` and closed), an idle connection is
dropped after `idle_timeout_s`, a body over the limit is refused from its Content-Length
(413) without being read. Answers follow `receive.Answer`; error bodies are a
`google.rpc.Status` in the request's encoding, as the OTLP specification asks.

With `tls` (a `tls.ServerTls`) every connection is TLS, wrapped on its own connection
thread (the handshake is bounded by the idle timeout and never holds up the accept loop).
A plaintext HTTP request to that port is answered `400` in plain text ("this port speaks
TLS") and closed; a failed handshake is closed. Both are counted as requests
(`not_tls`, `tls_failed`).

    >>> server = HttpReceiver(receiving, host="127.0.0.1", port=4318).start()
"""
from __future__ import annotations

import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from ..metrics.endpoint import BoundedThreadsMixIn, host_port
from .auth import BearerToken
from .payload import JSON, PROTOBUF, media_type
from .receive import (ACCEPTED, FULL, INVALID, NOT_FORWARDED, RETRYABLE, STOPPING, TOO_LARGE, UNAUTHORIZED, UNSUPPORTED, Answer,
                      Receiving)
from .tls import TLS_RECORD_HANDSHAKE, ServerTls

__all__ = ["HttpReceiver", "TRACES_PATH"]

logger = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
MAX_CONNECTIONS = 64
IDLE_TIMEOUT_S = 30.0
STATUS = {ACCEPTED: 200, FULL: 429, STOPPING: 503, NOT_FORWARDED: 503, INVALID: 400, TOO_LARGE: 413, UNSUPPORTED: 415,
          UNAUTHORIZED: 401}
GRPC_CODES = {FULL: 8, STOPPING: 14, NOT_FORWARDED: 14, INVALID: 3, TOO_LARGE: 3, UNSUPPORTED: 3, UNAUTHORIZED: 16}  # google.rpc.Code
WRONG_PATH, WRONG_METHOD = "wrong_path", "wrong_method"  # answers of their own: a sender set up wrong, not bad data
REFUSAL_CODES = {404: 5, 405: 12, 501: 12}  # google.rpc.Code NOT_FOUND, UNIMPLEMENTED; else INVALID_ARGUMENT
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
_NOT_TLS_TEXT = b"this port speaks TLS: send to https://\n"
NOT_TLS = (b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
           + str(len(_NOT_TLS_TEXT)).encode() + b"\r\nConnection: close\r\n\r\n" + _NOT_TLS_TEXT)


_MAX_CHUNK_LINE = 1024  # a chunk size line, extensions included
_MAX_TRAILERS = 64


class _BodyTooLarge(Exception):
    """A chunked body grew past the request limit."""


class _BadFraming(Exception):
    """A chunked body that does not follow the chunked coding."""


class _TracesHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse their connection
    server: _BoundedHttpServer

    def __init__(self, request: Any, client_address: Any, server: _BoundedHttpServer, raw: socket.socket) -> None:
        self.raw = raw  # the accepted socket (under TLS, `request` is its wrapped twin): what the server may close
        super().__init__(request, client_address, server)

    def parse_request(self) -> bool:
        whole = super().parse_request()  # reads the headers: a client may trickle them, waiting all along
        self.server.waiting(self.raw.fileno(), None)  # a whole request came: not one to close to make room
        return whole

    def handle_expect_100(self) -> bool:
        self.server.waiting(self.raw.fileno(), None)  # headers whole: popped before the client hears 100 Continue
        return super().handle_expect_100()

    def handle_one_request(self) -> None:
        super().handle_one_request()
        if not self.close_connection:  # kept alive and idle until its next request: may be closed to make room
            self.server.waiting(self.raw.fileno(), self.raw)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's own refusals (a malformed request line, 414, 431, 501 for other methods),
        answered and counted as the others rather than as an HTML page."""
        if self.request_version == "HTTP/0.9":  # a garbage request line: answer with a status line all the same
            self.request_version = "HTTP/1.1"
        label = WRONG_METHOD if code == 501 else TOO_LARGE if code in (414, 431) else INVALID
        self._refuse(code, label, message or "bad request")

    def do_POST(self) -> None:  # noqa: N802 - the standard library's name
        owner = self.server.owner
        receiving = owner.receiving
        if self.path.split("?", 1)[0] != TRACES_PATH:
            return self._refuse(404, WRONG_PATH, f"no such path; OTLP traces go to {TRACES_PATH}")
        kind = media_type(self.headers.get("Content-Type"))
        if owner.token is not None and not owner.token.allows(self.headers.get("Authorization")):
            return self._status(kind, receiving.unauthorized("http"), close=True)
        if self.headers.get("Transfer-Encoding"):  # the OTel JS SDK streams its body, so chunked
            if (self.headers.get("Transfer-Encoding") or "").strip().lower() != "chunked":
                self._status(kind, receiving.unreadable("http", "only the chunked transfer coding is read"), close=True)
                return
            try:
                body = self._chunked(receiving.max_bytes)
            except _BodyTooLarge:  # no length was sent: say what the limit is, not a length
                return self._refuse(413, TOO_LARGE, f"chunked request body is over the limit of {receiving.max_bytes:,} bytes")
            except _BadFraming as exc:
                self.close_connection = True
                return self._status(kind, receiving.unreadable("http", str(exc)), close=True)
        else:
            try:
                length = int(self.headers.get("Content-Length") or "")
                if length < 0:
                    raise ValueError
            except ValueError:
                return self._refuse(411, INVALID, "no valid Content-Length: send one, or a chunked body")
            if length > receiving.max_bytes:
                return self._status(kind, receiving.too_large("http", length), close=True)
            body = self.rfile.read(length)
            if len(body) < length:
                self.close_connection = True
                return  # the sender went away mid-body
        answer = receiving.take("http", body, self.headers.get("Content-Type") or "", self.headers.get("Content-Encoding") or "identity")
        if answer.kind == ACCEPTED:
            response = ExportTraceServiceResponse()
            if answer.rejected_spans:
                response.partial_success.rejected_spans = answer.rejected_spans
                response.partial_success.error_message = answer.message
            return self._message(200, kind, response)
        self._status(kind, answer, retry_after=receiving.retry_after_s if answer.kind in RETRYABLE else None)

    def do_GET(self) -> None:  # noqa: N802
        self._refuse(405, WRONG_METHOD, f"POST OTLP traces to {TRACES_PATH}")

    def _refuse(self, code: int, label: str, reason: str) -> None:
        """A refusal before the body is read: counted as a request with `label`, answered with one line of reason,
        in a `google.rpc.Status` when the request is OTLP (protobuf or JSON), else in plain text; then closed."""
        self.server.owner.receiving.metrics.request("http", label)
        headers = getattr(self, "headers", None)  # not read yet for a bad request line
        kind = media_type(headers.get("Content-Type") if headers is not None else None)
        if kind in (JSON, PROTOBUF):
            status = status_pb2.Status(code=REFUSAL_CODES.get(code, 3), message=reason)
            return self._message(code, kind, status, close=True)
        self._plain(code, reason, close=True)

    def _chunked(self, limit: int) -> bytes:
        """A chunked body (RFC 9112 7.1) of at most `limit` bytes; trailers are read and ignored."""
        parts, size = [], 0
        while True:
            line = self.rfile.readline(_MAX_CHUNK_LINE + 1)
            if not line.endswith(b"\n") or len(line) > _MAX_CHUNK_LINE:
                raise _BadFraming("a chunk size line is cut short or too long")
            try:
                n = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BadFraming(f"not a chunk size: {line[:40]!r}") from None
            if n < 0:
                raise _BadFraming("a negative chunk size")
            if n == 0:
                for _ in range(_MAX_TRAILERS):
                    if self.rfile.readline(_MAX_CHUNK_LINE) in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
                raise _BadFraming("too many trailer lines")
            size += n
            if size > limit:
                raise _BodyTooLarge
            chunk = self.rfile.read(n)
            if len(chunk) < n or self.rfile.readline(3) not in (b"\r\n", b"\n"):
                raise _BadFraming("the body ends inside a chunk")
            parts.append(chunk)

    def _status(self, kind: str, answer: Answer, *, retry_after: int | None = None, close: bool = False) -> None:
        status = status_pb2.Status(code=GRPC_CODES.get(answer.kind, 2), message=answer.message)
        self._message(STATUS[answer.kind], kind, status, retry_after=retry_after, close=close)

    def _message(self, code: int, kind: str, message: Any, *, retry_after: int | None = None, close: bool = False) -> None:
        if kind == JSON:
            body, content_type = json_format.MessageToJson(message, indent=None).encode(), JSON
        else:
            body, content_type = message.SerializeToString(), PROTOBUF
        self._reply(code, body, content_type, retry_after=retry_after, close=close)

    def _plain(self, code: int, text: str, *, close: bool = False) -> None:
        self._reply(code, text.encode() + b"\n", "text/plain; charset=utf-8", close=close)

    def _reply(self, code: int, body: bytes, content_type: str, *, retry_after: int | None = None, close: bool = False) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if code == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="otel-agent-eval"')
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the standard library's name
        """Nothing per request: the answers are counted in agent_eval_serve_requests_total."""


class _BoundedHttpServer(BoundedThreadsMixIn, HTTPServer):
    owner: HttpReceiver
    thread_name = "otel-agent-eval-serve-http"
    # past the limit, the connection waiting longest for a whole request (idle, trickling its headers, or kept
    # alive between requests) is closed for the new one; a retryable 503 only when all are mid-request
    make_room = True

    def __init__(self, address: tuple[str, int], owner: HttpReceiver, max_connections: int) -> None:
        self.owner = owner
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.max_connections, self.timeout_s = max_connections, owner.idle_timeout_s
        super().__init__(address, _TracesHandler)

    def refuse(self, request: Any) -> None:
        """Busy: a quick retryable answer rather than a pile of threads."""
        self.owner.receiving.metrics.request("http", "busy")
        try:
            request.settimeout(1.0)
            request.sendall(BUSY)
        except OSError:
            pass

    def finish_request(self, request: Any, client_address: Any) -> None:
        context = self.owner.ssl_context
        if context is not None:
            tls = self._handshake(context, request)
            if tls is None:
                return
            try:
                self._finish(tls, client_address, request)
            finally:
                try:
                    tls.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                tls.close()
            return
        self._finish(request, client_address, request)

    def _handshake(self, context: ssl.SSLContext, request: socket.socket) -> ssl.SSLSocket | None:
        """The TLS connection, or None (answered and counted) for a plaintext client or a failed handshake."""
        metrics = self.owner.receiving.metrics
        try:
            first = request.recv(1, socket.MSG_PEEK)
        except OSError:
            return None  # went away or stayed silent past the idle timeout
        if not first:
            return None
        if first[0] != TLS_RECORD_HANDSHAKE:
            metrics.request("http", "not_tls")
            if first.isalpha():  # "POST ...": a plaintext HTTP client; tell it why, in its own protocol
                _answer_and_linger(request, NOT_TLS)
            return None
        try:
            # a twin of the socket is wrapped: `request` stays open, for the mix-in to shut down to make room
            return context.wrap_socket(request.dup(), server_side=True)
        except (OSError, ValueError):  # ssl.SSLError is an OSError: bad certificate, protocol, timeout
            metrics.request("http", "tls_failed")
            return None

    def _finish(self, request: Any, client_address: Any, raw: socket.socket) -> None:
        try:
            _TracesHandler(request, client_address, self, raw)
        except (OSError, ValueError):
            raise  # a client that went away or timed out: the mix-in's to drop
        except Exception:  # noqa: BLE001 - one request must never take the server down
            logger.exception("otel-agent-eval serve: an HTTP request failed")


def _answer_and_linger(sock: socket.socket, answer: bytes, *, quiet_s: float = 0.25, most: int = 1 << 20) -> None:
    """Send `answer`, then read (and drop) what the client is still sending until it stops, so that closing
    does not reset the connection before the client has read the answer (a lingering close, as web servers do)."""
    try:
        sock.sendall(answer)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(quiet_s)
        while most > 0:
            data = sock.recv(65536)
            if not data:
                return
            most -= len(data)
    except OSError:
        return


class HttpReceiver:
    """The OTLP/HTTP server; `endpoint` is its full traces URL once built (port 0 picks a free one)."""

    def __init__(self, receiving: Receiving, *, host: str = "127.0.0.1", port: int = 4318, token: BearerToken | None = None,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 tls: ServerTls | None = None) -> None:
        self.receiving = receiving
        self.token = token
        self.ssl_context = tls.ssl_context() if tls is not None else None
        self.idle_timeout_s = idle_timeout_s
        self._server = _BoundedHttpServer((host, port), self, max_connections)
        self.address: tuple[str, int] = self._server.server_address[:2]
        scheme = "https" if tls is not None else "http"
        self.endpoint = f"{scheme}://{host_port(*self.address)}{TRACES_PATH}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="otel-agent-eval-serve-http-accept", daemon=True)

    def start(self) -> HttpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop accepting; requests already being read finish on their own threads."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

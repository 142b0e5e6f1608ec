"""The /metrics HTTP endpoint: prometheus-client's WSGI app behind a server with bounded threads.

prometheus-client's `start_http_server` starts a thread per connection with no read
timeout, so slow or idle connections pile up threads for good. This server serves at most
`MAX_CONNECTIONS` at once and drops a connection that sends nothing for `TIMEOUT_S`. When
all are taken, a new connection closes the one that has waited longest without sending a
whole request (a slow, idle or kept-alive client), so clients that trickle bytes cannot
keep a scrape out; only when every connection is mid-request is the new one refused.

    >>> server, thread = serve(registry, port=9464)        # or mount make_wsgi_app(registry)
"""
from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import REGISTRY, CollectorRegistry, make_wsgi_app

MAX_CONNECTIONS = 16
TIMEOUT_S = 5.0


class BoundedThreadsMixIn(ThreadingMixIn):
    """A thread per connection, but at most `max_connections` at once, each dropped after `timeout_s` of
    silence. Past the limit, with `make_room`, the connection waiting longest for a whole request is
    closed to make room (its handler calls `waiting(fd, None)` once it has read a request); else, or if
    none is waiting, the new connection is `refuse`d at once (closed here)."""

    daemon_threads = True
    max_connections = MAX_CONNECTIONS
    timeout_s = TIMEOUT_S
    thread_name = "otel-agent-eval-metrics"
    make_room = True
    request_queue_size = 128  # the listen backlog (socketserver's 5 drops a burst's connects for a 1 s SYN retry)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._waiting: dict[int, socket.socket] = {}  # by fd, oldest first: connections with no request read yet
        self._waiting_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False) and not (
                self.make_room and self._close_longest_waiting() and self._slots.acquire(timeout=1.0)):
            self.refuse(request)  # refuse rather than pile up threads
            self.shutdown_request(request)
            return
        request.settimeout(self.timeout_s)
        if self.make_room:
            self.waiting(request.fileno(), request)
        threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True,
                         name=self.thread_name).start()

    def waiting(self, fd: int, request: socket.socket | None) -> None:
        """Connection `fd` waits for a request (`request` its socket), or has one to answer (None)."""
        with self._waiting_lock:
            self._waiting.pop(fd, None)
            if request is not None:
                self._waiting[fd] = request

    def _close_longest_waiting(self) -> bool:
        with self._waiting_lock:
            if not self._waiting:
                return False
            request = self._waiting.pop(next(iter(self._waiting)))
        try:
            request.shutdown(socket.SHUT_RDWR)  # its thread's read returns; the thread ends and frees its slot
        except OSError:
            pass
        return True

    def refuse(self, request: Any) -> None:
        """What a connection past the limit gets before it is closed: nothing, here."""

    def _serve_one(self, request: Any, client_address: Any) -> None:
        fd = request.fileno()
        try:
            self.finish_request(request, client_address)
        except (OSError, ValueError):  # a client that went away or timed out
            pass
        finally:
            self.waiting(fd, None)
            self.shutdown_request(request)
            self._slots.release()


class _QuietHandler(WSGIRequestHandler):
    def parse_request(self) -> bool:
        whole = super().parse_request()  # reads the headers: a client may trickle them, waiting all along
        self.server.waiting(self.connection.fileno(), None)  # a whole request came: not one to close to make room
        return whole

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        """Log nothing: a scrape every 15 s is no news."""


class _BoundedServer(BoundedThreadsMixIn, WSGIServer):
    pass


def host_port(host: str, port: int) -> str:
    """`127.0.0.1:9464`, `[::1]:9464`: an IPv6 address goes in brackets, or its last group would read as the port."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(registry: CollectorRegistry = REGISTRY, *, port: int = 9464, addr: str = "127.0.0.1",
          app: Callable[..., Iterable[bytes]] | None = None) -> tuple[Any, threading.Thread]:
    """Start the /metrics endpoint in a daemon thread; returns (server, thread). `app` serves a WSGI
    app of one's own (e.g. health paths beside the metrics) on the same bounded server."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    server_class = type("MetricsServer", (_BoundedServer,), {"address_family": family})
    server = make_server(addr, port, app or make_wsgi_app(registry), server_class, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="otel-agent-eval-metrics-server", daemon=True)
    thread.start()
    return server, thread

"""The /metrics HTTP endpoint: prometheus-client's WSGI app behind a server with bounded threads.

prometheus-client's `start_http_server` starts a thread per connection with no read
timeout, so slow or idle connections pile up threads for good. This server serves at most
`MAX_CONNECTIONS` at once (more are closed at once) and drops a connection that sends
nothing for `TIMEOUT_S`.

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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        """Log nothing: a scrape every 15 s is no news."""


class BoundedThreadsMixIn(ThreadingMixIn):
    """A thread per connection, but at most `max_connections` at once, each dropped after
    `timeout_s` of silence; past the limit a connection is `refuse`d at once (closed here)."""

    daemon_threads = True
    max_connections = MAX_CONNECTIONS
    timeout_s = TIMEOUT_S
    thread_name = "otel-agent-eval-metrics"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):  # busy: refuse rather than pile up threads
            self.refuse(request)
            self.shutdown_request(request)
            return
        request.settimeout(self.timeout_s)
        threading.Thread(target=self._serve_one, args=(request, client_address), daemon=True,
                         name=self.thread_name).start()

    def refuse(self, request: Any) -> None:
        """What a connection past the limit gets before it is closed: nothing, here."""

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except (OSError, ValueError):  # a client that went away or timed out
            pass
        finally:
            self.shutdown_request(request)
            self._slots.release()


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

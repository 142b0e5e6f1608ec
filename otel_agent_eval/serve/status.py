"""`/metrics`, `/healthz` and `/readyz` on one port, on the /metrics endpoint's bounded server.

`/healthz` answers 200 while the process serves at all (a liveness probe); `/readyz`
answers 200 only while the receivers accept spans, and 503 from the moment shutdown
begins, so a load balancer stops sending before the queue is drained.

    >>> server, thread = serve_status(registry, ready=lambda: True, port=9464)
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app

from ..metrics.endpoint import serve

__all__ = ["serve_status", "status_app"]


def status_app(registry: CollectorRegistry, ready: Callable[[], bool]) -> Callable[..., Iterable[bytes]]:
    """A WSGI app: the health paths here, everything else prometheus-client's metrics app."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/healthz":
            return _plain(start_response, "200 OK", b"ok\n")
        if path == "/readyz":
            if ready():
                return _plain(start_response, "200 OK", b"ready\n")
            return _plain(start_response, "503 Service Unavailable", b"not ready\n")
        return metrics(environ, start_response)

    return app


def serve_status(registry: CollectorRegistry, ready: Callable[[], bool], *, port: int = 9464,
                 addr: str = "127.0.0.1") -> tuple[Any, threading.Thread]:
    """Serve the status app in a daemon thread; returns (server, thread). Raises OSError when the port is taken."""
    return serve(registry, port=port, addr=addr, app=status_app(registry, ready))


def _plain(start_response: Callable[..., Any], status: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]

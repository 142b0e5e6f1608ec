"""`otel-agent-eval demo`: its options, the paced run with a live view, /metrics and OTLP export.

It exists to wire the other modules together for the CLI: the workload through a real
`AgentEvalSpanProcessor`, the registry served on /metrics, the display fed by reading
the metrics back, and optionally the enriched spans exported over OTLP.
"""
from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.trace import SpanProcessor
from prometheus_client import CollectorRegistry

from ...config.catalog import Catalog, load_catalog
from ...metrics.endpoint import host_port, serve
from ...otel.processor import AgentEvalSpanProcessor
from .display import Display, LiveDisplay, PlainDisplay, format_summary
from .readback import read_metrics
from .workload import DEFAULT_SUBOPTIMAL_SHARE, DemoAgent, DemoError, Workload, check_share, demo_agents, private_provider

# -- defaults of the command ------------------------------------------------------------
DEFAULT_DURATION_S = 30.0
DEFAULT_RATE = 20.0  # runs per second
DEFAULT_PORT = 9464
DEFAULT_ADDR = "127.0.0.1"
MAX_LAG_S = 1.0  # further behind schedule than this, the pacing starts afresh instead of bursting
OTLP_TRACES_PATH = "/v1/traces"
OTLP_TIMEOUT_S = 5.0  # bounds the flush at exit when the collector is down (the exporter's default is 10)


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The `demo` options; defined here so the command and its defaults live in one module."""
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, metavar="SECONDS",
                        help="how long to run (default %(default)g; 0 runs until Ctrl-C)")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, metavar="RUNS_PER_SECOND",
                        help="simulated agent runs per second (default %(default)g)")
    parser.add_argument("--suboptimal-share", type=float, default=DEFAULT_SUBOPTIMAL_SHARE, metavar="FRACTION",
                        help="share of runs that pick a worse tool than the optimal one, 0 to 1 (default %(default)g)")
    parser.add_argument("--catalog", metavar="FILE", help="catalog YAML (default: the packaged catalog)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port of the /metrics endpoint (default %(default)s; 0 picks a free one)")
    parser.add_argument("--addr", default=DEFAULT_ADDR, help="address of the /metrics endpoint (default %(default)s)")
    parser.add_argument("--otlp-endpoint", metavar="URL",
                        help="also export the enriched spans over OTLP http/protobuf, e.g. http://localhost:4318 "
                             f"({OTLP_TRACES_PATH} is added to a URL without a path)")
    parser.add_argument("--seed", type=int, help="seed of the simulation, for a reproducible workload")
    parser.add_argument("--no-live", action="store_true",
                        help="plain progress lines instead of the live table (automatic when stdout is no terminal)")


def check_options(args: argparse.Namespace) -> None:
    """Reject values the demo cannot run with, before anything is started."""
    if not (0 <= args.duration < math.inf):
        raise DemoError(f"--duration must be a number of seconds >= 0, 0 for until Ctrl-C (got {args.duration:g})")
    if not (0 < args.rate < math.inf):
        raise DemoError(f"--rate must be a positive number of runs per second (got {args.rate:g})")
    check_share(args.suboptimal_share)
    if not 0 <= args.port <= 65535:
        raise DemoError(f"--port must be from 0 to 65535, 0 for a free port (got {args.port!r})")
    if args.otlp_endpoint is not None:
        otlp_traces_url(args.otlp_endpoint)


def otlp_traces_url(endpoint: str) -> str:
    """The traces URL for an OTLP/HTTP endpoint: a bare `http://host:4318` gets `/v1/traces`."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise DemoError(f"--otlp-endpoint must be an http:// or https:// URL, e.g. http://localhost:4318 (got {endpoint!r})")
    if parts.path in ("", "/"):
        parts = parts._replace(path=OTLP_TRACES_PATH)
    return urlunsplit(parts)


def otlp_forwarder(endpoint: str) -> SpanProcessor:
    """`BatchSpanProcessor(OTLPSpanExporter(...))` over http/protobuf; imported only when asked for."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_traces_url(endpoint), timeout=OTLP_TIMEOUT_S))


def start_metrics_server(registry: CollectorRegistry, *, port: int = DEFAULT_PORT, addr: str = DEFAULT_ADDR) -> tuple[Any, str]:
    """Serve `registry` on /metrics; returns the server (call `shutdown()`) and the URL actually bound.

    A busy port or a bad address is a `DemoError` (one line), not a traceback; port 0
    binds a free port, which the URL shows.
    """
    try:
        server, _thread = serve(registry, port=port, addr=addr)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise DemoError(f"cannot serve /metrics on {host_port(addr, port)}: {reason}") from None
    return server, f"http://{host_port(addr, server.server_port)}/metrics"


def run_demo(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """The `demo` command: serve /metrics, run the paced workload with a live view, print a summary.

    Raises `DemoError` or `CatalogError` for unusable options before starting anything.
    Ctrl-C (or SIGTERM) stops the workload early; the summary is printed all the same,
    before the OTLP exporter is flushed (which may take a while if the collector is down).
    """
    out = out or sys.stdout
    check_options(args)
    catalog = load_catalog(args.catalog)
    agents = demo_agents(catalog)
    registry = CollectorRegistry()
    server, url = start_metrics_server(registry, port=args.port, addr=args.addr)
    provider = None
    try:
        forward = otlp_forwarder(args.otlp_endpoint) if args.otlp_endpoint else None
        provider = private_provider(AgentEvalSpanProcessor(catalog, registry=registry, forward_to=forward))
        workload = Workload(provider, catalog, suboptimal_share=args.suboptimal_share, seed=args.seed)
        names = [a.name for a in agents]
        live = not args.no_live and out.isatty()
        display: Display = LiveDisplay(out, args.duration, names) if live else PlainDisplay(out, args.duration, names)
        elapsed = _run_interruptibly(workload, registry, display, args,
                                     header=lambda: _print_header(out, args, agents, catalog, url))
        metrics = read_metrics(registry)
        display.finish(metrics, workload.summary.runs, elapsed)
        print(format_summary(metrics, workload.summary, elapsed), file=out, flush=True)
    finally:
        server.shutdown()
        server.server_close()
        if provider is not None:
            provider.shutdown()  # flushes the OTLP exporter, if any
    return 0


def _run_interruptibly(workload: Workload, registry: CollectorRegistry, display: Display, args: argparse.Namespace,
                       *, header: Callable[[], None]) -> float:
    """Print the header and drive the workload; Ctrl-C or SIGTERM ends it early. Returns the seconds run.

    The header is printed inside the interruptible part, so once a user (or a test) has
    seen it, an interrupt always leads to the summary.
    """
    started = time.monotonic()
    try:
        with _sigterm_as_interrupt():
            header()
            display.start()
            return _drive(workload, registry, display, duration_s=args.duration, rate=args.rate)
    except KeyboardInterrupt:
        display.interrupted()
        return time.monotonic() - started
    finally:
        display.close()


def _print_header(out: TextIO, args: argparse.Namespace, agents: list[DemoAgent], catalog: Catalog, url: str) -> None:
    planned = f"for {args.duration:g} s" if args.duration else "until Ctrl-C"
    lines = [
        f"otel-agent-eval demo: {len(agents)} simulated agents ({', '.join(a.name for a in agents)}), "
        f"{args.rate:g} runs/s {planned}, {args.suboptimal_share:.0%} of runs pick a worse tool",
        f"  catalog: {catalog.source}",
        f"  metrics: curl {url}",
    ]
    if args.otlp_endpoint:
        lines.append(f"  spans:   exported to {otlp_traces_url(args.otlp_endpoint)} (OTLP http/protobuf)")
    lines.append("  Ctrl-C stops early and prints the summary.")
    print("\n".join(lines), file=out, flush=True)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let Ctrl-C, `kill` and `docker stop` (SIGINT, SIGTERM) end the demo with the summary.

    SIGINT is set too: a shell starts background jobs with SIGINT ignored, and Python
    then never installs its KeyboardInterrupt handler, so Ctrl-C alone is not enough.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _drive(workload: Workload, registry: CollectorRegistry, display: Display, *, duration_s: float, rate: float,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> float:
    """Run the workload at `rate` runs/s until `duration_s` (0: until Ctrl-C); returns the seconds run.

    Between runs it really sleeps (the spans carry simulated timings instead), and it
    refreshes the display every `display.interval` seconds. Ctrl-C propagates to the caller.
    """
    start = clock()
    end = start + duration_s if duration_s else math.inf
    period = 1.0 / rate
    next_run, next_show = start, start + display.first_after
    while (now := clock()) < end:
        if now >= next_run:
            workload.run_once()
            next_run = max(next_run + period, now - MAX_LAG_S)
        if now >= next_show:
            display.update(read_metrics(registry), workload.summary.runs, now - start)
            next_show = now + display.interval
        wait = min(next_run, next_show, end) - clock()
        if wait > 0:
            sleep(wait)
    return clock() - start

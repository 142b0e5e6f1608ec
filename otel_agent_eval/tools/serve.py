"""`otel-agent-eval serve`: run the evaluation as an OTLP hop until SIGTERM or SIGINT, then drain and exit 0.

Bad arguments (a broken catalog, an unreadable token file, a port in use) end with one
line on stderr and exit code 2, before anything listens.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Any

from ..config.catalog import Catalog, load_catalog
from ..config.settings import Settings
from .options import add_catalog_arguments

__all__ = ["add_serve_arguments", "run_serve"]

EXIT_BAD_INPUT = 2


def _port(text: str) -> int:
    """A port 0-65535; argparse names the flag in front of the message (never this function's name)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: not a port number (0-65535; 0 picks a free port)")
    return port


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grpc-port", type=_port, default=4317, metavar="PORT", help="OTLP/gRPC port (default 4317; 0: a free port)")
    parser.add_argument("--http-port", type=_port, default=4318, metavar="PORT", help="OTLP/HTTP port (default 4318; 0: a free port)")
    parser.add_argument("--no-grpc", action="store_true", help="do not listen for OTLP/gRPC")
    parser.add_argument("--no-http", action="store_true", help="do not listen for OTLP/HTTP")
    parser.add_argument("--bind", default="127.0.0.1", metavar="ADDR",
                        help="address of every listener (default 127.0.0.1: this machine only; 0.0.0.0 for all)")
    parser.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                        help="port of /metrics, /healthz and /readyz (default: $OTEL_AGENT_EVAL_METRICS_PORT, else 9464)")
    parser.add_argument("--forward-to", metavar="URL",
                        help="URL of the next hop, e.g. http://collector:4318/v1/traces, https://... for TLS, "
                             "grpc://collector:4317 or grpcs://... for OTLP/gRPC (default: nowhere)")
    parser.add_argument("--forward-protocol", choices=("http/protobuf", "grpc"), default="http/protobuf",
                        help="OTLP protocol to the next hop (default http/protobuf; grpc takes --forward-to scheme://host:port)")
    parser.add_argument("--forward-header", action="append", default=[], metavar="NAME=VALUE",
                        help="header (gRPC: metadata) on every export to the next hop; repeatable; NAME=@FILE reads the value "
                             "from FILE")
    parser.add_argument("--forward-ca-file", metavar="FILE",
                        help="CA certificate(s) (PEM) to verify an https:// next hop with (default: the system's)")
    parser.add_argument("--forward-client-cert-file", metavar="FILE", help="client certificate (PEM) for mutual TLS to the next hop")
    parser.add_argument("--forward-client-key-file", metavar="FILE", help="its private key (PEM)")
    parser.add_argument("--forward-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="time spent on one batch, retries included; a busy or unreachable hop is retried until it is spent (default 10)")
    parser.add_argument("--tls-cert-file", metavar="FILE",
                        help="serve both receivers over TLS with this certificate chain (PEM); needs --tls-key-file")
    parser.add_argument("--tls-key-file", metavar="FILE", help="the private key (PEM) of --tls-cert-file")
    parser.add_argument("--tls-client-ca-file", metavar="FILE",
                        help="require client certificates signed by this CA (PEM): mutual TLS")
    add_catalog_arguments(parser)
    parser.add_argument("--bearer-token-file", metavar="FILE", help="require 'Authorization: Bearer <token in FILE>' on every request")
    parser.add_argument("--queue-spans", type=int, default=None, metavar="N",
                        help="spans accepted and not yet evaluated before senders are told to retry (default 16384)")
    parser.add_argument("--max-request-mib", type=float, default=4.0, metavar="MIB", help="largest request body, also inflated (default 4)")
    parser.add_argument("--forward-max-request-mib", type=float, default=4.0, metavar="MIB",
                        help="largest request sent to the next hop; larger batches go in parts (default 4, the "
                             "Collector's gRPC limit)")
    parser.add_argument("--forward-delay", type=float, default=1.0, metavar="SECONDS",
                        help="longest wait to fill a batch for the next hop (default 1)")
    parser.add_argument("--workers", default="1", metavar="N",
                        help="evaluation processes, traces routed to them by trace id (default 1: this process evaluates)")
    parser.add_argument("--otlp-metrics-to", metavar="URL",
                        help="also send the metrics over OTLP to this URL (default: the --forward-to hop, /v1/metrics; "
                             "same protocol, TLS and headers flags)")
    parser.add_argument("--no-otlp-metrics", action="store_true", help="send metrics over OTLP nowhere (only /metrics)")
    parser.add_argument("--otlp-logs-to", metavar="URL",
                        help="send the judge's gen_ai.evaluation.result events as OTLP log records to this URL (default: the "
                             "--forward-to hop, /v1/logs; same protocol, TLS and headers flags; only while a judge runs)")
    parser.add_argument("--no-otlp-logs", action="store_true", help="send the judge's events nowhere (its metrics still count)")
    parser.add_argument("--otlp-metrics-interval", type=float, default=None, metavar="SECONDS",
                        help="seconds between OTLP metric exports (default: OTEL_METRIC_EXPORT_INTERVAL, else 60)")
    parser.add_argument("--otlp-histograms", choices=("exponential", "explicit"), default=None,
                        help="histograms over OTLP (default: OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION, "
                             "else exponential)")
    parser.add_argument("--ack", choices=("forwarded", "received"), default="forwarded",  # serve/ack.py
                        help="when a request is answered: 'forwarded' (default) once its spans are forwarded, so a crash "
                             "loses none the sender was told were taken (bar the runs still open); 'received' on receipt")
    parser.add_argument("--wal-dir", metavar="DIR",
                        help="write each request to a write-ahead log here before answering it, and replay it at start "
                             "(serve/durable.py): a crash loses nothing acknowledged, open runs included")
    parser.add_argument("--wal-fsync", choices=("always", "never"), default="always",
                        help="sync the log to disk before each answer (always, the default: a power cut loses nothing "
                             "acknowledged) or leave it to the OS (never: a process crash loses nothing)")
    parser.add_argument("--wal-max-mib", type=float, default=256.0, metavar="MIB",
                        help="the most the log holds on disk; past it, senders are told to retry (default 256)")
    parser.add_argument("--wal-dedup-spans", type=int, default=65_536, metavar="N",
                        help="with --wal-dir: drop a span whose id is among the last N taken (a sender's resend of a "
                             "request the log replayed); 0 turns it off (default 65536)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def run_serve(args: argparse.Namespace) -> int:
    """Serve until a signal; raises ValueError (one line) for bad arguments, which `main` turns into exit code 2."""
    from ..serve import ServeConfig, Service
    from ..serve.service import collect_less
    from ..serve.auth import read_token_file
    from ..serve.intake import DEFAULT_QUEUE_SPANS
    from ..serve.next_hop import MAX_TIMEOUT_S, NextHop
    from ..serve.otlp_logs import emits_log_records
    from ..serve.tls import ServerTls

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    settings = Settings.from_env().override(catalog=args.catalog, profile=args.profile, environment=args.environment)
    catalog = load_catalog(settings.catalog)  # a broken file stops here, in one line (no fallback for a service)
    _check_names(args, catalog)
    if args.no_grpc and args.no_http:
        raise ValueError("serve: --no-grpc and --no-http leave nothing to receive spans")
    if args.queue_spans is not None and args.queue_spans < 1:
        raise ValueError(f"serve: --queue-spans must be at least 1 (got {args.queue_spans})")
    if not 0 < args.max_request_mib <= 1024:
        raise ValueError(f"serve: --max-request-mib must be above 0 and at most 1024 (got {args.max_request_mib:g})")
    if not 0 < args.forward_delay <= MAX_TIMEOUT_S:  # 0 would make the forwarder spin while idle
        raise ValueError(f"serve: --forward-delay must be above 0 and at most {MAX_TIMEOUT_S} s (got {args.forward_delay:g})")
    if not 0 < args.forward_timeout <= MAX_TIMEOUT_S:
        raise ValueError(f"serve: --forward-timeout must be above 0 and at most {MAX_TIMEOUT_S} s (got {args.forward_timeout:g})")
    if not 1 <= args.wal_max_mib <= 1 << 20:
        raise ValueError(f"serve: --wal-max-mib must be at least 1 (got {args.wal_max_mib:g})")
    if args.wal_dedup_spans < 0:
        raise ValueError(f"serve: --wal-dedup-spans must be 0 or more (got {args.wal_dedup_spans})")
    workers = _workers(args.workers)
    queue_spans = args.queue_spans or DEFAULT_QUEUE_SPANS
    if queue_spans < workers:
        raise ValueError(f"serve: --queue-spans ({queue_spans}) must be at least --workers ({workers}): each worker holds its share")
    tls = None
    if args.tls_cert_file or args.tls_key_file:
        if not (args.tls_cert_file and args.tls_key_file):
            raise ValueError("serve: --tls-cert-file and --tls-key-file go together")
        tls = ServerTls.load(args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file)
    elif args.tls_client_ca_file:
        raise ValueError("serve: --tls-client-ca-file needs --tls-cert-file and --tls-key-file")
    if not 0 < args.forward_max_request_mib <= 1024:
        raise ValueError(f"serve: --forward-max-request-mib must be above 0 and at most 1024 "
                         f"(got {args.forward_max_request_mib:g})")
    forward_max = int(args.forward_max_request_mib * 1024 * 1024)
    hop = None
    if args.forward_to:
        hop = NextHop.parse(args.forward_to, protocol=args.forward_protocol, headers=args.forward_header,
                            ca_file=args.forward_ca_file, client_cert_file=args.forward_client_cert_file,
                            client_key_file=args.forward_client_key_file, timeout_s=args.forward_timeout,
                            max_request_bytes=forward_max)
    else:
        given = [flag for flag, value in (("--forward-header", args.forward_header), ("--forward-ca-file", args.forward_ca_file),
                                          ("--forward-client-cert-file", args.forward_client_cert_file),
                                          ("--forward-client-key-file", args.forward_client_key_file),
                                          ("--forward-protocol", args.forward_protocol != "http/protobuf")) if value]
        if given:
            raise ValueError(f"serve: {given[0]} needs --forward-to")
    metrics_hop = _signal_hop(args, hop, args.otlp_metrics_to, args.no_otlp_metrics, "--otlp-metrics-to")
    if metrics_hop is not None:
        metrics_hop.metrics_url  # noqa: B018 - a traces URL that says nothing of metrics is refused here, in one line
    logs_hop = None  # only while something emits log records: a judge runs (or OTEL_AGENT_EVAL_EVALUATION_EVENTS=log)
    if emits_log_records({"judge_model": settings.judge_model, "evaluation_events": settings.evaluation_events}):
        logs_hop = _signal_hop(args, hop, args.otlp_logs_to, args.no_otlp_logs, "--otlp-logs-to")
        if logs_hop is not None:
            logs_hop.logs_url  # noqa: B018 - as for metrics
    if args.otlp_metrics_interval is not None and not 0 < args.otlp_metrics_interval <= MAX_TIMEOUT_S:
        raise ValueError(f"serve: --otlp-metrics-interval must be above 0 and at most {MAX_TIMEOUT_S} s "
                         f"(got {args.otlp_metrics_interval:g})")
    config = ServeConfig(
        otlp_metrics=metrics_hop,
        otlp_metrics_interval_s=args.otlp_metrics_interval,
        otlp_histograms=args.otlp_histograms,
        otlp_logs=logs_hop,
        bind=args.bind,
        grpc_port=None if args.no_grpc else args.grpc_port,
        http_port=None if args.no_http else args.http_port,
        metrics_port=(args.metrics_port if args.metrics_port is not None else settings.metrics_port) if settings.metrics_enabled else None,
        forward_to=hop.url if hop is not None else None,
        next_hop=hop,
        tls=tls,
        bearer_token=read_token_file(args.bearer_token_file) if args.bearer_token_file else None,
        max_request_bytes=int(args.max_request_mib * 1024 * 1024),
        queue_spans=queue_spans,
        forward_delay_s=args.forward_delay,
        ack=args.ack,
        wal_dir=args.wal_dir,
        wal_fsync=args.wal_fsync,
        wal_max_bytes=int(args.wal_max_mib * 1024 * 1024),
        wal_dedup_spans=args.wal_dedup_spans,
    )
    if workers > 1:
        from ..serve.workers import WorkerService

        service: Any = WorkerService(config, workers=workers, settings=settings, catalog=catalog, log_level=args.log_level)
    else:
        service = Service(config, settings=settings, catalog=catalog)
    try:
        service.start()
    except OSError as exc:  # its message names the listener, address and port
        raise ValueError(f"serve: {exc}") from None
    collect_less()  # this process only serves
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():  # a second one during the drain: stop now, saying what is lost
            _forced_stop(service, signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    print(_listening(service), flush=True)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        service.stop()  # the handlers stay: a second signal here is a forced stop, never a silent one
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _forced_stop(service: Any, signum: int) -> None:
    """End the process at once (exit 128 + signal) with one line: the spans accepted and not forwarded are
    abandoned, counted (agent_eval_serve_forwarded_spans_total{outcome="abandoned"}); workers are killed too."""
    import os

    m = service.serve_metrics
    settled = sum(m.forward_count(outcome) for outcome in ("exported", "failed", "abandoned"))
    left = max(0, m.span_count("accepted") - settled) if service.next_hop is not None else len(getattr(service, "intake", ()))
    m.forwarded("abandoned", left)
    logging.getLogger(__name__).error(
        "otel-agent-eval serve: %s again during the drain: forced stop; %d accepted spans not forwarded are abandoned "
        "(agent_eval_serve_forwarded_spans_total{outcome=\"abandoned\"})", signal.Signals(signum).name, left)
    for worker in getattr(getattr(service, "pool", None), "workers", ()):
        if worker.process is not None:
            worker.process.kill()
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(128 + signum)


def _check_names(args: argparse.Namespace, catalog: Catalog) -> None:
    """--environment and --profile refused as score and compare refuse them: a typo on the command line must not
    fall back to the catalog's default (the OTEL_AGENT_EVAL_* variables do, with a warning, as in the processor)."""
    for flag, name, known, what in (("--environment", args.environment, catalog.thresholds, "environment"),
                                    ("--profile", args.profile, catalog.profiles, "profile")):
        if name is not None and name not in known:
            raise ValueError(f"serve: {flag} {name!r}: unknown {what}; {catalog.source} has: {', '.join(known)}")


def _signal_hop(args: argparse.Namespace, hop: Any, to: str | None, off: bool, flag: str) -> Any:
    """Where serve's own metrics or log records go over OTLP: `to` (with the --forward-* protocol, TLS and headers),
    else the next hop; None when `off`, or with neither."""
    from ..serve.next_hop import NextHop

    if off or not (to or hop is not None):
        return None
    if not to:
        return hop
    return NextHop.parse(to, protocol=args.forward_protocol, headers=args.forward_header, ca_file=args.forward_ca_file,
                         client_cert_file=args.forward_client_cert_file, client_key_file=args.forward_client_key_file,
                         timeout_s=args.forward_timeout, flag=flag)


MAX_WORKERS = 64  # as serve/workers.py


def _workers(text: str) -> int:
    try:
        workers = int(text)
    except ValueError:
        workers = 0
    if not 1 <= workers <= MAX_WORKERS:
        raise ValueError(f"serve: --workers {text!r}: expected a whole number of processes from 1 to {MAX_WORKERS}")
    return workers


def _listening(service: Any) -> str:
    """One line saying where everything listens (tests read the ports from it)."""
    from ..metrics.endpoint import host_port

    parts = []
    if service.grpc is not None:  # with TLS as https://host:port, which the SDK's gRPC exporter takes as it is
        parts.append(f"OTLP/gRPC on {service.grpc.url if service.grpc.tls else service.grpc.endpoint}")
    if service.http is not None:
        parts.append(f"OTLP/HTTP on {service.http.endpoint}")
    if service.metrics_address is not None:
        parts.append(f"metrics on http://{host_port(*service.metrics_address)}/metrics")
    hop = service.next_hop
    parts.append(f"forwarding to {hop.url} ({hop.protocol})" if hop is not None else "forwarding nowhere")
    if service.otlp_metrics is not None:
        parts.append(f"metrics over OTLP to {service.config.otlp_metrics.metrics_url}")
    if service.config.otlp_logs is not None:
        parts.append(f"evaluation events over OTLP to {service.config.otlp_logs.logs_url}")
    return "otel-agent-eval serve: " + ", ".join(parts)

"""The service: receivers -> intake (one `Pipeline`) -> forwarder -> next hop, with status and self-metrics.

Built from the same `OTEL_AGENT_EVAL_*` settings as the processor (`otel/wiring.py`), with
the core set up as the zero-code exporter sets it (`sees_starts=False`): spans arrive
finished. `stop()` is the graceful shutdown: not ready, stop accepting, evaluate what was
accepted, close open runs, flush the next hop, then stop serving metrics.

    >>> service = Service(ServeConfig(http_port=4318, forward_to="http://collector:4318/v1/traces")).start()
    >>> service.stop()
"""
from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric

from ..config.catalog import Catalog, PathLike
from ..config.settings import Settings
from ..core.noise import pipeline_keys
from ..metrics.endpoint import host_port
from ..otel.otlp_metrics import OtlpMetricsLink
from ..otel.reload import reload_catalog
from ..otel.wiring import attach, build_pipeline, resolve, stop_judging_on_shutdown
from .ack import DEFAULT_ACK, DEFAULT_ACK_TIMEOUT_S, FORWARDED, ForwardedAck
from .auth import BearerToken
from .durable import DurableLog
from .forward import DEFAULT_BUDGET_S, DEFAULT_FORWARD_QUEUE, Forwarder
from .grpc_receiver import GrpcReceiver
from .http_receiver import HttpReceiver
from .intake import DEFAULT_QUEUE_SPANS, Intake
from .next_hop import NextHop
from .otlp_logs import OtlpLogs, emits_log_records
from .payload import MAX_REQUEST_BYTES
from .receive import Receiving
from .self_metrics import ServeMetrics
from .status import serve_status
from .tls import ServerTls
from .wal import WriteAheadLog

__all__ = ["ServeConfig", "Service", "collect_less"]

logger = logging.getLogger(__name__)

SERVICE_NAME = "otel-agent-eval"  # the resource of serve's OTLP metrics and logs (OTEL_SERVICE_NAME wins)
OUR_PREFIXES = ("agent_eval_", "gen_ai_")  # our families in a registry that may hold others (process_*, python_*)
COLLECT_WAIT_S = 0.1  # a scrape waits this long for queued spans, then shows the last consistent state
MESSAGES_VAR = "OTEL_AGENT_EVAL_SERVE_MESSAGES"  # "reencode" turns forwarding from the received messages off (docs/serve.md)


def keep_messages_default() -> bool:
    """Whether protobuf spans are forwarded from the messages they arrived as (else re-encoded by the SDK)."""
    return os.environ.get(MESSAGES_VAR, "").strip().lower() != "reencode"


@dataclass(frozen=True)
class ServeConfig:
    """Where to listen and where to forward; a port of None turns that listener off, 0 picks a free port."""

    bind: str = "127.0.0.1"
    grpc_port: int | None = 4317
    http_port: int | None = 4318
    metrics_port: int | None = 9464
    metrics_bind: str | None = None  # default: `bind`
    forward_to: str | None = None  # an OTLP/HTTP traces URL; None forwards nowhere (`next_hop` says more)
    next_hop: NextHop | None = None  # protocol, TLS and headers of the next hop; wins over `forward_to`
    tls: ServerTls | None = None  # TLS on both receivers
    bearer_token: BearerToken | None = None
    max_request_bytes: int = MAX_REQUEST_BYTES
    queue_spans: int = DEFAULT_QUEUE_SPANS
    forward_queue_spans: int = DEFAULT_FORWARD_QUEUE
    forward_delay_s: float = 1.0
    retry_after_s: int = 1
    drain_timeout_s: float = 10.0
    otlp_metrics: NextHop | None = None  # where the metrics also go over OTLP (the CLI's default: the next hop)
    otlp_metrics_interval_s: float | None = None  # default: OTEL_METRIC_EXPORT_INTERVAL, else 60 s
    otlp_histograms: str | None = None  # exponential or explicit (default: OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION)
    otlp_logs: NextHop | None = None  # where the judge's events go as OTLP log records (the CLI's default: the next hop)
    keep_messages: bool = field(default_factory=keep_messages_default)  # never with redaction on (`Service`)
    ack: str = DEFAULT_ACK  # "forwarded": answer a request once its spans are forwarded; "received": on receipt (`ack.py`)
    ack_timeout_s: float = DEFAULT_ACK_TIMEOUT_S
    wal_dir: str | None = None  # answer once the request is in this write-ahead log, replayed at start (`durable.py`)
    wal_fsync: str = "always"
    wal_max_bytes: int = 256 << 20
    wal_dedup_spans: int = 65_536  # span ids remembered to drop a sender's resend; 0: none

    @property
    def hop(self) -> NextHop | None:
        if self.next_hop is not None:
            return self.next_hop
        return NextHop.parse(self.forward_to) if self.forward_to else None


class Listening:
    """What a serve process and the `--workers` main process share: the receivers, /metrics with health,
    readiness, and the first and last steps of shutdown. Set `config`, `receiving` and `registry` first."""

    metrics_address: tuple[str, int] | None = None
    otlp_metrics: OtlpMetricsLink | None = None
    otlp_logs: OtlpLogs | None = None
    config: ServeConfig
    receiving: Receiving
    registry: CollectorRegistry | None

    def __init__(self) -> None:
        self.grpc: GrpcReceiver | None = None
        self.http: HttpReceiver | None = None
        self._status: tuple[Any, Any] | None = None
        self._closers: list[Callable[[], Any]] = []
        self._ready = False
        self._stopped = False

    @property
    def ready(self) -> bool:
        return self._ready and not self.receiving.stopping

    def close_on_shutdown(self, close: Callable[[], Any]) -> None:
        self._closers.append(close)

    def stop(self) -> None:
        raise NotImplementedError

    def _listen(self) -> None:
        """/metrics (with health) and the receivers, as the config says; when a port is taken, what was
        started is stopped and an OSError raised whose message names the listener, its address and why."""
        config = self.config
        where = ""
        try:
            if config.metrics_port is not None and self.registry is not None:
                addr = config.metrics_bind or config.bind
                where = f"/metrics on {host_port(addr, config.metrics_port)}"
                self._status = serve_status(self.registry, lambda: self.ready, port=config.metrics_port, addr=addr)
                self.metrics_address = self._status[0].server_address[:2]
            if config.grpc_port is not None:
                where = f"OTLP/gRPC on {host_port(config.bind, config.grpc_port)}"
                self.grpc = GrpcReceiver(self.receiving, host=config.bind, port=config.grpc_port,
                                         token=config.bearer_token, tls=config.tls).start()
            if config.http_port is not None:
                where = f"OTLP/HTTP on {host_port(config.bind, config.http_port)}"
                self.http = HttpReceiver(self.receiving, host=config.bind, port=config.http_port,
                                         token=config.bearer_token, tls=config.tls).start()
        except OSError as exc:
            self.stop()
            raise OSError(f"cannot listen for {where}: {exc.strerror or exc}") from exc

    def _start_otlp_metrics(self) -> None:
        """Send the families of /metrics (ours: agent_eval_*, gen_ai_*) over OTLP too, as the config says; the last
        export happens at shutdown, after the accepted spans were evaluated (`_close_endpoints`)."""
        config = self.config
        if config.otlp_metrics is None:
            return
        registry, families = self.registry, self._families

        def ours() -> Iterator[Metric]:
            for family in (registry.collect() if registry is not None else families()):
                if family.name.startswith(OUR_PREFIXES):
                    yield family

        link = OtlpMetricsLink(ours, histograms=config.otlp_histograms)
        interval = config.otlp_metrics_interval_s * 1000 if config.otlp_metrics_interval_s is not None else None
        link.to_exporter(config.otlp_metrics.metric_exporter(), interval_ms=interval, resource=own_resource())
        self.otlp_metrics = link
        self._closers.insert(0, link.close)
        logger.info("otel-agent-eval serve: metrics also over OTLP to %s (%s)", config.otlp_metrics.metrics_url,
                    config.otlp_metrics.protocol)

    def _families(self) -> Iterator[Metric]:
        return iter(())

    def _stop_receiving(self) -> bool:
        """Shutdown's first step: not ready, the receivers stopped; False when it was taken already."""
        if self._stopped:
            return False
        self._stopped = True
        self.receiving.stopping = True
        for receiver in (self.grpc, self.http):
            if receiver is not None:
                receiver.stop()
        return True

    def _close_endpoints(self) -> None:
        """Shutdown's last steps: the closers (reload watchers), then the /metrics server."""
        for close in self._closers:
            try:
                close()
            except Exception:  # noqa: BLE001 - shutdown goes on
                logger.exception("otel-agent-eval serve: shutdown step failed")
        if self._status is not None:
            server, thread = self._status
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)


class Service(Listening):
    """One process of `otel-agent-eval serve`; `exporter` replaces the OTLP exporter `forward_to` would build."""

    def __init__(self, config: ServeConfig = ServeConfig(), *, settings: Settings | None = None,
                 catalog: Catalog | PathLike | None = None, registry: CollectorRegistry | None = REGISTRY,
                 exporter: SpanExporter | None = None, **options: Any) -> None:
        self.config = config
        settings = settings or Settings.from_env()
        options = resolve(settings, catalog=catalog, **options)
        if config.otlp_logs is not None and emits_log_records(options):  # the judge's events to the next hop
            self.otlp_logs = OtlpLogs(config.otlp_logs, own_resource())
            options["logger_provider"] = self.otlp_logs.provider
        self.pipeline, self.metrics = build_pipeline(registry=registry, sees_starts=False, **options)
        if hasattr(self.pipeline.judge_run, "prepare"):  # deepeval imported now, before serving (and `collect_less`)
            self.pipeline.judge_run.prepare()
        self.registry = registry
        self.serve_metrics = ServeMetrics(registry=registry)
        self.next_hop = config.hop
        # Forwarding a span's own message is proven equal to re-encoding it only for what the reader models;
        # with redaction on, everything forwarded is rebuilt from the redacted spans, as before.
        self.keep_messages = config.keep_messages and self.pipeline.redactor is None
        if exporter is None and self.next_hop is not None:
            exporter = self.next_hop.exporter(keep_messages=self.keep_messages)
        if exporter is None:  # nothing to forward to: score, but build no enriched copies
            self.pipeline.enricher = None
        self.forwarder = Forwarder(exporter, self.serve_metrics, limit=config.forward_queue_spans,
                                   delay_s=config.forward_delay_s,
                                   budget_s=self.next_hop.timeout_s if self.next_hop is not None else DEFAULT_BUDGET_S,
                                   ) if exporter is not None else None
        self.intake = Intake(self.pipeline, forward=self._forward, limit=config.queue_spans, on_seen=self.metrics.seen.bump)
        self.receiving = Receiving(self.intake, self.serve_metrics, max_bytes=config.max_request_bytes,
                                   retry_after_s=config.retry_after_s)
        self.receiving.keep_messages = self.keep_messages
        self.receiving.noise_keys = lambda: pipeline_keys(self.pipeline)  # spans that cannot matter pass unbuilt
        self.durable: DurableLog | None = None
        if config.wal_dir is not None:  # acknowledged once logged, whatever `ack` says
            self.durable = DurableLog(WriteAheadLog(config.wal_dir, fsync=config.wal_fsync, max_bytes=config.wal_max_bytes),
                                      self, dedup_spans=config.wal_dedup_spans)
            self.receiving.log = self.durable
        elif config.ack == FORWARDED:
            self.receiving.ack = ForwardedAck(self.intake, self.forwarder, timeout_s=config.ack_timeout_s)
        self.metrics.before_collect = lambda: self.intake.drain(timeout_s=COLLECT_WAIT_S)
        self.metrics.gauges = {
            "open_runs": ("Traces with agent runs open.", lambda: len(self.pipeline.runs)),
            "held_back_calls": ("Tool spans held until their agent is known.", lambda: self.pipeline.runs.held_back),
        }
        self.serve_metrics.gauges = {
            "queued_spans": ("Spans accepted and not evaluated yet.", lambda: len(self.intake)),
            "queue_capacity_spans": ("Spans the intake queue holds before senders are told to retry.", lambda: self.intake.limit),
            "forward_queued_spans": ("Evaluated spans waiting for the next hop.",
                                     lambda: len(self.forwarder) if self.forwarder is not None else 0),
        }
        super().__init__()
        # after the intake closed the open runs: the judge stops, then its events are flushed, in half the drain timeout
        share = config.drain_timeout_s / (4 if self.otlp_logs is not None else 2)
        stop_judging_on_shutdown(self, share)
        if self.otlp_logs is not None:
            self.close_on_shutdown(lambda: self.otlp_logs.close(share))
            self.otlp_logs.start()  # its thread, once nothing before can fail
        attach(self, settings.override(metrics_enabled=False), catalog)  # catalog fallback flag and reloads

    def reload_catalog(self, catalog: PathLike | None = None) -> bool:
        """Swap in the catalog at `catalog` (SIGHUP and the file watch call this); a broken one is refused, logged."""
        return reload_catalog(self.pipeline, catalog)

    def start(self) -> Service:
        """Listen on the configured ports (OSError, with everything started so far stopped, when one is taken)."""
        self.replay()
        self._listen()
        self._start_otlp_metrics()
        self._ready = True
        return self

    def replay(self) -> None:
        """With a write-ahead log: evaluate again what the last process left (`durable.py`), then keep it."""
        if self.durable is not None and not self.durable.started:
            self.durable.replay()
            self.durable.start()
            if self.registry is not None:
                self.registry.register(self.durable)

    def _families(self) -> Iterator[Metric]:
        yield from self.metrics.collect()
        yield from self.serve_metrics.collect()
        if self.durable is not None:
            yield from self.durable.collect()

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Evaluate what was accepted so far and export it to the next hop (tests and scrapes use this)."""
        if not self.intake.drain(timeout_s):
            return False
        return self.forwarder.flush(timeout_s) if self.forwarder is not None else True

    def stop(self) -> None:
        """Graceful shutdown: refuse new spans, evaluate and forward the accepted ones, close runs, flush."""
        if not self._stop_receiving():
            return
        timeout = self.config.drain_timeout_s
        finished = self.intake.stop(timeout)
        if self.forwarder is not None:
            self.forwarder.shutdown(timeout if finished else 0.0)
        if not finished:  # it waited on a next hop that hangs; the forwarder now abandons (counted) instead
            self.intake.stop(timeout)
        if self.durable is not None:
            self.durable.stop()
        self._close_endpoints()
        self.metrics.close()
        if self._ready:  # a port was taken at start: nothing ran, nothing to sum up
            log_stopped(self.serve_metrics)

    def _forward(self, spans: list[ReadableSpan]) -> None:
        if self.durable is not None and not self.durable.forwards(spans):
            return  # a replay of spans forwarded before a crash
        if self.forwarder is not None:
            self.forwarder.put(spans)


def own_resource() -> Resource:
    """The resource of serve's own OTLP metrics and log records: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`,
    else service.name `otel-agent-eval`."""
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):  # OTEL_SERVICE_NAME not set
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    return resource


def collect_less() -> None:
    """For a process that only serves (the command and its workers, not an app embedding `Service`): a request
    makes thousands of short-lived objects, nearly all freed by reference counting, so the cyclic collector's
    default, a young collection every 700 allocations, cost 5-20 % of serve's CPU at capacity (issue 27). What
    startup built (modules, the catalog, the exporters) is frozen out of its scans; young objects are collected
    every 100,000 allocations net of frees, older ones at the default ratios. Every 20,000 still cost 8 % at
    capacity: each collection walks the spans in flight (25,000 objects, 35-80 ms) and frees none of them. The
    bound on cyclic garbage between collections is then 100,000 objects (a few MB); serve makes none per request."""
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, older, oldest)


YOUNG_GC_THRESHOLD = 100_000


def log_stopped(m: ServeMetrics) -> None:
    logger.info("otel-agent-eval serve: stopped; spans accepted %d, refused %d, invalid %d; forwarded %d, failed %d, "
                "abandoned %d", m.span_count("accepted"), m.span_count("refused"), m.span_count("invalid"),
                m.forward_count("exported"), m.forward_count("failed"), m.forward_count("abandoned"))

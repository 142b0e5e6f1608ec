"""serve's log records over OTLP: the judge's `gen_ai.evaluation.result` events (and the evaluation's, with
`OTEL_AGENT_EVAL_EVALUATION_EVENTS=log`) to the next hop, as its metrics go there.

serve sets up no global LoggerProvider, so without this the judge's events went nowhere. The SDK's own parts do
the work: a `LoggerProvider` of serve's own (never the global one: an app embedding `Service` keeps its own),
a `BatchLogRecordProcessor` (`OTEL_BLRP_*`) and the OTLP log exporter of the hop (`NextHop.log_exporter`: the
same protocol, TLS and headers). Emitting only appends to the processor's bounded queue, so an endpoint that
fails or hangs never holds up the judge, let alone the spans: its first failure is logged once, in one line (the
SDK exporter's own lines inside our exports, a retry warning and a failure a second while the hop is down, are kept
back), and the records of a failed batch are lost. The processor's thread starts only once the pipeline that emits was built (`start`), and `close` flushes
within the time it is given, never longer.

    >>> logs = OtlpLogs(hop, resource)                   # a provider, no thread yet
    >>> pipeline = build_pipeline(..., logger_provider=logs.provider); logs.start()
    >>> logs.close(timeout_s=2.5)                        # at shutdown, after the judge stopped
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource

from ..otel.exit_flush import within
from .next_hop import NextHop

__all__ = ["OtlpLogs", "emits_log_records"]

logger = logging.getLogger(__name__)


def emits_log_records(options: dict[str, Any]) -> bool:
    """Whether a pipeline built with these `build_pipeline` options emits log records: a judge runs, or the
    evaluation events are asked for as log records; and no provider of the caller's own was given."""
    if options.get("logger_provider") is not None:
        return False
    judging = options.get("judge") is not None or bool(options.get("judge_model"))
    return judging or options.get("evaluation_events", "span") != "span"


# The SDK exporters' loggers: the HTTP log exporter's (which its client logs through), the HTTP client's own, and the
# gRPC exporters' (shared by every signal: only our exports' records are kept back, by thread, never the forwarder's)
SDK_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http._log_exporter", "opentelemetry.exporter.otlp.common.http",
                        "opentelemetry.exporter.otlp.proto.grpc.exporter")
_exporting = threading.local()


class _QuietWhileExporting(logging.Filter):
    """Keeps back what the SDK exporter logs inside our exports: it warns at every retry and fails at every batch
    (its duplicate filter lets the two alternate), one or two lines a second while a hop is down; ours says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_exporting, "active", False)


_QUIET = _QuietWhileExporting()


class _FailingOnce(LogRecordExporter):
    """The hop's exporter, saying once (one line) that it could not send; the records of a failed batch are lost."""

    def __init__(self, exporter: LogRecordExporter, url: str) -> None:
        self.exporter, self.url = exporter, url
        self.failed = 0  # batches the hop did not take
        self._told = False
        for name in SDK_EXPORTER_LOGGERS:
            if _QUIET not in logging.getLogger(name).filters:
                logging.getLogger(name).addFilter(_QUIET)

    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        _exporting.active = True
        try:
            result = self.exporter.export(batch)
        except Exception as exc:  # noqa: BLE001 - the processor's thread goes on
            result, why = LogRecordExportResult.FAILURE, f"{type(exc).__name__}: {exc}"
        else:
            why = "the exporter gave up: refused, unreachable or no answer within --forward-timeout"
        finally:
            _exporting.active = False
        if result is not LogRecordExportResult.SUCCESS:
            self.failed += 1
            if not self._told:
                self._told = True
                logger.error("otel-agent-eval serve: judge events could not be sent to %s (%s); %d records lost, and "
                             "further failures are not logged here; judging and forwarding go on", self.url, why,
                             len(batch))
        return result

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class OtlpLogs:
    """A LoggerProvider whose records go over OTLP to `hop` (its logs URL, or its LogsService over gRPC)."""

    def __init__(self, hop: NextHop, resource: Resource) -> None:
        self.hop = hop
        self.url = hop.logs_url
        self.provider = LoggerProvider(resource=resource, shutdown_on_exit=False)  # serve shuts it down itself
        self.exporter: _FailingOnce | None = None
        self._closed = False

    def start(self) -> None:
        """Export from now on (the processor's thread starts here)."""
        self.exporter = _FailingOnce(self.hop.log_exporter(), self.url)
        self.provider.add_log_record_processor(BatchLogRecordProcessor(self.exporter))

    def close(self, timeout_s: float) -> bool:
        """Export what is queued and stop, within `timeout_s` (a hop that hangs is left behind); never raises."""
        if self._closed:
            return True
        self._closed = True

        def shut(_: float) -> bool:
            self.provider.shutdown()  # the processor's last export of everything queued, then the exporter's shutdown
            return True

        try:
            done = within(shut, max(0.0, timeout_s))
        except Exception:  # noqa: BLE001 - shutdown goes on
            logger.exception("otel-agent-eval serve: flushing the judge events failed")
            return False
        if not done and self.exporter is not None and not self.exporter.failed:  # a failing hop was told of already
            logger.error("otel-agent-eval serve: the judge events still queued were not sent to %s within %.1f s of the "
                         "shutdown; they are lost", self.url, timeout_s)
        return done

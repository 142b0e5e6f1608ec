"""Enriched spans to the next hop: a bounded queue and one export thread in front of a standard `SpanExporter`.

Like the SDK's `BatchSpanProcessor` (batches of `max_batch`, at least every `delay_s`),
with one difference that a hop needs: when the queue is full, `put` waits instead of
dropping. A slow next hop so slows the intake, whose full queue makes the receivers answer
"retry later": the senders hold the spans, not our memory, and nothing is dropped
silently. A batch is the forwarder's for `budget_s` (`--forward-timeout`): when the exporter gives up on
a next hop that is busy or down (its attempts are few) and time is left, it is tried again, with a
capped backoff, meanwhile the queue fills and the senders are told to retry. A batch refused for its
content, a span the exporter cannot encode or a request over the exporter's size limit (or the
hop's: HTTP 413, gRPC "larger than max"), is split in halves until every span that can go went;
only the spans that cannot are failed. Failures are counted per span.

    >>> forwarder = Forwarder(OTLPSpanExporter(endpoint="http://collector:4318/v1/traces"), metrics)
    >>> forwarder.put(spans); forwarder.shutdown()
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from .message_export import ENCODE, RETRY, TOO_LARGE
from .os_threads import FORWARD, name_for_os
from .self_metrics import ServeMetrics

__all__ = ["DEFAULT_FORWARD_QUEUE", "Forwarder"]

logger = logging.getLogger(__name__)

DEFAULT_FORWARD_QUEUE = 8_192
DEFAULT_MAX_BATCH = 512  # the SDK's BatchSpanProcessor default
DEFAULT_DELAY_S = 1.0
DEFAULT_BUDGET_S = 10.0
MAX_BACKOFF_S = 5.0  # between the exporter's tries of one batch (it honours the hop's Retry-After within them)


class Forwarder:
    """`put` on the intake's thread (waits while full); `exporter.export` on this forwarder's own thread."""

    def __init__(self, exporter: SpanExporter, metrics: ServeMetrics, *, limit: int = DEFAULT_FORWARD_QUEUE,
                 max_batch: int = DEFAULT_MAX_BATCH, delay_s: float = DEFAULT_DELAY_S,
                 budget_s: float = DEFAULT_BUDGET_S) -> None:
        self.exporter = exporter
        self.metrics = metrics
        self.limit = max(1, limit)
        self.max_batch = max(1, max_batch)
        self.delay_s = delay_s
        self.budget_s = budget_s
        self._spans: deque[ReadableSpan] = deque()
        self._in_export = 0
        self._changed = threading.Condition()
        self._flush_asked = 0
        self._closing = False  # no more waiting for room: what does not fit is abandoned, counted
        self._closed = False
        self.handed = 0  # spans ever `put` (first in, first out: the n-th span handed is the n-th settled)
        self.settled = 0  # spans ever counted exported, failed or abandoned (`ack.py` waits on these two)
        self.on_settled: Callable[[], object] | None = None  # after an export settled, on this thread (`durable.py`)
        self._worker = threading.Thread(target=self._run, name="otel-agent-eval-serve-forward", daemon=True)
        self._worker.start()
        self._logged: set[str] = set()

    def __len__(self) -> int:
        return len(self._spans) + self._in_export

    @property
    def waiting(self) -> int:
        """Spans queued and not yet in an export (a `put` that does not fit beside them waits)."""
        return len(self._spans)

    def put(self, spans: list[ReadableSpan]) -> None:
        """Queue spans for export, waiting for room (a batch larger than the queue waits for it to empty)."""
        with self._changed:
            while len(self._spans) and len(self._spans) + len(spans) > self.limit and not self._closing:
                self._changed.wait()
            self.handed += len(spans)
            if self._closed or (self._closing and len(self._spans) and len(self._spans) + len(spans) > self.limit):
                self.settled += len(spans)
                self.metrics.forwarded("abandoned", len(spans))
                return
            self._spans.extend(spans)
            if len(self._spans) >= self.max_batch:
                self._changed.notify_all()

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Export everything queued now; False if that did not finish within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            self._flush_asked += 1
            self._changed.notify_all()
            while self._spans or self._in_export:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def wait_settled(self, mark: int, timeout_s: float) -> bool:
        """Wait until the first `mark` spans ever handed are settled (exported, failed or abandoned), asking for an
        export now rather than after `delay_s`; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self.settled < mark:
                self._flush_asked += 1
                self._changed.notify_all()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Export what is queued within `timeout_s`, count the rest as abandoned, shut the exporter down."""
        flushed = self.flush(timeout_s)
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if flushed:
            self._worker.join(timeout_s)
        with self._changed:
            left, self._spans = len(self._spans) + self._in_export, deque()
            self._in_export = 0  # a hung export's spans are counted here, not when (if ever) it returns
            self._closed = True
            self.settled += left
            self._changed.notify_all()
        if left:
            logger.error("otel-agent-eval serve: the next hop did not take %d spans before shutdown; they are abandoned "
                         "(agent_eval_serve_forwarded_spans_total{outcome=\"abandoned\"})", left)
            self.metrics.forwarded("abandoned", left)
        try:
            self.exporter.shutdown()
        except Exception:  # noqa: BLE001 - shutdown goes on
            logger.exception("otel-agent-eval serve: shutting the exporter down failed")

    def _run(self) -> None:
        name_for_os(FORWARD)
        while True:
            with self._changed:
                if not self._spans and not self._closing:
                    self._changed.wait(self.delay_s)
                if not self._spans:
                    if self._closing:
                        return
                    continue
                if len(self._spans) < self.max_batch and not self._flush_asked and not self._closing:
                    self._changed.wait(self.delay_s)  # let a batch gather, unless someone is waiting
                take = min(self.max_batch, len(self._spans))
                if take == 0:  # swept by a shutdown meanwhile
                    continue
                if take == len(self._spans):  # all of it (the usual case): one copy, not a pop a span
                    batch, self._spans = list(self._spans), deque()
                else:
                    batch = [self._spans.popleft() for _ in range(take)]
                self._in_export = take
                self._changed.notify_all()
            self._export(batch, time.monotonic() + self.budget_s)
            with self._changed:
                self._in_export = 0
                if not self._spans:
                    self._flush_asked = 0
                self._changed.notify_all()

    def _export(self, batch: list[ReadableSpan], deadline: float) -> None:
        """Export one batch within the budget: retried while the hop is busy or down, split when its content is
        refused; each part counted "exported" or "failed" as it ends."""
        tries = 0
        while True:
            failure = self._try(batch)
            if failure is None:
                return self._count("exported", batch)
            if failure in (ENCODE, TOO_LARGE) and len(batch) > 1:
                half = len(batch) // 2
                self._export(batch[:half], deadline)
                return self._export(batch[half:], deadline)
            backoff = min(MAX_BACKOFF_S, 2.0 ** tries)
            tries += 1
            if failure == RETRY and time.monotonic() + backoff < deadline:
                with self._changed:
                    if not self._closing:
                        self._changed.wait(backoff)  # a shutdown wakes it
                    if not self._closing:
                        continue
            self._log_failure(failure, batch)
            return self._count("failed", batch)

    def _try(self, batch: list[ReadableSpan]) -> str | None:
        """One export; None when it went, else why not (the exporter's `failure`, `message_export.py`)."""
        try:
            result = self.exporter.export(batch)
        except Exception as error:  # noqa: BLE001 - exporters should not raise: the batch's content made it
            logger.debug("otel-agent-eval serve: the exporter raised: %s", error)
            return ENCODE
        if result is SpanExportResult.SUCCESS:
            return None
        return getattr(self.exporter, "failure", None) or "refused"

    def _count(self, outcome: str, spans: list[ReadableSpan]) -> None:
        with self._changed:
            if self._closed:  # a shutdown counted them abandoned
                return
            self.metrics.forwarded(outcome, len(spans))
            self._in_export -= len(spans)
            self.settled += len(spans)
            self._changed.notify_all()
        if self.on_settled is not None:
            try:
                self.on_settled()
            except Exception:  # noqa: BLE001 - forwarding goes on; the next settle or checkpoint records it
                logger.exception("otel-agent-eval serve: recording the forwarding progress failed")

    def _log_failure(self, failure: str, batch: list[ReadableSpan]) -> None:
        """One line for the first failure of each kind; the rest are only counted."""
        if failure in self._logged:
            return
        self._logged.add(failure)
        counted = "further such spans are only counted (agent_eval_serve_forwarded_spans_total{outcome=\"failed\"})"
        if failure == ENCODE:
            logger.error("otel-agent-eval serve: span %r cannot be encoded as OTLP (not sent; the next hop is not at "
                         "fault); %s", getattr(batch[0], "name", "?"), counted)
        elif failure == TOO_LARGE:
            logger.error("otel-agent-eval serve: span %r alone is larger than the next hop takes (not sent); %s",
                         getattr(batch[0], "name", "?"), counted)
        else:
            logger.error("otel-agent-eval serve: the next hop refused %d spans (%s, --forward-timeout spent or no "
                         "retry possible); %s", len(batch), failure, counted)

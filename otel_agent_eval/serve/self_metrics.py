"""How the service itself is doing: spans accepted, refused and forwarded, requests by answer, queue depths.

Every span a sender offers is counted once, as accepted or refused, so that the senders'
own counts can be checked against ours; every accepted span is later counted once as
forwarded, failed (the next hop refused it) or abandoned (shutdown could not wait longer).
Prometheus names: `agent_eval_serve_<name>_total`, read at scrape time from plain counts.

    >>> metrics = ServeMetrics(registry=registry)
    >>> metrics.spans("http", "accepted", 10)
"""
from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["PREFIX", "ServeMetrics"]

PREFIX = "agent_eval_serve_"
SPAN_OUTCOMES = ("accepted", "refused", "invalid")  # refused: queue full or shutting down (retryable); invalid: unreadable
FORWARD_OUTCOMES = ("exported", "failed", "abandoned")


class ServeMetrics:
    """Counters under one lock (a few per request, not per span) and gauges read when scraped."""

    def __init__(self, *, registry: CollectorRegistry | None) -> None:
        self._lock = threading.Lock()
        self._spans: Counter[tuple[str, str]] = Counter()
        self._requests: Counter[tuple[str, str]] = Counter()
        self._forwarded: Counter[str] = Counter()
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}
        self.on_forwarded: Callable[[str, int], object] | None = None  # a `serve --workers` worker reports to its parent
        if registry is not None:
            registry.register(self)

    def spans(self, transport: str, outcome: str, n: int) -> None:
        if n:
            with self._lock:
                self._spans[(transport, outcome)] += n

    def request(self, transport: str, answer: str) -> None:
        with self._lock:
            self._requests[(transport, answer)] += 1

    def forwarded(self, outcome: str, n: int) -> None:
        if n:
            with self._lock:
                self._forwarded[outcome] += n
            if self.on_forwarded is not None:
                self.on_forwarded(outcome, n)

    def span_count(self, outcome: str) -> int:
        """Spans with this outcome over both transports (for tests and the shutdown log)."""
        with self._lock:
            return sum(v for (_, o), v in self._spans.items() if o == outcome)

    def forward_count(self, outcome: str) -> int:
        with self._lock:
            return self._forwarded[outcome]

    def describe(self) -> Iterator[Metric]:
        yield from self._families(Counter(), Counter(), Counter(), gauges=False)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            spans, requests, forwarded = Counter(self._spans), Counter(self._requests), Counter(self._forwarded)
        yield from self._families(spans, requests, forwarded, gauges=True)

    def _families(self, spans: Counter[tuple[str, str]], requests: Counter[tuple[str, str]], forwarded: Counter[str], *,
                  gauges: bool) -> Iterator[Metric]:
        received = CounterMetricFamily(PREFIX + "spans", "Spans offered by senders, by transport and outcome "
                                       "(accepted; refused with a retryable error; invalid, skipped).", labels=["transport", "outcome"])
        for (transport, outcome), value in sorted(spans.items()):
            received.add_metric([transport, outcome], value)
        answered = CounterMetricFamily(PREFIX + "requests", "Export requests by transport and answer.", labels=["transport", "answer"])
        for (transport, answer), value in sorted(requests.items()):
            answered.add_metric([transport, answer], value)
        sent = CounterMetricFamily(PREFIX + "forwarded_spans", "Spans handed to the next hop, by outcome "
                                   "(exported; failed: the exporter gave up; abandoned: shutdown could not wait).", labels=["outcome"])
        for outcome in FORWARD_OUTCOMES:
            sent.add_metric([outcome], forwarded[outcome])
        yield from (received, answered, sent)
        if not gauges:
            return
        for name, (doc, read) in self.gauges.items():
            try:
                yield GaugeMetricFamily(PREFIX + name, doc, value=read())
            except Exception:  # noqa: BLE001 - a scrape shows what it can
                continue

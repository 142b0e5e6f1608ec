"""Metric families built from the table in `names.py`: the exposition side, shared by every collector."""
from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar, Sample

from ..config.catalog import Catalog
from . import names as n

MAX_LABEL_CHARS = 256
# (label values, upper bounds with +Inf last, count per bucket (not cumulative), sum, exemplar per bucket or None)
Point = tuple[tuple[str, ...], Sequence[float], Sequence[float], float, Sequence[Any] | None]


class BucketFamily(HistogramMetricFamily):
    """A histogram family that keeps each series as its bucket counts (`points`), which an OTLP reader takes as they
    are (`metrics/otlp.py`); the Prometheus samples, a `le` bucket each, are made only when read (a scrape). Making
    them for every OTLP collection, to parse them back, was most of its cost (issue 27)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        self.points: list[Point] = []
        self._made = 0
        super().__init__(name, documentation, labels=labels)

    def add_counts(self, labels: Sequence[str], bounds: Sequence[float], counts: Sequence[float], sum_value: float,
                   exemplars: Sequence[Any] | None = None) -> None:
        self.points.append((tuple(labels), bounds, counts, sum_value, exemplars))

    def add_metric(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(f"{self.name}: a BucketFamily takes counts (add_counts), not le buckets")

    @property  # type: ignore[override]
    def samples(self) -> list[Sample]:
        """HistogramMetricFamily's samples of every point: per bucket, then the count and the sum."""
        made, names = self._samples, self._labelnames
        for labels, bounds, counts, total, exemplars in self.points[self._made:]:
            base = dict(zip(names, labels))
            for le, cumulative, *exemplar in le_buckets(bounds, counts, exemplars):  # type: ignore[arg-type]
                made.append(Sample(self.name + "_bucket", {**base, "le": le}, cumulative, None,
                                   exemplar[0] if exemplar else None))
            if not bounds or bounds[0] >= 0:  # as HistogramMetricFamily: no count and sum with negative buckets
                made.append(Sample(self.name + "_count", base, sum(counts), None))
                made.append(Sample(self.name + "_sum", dict(base), total, None))
        self._made = len(self.points)
        return made

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = value


_KINDS = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": BucketFamily}


def family(spec: n.Spec, **fmt: Any) -> Metric:
    """An empty family for `spec` (HELP placeholders such as `{window}` filled from `fmt`)."""
    doc = spec.help.format(**fmt) if fmt else spec.help
    if spec.kind == "summary":
        return Metric(spec.name, doc, "summary")
    return _KINDS[spec.kind](spec.name, doc, labels=list(spec.labels))


def le_buckets(bounds: Sequence[float], counts: Sequence[float], exemplars: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    """Cumulative `le` buckets, with a trace-id exemplar where one was kept."""
    out: list[tuple[Any, ...]] = []
    total = 0
    for i, (bound, count) in enumerate(zip(bounds, counts)):
        total += count
        le = "+Inf" if bound == math.inf else repr(float(bound))
        ex = exemplars[i] if exemplars else None
        out.append((le, total, Exemplar({"trace_id": _hex(ex[0])}, ex[1], ex[2])) if ex else (le, total))
    return out


def label_text(value: str) -> str:
    """A label value the exposition can encode and afford: span text may hold lone surrogates, which
    UTF-8 cannot, or be megabytes long (repeated on every line of a series)."""
    if len(value) > MAX_LABEL_CHARS:
        value = value[:MAX_LABEL_CHARS]
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")


def catalog_families(catalog: Catalog) -> Iterator[Metric]:
    """Gauges of the catalog's figures, so alerts and dashboards can compare against them."""
    expected, slo, cost = family(n.TOOL_EXPECTED_LATENCY), family(n.TOOL_LATENCY_SLO), family(n.TOOL_COST_PER_CALL)
    for tool in catalog.tools.values():
        expected.add_metric([tool.name], tool.latency_ms / 1000)
        cost.add_metric([tool.name], tool.cost_usd)
        if tool.latency_slo_ms:
            slo.add_metric([tool.name], tool.latency_slo_ms / 1000)
    thresholds = family(n.EFFICIENCY_THRESHOLD)
    for t in catalog.thresholds.values():
        thresholds.add_metric([t.environment, "warn"], t.warn)
        thresholds.add_metric([t.environment, "fail"], t.fail)
    yield from (expected, slo, cost, thresholds)


def _hex(trace_id: int | str) -> str:
    return format(trace_id, "032x") if isinstance(trace_id, int) else trace_id

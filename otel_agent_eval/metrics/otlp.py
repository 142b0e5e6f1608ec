"""Our Prometheus families as OpenTelemetry metrics data, built when an OTLP metric reader collects.

The span path pays nothing for OTLP: recording a call through the OTel metrics SDK costs
7-10 µs, so instead the families `/metrics` serves (`EvalMetrics.collect()`, or any other
`collect`, e.g. the multiprocess registry of `serve --workers`) are translated point by point
when a reader collects. A series therefore means over OTLP exactly what it means in a
scrape, under the same sample budget and label caps.

- Names and units: `names.Spec.otel` (dots, UCUM units, `gen_ai.*` where the GenAI
  conventions define the metric); other families of ours by their prefix
  (`agent_eval_processor_x` -> `agent_eval.processor.x`). Label keys as the conventions spell
  them (`names.OTEL_ATTRIBUTES`); an empty label value is no attribute (Prometheus reads an
  empty label as no label, so the series stay the same ones).
- Counters -> monotonic `Sum`, gauges -> `Gauge`, histograms -> `ExponentialHistogram` where
  the buckets are one of the fixed exponential layouts (`histogram.exponential_layout`:
  the counts go over unchanged) or, with `histograms="explicit"` and for every other
  histogram, `Histogram` with the same bounds. A summary's quantiles -> a `Gauge` with a
  `quantile` attribute (the SDK's exporters cannot send a summary; its count and sum are
  those of `gen_ai.execute_tool.duration`).
- Temporality per collection: cumulative since this translation started, or delta since its
  last collection (the last cumulative values kept and subtracted, so deltas add up exactly;
  each delta starts where the previous one ended, as the Collector's delta-to-cumulative
  conversions require; a series that went back, e.g. after a fork, starts over).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    Sum,
)
from prometheus_client.metrics_core import Metric as Family

from ..config.settings import EXPLICIT, EXPONENTIAL, HISTOGRAMS
from . import names as n
from .families import BucketFamily
from .histogram import exponential_layout

__all__ = ["EXPLICIT", "EXPONENTIAL", "HISTOGRAMS", "OtlpMetrics", "otel_name"]

DELTA, CUMULATIVE = AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE
_PREFIXES = (("agent_eval_processor_", "agent_eval.processor."), ("agent_eval_serve_", "agent_eval.serve."),
             ("agent_eval_", "agent_eval."))
Series = tuple[str, tuple[tuple[str, str], ...]]  # (family name, sorted labels)


def otel_name(family: str) -> tuple[str, str]:
    """The OpenTelemetry name and unit of the Prometheus family `family` (names.py's table, else by its prefix)."""
    spec = n.SPECS.get(family)
    if spec is not None and spec.otel[0]:
        return spec.otel
    unit = "s" if family.endswith("_seconds") else ""
    name = family.removesuffix("_seconds")
    for prefix, dotted in _PREFIXES:
        if name.startswith(prefix):
            return dotted + name[len(prefix):], unit
    return name, unit


class OtlpMetrics:
    """The families of `collect` as OTel `Metric`s, with the delta state of one reader (one per reader)."""

    def __init__(self, collect: Callable[[], Iterable[Family]], *, histograms: str = EXPONENTIAL,
                 clock: Callable[[], int] = time.time_ns) -> None:
        if histograms not in HISTOGRAMS:
            raise ValueError(f"otel-agent-eval: otlp_histograms={histograms!r}: expected one of {', '.join(HISTOGRAMS)}")
        self._collect = collect
        self.histograms = histograms
        self._clock = clock
        self._start_ns = self._last_ns = clock()
        self._previous: dict[Series, Any] = {}  # last cumulative value per series, for deltas
        self._lock = threading.Lock()  # one collection at a time: deltas need the previous one finished

    def metrics(self, sums: AggregationTemporality = CUMULATIVE, histograms: AggregationTemporality = CUMULATIVE) -> list[Metric]:
        """Every family's points now; counters as `sums`, histograms as `histograms` temporality."""
        with self._lock:
            families = list(self._collect())
            now = self._clock()
            previous, self._previous = self._previous, {}
            out = []
            for family in families:
                build = _BUILDERS.get(family.type)
                if build is None:
                    continue
                temporality = histograms if family.type == "histogram" else sums
                data = build(self, family, temporality, previous, now)
                if data is not None:
                    name, unit = otel_name(family.name)
                    out.append(Metric(name=name, description=family.documentation, unit=unit, data=data))
            self._last_ns = now
            return out

    # -- one family each ----------------------------------------------------------------

    def _start(self, temporality: AggregationTemporality) -> int:
        return self._last_ns if temporality is DELTA else self._start_ns

    def _sum(self, family: Family, temporality: AggregationTemporality, previous: dict[Series, Any], now: int) -> Sum | None:
        points = []
        for sample in family.samples:
            if not sample.name.endswith("_total"):  # _created
                continue
            key = (family.name, _key(sample.labels))
            self._previous[key] = value = sample.value
            if temporality is DELTA:
                before = previous.get(key, 0)
                value = value - before if value >= before else value  # went back: counted again from zero
            points.append(NumberDataPoint(_attributes(sample.labels), self._start(temporality), now, float(value)))
        return Sum(data_points=points, aggregation_temporality=temporality, is_monotonic=True) if points else None

    def _gauge(self, family: Family, temporality: AggregationTemporality, previous: dict[Series, Any], now: int) -> Gauge | None:
        points = [NumberDataPoint(_attributes(s.labels), 0, now, float(s.value)) for s in family.samples
                  if s.name == family.name]  # of a summary, its quantiles (NaN while its window is empty, as scraped)
        return Gauge(data_points=points) if points else None

    def _histogram(self, family: Family, temporality: AggregationTemporality, previous: dict[Series, Any],
                   now: int) -> Histogram | ExponentialHistogram | None:
        series = _counted(family) if isinstance(family, BucketFamily) else _sampled(family)
        points: list[Any] = []
        exponential = None
        for labels, bounds, counts, total, count in series:
            key = (family.name, labels)
            self._previous[key] = (counts, total, count)
            if temporality is DELTA:
                before = previous.get(key)
                if before is not None and before[2] <= count and len(before[0]) == len(counts):
                    counts = [c - b for c, b in zip(counts, before[0])]
                    total, count = total - before[1], count - before[2]
            layout = exponential_layout(bounds) if self.histograms == EXPONENTIAL else None
            exponential = layout is not None
            attributes, start = _attributes(dict(labels)), self._start(temporality)
            if layout is None:
                points.append(HistogramDataPoint(attributes, start, now, count, total, counts, bounds[:-1], None, None))
            else:
                scale, offset = layout
                first = next((i for i, c in enumerate(counts) if c), len(counts))
                last = max((i for i, c in enumerate(counts) if c), default=first - 1)
                points.append(ExponentialHistogramDataPoint(
                    attributes, start, now, count, total, scale, zero_count=0,
                    positive=Buckets(offset + first, counts[first:last + 1]), negative=Buckets(0, []),
                    flags=0, min=None, max=None))
        if not points:
            return None
        kind = ExponentialHistogram if exponential else Histogram
        return kind(data_points=points, aggregation_temporality=temporality)


# One histogram series: sorted labels, upper bounds (+Inf last), count per bucket, sum, count.
_Counts = tuple[tuple[tuple[str, str], ...], tuple[float, ...], list[int], float, int]


def _counted(family: BucketFamily) -> list[_Counts]:
    """The series of a `BucketFamily`, from its counts."""
    out = []
    for values, bounds, counts, total, _ in family.points:
        whole = [int(c) for c in counts]
        negative = bool(bounds) and bounds[0] < 0  # as its samples: no count and sum then
        out.append((_key(dict(zip(family._labelnames, values))), tuple(bounds), whole, 0.0 if negative else total,
                    sum(whole)))
    return out


def _sampled(family: Family) -> list[_Counts]:
    """The series of any other histogram family, from its `le` bucket, count and sum samples."""
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for sample in family.samples:
        suffix = sample.name[len(family.name):]
        if suffix == "_bucket":
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            series.setdefault(_key(labels), {"buckets": []})["buckets"].append((float(sample.labels["le"]), sample.value))
        elif suffix in ("_sum", "_count"):
            series.setdefault(_key(sample.labels), {"buckets": []})[suffix[1:]] = sample.value
    out = []
    for labels, parts in series.items():
        cumulative = [int(c) for _, c in parts["buckets"]]
        out.append((labels, tuple(b for b, _ in parts["buckets"]),
                    [c - b for c, b in zip(cumulative, [0, *cumulative[:-1]])], parts.get("sum", 0.0),
                    int(parts.get("count", cumulative[-1] if cumulative else 0))))
    return out


_BUILDERS: dict[str, Callable[..., Any]] = {
    "counter": OtlpMetrics._sum, "gauge": OtlpMetrics._gauge, "summary": OtlpMetrics._gauge,
    "histogram": OtlpMetrics._histogram,
}


def _key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _attributes(labels: dict[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    items = labels.items() if isinstance(labels, dict) else labels
    return {n.OTEL_ATTRIBUTES.get(k, k): v for k, v in items if v != ""}


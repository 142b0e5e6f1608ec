"""Metric families built from the table in `names.py`: the exposition side, shared by every collector."""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar

from ..config.catalog import Catalog
from . import names as n

MAX_LABEL_CHARS = 256
_KINDS = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily, "histogram": HistogramMetricFamily}


def family(spec: n.Spec, **fmt: Any) -> Metric:
    """An empty family for `spec` (HELP placeholders such as `{window}` filled from `fmt`)."""
    doc = spec.help.format(**fmt) if fmt else spec.help
    if spec.kind == "summary":
        return Metric(spec.name, doc, "summary")
    return _KINDS[spec.kind](spec.name, doc, labels=list(spec.labels))


def le_buckets(bounds: tuple[float, ...], counts: list[int], exemplars: list[Any] | None = None) -> list[tuple[Any, ...]]:
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

"""prometheus-client multiprocess mode (gunicorn, uWSGI, ...): every process writes, one endpoint sums.

When `PROMETHEUS_MULTIPROC_DIR` is set (before prometheus_client is imported, as its docs
require), each process also mirrors its counts into prometheus-client metrics backed by
files in that directory, and `multiprocess_registry()` serves their sum with `FileSums`
(prometheus-client's `MultiProcessCollector`, made for frequent collections), plus the catalog
gauges. `agent_eval_catalog_fallback` is a file-backed gauge too (`livemax`: 1 while any live
process scores with the packaged catalog instead of the configured one; a process that ends must
be marked dead, `prometheus_client.multiprocess.mark_process_dead(pid)` in gunicorn's
`child_exit`, as prometheus-client's docs say for every live gauge).

Merged across processes: every counter and histogram (tool calls, cost, money wasted,
context tokens, cost and calls (what tool results cost later model calls), excess latency,
SLO violations, the duration and efficiency histograms, runs and their histograms, the self-metrics).
Not merged: the sliding-window quantiles of `agent_eval_tool_latency_seconds` (a summary's quantiles cannot be added; use
`histogram_quantile` over `gen_ai_execute_tool_duration_seconds`, whose buckets can).
Mirroring costs about 1-2 µs per metric update on top of the in-process accumulators (each update
takes a lock and writes the file). After `buffer()` nothing is written on an update: `flush(metrics)` writes
the series of the in-process accumulators as they stand, which a `serve --workers` worker does when its
parent is about to read the files, every second and at stop (writing on each update took about 30 % of a
worker's CPU; summing the updates apart from the accumulators until a flush, 10 %).
"""
from __future__ import annotations

import glob
import json
import os
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.samples import Sample

from ..core.runs import AGENT_RUN
from . import names as n
from .families import BucketFamily, catalog_families

if TYPE_CHECKING:
    from ..config.catalog import Catalog
    from ..core.scoring import CallScore


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir") or None


def multiprocess_registry(metrics: Any) -> CollectorRegistry:
    """A registry that serves every process's files, plus the catalog gauges of `metrics` (an `EvalMetrics`)."""
    registry = CollectorRegistry()
    FileSums(registry)
    if metrics.mirror is not None:  # the serving process always writes its flag, so the gauge is always served
        metrics.mirror.catalog_fallback(metrics.catalog_fallback, always=True)
    registry.register(_CatalogGauges(lambda: metrics.catalog))
    return registry


class FileSums(MultiProcessCollector):
    """prometheus-client's `MultiProcessCollector`, the same series, made for being collected every second: what it
    parses is kept between collections (sample keys, `le` labels), and a histogram comes as a `BucketFamily`, its
    sums per bucket, which OTLP takes as they are. Its own parses every key of every file again (JSON) and makes a
    sample per bucket to be parsed back: 80-125 ms a collection of two serve workers' files (10,000 entries)."""

    _KEPT = 100_000

    def __init__(self, registry: CollectorRegistry | None, path: str | None = None) -> None:
        super().__init__(registry, path)
        self._keys: dict[str, tuple[str, str, tuple[tuple[str, str], ...], str]] = {}
        self._buckets: dict[tuple[tuple[str, str], ...], tuple[tuple[tuple[str, str], ...], float]] = {}

    def collect(self) -> Iterable[Metric]:
        if len(self._keys) > self._KEPT or len(self._buckets) > self._KEPT:
            self._keys.clear()
            self._buckets.clear()
        metrics = self._read(glob.glob(os.path.join(self._path, "*.db")))
        summed = {name: self._histogram(metric) if metric.type == "histogram" else None for name, metric in metrics.items()}
        others = {name: metric for name, metric in metrics.items() if summed[name] is None}
        by_name = {metric.name: metric for metric in self._accumulate_metrics(others, True)}
        return [summed[name] or by_name[name] for name in metrics]

    def _read(self, files: list[str]) -> dict[str, Metric]:
        """As `MultiProcessCollector._read_metrics`, with its key cache kept."""
        metrics: dict[str, Metric] = {}
        keys = self._keys
        for path in files:
            parts = os.path.basename(path).split("_")
            kind = parts[0]
            try:
                values = MmapedDict.read_all_values_from_file(path)
            except FileNotFoundError:
                if kind == "gauge" and parts[1].startswith("live"):  # marked dead since the glob
                    continue
                raise
            for key, value, timestamp, _ in values:
                parsed = keys.get(key)
                if parsed is None:
                    metric_name, name, labels, help_text = json.loads(key)
                    parsed = keys[key] = (metric_name, name, tuple(sorted(labels.items())), help_text)
                metric_name, name, labels_key, help_text = parsed
                metric = metrics.get(metric_name)
                if metric is None:
                    metric = metrics[metric_name] = Metric(metric_name, help_text, kind)
                if kind == "gauge":
                    metric._multiprocess_mode = parts[1]
                    metric.samples.append(Sample(name, labels_key + (("pid", parts[2][:-3]),), value, timestamp))
                else:
                    metric.samples.append(Sample(name, labels_key, value))
        return metrics

    def _histogram(self, metric: Metric) -> BucketFamily | None:
        """The summed series of a histogram's `_bucket` and `_sum` samples; None when it has others (then
        prometheus-client sums it)."""
        series: dict[tuple[tuple[str, str], ...], list[Any]] = {}  # labels without le -> [sum, {bound: count}]
        buckets, bucket_name, sum_name = self._buckets, metric.name + "_bucket", metric.name + "_sum"
        for name, labels, value, *_ in metric.samples:
            if name == bucket_name:
                split = buckets.get(labels)
                if split is None:
                    le = dict(labels).get("le")
                    if le is None:
                        return None
                    split = buckets[labels] = (tuple(kv for kv in labels if kv[0] != "le"), float(le))
                sums = series.get(split[0])
                if sums is None:
                    sums = series[split[0]] = [0.0, {}]
                by_bound = sums[1]
                by_bound[split[1]] = by_bound.get(split[1], 0.0) + value
            elif name == sum_name:
                sums = series.get(labels)
                if sums is None:
                    sums = series[labels] = [0.0, {}]
                sums[0] += value
            else:
                return None
        names = {tuple(k for k, _ in labels) for labels in series}
        if len(names) > 1:
            return None
        family = BucketFamily(metric.name, metric.documentation, next(iter(names), ()))
        for labels, (total, by_bound) in series.items():
            bounds = sorted(by_bound)
            family.add_counts([v for _, v in labels], bounds, [by_bound[b] for b in bounds], total)
        return family


class _CatalogGauges:
    """The catalog gauges alone (they are per process, not summed over the files)."""

    def __init__(self, catalog: Any) -> None:
        self.catalog = catalog

    def collect(self) -> Iterator[Metric]:
        catalog: Catalog | None = self.catalog()
        if catalog is not None:
            yield from catalog_families(catalog)


def _metric(spec: n.Spec) -> Any:
    if spec.kind == "histogram":
        return Histogram(spec.name, spec.help, list(spec.labels), buckets=spec.buckets, registry=None)
    return Counter(spec.name, spec.help, list(spec.labels), registry=None)


# The in-process collector exposes the context series of every (tool, agent) pair, at 0 until one of its calls was
# measured; the mirror writes one once it counted something, buffered or not (the summed files hold no zeros).
_CONTEXT = frozenset(spec.name for spec in (n.TOOL_CONTEXT_TOKENS, n.TOOL_CONTEXT_COST, n.TOOL_CONTEXT_CALLS))


class MultiprocessMirror:
    """The same series as `EvalMetrics`, written through prometheus-client's file-backed values: on each update, or,
    after `buffer()`, nothing until `flush(metrics)` writes what `metrics` holds then."""

    def __init__(self) -> None:
        self.calls, self.cost, self.excess_cost = _metric(n.TOOL_CALLS), _metric(n.TOOL_COST), _metric(n.TOOL_EXCESS_COST)
        self.context_tokens, self.context_cost = _metric(n.TOOL_CONTEXT_TOKENS), _metric(n.TOOL_CONTEXT_COST)
        self.context_calls = _metric(n.TOOL_CONTEXT_CALLS)
        self.excess_latency, self.slo = _metric(n.TOOL_EXCESS_LATENCY), _metric(n.TOOL_SLO_VIOLATIONS)
        self.duration, self.scores = _metric(n.TOOL_DURATION), _metric(n.TOOL_EFFICIENCY)
        self.runs, self.run_duration, self.run_cost = _metric(n.RUNS), _metric(n.RUN_DURATION), _metric(n.RUN_COST)
        self.run_calls, self.correctness, self.health = _metric(n.RUN_TOOL_CALLS), _metric(n.RUN_CORRECTNESS), _metric(n.RUN_HEALTH)
        self.agent_duration, self.agent_tool_calls = _metric(n.AGENT_DURATION), _metric(n.AGENT_TOOL_CALLS)
        self.agent_inference_calls = _metric(n.AGENT_INFERENCE_CALLS)
        self.redundant, self.spurious, self.over_budget = _metric(n.RUN_REDUNDANT), _metric(n.RUN_SPURIOUS), _metric(n.RUN_OVER_BUDGET)
        self.loops, self.llm_calls = _metric(n.RUN_LOOPS), _metric(n.LLM_CALLS)
        self.unknown_tool_calls, self.unpriced_model_calls = _metric(n.CATALOG_UNKNOWN_TOOL_CALLS), _metric(n.CATALOG_UNPRICED_MODEL_CALLS)
        self.self_counters = {name: Counter(n.SELF_PREFIX + name, doc, registry=None) for name, doc in n.SELF_COUNTERS.items()}
        self._flushed = {"spans_seen": 0, "spans_ignored": 0}
        self._fallback: Any = None  # made on first use: a process that never fell back (a serve worker) writes no file
        self._lock = threading.Lock()
        self.buffered = False
        self._by_name = {m._name: m for m in (*vars(self).values(), *self.self_counters.values())
                         if isinstance(m, (Counter, Histogram))}
        self._written: dict[tuple[str, tuple[str, ...]], Any] = {}  # buffered: each series' value as last written

    def start_judging(self) -> None:
        """The judge's families too, from now on (made only then: an unlabelled one writes its file when made)."""
        with self._lock:
            for spec in (n.JUDGEMENTS, n.JUDGE_SCORE, n.JUDGE_DURATION, n.JUDGE_TOKENS, n.JUDGE_COST):
                self._by_name.setdefault(spec.name, _metric(spec))

    def buffer(self) -> None:
        """From now on, write nothing on an update: `flush(metrics)` writes each series as `metrics` holds it then
        (whoever calls this must call that). A serve worker does, when its parent is about to read the files: writing
        them on each update took about 30 % of a worker's CPU, summing the updates apart from `metrics` until then 10 %."""
        self.buffered = True

    def flush(self, metrics: Any) -> None:
        """Buffered: write every series of `metrics` (the `EvalMetrics` this mirrors) that changed since the last flush,
        as this process's value in its files (its counts since it started, as the unbuffered writes would sum to)."""
        if not self.buffered:
            return
        self.write(metrics.families())

    def write(self, families: Iterable[Metric]) -> None:
        """Write these families' series as this process's values, buffered or not (the judge's, as they change)."""
        written, by_name = self._written, self._by_name
        with self._lock:
            for family in families:
                metric = by_name.get(family.name)
                if metric is None:  # not summed across processes (quantiles, gauges, runs closed early)
                    continue
                if isinstance(family, BucketFamily):
                    for values, _, counts, total, _ in family.points:
                        key, now = (family.name, values), (tuple(counts), total)
                        if written.get(key) != now:
                            child = metric.labels(*values) if values else metric
                            child._sum.set(total)  # prometheus-client's own values: the sum, one count per bucket
                            for value, count in zip(child._buckets, counts):
                                value.set(count)
                            written[key] = now
                    continue
                names = metric._labelnames
                for sample in family.samples:
                    if sample.name.endswith("_total"):
                        values = tuple(sample.labels[name] for name in names)
                        key = (family.name, values)
                        if not sample.value and family.name in _CONTEXT and key not in written:
                            continue  # as the unbuffered mirror: a context series once it counted something
                        if written.get(key) != sample.value:
                            (metric.labels(*values) if values else metric)._value.set(sample.value)
                            written[key] = sample.value

    def _inc(self, metric: Any, labels: tuple[str, ...], amount: float = 1.0) -> None:
        (metric.labels(*labels) if labels else metric).inc(amount)

    def _observe(self, metric: Any, labels: tuple[str, ...], value: float) -> None:
        metric.labels(*labels).observe(value)

    def catalog_fallback(self, value: bool, *, always: bool = False) -> None:
        """This process's `agent_eval_catalog_fallback`; written once it was 1 (or `always`), then on every change."""
        if self._fallback is None:
            if not (value or always):
                return
            self._fallback = Gauge(n.CATALOG_FALLBACK.name, n.CATALOG_FALLBACK.help, multiprocess_mode="livemax", registry=None)
        self._fallback.set(1 if value else 0)

    def record(self, score: CallScore, labels: tuple[str, str], duration_labels: tuple[str, str] | None) -> None:
        """One call, under the labels the in-process collector chose: (tool, agent) and (tool, tool type, error_type)."""
        if self.buffered:
            return
        tool, agent = labels
        static = score.static
        inc, observe = self._inc, self._observe
        with self._lock:
            inc(self.calls, (tool, agent, static.task, score.outcome, static.verdict, static.optimal_tool))
            if not static.known:
                inc(self.unknown_tool_calls, (tool,))
            inc(self.cost, labels, static.cost_usd)
            if static.excess_cost_usd:
                inc(self.excess_cost, (tool, agent, static.optimal_tool), static.excess_cost_usd)
            for dimension, value in (("efficiency", static.efficiency), ("cost", static.cost_score),
                                     ("latency", static.latency_score), ("complexity", static.complexity_score)):
                if value is not None:
                    observe(self.scores, (tool, agent, static.profile, dimension), value)
            if duration_labels is not None and score.duration_s is not None:
                observe(self.duration, duration_labels, score.duration_s)
                inc(self.excess_latency, labels, score.excess_latency_s)
                inc(self.slo, labels, 1 if score.slo_exceeded else 0)
            inc(self.self_counters["spans_scored"], ())

    def record_run(self, run: Any, labels: tuple[str, str], redundant: list[str], spurious: list[str],
                   loops: list[str] = (), unpriced_models: list[str] = ()) -> None:
        if self.buffered:
            return
        e = run.evaluation
        inc, observe = self._inc, self._observe
        labels = tuple(labels)
        with self._lock:
            for model in unpriced_models:
                inc(self.unpriced_model_calls, (model,))
            inc(self.runs, (*labels, e.outcome))
            if e.duration_s is not None:
                observe(self.run_duration, labels, e.duration_s)
            observe(self.run_cost, labels, e.cost_usd)
            observe(self.run_calls, labels, len(run.tool_calls) + run.calls_dropped)
            if e.tool_correctness is not None:
                observe(self.correctness, labels, e.tool_correctness)
            observe(self.health, labels, e.health)
            if run.kind == AGENT_RUN:
                if e.duration_s is not None:
                    observe(self.agent_duration, labels, e.duration_s)
                observe(self.agent_tool_calls, labels, len(run.tool_calls) + run.calls_dropped)
                observe(self.agent_inference_calls, labels, len(run.llm_calls))
            for tool in redundant:
                inc(self.redundant, (*labels, tool))
            for tool in spurious:
                inc(self.spurious, (*labels, tool))
            for tool in loops:
                inc(self.loops, (*labels, tool))
            inc(self.over_budget, labels, 1 if e.over_budget else 0)
            for source in e.llm_price_sources:
                inc(self.llm_calls, (source,))

    def record_context(self, counted: list[tuple[tuple[str, str], int, float | None]]) -> None:
        """What a run's tool calls' results cost its later model calls: per call, the (tool, agent) labels the
        in-process collector counted it on, its induced tokens and their USD (None: unpriced)."""
        if self.buffered:
            return
        inc = self._inc
        with self._lock:
            for labels, tokens, usd in counted:
                if tokens:
                    inc(self.context_tokens, labels, tokens)
                if usd:
                    inc(self.context_cost, labels, usd)
                inc(self.context_calls, labels)

    def count(self, name: str, n: int) -> None:
        counter = self.self_counters.get(name)
        if counter is not None and not self.buffered:
            with self._lock:
                self._inc(counter, (), n)

    def flush_tallies(self, metrics: Any) -> None:
        """Carry the lock-free span tallies over as deltas (done on tool spans, not on every span)."""
        if self.buffered:
            return
        for name, tally in (("spans_seen", metrics.seen), ("spans_ignored", metrics.ignored)):
            value = tally.value
            delta = value - self._flushed[name]
            if delta > 0:
                self._flushed[name] = value
                with self._lock:
                    self._inc(self.self_counters[name], (), delta)

"""prometheus-client multiprocess mode (gunicorn, uWSGI, ...): every process writes, one endpoint sums.

When `PROMETHEUS_MULTIPROC_DIR` is set (before prometheus_client is imported, as its docs
require), each process also mirrors its counts into prometheus-client metrics backed by
files in that directory, and `multiprocess_registry()` serves their sum with
`MultiProcessCollector`, plus the catalog gauges. `agent_eval_catalog_fallback` is a file-backed gauge too
(`livemax`: 1 while any live process scores with the packaged catalog instead of the configured one; a
process that ends must be marked dead, `prometheus_client.multiprocess.mark_process_dead(pid)` in
gunicorn's `child_exit`, as prometheus-client's docs say for every live gauge).

Merged across processes: every counter and histogram (tool calls, cost, money wasted,
excess latency, SLO violations, the duration and efficiency histograms, runs and their
histograms, the self-metrics). Not merged: the sliding-window quantiles of
`agent_eval_tool_latency_seconds` (a summary's quantiles cannot be added; use
`histogram_quantile` over `gen_ai_execute_tool_duration_seconds`, whose buckets can).
Mirroring costs about 1-2 µs per metric update on top of the in-process accumulators.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from ..core.runs import AGENT_RUN
from . import names as n
from .families import catalog_families

if TYPE_CHECKING:
    from ..config.catalog import Catalog
    from ..core.scoring import CallScore


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir") or None


def multiprocess_registry(metrics: Any) -> CollectorRegistry:
    """A registry that serves every process's files, plus the catalog gauges of `metrics` (an `EvalMetrics`)."""
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    if metrics.mirror is not None:  # the serving process always writes its flag, so the gauge is always served
        metrics.mirror.catalog_fallback(metrics.catalog_fallback, always=True)
    registry.register(_CatalogGauges(lambda: metrics.catalog))
    return registry


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


class MultiprocessMirror:
    """The same series as `EvalMetrics`, written through prometheus-client's file-backed values."""

    def __init__(self) -> None:
        self.calls, self.cost, self.excess_cost = _metric(n.TOOL_CALLS), _metric(n.TOOL_COST), _metric(n.TOOL_EXCESS_COST)
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

    def catalog_fallback(self, value: bool, *, always: bool = False) -> None:
        """This process's `agent_eval_catalog_fallback`; written once it was 1 (or `always`), then on every change."""
        if self._fallback is None:
            if not (value or always):
                return
            self._fallback = Gauge(n.CATALOG_FALLBACK.name, n.CATALOG_FALLBACK.help, multiprocess_mode="livemax", registry=None)
        self._fallback.set(1 if value else 0)

    def record(self, score: CallScore, labels: tuple[str, str], duration_labels: tuple[str, str] | None) -> None:
        """One call, under the labels the in-process collector chose: (tool, agent) and (tool, tool type, error_type)."""
        tool, agent = labels
        static = score.static
        self.calls.labels(tool, agent, static.task, score.outcome, static.verdict, static.optimal_tool).inc()
        if not static.known:
            self.unknown_tool_calls.labels(tool).inc()
        self.cost.labels(tool, agent).inc(static.cost_usd)
        if static.excess_cost_usd:
            self.excess_cost.labels(tool, agent, static.optimal_tool).inc(static.excess_cost_usd)
        for dimension, value in (("efficiency", static.efficiency), ("cost", static.cost_score), ("latency", static.latency_score),
                                 ("complexity", static.complexity_score)):
            if value is not None:
                self.scores.labels(tool, agent, static.profile, dimension).observe(value)
        if duration_labels is not None and score.duration_s is not None:
            self.duration.labels(*duration_labels).observe(score.duration_s)
            self.excess_latency.labels(tool, agent).inc(score.excess_latency_s)
            self.slo.labels(tool, agent).inc(1 if score.slo_exceeded else 0)
        self.self_counters["spans_scored"].inc()

    def record_run(self, run: Any, labels: tuple[str, str], redundant: list[str], spurious: list[str],
                   loops: list[str] = (), unpriced_models: list[str] = ()) -> None:
        e = run.evaluation
        for model in unpriced_models:
            self.unpriced_model_calls.labels(model).inc()
        self.runs.labels(*labels, e.outcome).inc()
        if e.duration_s is not None:
            self.run_duration.labels(*labels).observe(e.duration_s)
        self.run_cost.labels(*labels).observe(e.cost_usd)
        self.run_calls.labels(*labels).observe(len(run.tool_calls) + run.calls_dropped)
        if e.tool_correctness is not None:
            self.correctness.labels(*labels).observe(e.tool_correctness)
        self.health.labels(*labels).observe(e.health)
        if run.kind == AGENT_RUN:
            if e.duration_s is not None:
                self.agent_duration.labels(*labels).observe(e.duration_s)
            self.agent_tool_calls.labels(*labels).observe(len(run.tool_calls) + run.calls_dropped)
            self.agent_inference_calls.labels(*labels).observe(len(run.llm_calls))
        for tool in redundant:
            self.redundant.labels(*labels, tool).inc()
        for tool in spurious:
            self.spurious.labels(*labels, tool).inc()
        for tool in loops:
            self.loops.labels(*labels, tool).inc()
        self.over_budget.labels(*labels).inc(1 if e.over_budget else 0)
        for source in e.llm_price_sources:
            self.llm_calls.labels(source).inc()

    def count(self, name: str, n: int) -> None:
        counter = self.self_counters.get(name)
        if counter is not None:
            counter.inc(n)

    def flush_tallies(self, metrics: Any) -> None:
        """Carry the lock-free span tallies over as deltas (done on tool spans, not on every span)."""
        for name, tally in (("spans_seen", metrics.seen), ("spans_ignored", metrics.ignored)):
            value = tally.value
            delta = value - self._flushed[name]
            if delta > 0:
                self._flushed[name] = value
                self.self_counters[name].inc(delta)

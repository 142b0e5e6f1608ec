"""prometheus-client multiprocess mode (gunicorn, uWSGI, ...): every process writes, one endpoint sums.

When `PROMETHEUS_MULTIPROC_DIR` is set (before prometheus_client is imported, as its docs
require), each process also mirrors its counts into prometheus-client metrics backed by
files in that directory, and `multiprocess_registry()` serves their sum with
`MultiProcessCollector`, plus the catalog gauges.

Merged across processes: every counter and histogram (tool calls, cost, money wasted,
excess latency, SLO violations, the duration and efficiency histograms, runs and their
histograms, the self-metrics). Not merged: the sliding-window quantiles of
`agent_eval_tool_latency_seconds` (a summary's quantiles cannot be added; use
`histogram_quantile` over `gen_ai_execute_tool_duration_seconds`, whose buckets can).
Mirroring costs about 1-2 µs per metric update on top of the in-process accumulators.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

if TYPE_CHECKING:
    from ..otel.processor import AgentEvalSpanProcessor
    from .collector import EvalMetrics
    from ..core.scoring import CallScore


def multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir") or None


def multiprocess_registry(processor: AgentEvalSpanProcessor) -> CollectorRegistry:
    """A registry that serves every process's files, plus this processor's catalog gauges."""
    from prometheus_client.multiprocess import MultiProcessCollector

    from .collector import CatalogCollector

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    registry.register(CatalogCollector(processor.metrics))
    return registry


class MultiprocessMirror:
    """The same series as `EvalMetrics`, written through prometheus-client's file-backed values."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        from .histogram import COST_BUCKETS_USD, DURATION_BUCKETS_S
        from .collector import AGENT, CALL_COUNT_BUCKETS, DIMENSIONS, HEALTH_BUCKETS, SCORE_BUCKETS, SELF_COUNTERS, TOOL

        def counter(name: str, doc: str, *labels: str) -> Any:
            return Counter(name, doc, list(labels), registry=None)

        def histogram(name: str, doc: str, buckets: Any, *labels: str) -> Any:
            return Histogram(name, doc, list(labels), buckets=buckets, registry=None)

        self.dimensions = DIMENSIONS
        self.calls = counter("agent_eval_tool_calls", "Tool calls by outcome and verdict.", TOOL, AGENT, "task", "outcome", "verdict", "optimal_tool")
        self.cost = counter("agent_eval_tool_cost_usd", "Catalog cost of the tool calls made, in USD.", TOOL, AGENT)
        self.excess_cost = counter("agent_eval_tool_excess_cost_usd", "Money wasted, in USD.", TOOL, AGENT, "optimal_tool")
        self.excess_latency = counter("agent_eval_tool_excess_latency_seconds", "Duration beyond the optimal tool's.", TOOL, AGENT)
        self.slo = counter("agent_eval_tool_slo_violations", "Calls slower than the tool's SLO.", TOOL, AGENT)
        self.duration = histogram("gen_ai_execute_tool_duration_seconds", "Duration of tool executions.", DURATION_BUCKETS_S, TOOL, AGENT, "error_type")
        self.scores = histogram("agent_eval_tool_efficiency_score", "Per-call efficiency score and components.", SCORE_BUCKETS, TOOL, AGENT, "profile", "dimension")
        run = (AGENT, "task")
        self.runs = counter("agent_eval_runs", "Agent runs by outcome.", *run, "outcome")
        self.run_duration = histogram("agent_eval_run_duration_seconds", "Duration of agent runs.", DURATION_BUCKETS_S, *run)
        self.run_cost = histogram("agent_eval_run_cost_usd", "Cost of agent runs, in USD.", COST_BUCKETS_USD, *run)
        self.run_calls = histogram("agent_eval_run_tool_calls", "Tool calls per agent run.", CALL_COUNT_BUCKETS, *run)
        self.correctness = histogram("agent_eval_tool_correctness_score", "Tool correctness of runs.", SCORE_BUCKETS, *run)
        self.health = histogram("agent_eval_run_health_score", "Run health score, 0-100.", HEALTH_BUCKETS, *run)
        self.redundant = counter("agent_eval_redundant_tool_calls", "Repeated identical calls within a run.", *run, TOOL)
        self.spurious = counter("agent_eval_spurious_tool_calls", "Calls outside the task's expected tools.", *run, TOOL)
        self.over_budget = counter("agent_eval_runs_over_budget", "Runs over the task's max_calls.", *run)
        self.self_counters = {name: counter(f"agent_eval_processor_{name}", doc) for name, doc in SELF_COUNTERS.items()}
        self._flushed = {"spans_seen": 0, "spans_ignored": 0}

    def record(self, score: CallScore, tool: str, agent: str, error_type: str) -> None:
        static = score.static
        self.calls.labels(tool, agent, static.task, score.outcome, static.verdict, static.optimal_tool).inc()
        self.cost.labels(tool, agent).inc(static.cost_usd)
        if static.excess_cost_usd:
            self.excess_cost.labels(tool, agent, static.optimal_tool).inc(static.excess_cost_usd)
        for dimension, value in (("efficiency", static.efficiency), ("cost", static.cost_score), ("latency", static.latency_score),
                                 ("complexity", static.complexity_score)):
            if value is not None:
                self.scores.labels(tool, agent, static.profile, dimension).observe(value)
        if score.duration_s is not None:
            self.duration.labels(tool, agent, error_type).observe(score.duration_s)
            self.excess_latency.labels(tool, agent).inc(score.excess_latency_s)
            self.slo.labels(tool, agent).inc(1 if score.slo_exceeded else 0)
        self.self_counters["spans_scored"].inc()

    def record_run(self, run: Any, labels: tuple[str, str], redundant: list[str], spurious: list[str]) -> None:
        e = run.evaluation
        self.runs.labels(*labels, e.outcome).inc()
        if e.duration_s is not None:
            self.run_duration.labels(*labels).observe(e.duration_s)
        self.run_cost.labels(*labels).observe(e.cost_usd)
        self.run_calls.labels(*labels).observe(len(run.tool_calls) + run.calls_dropped)
        if e.tool_correctness is not None:
            self.correctness.labels(*labels).observe(e.tool_correctness)
        self.health.labels(*labels).observe(e.health)
        for tool in redundant:
            self.redundant.labels(*labels, tool).inc()
        for tool in spurious:
            self.spurious.labels(*labels, tool).inc()
        self.over_budget.labels(*labels).inc(1 if e.over_budget else 0)

    def count(self, name: str, n: int) -> None:
        counter = self.self_counters.get(name)
        if counter is not None:
            counter.inc(n)

    def flush_tallies(self, metrics: EvalMetrics) -> None:
        """Carry the lock-free span tallies over as deltas (done on tool spans, not on every span)."""
        for name, tally in (("spans_seen", metrics.seen), ("spans_ignored", metrics.ignored)):
            value = tally.value
            delta = value - self._flushed[name]
            if delta > 0:
                self._flushed[name] = value
                self.self_counters[name].inc(delta)

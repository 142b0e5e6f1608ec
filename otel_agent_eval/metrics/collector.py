"""Prometheus metrics for scored tool calls: cheap accumulators now, metric families at scrape.

prometheus-client's own `.labels(...).observe()` costs 1–2 µs per metric, and a tool span
feeds a dozen values, so the `span.end()` path only bumps a few counters under one lock.
Everything fixed by the catalog (scores, costs, verdicts) is stored once per
`StaticScore` and multiplied out by its call count when Prometheus scrapes.

    >>> metrics = EvalMetrics(registry=CollectorRegistry())
    >>> metrics.record(call_score, agent="support_agent", trace_id=span.context.trace_id)
    >>> serve(metrics.registry, port=9464)            # or mount make_wsgi_app(registry)
"""
from __future__ import annotations

import itertools
import math
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Exemplar

from ..config.catalog import Catalog
from .histogram import COST_BUCKETS_USD, DURATION_BUCKETS_S, BucketCounts
from .multiprocess import MultiprocessMirror, multiprocess_dir
from ..core.scoring import CallScore, StaticScore
from .window import SlidingQuantiles

TOOL, AGENT = "gen_ai_tool_name", "gen_ai_agent_name"
OTHER = "_other_"  # label value that absorbs names past the cardinality caps
MAX_ERROR_TYPES = 10  # error_type label values per (tool, agent); more are folded into "_OTHER"
MAX_LABEL_CHARS = 256
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, math.inf)
QUANTILES = (0.5, 0.95, 0.99)
CALL_COUNT_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100, math.inf)
HEALTH_BUCKETS = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100, math.inf)
DIMENSIONS = ("efficiency", "cost", "latency", "complexity")

# Self-metrics: how the processor itself is doing.
SELF_COUNTERS = {
    "spans_seen": "Spans the processor received.",
    "spans_scored": "Tool-call spans scored.",
    "spans_ignored": "Spans that are no tool call.",
    "malformed_tool_spans": "Tool-call spans with values that could not be read (see the log).",
    "enrichments_dropped": "Tool spans forwarded without scores because enriching them failed.",
    "forward_errors": "Exceptions raised by the forwarded span processor.",
    "internal_errors": "Exceptions caught inside the processor (see the log).",
    "labels_folded": f"Tool or agent names folded into {OTHER!r} by the cardinality caps.",
    "runs_calls_dropped": "Calls not kept in a run because it exceeded max_calls_per_run (still scored).",
    "unpriced_llm_calls": "LLM calls whose model the catalog's `models` does not price (not counted in run cost).",
    "deferred_calls_released": "Tool spans held until their agent was known, then scored.",
    "catalog_reloads": "Catalogs swapped in by a reload.",
    "catalog_reloads_rejected": "Catalog reloads rejected because the new file was broken (the last good one stays).",
}


class Tally:
    """A counter any thread may bump without a lock: `itertools.count` advances atomically in CPython."""

    __slots__ = ("_count", "bump")

    def __init__(self) -> None:
        self._count = itertools.count()
        self.bump = self._count.__next__

    @property
    def value(self) -> int:
        return self._count.__reduce__()[1][0]


class _Series:
    """Accumulators for one (tool, agent) pair."""

    __slots__ = ("labels", "calls", "durations", "window", "excess_latency_s", "slo_violations")

    def __init__(self, labels: tuple[str, str], window_s: float) -> None:
        self.labels = labels  # (tool, agent) as exposed, after the cardinality caps
        self.calls: dict[tuple[StaticScore, str], int] = {}
        self.durations: dict[str, BucketCounts] = {}
        self.window = SlidingQuantiles(window_s)
        self.excess_latency_s = 0.0
        self.slo_violations = 0


class _RunSeries:
    """Accumulators for the runs of one (agent, task) pair."""

    __slots__ = ("outcomes", "duration", "cost", "calls", "correctness", "health", "redundant", "spurious", "over_budget")

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.duration = BucketCounts(DURATION_BUCKETS_S)
        self.cost = BucketCounts(COST_BUCKETS_USD)
        self.calls = BucketCounts(CALL_COUNT_BUCKETS)
        self.correctness = BucketCounts(SCORE_BUCKETS)
        self.health = BucketCounts(HEALTH_BUCKETS)
        self.redundant: Counter[str] = Counter()
        self.spurious: Counter[str] = Counter()
        self.over_budget = 0


class EvalMetrics:
    """Collects scored tool calls and agent runs; exposes them as Prometheus metrics (a registry collector)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        catalog: Catalog | None = None,
        window_s: float = 300.0,
        max_unknown_tools: int = 20,
        max_agents: int = 100,
    ) -> None:
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], _Series] = {}
        self._runs: dict[tuple[str, str], _RunSeries] = {}
        self.closed_early: Counter[str] = Counter()  # shared with the RunTracker, which counts them
        self._window_s = window_s
        self._known_tools = set(catalog.tools) if catalog else set()
        self._unknown_tools: set[str] = set()
        self._agents: set[str] = set()
        self._max_unknown_tools = max_unknown_tools
        self._max_agents = max_agents
        self.catalog = catalog
        self.counters: Counter[str] = Counter()
        self.seen = Tally()  # bumped for every span, so lock-free
        self.ignored = Tally()
        self.mirror = MultiprocessMirror() if multiprocess_dir() else None
        self.before_collect: Callable[[], object] | None = None  # e.g. process spans still queued
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}  # self-metric gauges read at scrape time
        self.registry = registry
        if registry is not None:
            registry.register(self)

    def reset_after_fork(self) -> None:
        """In a forked child: fresh locks and counts (the parent's are the parent's to report)."""
        self._lock = threading.Lock()
        self._series, self._runs = {}, {}
        self.counters = Counter()
        self.seen, self.ignored = Tally(), Tally()
        if self.mirror is not None:
            self.mirror = MultiprocessMirror()

    def catalog_changed(self, catalog: Catalog) -> None:
        """A reloaded catalog: its tools become known label values and its figures the gauges."""
        with self._lock:
            self.catalog = catalog
            self._known_tools = set(catalog.tools)

    def count(self, name: str, n: int = 1) -> None:
        """Bump a self-metric counter (thread-safe)."""
        with self._lock:
            self.counters[name] += n
        if self.mirror is not None:
            self.mirror.count(name, n)

    def record(self, score: CallScore, agent: str | None, trace_id: int = 0) -> None:
        """Account one scored call. Hot path: a few dict look-ups and additions under one lock."""
        static = score.static
        duration = score.duration_s
        error_type = "" if score.outcome != "error" else (score.error_type or "_OTHER")
        with self._lock:
            self.counters["spans_scored"] += 1
            key = (static.tool, agent or "")
            series = self._series.get(key)
            if series is None:
                series = self._new_series(key)
            calls_key = (static, score.outcome)
            series.calls[calls_key] = series.calls.get(calls_key, 0) + 1
            if duration is not None:
                hist = series.durations.get(error_type)
                if hist is None:  # a new error type: bounded, and encodable as a label
                    error_type = label_text(error_type) if len(series.durations) < MAX_ERROR_TYPES else "_OTHER"
                    hist = series.durations.get(error_type)
                    if hist is None:
                        hist = series.durations[error_type] = BucketCounts(DURATION_BUCKETS_S)
                hist.observe(duration, trace_id or None)  # an int; formatted as hex only when scraped
                series.window.observe(duration)
                series.excess_latency_s += score.excess_latency_s
                if score.slo_exceeded:
                    series.slo_violations += 1
            if self.mirror is not None:
                self.mirror.flush_tallies(self)
        if self.mirror is not None:
            self.mirror.record(score, *series.labels, error_type)

    def record_run(self, run: Any) -> None:
        """Account one evaluated `AgentRun` (called when its root span ends, not per span)."""
        evaluation = run.evaluation
        trace_id = run.trace_id or None
        with self._lock:
            key = (self._agent_label(run.agent or ""), run.task)
            series = self._runs.get(key)
            if series is None:
                series = self._runs[key] = _RunSeries()
            series.outcomes[evaluation.outcome] += 1
            if evaluation.duration_s is not None:
                series.duration.observe(evaluation.duration_s, trace_id)
            series.cost.observe(evaluation.cost_usd, trace_id)
            series.calls.observe(len(run.tool_calls) + run.calls_dropped)
            if evaluation.tool_correctness is not None:
                series.correctness.observe(evaluation.tool_correctness)
            series.health.observe(evaluation.health, trace_id)
            redundant = [self._tool_label(tool) for tool in evaluation.redundant_calls]
            spurious = [self._tool_label(tool) for tool in evaluation.spurious_calls]
            series.redundant.update(redundant)
            series.spurious.update(spurious)
            series.over_budget += evaluation.over_budget
            self.counters["unpriced_llm_calls"] += len(evaluation.unpriced_models)
            self.counters["runs_calls_dropped"] += run.calls_dropped
        if self.mirror is not None:
            self.mirror.record_run(run, key, redundant, spurious)

    def _tool_label(self, tool: str) -> str:
        return tool if tool in self._known_tools else self._bounded(tool, self._unknown_tools, self._max_unknown_tools)

    def _agent_label(self, agent: str) -> str:
        return self._bounded(agent, self._agents, self._max_agents) if agent else agent

    def _bounded(self, name: str, seen: set[str], cap: int) -> str:
        """`name` as a label value while fewer than `cap` names were seen, else OTHER (counted)."""
        if name in seen:
            return label_text(name)
        if len(seen) < cap:
            seen.add(name)
            return label_text(name)
        self.counters["labels_folded"] += 1
        return OTHER

    def _new_series(self, key: tuple[str, str]) -> _Series:
        folded = (self._tool_label(key[0]), self._agent_label(key[1]))
        series = self._series.get(folded)
        if series is None:
            series = self._series[folded] = _Series(folded, self._window_s)
        return series

    # -- scrape side -------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        if self.before_collect is not None:
            try:
                self.before_collect()
            except Exception:  # noqa: BLE001 - a scrape shows what there is
                pass
        with self._lock:
            yield from self._tool_families()
            yield from self._run_families()
            yield from self._self_families()
        yield from self._catalog_families()

    def _tool_families(self) -> Iterator[Metric]:
        calls = CounterMetricFamily("agent_eval_tool_calls", "Tool calls by outcome and verdict against the environment's thresholds.",
                                    labels=[TOOL, AGENT, "task", "outcome", "verdict", "optimal_tool"])
        cost = CounterMetricFamily("agent_eval_tool_cost_usd", "Catalog cost of the tool calls made, in USD.", labels=[TOOL, AGENT])
        excess_cost = CounterMetricFamily("agent_eval_tool_excess_cost_usd", "Money wasted: cost of the calls minus the cost of the optimal tool, in USD.",
                                          labels=[TOOL, AGENT, "optimal_tool"])
        excess_latency = CounterMetricFamily("agent_eval_tool_excess_latency_seconds", "Observed duration beyond the optimal tool's expected latency.",
                                             labels=[TOOL, AGENT])
        slo = CounterMetricFamily("agent_eval_tool_slo_violations", "Tool calls slower than the tool's catalog latency SLO.", labels=[TOOL, AGENT])
        scores = HistogramMetricFamily("agent_eval_tool_efficiency_score", "Per-call efficiency score and its cost, latency and complexity components (0-1).",
                                       labels=[TOOL, AGENT, "profile", "dimension"])
        duration = HistogramMetricFamily("gen_ai_execute_tool_duration_seconds", "Duration of tool executions (GenAI semantic conventions).",
                                         labels=[TOOL, AGENT, "error_type"])
        latency = Metric("agent_eval_tool_latency_seconds", f"Tool call duration; quantiles over the last {self._window_s:g} s.", "summary")
        for (tool, agent), series in self._series.items():
            by_calls: Counter[tuple[str, ...]] = Counter()
            by_excess_cost: Counter[str] = Counter()
            score_counts: dict[tuple[str, str], list[int]] = {}
            score_sums: Counter[tuple[str, str]] = Counter()
            cost_usd = 0.0
            for (static, outcome), n in series.calls.items():
                by_calls[(static.task, outcome, static.verdict, static.optimal_tool)] += n
                cost_usd += static.cost_usd * n
                if static.excess_cost_usd:
                    by_excess_cost[static.optimal_tool] += static.excess_cost_usd * n
                for dimension, value in _dimensions(static):
                    counts = score_counts.setdefault((static.profile, dimension), [0] * len(SCORE_BUCKETS))
                    counts[bisect_left(SCORE_BUCKETS, value)] += n
                    score_sums[(static.profile, dimension)] += value * n
            for (task, outcome, verdict, optimal), n in by_calls.items():
                calls.add_metric([tool, agent, task, outcome, verdict, optimal], n)
            cost.add_metric([tool, agent], cost_usd)
            for optimal, usd in by_excess_cost.items():
                excess_cost.add_metric([tool, agent, optimal], usd)
            for (profile, dimension), counts in score_counts.items():
                scores.add_metric([tool, agent, profile, dimension], _le_buckets(SCORE_BUCKETS, counts), score_sums[(profile, dimension)])
            excess_latency.add_metric([tool, agent], series.excess_latency_s)
            slo.add_metric([tool, agent], series.slo_violations)
            for error_type, hist in series.durations.items():
                duration.add_metric([tool, agent, error_type], _le_buckets(hist.bounds, hist.counts, hist.exemplars), hist.sum)
            snap = series.window.snapshot(QUANTILES)
            labels = {TOOL: tool, AGENT: agent}
            for q, value in zip(QUANTILES, snap.quantiles):
                latency.add_sample("agent_eval_tool_latency_seconds", {**labels, "quantile": str(q)}, value)
            latency.add_sample("agent_eval_tool_latency_seconds_count", labels, snap.total_count)
            latency.add_sample("agent_eval_tool_latency_seconds_sum", labels, snap.total_sum)
        yield from (calls, cost, excess_cost, excess_latency, slo, scores, duration, latency)

    def _run_families(self) -> Iterator[Metric]:
        labels = [AGENT, "task"]
        runs = CounterMetricFamily("agent_eval_runs", "Agent runs by outcome (completed: root OK, tool errors recovered, validator passed).",
                                   labels=[*labels, "outcome"])
        histograms = {
            "duration": HistogramMetricFamily("agent_eval_run_duration_seconds", "Duration of agent runs.", labels=labels),
            "cost": HistogramMetricFamily("agent_eval_run_cost_usd", "Cost of agent runs: catalog tool costs plus priced LLM tokens, in USD.", labels=labels),
            "calls": HistogramMetricFamily("agent_eval_run_tool_calls", "Tool calls per agent run.", labels=labels),
            "correctness": HistogramMetricFamily("agent_eval_tool_correctness_score", "Tool correctness of runs against the task's expected tools (deepeval semantics, 0-1).", labels=labels),
            "health": HistogramMetricFamily("agent_eval_run_health_score", "Run health score, 0-100 (completion, tool accuracy, latency, cost).", labels=labels),
        }
        redundant = CounterMetricFamily("agent_eval_redundant_tool_calls", "Repeated calls of a tool with the same arguments within a run.", labels=[*labels, TOOL])
        spurious = CounterMetricFamily("agent_eval_spurious_tool_calls", "Calls of tools outside the task's expected and acceptable tools.", labels=[*labels, TOOL])
        over_budget = CounterMetricFamily("agent_eval_runs_over_budget", "Runs with more tool calls than the task's max_calls.", labels=labels)
        for (agent, task), series in self._runs.items():
            for outcome, n in series.outcomes.items():
                runs.add_metric([agent, task, outcome], n)
            for name, family in histograms.items():
                hist = getattr(series, name)
                if hist.count:
                    family.add_metric([agent, task], _le_buckets(hist.bounds, hist.counts, hist.exemplars), hist.sum)
            for tool, n in series.redundant.items():
                redundant.add_metric([agent, task, tool], n)
            for tool, n in series.spurious.items():
                spurious.add_metric([agent, task, tool], n)
            over_budget.add_metric([agent, task], series.over_budget)
        yield from (runs, *histograms.values(), redundant, spurious, over_budget)

    def _self_families(self) -> Iterator[Metric]:
        values = {**self.counters, "spans_seen": self.seen.value, "spans_ignored": self.ignored.value}
        for name, doc in SELF_COUNTERS.items():
            yield CounterMetricFamily(f"agent_eval_processor_{name}", doc, value=values.get(name, 0))
        closed = CounterMetricFamily("agent_eval_processor_runs_closed_early", "Runs closed before their root span ended, by reason (ttl, capacity, shutdown).",
                                     labels=["reason"])
        for reason in ("ttl", "capacity", "shutdown"):
            closed.add_metric([reason], self.closed_early[reason])
        yield closed
        for name, (doc, read) in self.gauges.items():
            try:
                family = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
                yield family(f"agent_eval_processor_{name.removesuffix('_total')}", doc, value=read())
            except Exception:  # noqa: BLE001 - a scrape shows what it can
                continue

    def _catalog_families(self) -> Iterator[Metric]:
        if self.catalog is not None:
            yield from catalog_families(self.catalog)


class CatalogCollector:
    """The catalog gauges alone, for an endpoint that serves multiprocess files (see multiprocess.py)."""

    def __init__(self, metrics: EvalMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self.metrics._catalog_families()


def catalog_families(catalog: Catalog) -> Iterator[Metric]:
    """Gauges of the catalog's figures, so alerts and dashboards can compare against them."""
    expected = GaugeMetricFamily("agent_eval_tool_expected_latency_seconds", "Expected latency of each tool, from the catalog.", labels=[TOOL])
    slo = GaugeMetricFamily("agent_eval_tool_latency_slo_seconds", "Latency SLO of each tool, from the catalog.", labels=[TOOL])
    cost = GaugeMetricFamily("agent_eval_tool_cost_per_call_usd", "Cost of one call of each tool, from the catalog.", labels=[TOOL])
    for tool in catalog.tools.values():
        expected.add_metric([tool.name], tool.latency_ms / 1000)
        cost.add_metric([tool.name], tool.cost_usd)
        if tool.latency_slo_ms:
            slo.add_metric([tool.name], tool.latency_slo_ms / 1000)
    thresholds = GaugeMetricFamily("agent_eval_efficiency_threshold", "Efficiency score thresholds per environment, from the catalog.",
                                   labels=["environment", "level"])
    for t in catalog.thresholds.values():
        thresholds.add_metric([t.environment, "warn"], t.warn)
        thresholds.add_metric([t.environment, "fail"], t.fail)
    yield from (expected, slo, cost, thresholds)


def _dimensions(static: StaticScore) -> list[tuple[str, float]]:
    values = [("efficiency", static.efficiency), ("cost", static.cost_score), ("latency", static.latency_score)]
    if static.complexity_score is not None:
        values.append(("complexity", static.complexity_score))
    return values


def _le_buckets(bounds: tuple[float, ...], counts: list[int], exemplars: list[Any] | None = None) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    total = 0
    for i, (bound, n) in enumerate(zip(bounds, counts)):
        total += n
        le = "+Inf" if bound == math.inf else _float_label(bound)
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


def _hex(trace_id: int | str) -> str:
    return format(trace_id, "032x") if isinstance(trace_id, int) else trace_id


def _float_label(value: float) -> str:
    return repr(float(value))


def serve(registry: CollectorRegistry = REGISTRY, *, port: int = 9464, addr: str = "127.0.0.1") -> Any:
    """Start the /metrics HTTP endpoint in a daemon thread; returns (server, thread)."""
    from prometheus_client import start_http_server

    return start_http_server(port, addr=addr, registry=registry)

"""Prometheus metrics for scored tool calls: cheap accumulators now, metric families at scrape.

prometheus-client's own `.labels(...).observe()` costs 1–2 µs per metric, and a tool span
feeds a dozen values, so the `span.end()` path only bumps a few counters under one lock.
Everything fixed by the catalog (scores, costs, verdicts) is stored once per
`StaticScore` and multiplied out by its call count when Prometheus scrapes.

    >>> metrics = EvalMetrics(registry=CollectorRegistry())
    >>> metrics.record(call_score, agent="support_agent", trace_id=span.context.trace_id)
"""
from __future__ import annotations

import itertools
import threading
import time
import weakref
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..config.catalog import Catalog
from ..core.runs import AGENT_RUN
from ..core.scoring import CallScore, StaticScore
from . import budget as b
from . import names as n
from .carried import Carried, take
from .families import catalog_families, family, label_text
from .histogram import COST_BUCKETS_USD, DURATION_BUCKETS_S, BucketCounts
from .judge import JudgeMetrics
from .multiprocess import MultiprocessMirror, multiprocess_dir
from .window import SlidingQuantiles

OTHER = n.OTHER
_OTHER_PAIR = (OTHER, OTHER)
MAX_ERROR_TYPES = 10  # error_type label values per tool; more are folded into "_OTHER"
MAX_REMEMBERED_NAMES = 10_000  # tool names of run counters remembered with their catalog tool's label


_holders: weakref.WeakKeyDictionary[CollectorRegistry, EvalMetrics] = weakref.WeakKeyDictionary()  # registry -> ours in it


class Tally:
    """A counter any thread may bump without a lock: `itertools.count` advances atomically in CPython. `also`: a tally
    whose counts this one's value includes (a span passed on by the fast path is both seen and ignored: one bump)."""

    __slots__ = ("_count", "bump", "_also")

    def __init__(self, also: Tally | None = None) -> None:
        self._count = itertools.count()
        self.bump = self._count.__next__
        self._also = also

    @property
    def value(self) -> int:
        own = self._count.__reduce__()[1][0]
        return own if self._also is None else own + self._also.value


class _Series:
    """Accumulators for one (tool, agent) pair, and the label sets it exposes (charged to the budget)."""

    __slots__ = ("labels", "calls", "window", "excess_latency_s", "slo_violations", "exposed", "optimals", "dimensions",
                 "other", "context")

    def __init__(self, labels: tuple[str, str], window_s: float, *, other: bool = False) -> None:
        self.labels = labels  # (tool, agent) as exposed, after the cardinality caps
        self.calls: dict[tuple[StaticScore, str], int] = {}
        self.window = SlidingQuantiles(window_s)
        self.excess_latency_s = 0.0
        self.slo_violations = 0
        self.exposed: set[tuple[str, ...]] = set()  # (task, outcome, verdict, optimal tool) of the calls counter
        self.optimals: set[str] = set()  # optimal_tool labels of the money-wasted counter
        self.dimensions: set[tuple[str, str]] = set()  # (profile, dimension) of the efficiency histogram
        self.other = other  # the (_other_, _other_) pair: always admitted
        self.context = [0, 0.0, 0]  # what its calls' results cost later model calls: tokens, USD, calls measured


class _RunSeries:
    """Accumulators for the runs of one (agent, task) pair."""

    __slots__ = ("outcomes", "duration", "cost", "calls", "correctness", "health", "redundant", "spurious", "over_budget", "loops",
                 "agent_duration", "agent_tool_calls", "agent_inference_calls")

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.duration = BucketCounts(DURATION_BUCKETS_S)
        self.cost = BucketCounts(COST_BUCKETS_USD)
        self.calls = BucketCounts(n.CALL_COUNT_BUCKETS)
        self.correctness = BucketCounts(n.SCORE_BUCKETS)
        self.health = BucketCounts(n.HEALTH_BUCKETS)
        self.redundant: Counter[str] = Counter()
        self.spurious: Counter[str] = Counter()
        self.over_budget = 0
        self.loops: Counter[str] = Counter()
        self.agent_duration = BucketCounts(n.GENAI_AGENT_DURATION_BUCKETS)
        self.agent_tool_calls = BucketCounts(n.GENAI_AGENT_CALL_BUCKETS)
        self.agent_inference_calls = BucketCounts(n.GENAI_AGENT_CALL_BUCKETS)

    def copy(self) -> _RunSeries:
        other = _RunSeries.__new__(_RunSeries)
        for name in self.__slots__:
            value = getattr(self, name)
            setattr(other, name, value.copy() if hasattr(value, "copy") else value)
        return other


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
        max_samples: int = b.DEFAULT_MAX_SAMPLES,
        label_mask: Callable[[str], str] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._mask = label_mask  # redaction's, when on: names from spans become label values
        self._series: dict[tuple[str, str], _Series] = {}
        # (static score, outcome, agent, tool type, error type) of a call -> where it is counted (`record`'s one look-up)
        self._known_calls: dict[tuple[Any, ...], tuple[_Series, tuple[StaticScore, str], BucketCounts, tuple[str, str, str]]] = {}
        self._durations: dict[tuple[str, str, str], BucketCounts] = {}  # by (tool, tool type, error_type): the fleet's latency
        self._error_types: Counter[str] = Counter()  # error_type values per tool label
        self._runs: dict[tuple[str, str], _RunSeries] = {}
        self._judged: set[tuple[str, str]] = set()  # (agent, task) label pairs of the judge's score series
        self._known_runs: dict[tuple[str | None, str], tuple[tuple[str, str], _RunSeries]] = {}  # (agent, task) -> place
        self._max_samples = max_samples
        self.budget = b.SampleBudget(max_samples)
        self.closed_early: Counter[str] = Counter()  # shared with the RunTracker, which counts them
        self.llm_price_sources: Counter[str] = Counter()  # LLM calls by where their price came from
        self._window_s = window_s
        self._known_tools = set(catalog.tools) if catalog else set()
        self._catalog_labels: dict[str, str] = {}  # a name a run counter saw -> its catalog tool's label
        self._unknown_tools: set[str] = set()
        self._unpriced_models: set[str] = set()  # label values, capped like unknown tools
        self._missing_tools: Counter[str] = Counter()  # calls per unknown tool label
        self._missing_models: Counter[str] = Counter()  # LLM calls per unpriced model label
        self._agents: set[str] = set()
        self._max_unknown_tools = max_unknown_tools
        self._max_agents = max_agents
        self.catalog = catalog
        self._catalog_fallback = False  # the configured catalog failed to load; the packaged one scores
        self.counters: Counter[str] = Counter()
        self.scored = 0  # tool calls scored: the one counter of every call, a plain int under the lock
        self._tallies()
        self.mirror = MultiprocessMirror() if multiprocess_dir() else None
        self.before_collect: Callable[[], object] | None = None  # e.g. process spans still queued
        self.gauges: dict[str, tuple[str, Callable[[], float]]] = {}  # self-metric gauges read at scrape time
        self.judge: JudgeMetrics | None = None  # the online judge's families, when one runs (`start_judging`)
        self.carried: Carried | None = None  # what a killed process had counted (`restore`, `serve --wal-dir`)
        self.registry = registry
        self.closed = False
        if registry is not None:
            previous = _holders.get(registry)
            if previous is not None and previous.closed:  # a shut-down processor's last counts make way
                registry.unregister(previous)
            try:
                registry.register(self)
                _holders[registry] = self
            except ValueError:  # prometheus-client lists every duplicated name: thousands of characters
                raise ValueError("otel-agent-eval: this Prometheus registry already holds otel-agent-eval's metrics (from "
                                 "another AgentEvalSpanProcessor or install()); shut that one down first, or pass "
                                 "registry=CollectorRegistry()") from None

    @property
    def catalog_fallback(self) -> bool:
        """Whether the configured catalog failed to load and the packaged one scores (`agent_eval_catalog_fallback`)."""
        return self._catalog_fallback

    @catalog_fallback.setter
    def catalog_fallback(self, value: bool) -> None:
        self._catalog_fallback = bool(value)
        if self.mirror is not None:  # multiprocess mode: the endpoint serves it from the files
            self.mirror.catalog_fallback(self._catalog_fallback)

    def describe(self) -> Iterator[Metric]:
        """The families this collector exposes, empty: how a registry detects a second registration."""
        specs = (n.TOOL_CALLS, n.TOOL_COST, n.TOOL_EXCESS_COST, n.TOOL_CONTEXT_TOKENS, n.TOOL_CONTEXT_COST, n.TOOL_CONTEXT_CALLS,
                 n.TOOL_EXCESS_LATENCY, n.TOOL_SLO_VIOLATIONS, n.TOOL_EFFICIENCY,
                 n.TOOL_DURATION, n.TOOL_LATENCY, n.RUNS, *n.RUN_HISTOGRAMS.values(), n.RUN_REDUNDANT, n.RUN_SPURIOUS,
                 n.RUN_OVER_BUDGET, n.RUN_LOOPS, n.LLM_CALLS, n.RUNS_CLOSED_EARLY, n.TOOL_EXPECTED_LATENCY, n.TOOL_LATENCY_SLO, n.TOOL_COST_PER_CALL,
                 n.EFFICIENCY_THRESHOLD, n.CATALOG_FALLBACK, n.CATALOG_UNKNOWN_TOOL_CALLS, n.CATALOG_UNPRICED_MODEL_CALLS)
        yield from (family(spec, window=self._window_s) for spec in specs)
        yield from (CounterMetricFamily(n.SELF_PREFIX + name, doc) for name, doc in n.SELF_COUNTERS.items())

    def close(self) -> None:
        """The owner shut down: the last counts stay readable until another processor takes the registry."""
        self.closed = True

    def reset_after_fork(self) -> None:
        """In a forked child: fresh locks and counts (the parent's are the parent's to report)."""
        self._lock = threading.Lock()
        self._series, self._runs, self._durations, self._error_types = {}, {}, {}, Counter()
        self._judged = set()
        self._known_calls, self._known_runs = {}, {}
        self._missing_tools, self._missing_models = Counter(), Counter()
        self.budget = b.SampleBudget(self._max_samples)
        self.counters, self.scored, self.llm_price_sources = Counter(), 0, Counter()
        self._tallies()
        self.carried = None
        if self.mirror is not None:
            self.mirror = MultiprocessMirror()
            self.mirror.catalog_fallback(self._catalog_fallback)  # the child scores with the parent's catalog
        if self.judge is not None:
            self.judge.reset()
            if self.mirror is not None:
                mirror, judge = self.mirror, self.judge
                mirror.start_judging()
                judge.on_change = lambda: mirror.write(judge.families())

    def catalog_changed(self, catalog: Catalog) -> None:
        """A reloaded catalog: its tools become known label values and its figures the gauges."""
        with self._lock:
            self.catalog = catalog
            self.catalog_fallback = False  # a reload that succeeds ends the fallback
            self._known_tools = set(catalog.tools)
            self._known_calls = {}  # keyed by the old catalog's static scores: let them go
            self._catalog_labels = {}

    def count(self, name: str, n: int = 1) -> None:
        """Bump a self-metric counter (thread-safe)."""
        with self._lock:
            self.counters[name] += n
        if self.mirror is not None:
            self.mirror.count(name, n)

    def _tallies(self) -> None:
        """The span counters the app's threads bump, lock-free; `passed`: spans seen and ignored at once (the
        processor's fast path for spans that cannot matter, core/noise.py)."""
        self.passed = Tally()
        self.seen, self.ignored = Tally(also=self.passed), Tally(also=self.passed)
        self.unscored, self.tool_calls_unscored, self.dropped_downstream = Tally(), Tally(), Tally()

    def span_ignored(self) -> None:
        self.ignored.bump()

    def record(self, score: CallScore, agent: str | None, trace_id: int = 0) -> None:
        """Account one scored call. Hot path: one look-up by the call's key (as the Collector's spanmetrics connector
        keys its accumulators) finds its series, its count and its duration histogram, then a few additions under
        one lock; a new key takes `_place`, which labels it, charges the budget and folds what does not fit."""
        static = score.static
        duration = score.duration_s
        call_key = (static, score.outcome, agent, score.tool_type, score.error_type)
        with self._lock:
            self.scored += 1
            place = self._known_calls.get(call_key)
            if place is None:
                place = self._place(score, agent, call_key)
            series, calls_key, hist, duration_labels = place
            calls = series.calls
            calls[calls_key] = calls.get(calls_key, 0) + 1
            if not static.known:
                self._missing_tools[series.labels[0]] += 1
            if duration is not None:
                hist.observe(duration, trace_id or None)  # an int; formatted as hex only when scraped
                series.window.observe(duration)
                series.excess_latency_s += score.excess_latency_s
                if score.slo_exceeded:
                    series.slo_violations += 1
            if self.mirror is not None:
                self.mirror.flush_tallies(self)
        if self.mirror is not None:
            self.mirror.record(score, series.labels, duration_labels if duration is not None else None)

    def _place(self, score: CallScore, agent: str | None,
               call_key: tuple[Any, ...]) -> tuple[_Series, tuple[StaticScore, str], BucketCounts, tuple[str, str, str]]:
        """Where a call with a new key is counted: its series (the call's label sets admitted to it, or _other_'s), its
        count's key there, its duration histogram and that one's labels (lock held). Remembered for the key only when
        the series and the histogram were found by the call's own names: a repeat then finds what this would find,
        with nothing charged or folded (a folded call comes this way each time, and is counted as folded each time)."""
        static = score.static
        key = (static.tool, agent or "")
        series = self._series.get(key)
        if series is None:
            series = self._new_series(key)
        calls_key = (static, score.outcome)
        if calls_key not in series.calls:  # new label sets, maybe: charged to the budget, or counted under _other_
            series = self._admit(series, static, score.outcome)
        error_type = "" if score.outcome != "error" else (score.error_type or "_OTHER")
        duration_key = (static.tool, score.tool_type, error_type)
        hist = self._durations.get(duration_key)
        if hist is None:
            if score.duration_s is None:  # no histogram for a call without a duration: nothing to remember either
                return series, calls_key, None, duration_key  # type: ignore[return-value]
            duration_key, hist = self._new_duration(duration_key)
        place = (series, calls_key, hist, duration_key)
        if self._series.get(key) is series and self._durations.get(duration_key) is hist:
            self._known_calls[call_key] = place
        return place

    def record_run(self, run: Any) -> None:
        """Account one evaluated `AgentRun` (called when its root span ends, not per span)."""
        evaluation = run.evaluation
        trace_id = run.trace_id or None
        now = time.time()  # one exemplar timestamp for the run's observations
        duration = evaluation.duration_s
        calls = len(run.tool_calls) + run.calls_dropped
        with self._lock:
            place = self._known_runs.get((run.agent, run.task))
            if place is None:
                place = self._place_run(run.agent, run.task)
            key, series = place
            series.outcomes[evaluation.outcome] += 1
            if duration is not None:
                series.duration.observe(duration, trace_id, now)
            series.cost.observe(evaluation.tool_cost_usd + evaluation.llm_cost_usd, trace_id, now)
            series.calls.observe(calls)
            if evaluation.tool_correctness is not None:
                series.correctness.observe(evaluation.tool_correctness)
            series.health.observe(evaluation.health, trace_id, now)
            if run.kind == AGENT_RUN:  # an invoke_agent operation, as the GenAI agent metrics count them
                if duration is not None:
                    series.agent_duration.observe(duration, trace_id, now)
                series.agent_tool_calls.observe(calls)
                series.agent_inference_calls.observe(len(run.llm_calls))
            labels = self._run_tool_labels
            redundant = labels(evaluation.redundant_calls, series.redundant) if evaluation.redundant_calls else []
            spurious = labels(evaluation.spurious_calls, series.spurious) if evaluation.spurious_calls else []
            loops = labels(evaluation.loops, series.loops) if evaluation.loops else []
            series.over_budget += evaluation.over_budget
            unpriced = [self._bounded(model, self._unpriced_models, self._max_unknown_tools)
                        for model in evaluation.unpriced_models] if evaluation.unpriced_models else []
            if unpriced:
                self.counters["unpriced_llm_calls"] += len(unpriced)
                self._missing_models.update(unpriced)
            price_sources = self.llm_price_sources
            for source in evaluation.llm_price_sources:  # Counter.update is Python code, a dozen steps per call
                price_sources[source] += 1
            if run.calls_dropped:
                self.counters["runs_calls_dropped"] += run.calls_dropped
            context = evaluation.context
            counted = None
            if context is not None and context.measured and len(context.calls) == len(run.scores):
                counted = self._context_cost(run, context, self.mirror is not None)
        if self.mirror is not None:
            self.mirror.record_run(run, key, redundant, spurious, loops, unpriced)
            if counted:
                self.mirror.record_context(counted)

    def _context_cost(self, run: Any, context: Any, listed: bool = False) -> list[tuple[tuple[str, str], int, float | None]]:
        """Each call's context cost on the (tool, agent) series it was counted on (lock held), found by the call's key
        as `record` remembered it; a call whose labels were folded is added to the `_other_` pair. Nothing new is
        labelled: no budget is charged. `listed`: also returns what it added, per call, under the series' labels
        (for the multiprocess mirror)."""
        known = self._known_calls
        counted: list[tuple[tuple[str, str], int, float | None]] = []
        for record, score, (tokens, usd, *_) in zip(run.tool_calls, run.scores, context.calls):
            if tokens is None:
                continue
            place = known.get((score.static, score.outcome, record.agent, score.tool_type, score.error_type))
            series = place[0] if place is not None else self._series.get(_OTHER_PAIR)
            if series is None:
                continue
            tally = series.context
            tally[0] += tokens
            tally[2] += 1
            if usd is not None:
                tally[1] += usd
            if listed:
                counted.append((series.labels, tokens, usd))
        return counted

    def _place_run(self, agent: str | None, task: str) -> tuple[tuple[str, str], _RunSeries]:
        """The labels and series of a run with a new (agent, task) (lock held). Remembered only when found by the run's
        own names: a repeat then finds what this would find, with nothing charged or folded (a folded run comes this way
        each time, and is counted as folded each time)."""
        key = (self._agent_label(agent or ""), task)
        series = self._runs.get(key)
        if series is None:
            key, series = self._new_run_series(key)
        if key[0] != OTHER and key != _OTHER_PAIR:
            self._known_runs[(agent, task)] = (key, series)
        return key, series

    def _tool_label(self, tool: str, *, count: bool = True) -> str:
        if tool in self._known_tools:
            return tool
        return self._bounded(tool, self._unknown_tools, self._max_unknown_tools, count=count)

    def _agent_label(self, agent: str) -> str:
        return self._bounded(agent, self._agents, self._max_agents) if agent else agent

    def _bounded(self, name: str, seen: set[str], cap: int, *, count: bool = True) -> str:
        """`name` as a label value while fewer than `cap` names were seen, else OTHER (counted)."""
        if name in seen:
            return self._label(name)
        if len(seen) < cap:
            seen.add(name)
            return self._label(name)
        if count:
            self.counters["labels_folded"] += 1
        return OTHER

    def _label(self, text: str) -> str:
        """Span text as a label value: masked when redaction is on (a tool named `token=...` is data leaving too)."""
        return label_text(text if self._mask is None else self._mask(text))

    # -- new label sets: charged to the sample budget, or folded into _other_ -----------

    def _labelled(self, table: dict[tuple[str, ...], Any], labels: tuple[str, ...], samples: int,
                  other: tuple[str, str], make: Callable[[tuple[str, str]], Any]) -> tuple[tuple[str, str], Any]:
        """`table[labels]`, made if its `samples` fit the budget; else `table[other]`, always admitted."""
        found = table.get(labels)
        if found is not None:
            return labels, found
        if labels != other:
            if self.budget.take(samples):
                found = table[labels] = make(labels)
                return labels, found
            self.counters["labels_folded"] += 1
        found = table.get(other)
        if found is None:
            self.budget.charge(samples)
            found = table[other] = make(other)
        return other, found

    def _new_series(self, key: tuple[str, str]) -> _Series:
        labels = (self._tool_label(key[0]), self._agent_label(key[1]))
        return self._labelled(self._series, labels, b.PAIR, _OTHER_PAIR, self._make_series)[1]

    def _make_series(self, labels: tuple[str, str]) -> _Series:
        return _Series(labels, self._window_s, other=labels == _OTHER_PAIR)

    def _admit(self, series: _Series, static: StaticScore, outcome: str) -> _Series:
        """The series that counts a new (static score, outcome): `series` if the label sets it adds fit."""
        exposed = (static.task, outcome, static.verdict, static.optimal_tool)
        wasted = bool(static.excess_cost_usd) and static.optimal_tool not in series.optimals
        dimensions = [(static.profile, d) for d, _ in _dimensions(static) if (static.profile, d) not in series.dimensions]
        samples = (exposed not in series.exposed) + wasted + b.EFFICIENCY * len(dimensions)
        if series.other:
            self.budget.charge(samples)
        elif samples and not self.budget.take(samples):
            self.counters["labels_folded"] += 1
            return self._admit(self._new_series(_OTHER_PAIR), static, outcome)
        series.exposed.add(exposed)
        if wasted:
            series.optimals.add(static.optimal_tool)
        series.dimensions.update(dimensions)
        return series

    def _new_duration(self, key: tuple[str, str, str]) -> tuple[tuple[str, str, str], BucketCounts]:
        """The (tool, tool type, error_type) histogram of a call: error types capped per tool, then the budget.
        A tool has one type (a few at most, from a bounded set), so the type adds no series in practice.
        Past the budget the tool folds to _other_ but the call keeps its error state ("" if it did not fail, else
        "_OTHER"), so an `error_type!=""` query still counts failures only."""
        tool = self._tool_label(key[0], count=False)  # the call's series already counted a folded name
        tool_type, error_type = self._label(key[1]), self._label(key[2])
        if (tool, tool_type, error_type) not in self._durations and self._error_types[tool] >= MAX_ERROR_TYPES:
            error_type = "_OTHER"
        other = (OTHER, "", "_OTHER" if error_type else "")
        return self._labelled(self._durations, (tool, tool_type, error_type), b.DURATION, other, self._make_duration)

    def _make_duration(self, labels: tuple[str, str]) -> BucketCounts:
        self._error_types[labels[0]] += 1
        return BucketCounts(DURATION_BUCKETS_S)

    def _new_run_series(self, key: tuple[str, str]) -> tuple[tuple[str, str], _RunSeries]:
        return self._labelled(self._runs, key, b.RUN, _OTHER_PAIR, lambda _: _RunSeries())

    def _run_tool_labels(self, tools: tuple[str, ...], counts: Counter[str]) -> list[str]:
        """Count a run's tools (redundant, spurious calls, loops) in `counts`, as labelled; the labels."""
        catalog_labels = self._catalog_labels
        labels = []
        for tool in tools:
            label = catalog_labels.get(tool)
            if label is None or label not in counts:  # a name not seen yet, or a label set that is new here
                label = self._run_tool_label(tool, counts)
            labels.append(label)
        for label in labels:  # Counter.update's own checks cost more than this
            counts[label] += 1
        return labels

    def _run_tool_label(self, tool: str, counts: Counter[str]) -> str:
        """A tool label of a run counter (redundant, spurious calls, loops): one sample each, within the budget.
        An alias or qualified name is labelled as its catalog tool, as the call's own series are."""
        known = self.catalog.tool(tool)
        label = self._tool_label(known.name if known is not None else tool)
        if known is not None and label == known.name:  # a catalog tool's label: the same whatever the budget
            if len(self._catalog_labels) >= MAX_REMEMBERED_NAMES:  # qualified names of a tool are endless
                self._catalog_labels.clear()
            self._catalog_labels[tool] = label
        if label in counts:
            return label
        if label != OTHER and self.budget.take(1):
            return label
        if label != OTHER:
            self.counters["labels_folded"] += 1
        if OTHER not in counts:
            self.budget.charge(1)
        return OTHER

    # -- scrape side: copy under the lock, build the families outside it ----------------

    def collect(self) -> Iterator[Metric]:
        if self.before_collect is not None:
            try:
                self.before_collect()
            except Exception:  # noqa: BLE001 - a scrape shows what there is
                pass
        return self.families()

    def families(self) -> Iterator[Metric]:
        """Every family as it stands now (what `collect` gives after its `before_collect`)."""
        yield from self._evaluated()
        judge = self.judge
        if judge is not None:
            yield from judge.families()

    def monotonic_state(self) -> Callable[[], bytes]:
        """The counters and histograms of the evaluation as they stand now, carried ones included: copied now (a few
        dict copies, so that whoever holds the evaluation still does so briefly), made into `carried.take`'s bytes
        by the call returned. Not the judge's: it judges apart from the requests, and a `--workers` worker writes
        them to its files apart."""
        copy = self._copy()
        return lambda: take(self._with_carried(self._families_of(copy)))

    def restore(self, state: bytes) -> None:
        """Start from a killed process's `monotonic_state` (ValueError: not one); its series take their share of the
        sample budget, so that a process started again many times still exposes a bounded number."""
        carried = Carried.load(state)
        with self._lock:
            self.budget.charge(carried.samples)
            self.carried = carried

    def _evaluated(self) -> Iterator[Metric]:
        """The families of the evaluation, with what a killed process had counted added (`carried`)."""
        return self._with_carried(self._families_of(self._copy()))

    def _with_carried(self, own: Iterator[Metric]) -> Iterator[Metric]:
        return own if self.carried is None else self.carried.apply(own)

    def _copy(self) -> tuple[Any, ...]:
        """What the families are made of, copied under the lock (the lock-free tallies read with it)."""
        with self._lock:
            tools = [(s.labels, dict(s.calls), s.window.snapshot(n.QUANTILES), s.excess_latency_s, s.slo_violations,
                      tuple(s.context)) for s in self._series.values()]
            durations = [(labels, hist.copy()) for labels, hist in self._durations.items()]
            runs = [(key, series.copy()) for key, series in self._runs.items()]
            counters = {**self.counters, "spans_scored": self.scored, "spans_seen": self.seen.value,
                        "spans_ignored": self.ignored.value, "spans_unscored": self.unscored.value,
                        "tool_calls_unscored": self.tool_calls_unscored.value,
                        "spans_dropped_downstream": self.dropped_downstream.value}
            closed_early, catalog = Counter(self.closed_early), self.catalog
            missing_tools, missing_models = Counter(self._missing_tools), Counter(self._missing_models)
            llm_sources = Counter(self.llm_price_sources)
        return tools, durations, runs, counters, closed_early, catalog, missing_tools, missing_models, llm_sources

    def _families_of(self, copy: tuple[Any, ...]) -> Iterator[Metric]:
        tools, durations, runs, counters, closed_early, catalog, missing_tools, missing_models, llm_sources = copy
        yield from self._tool_families(tools, durations)
        for spec, missing in ((n.CATALOG_UNKNOWN_TOOL_CALLS, missing_tools), (n.CATALOG_UNPRICED_MODEL_CALLS, missing_models)):
            coverage = family(spec)
            for name, count in sorted(missing.items()):
                coverage.add_metric([name], count)
            yield coverage
        yield from _run_families(runs)
        llm_calls = family(n.LLM_CALLS)
        for source, count in sorted(llm_sources.items()):
            llm_calls.add_metric([source], count)
        yield llm_calls
        yield from self._self_families(counters, closed_early)
        if catalog is not None:
            yield from catalog_families(catalog)
        fallback = family(n.CATALOG_FALLBACK)
        fallback.add_metric([], 1.0 if self.catalog_fallback else 0.0)
        yield fallback

    def start_judging(self) -> JudgeMetrics:
        """The judge's families, exposed from now on (in multiprocess mode written to the files as they change)."""
        judge = JudgeMetrics(place=self.judge_labels)
        mirror = self.mirror
        if mirror is not None:
            mirror.start_judging()
            judge.on_change = lambda: mirror.write(judge.families())
        self.judge = judge
        return judge

    def judge_labels(self, agent: str | None, task: str, judge_model: str, prompt_version: str) -> tuple[str, ...]:
        """Labels of a judge score series: the agent capped as everywhere, a new label set charged to the sample budget
        (`_other_` for agent and task past it); the judge model and prompt version are one per configuration."""
        with self._lock:
            key = (self._agent_label(agent or ""), task)
            if key not in self._judged:
                if key != _OTHER_PAIR and self.budget.take(b.JUDGE):
                    self._judged.add(key)
                else:
                    if key != _OTHER_PAIR:
                        self.counters["labels_folded"] += 1
                    if _OTHER_PAIR not in self._judged:
                        self.budget.charge(b.JUDGE)
                        self._judged.add(_OTHER_PAIR)
                    key = _OTHER_PAIR
        return (*key, self._label(judge_model), self._label(prompt_version))

    def _tool_families(self, tools: list[tuple[Any, ...]], durations: list[tuple[tuple[str, str, str], BucketCounts]]) -> Iterator[Metric]:
        calls, cost, excess_cost = family(n.TOOL_CALLS), family(n.TOOL_COST), family(n.TOOL_EXCESS_COST)
        excess_latency, slo, scores = family(n.TOOL_EXCESS_LATENCY), family(n.TOOL_SLO_VIOLATIONS), family(n.TOOL_EFFICIENCY)
        duration, latency = family(n.TOOL_DURATION), family(n.TOOL_LATENCY, window=self._window_s)
        context_tokens, context_cost, context_calls = family(n.TOOL_CONTEXT_TOKENS), family(n.TOOL_CONTEXT_COST), family(n.TOOL_CONTEXT_CALLS)
        for (tool, agent), series_calls, snap, excess_latency_s, slo_violations, context in tools:
            by_calls: Counter[tuple[str, ...]] = Counter()
            by_excess_cost: Counter[str] = Counter()
            score_counts: dict[tuple[str, str], list[int]] = {}
            score_sums: Counter[tuple[str, str]] = Counter()
            cost_usd = 0.0
            for (static, outcome), count in series_calls.items():
                by_calls[(static.task, outcome, static.verdict, static.optimal_tool)] += count
                cost_usd += static.cost_usd * count
                if static.excess_cost_usd:
                    by_excess_cost[static.optimal_tool] += static.excess_cost_usd * count
                for dimension, value in _dimensions(static):
                    counts = score_counts.setdefault((static.profile, dimension), [0] * len(n.SCORE_BUCKETS))
                    counts[bisect_left(n.SCORE_BUCKETS, value)] += count
                    score_sums[(static.profile, dimension)] += value * count
            for (task, outcome, verdict, optimal), count in by_calls.items():
                calls.add_metric([tool, agent, task, outcome, verdict, optimal], count)
            cost.add_metric([tool, agent], cost_usd)
            for optimal, usd in by_excess_cost.items():
                excess_cost.add_metric([tool, agent, optimal], usd)
            for (profile, dimension), counts in score_counts.items():
                scores.add_counts([tool, agent, profile, dimension], n.SCORE_BUCKETS, counts, score_sums[(profile, dimension)])
            excess_latency.add_metric([tool, agent], excess_latency_s)
            slo.add_metric([tool, agent], slo_violations)
            # a context series once it counted something, as the multiprocess mode writes them (no zeros)
            for counted, value in ((context_tokens, context[0]), (context_cost, context[1]), (context_calls, context[2])):
                if value:
                    counted.add_metric([tool, agent], value)
            labels = {n.TOOL: tool, n.AGENT: agent}
            for q, value in zip(n.QUANTILES, snap.quantiles):
                latency.add_sample(n.TOOL_LATENCY.name, {**labels, "quantile": str(q)}, value)
            latency.add_sample(n.TOOL_LATENCY.name + "_count", labels, snap.total_count)
            latency.add_sample(n.TOOL_LATENCY.name + "_sum", labels, snap.total_sum)
        for (tool, tool_type, error_type), hist in durations:
            duration.add_counts([tool, tool_type, error_type], hist.bounds, hist.counts, hist.sum, hist.exemplars)
        yield from (calls, cost, excess_cost, context_tokens, context_cost, context_calls, excess_latency, slo, scores, duration,
                    latency)

    def _self_families(self, values: dict[str, int], closed_early: Counter[str]) -> Iterator[Metric]:
        for name, doc in n.SELF_COUNTERS.items():
            yield CounterMetricFamily(n.SELF_PREFIX + name, doc, value=values.get(name, 0))
        closed = family(n.RUNS_CLOSED_EARLY)
        for reason in ("ttl", "capacity", "shutdown"):
            closed.add_metric([reason], closed_early[reason])
        yield closed
        for name, (doc, read) in self.gauges.items():
            try:
                kind = CounterMetricFamily if name.endswith("_total") else GaugeMetricFamily
                yield kind(n.SELF_PREFIX + name.removesuffix("_total"), doc, value=read())
            except Exception:  # noqa: BLE001 - a scrape shows what it can
                continue


def _run_families(runs: list[tuple[tuple[str, str], _RunSeries]]) -> Iterator[Metric]:
    outcomes, redundant, spurious, over_budget = family(n.RUNS), family(n.RUN_REDUNDANT), family(n.RUN_SPURIOUS), family(n.RUN_OVER_BUDGET)
    loops = family(n.RUN_LOOPS)
    histograms = {field: family(spec) for field, spec in n.RUN_HISTOGRAMS.items()}
    for (agent, task), series in runs:
        for outcome, count in series.outcomes.items():
            outcomes.add_metric([agent, task, outcome], count)
        for field, hist_family in histograms.items():
            hist = getattr(series, field)
            if hist.count:
                hist_family.add_counts([agent, task], hist.bounds, hist.counts, hist.sum, hist.exemplars)
        for tool, count in series.redundant.items():
            redundant.add_metric([agent, task, tool], count)
        for tool, count in series.spurious.items():
            spurious.add_metric([agent, task, tool], count)
        for tool, count in series.loops.items():
            loops.add_metric([agent, task, tool], count)
        over_budget.add_metric([agent, task], series.over_budget)
    yield from (outcomes, *histograms.values(), redundant, spurious, over_budget, loops)


def _dimensions(static: StaticScore) -> list[tuple[str, float]]:
    values = [("efficiency", static.efficiency), ("cost", static.cost_score), ("latency", static.latency_score)]
    if static.complexity_score is not None:
        values.append(("complexity", static.complexity_score))
    return values

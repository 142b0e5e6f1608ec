"""What scoring recorded traces found, per agent and task and per tool: the `Report` of `score_traces`.

`ReportBuilder` is fed by the pipeline's own callbacks (`on_call(record, score)`,
`on_run(run)`), so every figure comes from the scores the live processor would give. Memory
does not grow with the number of spans: per (agent, task, tool) a few sums and a latency
sketch (the live summary's estimator, within 0.5 % of the exact nearest-rank quantile), per
tool over all agents another, two fixed histograms (per-call efficiency, run health) and
the `worst_runs` lowest-health runs (a bounded heap) with their tool sequences.

    >>> builder = ReportBuilder(catalog, environment="staging")
    >>> pipeline, _ = build_pipeline(catalog, registry=None, on_call=builder.call, on_run=builder.run)
    >>> report = builder.build(stats)
"""
from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.catalog import Catalog, GateLevel, Thresholds
from ..core.prices import CATALOG, GENAI_PRICES, PRICE_SOURCES, REPORTED, UNPRICED
from ..core.recognize import ToolCallRecord
from ..core.runs import AgentRun
from ..core.scoring import ERROR, SUBOPTIMAL, CallScore
from ..metrics.window import SlidingQuantiles
from .recorded import ReadStats

__all__ = ["Coverage", "EFFICIENCY_BINS", "HEALTH_BINS", "GroupSummary", "PoorChoice", "Report", "ReportBuilder", "RunCall", "RunSummary",
           "ToolLatency", "ToolSummary", "llm_prices_note", "printable"]

# C0 and C1 controls, line and paragraph separators, bidi marks, embeddings, overrides and isolates, lone surrogates
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: str, unprintable: re.Pattern[str] = _UNPRINTABLE) -> str:
    """`text` with its control, bidi and lone surrogate characters (or those `unprintable` matches) as visible escapes
    (`\\n`, `\\x1b`, `\\u202e`), the rest as it is: a name from a span, printed to a terminal, cannot colour it, move
    the cursor or forge a line."""
    return unprintable.sub(lambda m: repr(m.group())[1:-1], text)


MAX_AGENTS = 1_000  # distinct agent names reported; more are summed under OTHER
OTHER = "_other_"


class AgentGroups:
    """An agent's name as a report groups it: the first `MAX_AGENTS` names as they are, later ones
    under OTHER, so a flood of names cannot grow a report without bound."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, agent: str | None) -> str:
        if not agent:
            return ""
        if agent in self._seen:
            return agent
        if len(self._seen) >= MAX_AGENTS:
            return OTHER
        self._seen.add(agent)
        return agent
QUANTILES = (0.5, 0.95, 0.99)
EFFICIENCY_BINS = 20  # per-call efficiency histogram: equal bins over [0, 1], the last one closed
HEALTH_BINS = 10  # run health histogram: equal bins over [0, 100], the last one closed
WORST_RUNS = 10  # lowest-health runs kept, with their tool sequences
MAX_RUN_CALLS = 50  # calls of a worst run kept in its sequence; the rest are counted


@dataclass(frozen=True)
class ToolSummary:
    """One tool as used by one agent for one task."""

    agent: str
    task: str
    tool: str
    optimal_tool: str
    known: bool  # in the catalog
    calls: int
    errors: int
    efficiency: float  # mean per-call efficiency, 0-1 (the catalog's, as live)
    wasted_usd: float  # sum of the calls' excess cost over the optimal tool
    cost_usd: float
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    slo_violations: int
    outcomes: dict[str, int]
    latency_slo_s: float | None = None  # the catalog's latency SLO for the tool, if it has one


@dataclass(frozen=True)
class ToolLatency:
    """One tool's latency over all agents and tasks, against the catalog's SLO."""

    tool: str
    known: bool
    calls: int  # calls with a duration
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    latency_slo_s: float | None
    slo_violations: int


@dataclass(frozen=True)
class RunCall:
    """One tool call in a run's sequence."""

    tool: str
    outcome: str  # optimal, suboptimal, unknown, error, ...
    optimal_tool: str
    efficiency: float
    wasted_usd: float
    duration_s: float | None


@dataclass(frozen=True)
class RunSummary:
    """One agent run, kept for the report because it was among the least healthy."""

    agent: str
    task: str
    trace_id: str  # 32 hex digits
    root_name: str
    health: float  # 0-100
    completed: bool
    completion_reason: str
    status: str
    closed_by: str
    cost_usd: float
    wasted_usd: float
    duration_s: float | None
    calls: tuple[RunCall, ...]  # in the order they ended, at most MAX_RUN_CALLS
    calls_not_shown: int  # calls beyond MAX_RUN_CALLS and calls the run tracker dropped
    problems: tuple[str, ...]  # spurious, redundant, invalid calls; over budget
    llm_cost_usd: float = 0.0
    llm_priced_by: tuple[str, ...] = ()  # where its LLM calls' prices came from (catalog, reported, genai_prices, unpriced)


@dataclass(frozen=True)
class GroupSummary:
    """One agent on one task: its calls (over all tools) and its runs."""

    agent: str  # "" when no agent was recognised
    task: str  # "" when no task route matched
    calls: int
    efficiency: float | None  # mean over the calls; None without calls
    wasted_usd: float
    runs: int
    completed: int
    completion: float | None  # completed / runs
    cost_per_run_usd: float | None  # tools and priced LLM tokens
    health: float | None  # mean run health, 0-100
    correctness: float | None  # mean tool correctness of runs with expected tools
    duration_s: float | None  # mean run duration
    runs_closed_early: int  # runs whose root span never came (closed by TTL, capacity or end of input)
    tools: tuple[ToolSummary, ...]
    wasted_per_run_usd: float | None = None  # money spent over the optimal tools in the runs, per run
    p95_s: float | None = None  # 95th percentile run duration (the latency sketch: within 0.5 %)
    llm_cost_per_run_usd: float | None = None  # the LLM part of cost_per_run_usd
    llm_priced_by: tuple[str, ...] = ()  # where the runs' LLM calls' prices came from, each source once
    judge_score: float | None = None  # mean judged tool correctness (`score --judge`); None when none was judged
    judged_runs: int = 0

    @property
    def name(self) -> str:
        return f"{self.agent or '(no agent)'}/{self.task or '(unrouted)'}"


@dataclass(frozen=True)
class PoorChoice:
    """A suboptimal tool used where the catalog names a better one, and what it cost."""

    task: str
    tool: str
    optimal_tool: str
    calls: int
    wasted_usd: float


@dataclass(frozen=True)
class Coverage:
    """What the catalog lacks for these traces: tools called that it does not know, models it cannot price."""

    unknown_tools: tuple[tuple[str, int], ...] = ()  # (name as called, calls), most calls first
    unpriced_models: tuple[tuple[str, int], ...] = ()  # (model, LLM calls), most calls first; only models whose
    # calls used tokens: one that used none costs nothing whatever its price
    commented_models: tuple[str, ...] = ()  # of the unpriced models, those the catalog file names in a commented
    # line (a draft's `#   model: {input_per_1k: ...}`): `catalog draft --merge` adds nothing for them

    @property
    def complete(self) -> bool:
        return not self.unknown_tools and not self.unpriced_models

    @property
    def prices_to_set(self) -> bool:
        """All the catalog lacks is prices of models it already names in comments: the next step is to set them
        under `models:` (and uncomment them), not another draft, which would find nothing to add."""
        return (not self.unknown_tools and bool(self.unpriced_models)
                and {m for m, _ in self.unpriced_models} <= set(self.commented_models))

    def describe(self, limit: int = 5) -> str:
        """`the catalog lacks 2 tools (a: 7 calls, b: 1 call) and the price of 1 model (m: 3 calls)`, or ""."""
        parts = [f"{_count(len(items), what)} ({_some(items, limit)})" for items, what in
                 ((self.unknown_tools, "tool"), (self.unpriced_models, "model price")) if items]
        return f"the catalog lacks {' and '.join(parts)}" if parts else ""

    def to_dict(self) -> dict[str, Any]:
        return {"unknown_tools": [{"tool": t, "calls": n} for t, n in self.unknown_tools],
                "unpriced_models": [{"model": m, "calls": n} for m, n in self.unpriced_models],
                "commented_models": list(self.commented_models), "prices_to_set": self.prices_to_set}


def commented_models(text: str, models: Iterable[str]) -> tuple[str, ...]:
    """The models a commented line of the catalog text names as a key (`#   name: ...`, the name plain or
    quoted as a draft writes it): priced there once the user uncomments and fills the line in."""
    found = []
    for model in models:
        keys = {re.escape(model), re.escape(json.dumps(model, ensure_ascii=False))}
        if re.search(rf"^#\s+(?:{'|'.join(sorted(keys))}):", text, re.M):
            found.append(model)
    return tuple(found)


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _some(items: tuple[tuple[str, int], ...], limit: int) -> str:
    shown = ", ".join(f"{printable(name)}: {_count(calls, 'call')}" for name, calls in items[:limit])
    return shown if len(items) <= limit else f"{shown}, {len(items) - limit:,} more"


@dataclass(frozen=True)
class Report:
    """Scores of recorded traces, per agent and task; `to_dict()` for JSON."""

    groups: tuple[GroupSummary, ...]
    poor_choices: tuple[PoorChoice, ...]
    inputs: ReadStats
    catalog: str
    environment: str
    thresholds: Thresholds
    calls: int
    runs: int
    efficiency_histogram: tuple[int, ...] = (0,) * EFFICIENCY_BINS  # calls per efficiency bin
    health_histogram: tuple[int, ...] = (0,) * HEALTH_BINS  # runs per health bin
    tool_latency: tuple[ToolLatency, ...] = ()  # per tool over all agents, most calls first
    worst_runs: tuple[RunSummary, ...] = ()  # lowest health first
    gate_levels: Mapping[str, GateLevel] = field(default_factory=dict)  # the catalog's `gates` for the environment
    coverage: Coverage = Coverage()
    llm_calls_by_price_source: Mapping[str, int] = field(default_factory=dict)  # LLM calls of the runs, by price source
    judge: Any = None  # `offline.judging.JudgeSummary` when `score --judge` judged runs

    @property
    def wasted_usd(self) -> float:
        return math.fsum(g.wasted_usd for g in self.groups)

    def group(self, agent: str, task: str) -> GroupSummary | None:
        return next((g for g in self.groups if g.agent == agent and g.task == task), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "catalog": self.catalog,
            "environment": self.environment,
            "thresholds": {"warn": self.thresholds.warn, "fail": self.thresholds.fail},
            "gate_levels": {metric: {"fail": level.fail, "warn": level.warn, "higher_is_better": level.higher_is_better}
                            for metric, level in self.gate_levels.items()},
            "inputs": self.inputs.as_dict(),
            "totals": {"tool_calls": self.calls, "runs": self.runs, "wasted_usd": self.wasted_usd},
            "groups": [_group_dict(g) for g in self.groups],
            "poor_choices": [vars(p) for p in self.poor_choices],
            "efficiency_histogram": list(self.efficiency_histogram),
            "health_histogram": list(self.health_histogram),
            "tool_latency": [vars(t) for t in self.tool_latency],
            "worst_runs": [{**vars(r), "calls": [vars(c) for c in r.calls], "problems": list(r.problems),
                            "llm_priced_by": list(r.llm_priced_by)} for r in self.worst_runs],
            "coverage": self.coverage.to_dict(),
            "llm_prices": {"calls_by_source": dict(self.llm_calls_by_price_source)},
            **({"judge": self.judge.to_dict()} if self.judge is not None else {}),
        }


_SOURCE_WORDS = {CATALOG: "by the catalog's models", REPORTED: "by the cost the spans report", GENAI_PRICES: "by genai-prices"}


def _used_tokens(run: AgentRun, model: str) -> bool:
    """Whether the run's calls of `model` used any token: the price of one that used none changes no cost."""
    return any(call.model == model and (call.input_tokens or call.output_tokens) for call in run.llm_calls)


def _catalog_text(source: str) -> str:
    """The catalog file's text, for its commented lines ("" for the packaged catalog or one not read from a file)."""
    if source.startswith("<"):
        return ""
    try:
        with open(source, encoding="utf-8", errors="replace") as file:
            return file.read(MAX_CATALOG_SCAN)
    except OSError:
        return ""


MAX_CATALOG_SCAN = 10_000_000  # characters of a catalog file searched for commented model lines


def llm_prices_note(report: Report) -> str | None:
    """Where the LLM calls' prices came from, in one sentence (the models nothing prices are in `coverage`);
    None without LLM calls."""
    by_source = report.llm_calls_by_price_source
    if not by_source:
        return None
    priced = [f"{by_source[s]:,} {_SOURCE_WORDS[s]}" for s in PRICE_SOURCES if s != UNPRICED and by_source.get(s)]
    note = "LLM calls priced: " + (", ".join(priced) if priced else "none")
    if by_source.get(UNPRICED):
        unpriced = by_source[UNPRICED]
        listed = sum(n for _, n in report.coverage.unpriced_models)
        note += f"; {unpriced:,} unpriced by every source, not in the runs' cost"
        note += " (their models: see Coverage)" if listed else " (they used no tokens: they cost nothing)"
    return note + "."


def _group_dict(group: GroupSummary) -> dict[str, Any]:
    data = {k: v for k, v in vars(group).items() if k != "tools"}
    data["tools"] = [dict(vars(t)) for t in group.tools]
    data["llm_priced_by"] = list(group.llm_priced_by)
    return data


class _ToolAcc:
    __slots__ = ("optimal_tool", "known", "slo_s", "calls", "errors", "efficiency", "wasted", "cost", "latency", "slo", "outcomes")

    def __init__(self, score: CallScore) -> None:
        self.optimal_tool, self.known, self.slo_s = score.static.optimal_tool, score.static.known, score.static.latency_slo_s
        self.calls = self.errors = self.slo = 0
        self.efficiency = self.wasted = self.cost = 0.0
        self.latency = SlidingQuantiles(1.0, sub_windows=1, clock=_never)  # one window forever: all calls
        self.outcomes: Counter[str] = Counter()


class _RunAcc:
    __slots__ = ("runs", "completed", "cost", "health", "correctness", "correctness_runs", "duration", "duration_runs", "early",
                 "wasted", "durations", "llm_cost", "llm_sources")

    def __init__(self) -> None:
        self.runs = self.completed = self.correctness_runs = self.duration_runs = self.early = 0
        self.cost = self.health = self.correctness = self.duration = self.wasted = self.llm_cost = 0.0
        self.llm_sources: set[str] = set()
        self.durations = SlidingQuantiles(1.0, sub_windows=1, clock=_never)  # one window forever: all runs


class _LatencyAcc:
    __slots__ = ("known", "slo_s", "slo", "latency")

    def __init__(self, score: CallScore) -> None:
        self.known, self.slo_s, self.slo = score.static.known, score.static.latency_slo_s, 0
        self.latency = SlidingQuantiles(1.0, sub_windows=1, clock=_never)


def _never() -> float:
    return 0.0


def _bin(value: float, low: float, high: float, bins: int) -> int:
    """The bin of `value` among `bins` equal ones over [low, high]; out-of-range values go to the end bins."""
    if not value > low:  # also NaN
        return 0
    return min(bins - 1, int((value - low) / (high - low) * bins))


def _run_summary(run: AgentRun, agent: str) -> RunSummary:
    evaluation = run.evaluation
    assert evaluation is not None
    calls = tuple(RunCall(tool=s.static.tool, outcome=s.outcome, optimal_tool=s.static.optimal_tool,
                          efficiency=s.static.efficiency, wasted_usd=s.static.excess_cost_usd, duration_s=s.duration_s)
                  for s in run.scores[:MAX_RUN_CALLS])
    problems = [*(f"spurious: {t}" for t in evaluation.spurious_calls), *(f"redundant: {t}" for t in evaluation.redundant_calls),
                *(f"invalid: {t}" for t in evaluation.invalid_calls)]
    if evaluation.over_budget:
        problems.append("over the route's call budget")
    return RunSummary(
        agent=agent, task=run.task, trace_id=f"{run.trace_id:032x}", root_name=run.root_name, health=evaluation.health,
        completed=evaluation.completed, completion_reason=evaluation.completion_reason, status=run.status,
        closed_by=run.closed_by, cost_usd=evaluation.cost_usd, wasted_usd=math.fsum(s.static.excess_cost_usd for s in run.scores),
        duration_s=evaluation.duration_s, calls=calls,
        calls_not_shown=max(0, len(run.scores) - MAX_RUN_CALLS) + run.calls_dropped, problems=tuple(problems),
        llm_cost_usd=evaluation.llm_cost_usd, llm_priced_by=evaluation.llm_priced_by)


class ReportBuilder:
    """Accumulates scored calls and evaluated runs (the pipeline's callbacks) into a `Report`."""

    def __init__(self, catalog: Catalog, environment: str | None = None, *, worst_runs: int = WORST_RUNS) -> None:
        if worst_runs < 0:
            raise ValueError(f"worst_runs must be >= 0, got {worst_runs}")
        self.catalog = catalog
        self.environment = environment
        self.calls = self.runs = 0
        self._efficiency_bins = [0] * EFFICIENCY_BINS
        self._health_bins = [0] * HEALTH_BINS
        self._latency: dict[str, _LatencyAcc] = {}  # by tool, over all agents and tasks
        self._worst_size = worst_runs
        self._worst: list[tuple[float, int, RunSummary]] = []  # a heap on (-health, -seq): its root is the healthiest kept
        self._tools: dict[tuple[str, str, str], _ToolAcc] = {}  # by (agent, task, tool)
        self._runs: dict[tuple[str, str], _RunAcc] = {}  # by (agent, task)
        self._poor: dict[tuple[str, str, str], list[float]] = {}  # (task, tool, optimal tool) -> [calls, wasted]
        self._agent = AgentGroups()
        self._unpriced: Counter[str] = Counter()  # LLM calls per model the catalog cannot price, up to MAX_AGENTS models
        self._llm_sources: Counter[str] = Counter()  # LLM calls by where their price came from

    def call(self, record: ToolCallRecord, score: CallScore) -> None:
        static = score.static
        key = (self._agent(record.agent), static.task, static.tool)
        acc = self._tools.get(key)
        if acc is None:
            acc = self._tools[key] = _ToolAcc(score)
        self.calls += 1
        acc.calls += 1
        acc.errors += score.outcome == ERROR
        acc.efficiency += static.efficiency
        acc.wasted += static.excess_cost_usd
        acc.cost += static.cost_usd
        acc.slo += score.slo_exceeded
        acc.outcomes[score.outcome] += 1
        self._efficiency_bins[_bin(static.efficiency, 0.0, 1.0, EFFICIENCY_BINS)] += 1
        if score.duration_s is not None:
            acc.latency.observe(score.duration_s)
            latency = self._latency.get(static.tool)
            if latency is None:
                latency = self._latency[static.tool] = _LatencyAcc(score)
            latency.latency.observe(score.duration_s)
            latency.slo += score.slo_exceeded
        if static.outcome == SUBOPTIMAL:  # the choice was poor, whether or not the call then failed
            poor = self._poor.setdefault((static.task, static.tool, static.optimal_tool), [0, 0.0])
            poor[0] += 1
            poor[1] += static.excess_cost_usd

    def run(self, run: AgentRun) -> None:
        evaluation = run.evaluation
        if evaluation is None:
            return
        key = (self._agent(run.agent), run.task)
        acc = self._runs.get(key)
        if acc is None:
            acc = self._runs[key] = _RunAcc()
        self.runs += 1
        acc.runs += 1
        acc.completed += evaluation.completed
        acc.cost += evaluation.cost_usd
        acc.llm_cost += evaluation.llm_cost_usd
        if evaluation.llm_price_sources:
            acc.llm_sources.update(evaluation.llm_price_sources)
            for source in evaluation.llm_price_sources:  # (Counter.update is Python code, a dozen steps per call)
                self._llm_sources[source] += 1
        acc.health += evaluation.health
        acc.early += run.closed_by != "end"
        acc.wasted += math.fsum(s.static.excess_cost_usd for s in run.scores)
        if evaluation.tool_correctness is not None:
            acc.correctness += evaluation.tool_correctness
            acc.correctness_runs += 1
        if evaluation.duration_s is not None:
            acc.duration += evaluation.duration_s
            acc.duration_runs += 1
            acc.durations.observe(evaluation.duration_s)
        self._health_bins[_bin(evaluation.health, 0.0, 100.0, HEALTH_BINS)] += 1
        for model in evaluation.unpriced_models:
            if (model in self._unpriced or len(self._unpriced) < MAX_AGENTS) and _used_tokens(run, model):
                self._unpriced[model] += 1
        self._keep_if_worst(run, key[0])

    def _keep_if_worst(self, run: AgentRun, agent: str) -> None:
        """Keep `run` among the `worst_runs` least healthy (ties: the earlier run); O(log N), built only when kept."""
        assert run.evaluation is not None
        key = (-run.evaluation.health, -self.runs)
        worst = self._worst
        if len(worst) >= self._worst_size and not (worst and key > worst[0][:2]):
            return
        item = (*key, _run_summary(run, agent))
        if len(worst) < self._worst_size:
            heapq.heappush(worst, item)
        else:
            heapq.heapreplace(worst, item)

    def build(self, inputs: ReadStats) -> Report:
        tools_by_group: dict[tuple[str, str], list[ToolSummary]] = {}
        for (agent, task, tool), acc in self._tools.items():
            quantiles = acc.latency.quantiles(QUANTILES) if acc.latency.count else [math.nan] * 3
            p50, p95, p99 = (None if math.isnan(q) else q for q in quantiles)
            tools_by_group.setdefault((agent, task), []).append(ToolSummary(
                agent=agent, task=task, tool=tool, optimal_tool=acc.optimal_tool, known=acc.known, calls=acc.calls,
                errors=acc.errors, efficiency=acc.efficiency / acc.calls, wasted_usd=acc.wasted, cost_usd=acc.cost,
                p50_s=p50, p95_s=p95, p99_s=p99, slo_violations=acc.slo, outcomes=dict(acc.outcomes), latency_slo_s=acc.slo_s))
        groups = []
        for key in sorted({*tools_by_group, *self._runs}):
            tools = sorted(tools_by_group.get(key, ()), key=lambda t: (-t.wasted_usd, -t.calls, t.tool))
            calls = sum(t.calls for t in tools)
            runs = self._runs.get(key) or _RunAcc()
            groups.append(GroupSummary(
                agent=key[0], task=key[1], calls=calls,
                efficiency=math.fsum(t.efficiency * t.calls for t in tools) / calls if calls else None,
                wasted_usd=math.fsum(t.wasted_usd for t in tools), runs=runs.runs, completed=runs.completed,
                completion=runs.completed / runs.runs if runs.runs else None,
                cost_per_run_usd=runs.cost / runs.runs if runs.runs else None,
                health=runs.health / runs.runs if runs.runs else None,
                correctness=runs.correctness / runs.correctness_runs if runs.correctness_runs else None,
                duration_s=runs.duration / runs.duration_runs if runs.duration_runs else None,
                runs_closed_early=runs.early, tools=tuple(tools),
                wasted_per_run_usd=runs.wasted / runs.runs if runs.runs else None,
                p95_s=runs.durations.quantiles((0.95,))[0] if runs.durations.count else None,
                llm_cost_per_run_usd=runs.llm_cost / runs.runs if runs.runs else None,
                llm_priced_by=tuple(s for s in PRICE_SOURCES if s in runs.llm_sources)))
        poor = sorted((PoorChoice(task, tool, optimal, int(n), usd) for (task, tool, optimal), (n, usd) in self._poor.items()),
                      key=lambda p: (-p.wasted_usd, -p.calls, p.task, p.tool))
        latency = []
        for tool, lat in self._latency.items():
            p50, p95, p99 = lat.latency.quantiles(QUANTILES)
            latency.append(ToolLatency(tool=tool, known=lat.known, calls=lat.latency.count, p50_s=p50, p95_s=p95, p99_s=p99,
                                       latency_slo_s=lat.slo_s, slo_violations=lat.slo))
        latency.sort(key=lambda t: (-t.calls, t.tool))
        worst = tuple(item[2] for item in sorted(self._worst, reverse=True))  # lowest health first; ties: earlier run first
        unknown: Counter[str] = Counter()
        for (_, _, tool), acc in self._tools.items():
            if not acc.known:
                unknown[tool] += acc.calls
        by_calls = lambda item: (-item[1], item[0])  # noqa: E731
        unpriced = tuple(sorted(self._unpriced.items(), key=by_calls))
        coverage = Coverage(tuple(sorted(unknown.items(), key=by_calls)), unpriced,
                            commented_models(_catalog_text(self.catalog.source), (m for m, _ in unpriced)) if unpriced else ())
        return Report(groups=tuple(groups), poor_choices=tuple(poor), inputs=inputs, catalog=self.catalog.source,
                      environment=self.environment or self.catalog.default_environment,
                      thresholds=self.catalog.thresholds_for(self.environment), calls=self.calls, runs=self.runs,
                      efficiency_histogram=tuple(self._efficiency_bins), health_histogram=tuple(self._health_bins),
                      tool_latency=tuple(latency), worst_runs=worst,
                      gate_levels=dict(self.catalog.gates_for(self.environment)), coverage=coverage,
                      llm_calls_by_price_source={s: self._llm_sources[s] for s in PRICE_SOURCES if self._llm_sources[s]})


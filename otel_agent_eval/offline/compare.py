"""Compare two sets of recorded traces (e.g. main vs. a branch's agent): `compare_traces(base, head) -> Comparison`.

Both sets are scored by `score_traces`, the live processor's core, with the same catalog,
profile and environment. Per agent and task, each metric is a statistic of the group's
*runs* (the unit that is independent; calls within a run are not):

    efficiency          mean tool-call efficiency (sum over runs / calls over runs; as `score`)   higher is better
    wasted_per_run_usd  money spent over the catalog's optimal tools, per run                    lower is better
    cost_per_run_usd    tools and priced LLM tokens, per run                                     lower is better
    completion          share of runs completed                                                  higher is better
    p95_s, p99_s        run duration quantiles (nearest rank)                                    lower is better
    judge_score         mean judged tool correctness, with --judge (docs/judge.md)               higher is better

Whether a change is beyond noise: a seeded percentile **bootstrap** of the difference
(head - base), resampling each side's runs with replacement (`resamples` times, each side on
its own, a cluster bootstrap: a run's calls stay together). One method for means, ratios and
quantiles alike, in the metric's own units, with no assumption about the shape of the data
(money wasted is mostly zeros and a few costly runs). The intervals hold *together*: the
level of each is Bonferroni-adjusted over every comparison tested (95 % family-wise by
default), so a report of 30 metrics does not cry wolf once in every few comparisons of the
same agent. A change is a regression when it is worse and its interval excludes zero.

A metric is tested only with enough runs on both sides: `MIN_RUNS` for means; for a
quantile q, at least `MIN_TAIL_RUNS` runs beyond it (p95: 200 runs, p99: 1,000), as the
bootstrap of a tail quantile from a few runs is too narrow to trust. Untested changes are
shown with the reason. Per tool (calls per run, efficiency, money wasted per run, call
latency p95/p99) the figures are side by side, not tested: a tool used more or less is not
by itself better or worse; the group's metrics say whether it was.

Memory: per agent/task group and side, streaming sums plus a uniform reservoir sample of at
most `MAX_RUNS_PER_GROUP` runs (five floats each, ~0.3 MB per group); the groups are bounded
as in the `Report` (1,000 agents). Beyond the cap the interval comes from the sample, so it is
wider, not narrower, than on all runs. Time, in plain Python: ~1.5 s per group and side for
1,000 runs at 2,000 resamples (so at most ~3 s each, at the cap), beside scoring itself.

    >>> comparison = compare_traces("traces/main", "traces/branch", environment="staging")
    >>> [str(change) for change in comparison.regressions]
    ['support_agent/faq: efficiency 1 -> 0.8981 (-0.1019, interval -0.1375 to -0.0712)',
     'support_agent/faq: wasted_per_run_usd 0 -> 0.00064 (+0.00064, interval +0.00044 to +0.0008645)', ...]
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config.catalog import Catalog, PathLike, load_catalog
from ..core.runs import AgentRun
from .recorded import FileProblem, PathArg, TraceInputError
from .judging import OfflineJudging
from .report import AgentGroups, GroupSummary, Report
from .score import score_traces

__all__ = ["MAX_RESAMPLES", "METRICS", "Change", "Comparison", "GroupComparison", "ToolComparison", "compare_traces"]

DEFAULT_RESAMPLES = 2_000
MAX_RESAMPLES = 100_000  # ~75 s per group and side at 1,000 runs: beyond, a typo that would run for hours
DEFAULT_CONFIDENCE = 0.95
MAX_RUNS_PER_GROUP = 2_000  # runs held per group and side for the bootstrap (a uniform reservoir sample)
MIN_RUNS = 20  # runs on each side before a mean is tested
MIN_TAIL_RUNS = 10  # runs beyond a quantile on each side before it is tested
METHOD = "bootstrap"

# metric -> (what it is, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "efficiency": ("mean tool-call efficiency, 0-1", True),
    "wasted_per_run_usd": ("money wasted over the optimal tools per run, USD", False),
    "cost_per_run_usd": ("cost per run (tools and priced LLM tokens), USD", False),
    "completion": ("share of runs completed, 0-1", True),
    "p95_s": ("95th percentile run duration, seconds", False),
    "p99_s": ("99th percentile run duration, seconds", False),
    "judge_score": ("mean judged tool correctness (--judge: deepeval's metric with an LLM judge), 0-1", True),
}
JUDGE_SCORE = "judge_score"  # compared only when both sides were judged
_QUANTILES = {"p95_s": 0.95, "p99_s": 0.99}


@dataclass(frozen=True)
class Change:
    """One metric of one agent/task group, base against head."""

    group: str
    metric: str
    base: float | None
    head: float | None
    low: float | None  # the interval of head - base; None when not tested
    high: float | None
    confidence: float | None  # of this interval alone (Bonferroni-adjusted); None when not tested
    untested: str = ""  # why there is no interval

    @property
    def delta(self) -> float | None:
        return None if self.base is None or self.head is None else self.head - self.base

    @property
    def tested(self) -> bool:
        return self.low is not None

    @property
    def beyond_noise(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    @property
    def worse(self) -> bool:
        delta = self.delta
        if not delta:
            return False
        return delta < 0 if METRICS[self.metric][1] else delta > 0

    @property
    def regression(self) -> bool:
        return self.beyond_noise and self.worse

    @property
    def improvement(self) -> bool:
        return self.beyond_noise and not self.worse

    def __str__(self) -> str:
        text = f"{self.group}: {self.metric} {_number(self.base)} -> {_number(self.head)}"
        if self.delta is not None:
            text += f" ({self.delta:+.4g}"
            text += f", interval {self.low:+.4g} to {self.high:+.4g})" if self.tested else f"; {self.untested})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "base": self.base, "head": self.head, "delta": self.delta, "low": self.low,
                "high": self.high, "confidence": self.confidence, "tested": self.tested, "untested": self.untested or None,
                "beyond_noise": self.beyond_noise, "regression": self.regression, "improvement": self.improvement}


@dataclass(frozen=True)
class ToolComparison:
    """One tool of one agent/task group, side by side (not tested)."""

    agent: str
    task: str
    tool: str
    optimal_tool: str
    base_calls_per_run: float | None
    head_calls_per_run: float | None
    base_efficiency: float | None
    head_efficiency: float | None
    base_wasted_per_run_usd: float | None
    head_wasted_per_run_usd: float | None
    base_p95_s: float | None
    head_p95_s: float | None
    base_p99_s: float | None
    head_p99_s: float | None


@dataclass(frozen=True)
class GroupComparison:
    """One agent on one task in both trace sets."""

    agent: str
    task: str
    base_runs: int
    head_runs: int
    changes: tuple[Change, ...]
    tools: tuple[ToolComparison, ...]

    @property
    def name(self) -> str:
        return f"{self.agent or '(no agent)'}/{self.task or '(unrouted)'}"

    def change(self, metric: str) -> Change:
        return next(c for c in self.changes if c.metric == metric)


@dataclass(frozen=True)
class Comparison:
    """What changed from `base` to `head`, per agent and task; `regressions`, `to_dict()` for JSON."""

    base: Report
    head: Report
    groups: tuple[GroupComparison, ...]
    method: str
    confidence: float  # family-wise, over all `tests` intervals
    tests: int
    resamples: int
    seed: int

    @property
    def changes(self) -> list[Change]:
        return [c for g in self.groups for c in g.changes]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    @property
    def improvements(self) -> list[Change]:
        return [c for c in self.changes if c.improvement]

    def group(self, agent: str, task: str) -> GroupComparison | None:
        return next((g for g in self.groups if g.agent == agent and g.task == task), None)

    def describe_method(self) -> str:
        return (f"{self.method}: percentile interval of head - base over {self.resamples:,} resamples of runs (seed {self.seed}); "
                + (f"{self.confidence:.0%} family-wise over {self.tests:,} tested comparison{'s' if self.tests != 1 else ''} (Bonferroni)"
                   if self.tests else "no comparison tested"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": {"name": self.method, "statistic": "difference of per-run statistics (head - base)",
                       "interval": "bootstrap percentile, runs resampled per side", "resamples": self.resamples,
                       "seed": self.seed, "confidence": self.confidence, "correction": "bonferroni", "tests": self.tests,
                       "description": self.describe_method()},
            "catalog": self.head.catalog,
            "environment": self.head.environment,
            "base": {"inputs": self.base.inputs.as_dict(), "tool_calls": self.base.calls, "runs": self.base.runs},
            "head": {"inputs": self.head.inputs.as_dict(), "tool_calls": self.head.calls, "runs": self.head.runs},
            "regressions": [{"group": c.group, **c.to_dict()} for c in self.regressions],
            "groups": [{"agent": g.agent, "task": g.task, "base_runs": g.base_runs, "head_runs": g.head_runs,
                        "changes": {c.metric: c.to_dict() for c in g.changes},
                        "tools": [dict(vars(t)) for t in g.tools]} for g in self.groups],
            **({"judge": {"base": self.base.judge.to_dict(), "head": self.head.judge.to_dict()}}
               if self.base.judge is not None and self.head.judge is not None else {}),
        }


def compare_traces(
    base: PathArg | Iterable[PathArg],
    head: PathArg | Iterable[PathArg],
    catalog: Catalog | PathLike | None = None,
    *,
    profile: str | None = None,
    environment: str | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    on_problem: Callable[[str, FileProblem], None] | None = None,
    judging: OfflineJudging | None = None,
    **options: Any,
) -> Comparison:
    """Score `base` and `head` (files or directories each) with one catalog and compare them per agent and task.

    `on_problem(side, problem)` gets each unreadable part of a file ("base" or "head");
    other options are those of `score_traces`. The same inputs and `seed` give the same
    intervals. With `judging` (`offline.judging`), both sides' sampled runs are judged (one budget for both) and
    `judge_score`, the mean judged tool correctness, is compared too. Raises `TraceInputError` (naming the side) for paths that do not exist, `CatalogError` for a
    broken catalog and `ValueError` for bad options.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1 (got {confidence})")
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100 (got {resamples})")
    if resamples > MAX_RESAMPLES:
        raise ValueError(f"resamples must be at most {MAX_RESAMPLES:,} (got {resamples:,})")
    loaded = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    sides = []
    for side, paths in (("base", base), ("head", head)):
        runs = RunSamples(seed=f"{seed}/{side}")
        problem = None if on_problem is None else (lambda p, side=side: on_problem(side, p))
        judged = None if judging is None else judging if side == "base" else judging.another()
        on_run = runs.run if judged is None else _both(runs.run, judged.on_run)
        try:
            report = score_traces(paths, loaded, profile=profile, environment=environment, on_run=on_run,
                                  on_problem=problem, on_span=judged.on_span if judged is not None else None, **options)
        except TraceInputError as exc:
            raise TraceInputError(f"{side}: {exc}") from None
        if judged is not None:
            report = judged.attach(report)
            for run in judged.judged:
                if run.result is not None:
                    runs.judged(run.agent, run.task, run.result.score)
        sides.append((report, runs))
    (base_report, base_runs), (head_report, head_runs) = sides
    return _compare(base_report, base_runs, head_report, head_runs, confidence=confidence, resamples=resamples, seed=seed,
                    metrics=tuple(METRICS) if judging is not None else tuple(m for m in METRICS if m != JUDGE_SCORE))


def _both(first: Callable[[AgentRun], None], second: Callable[[AgentRun], None]) -> Callable[[AgentRun], None]:
    def both(run: AgentRun) -> None:
        first(run)
        second(run)
    return both


class _Group:
    """One agent/task group's runs on one side: exact sums, and a reservoir sample for the bootstrap."""

    __slots__ = ("runs", "calls", "efficiency", "wasted", "cost", "completed", "durations_seen",
                 "sample", "durations", "judged", "judge_sum", "judge_scores", "_rng")

    def __init__(self, rng: random.Random) -> None:
        self.runs = self.calls = self.completed = self.durations_seen = self.judged = 0
        self.efficiency = self.wasted = self.cost = self.judge_sum = 0.0
        self.sample: list[tuple[int, float, float, float, int]] = []  # (calls, efficiency sum, wasted, cost, completed)
        self.durations: list[float] = []
        self.judge_scores: list[float] = []  # of the judged runs (--judge), a reservoir sample too
        self._rng = rng

    def add(self, calls: int, efficiency: float, wasted: float, cost: float, completed: int, duration: float | None) -> None:
        self.runs += 1
        self.calls += calls
        self.efficiency += efficiency
        self.wasted += wasted
        self.cost += cost
        self.completed += completed
        _reservoir(self.sample, (calls, efficiency, wasted, cost, completed), self.runs, self._rng)
        if duration is not None:
            self.durations_seen += 1
            _reservoir(self.durations, duration, self.durations_seen, self._rng)


def _reservoir(sample: list[Any], item: Any, seen: int, rng: random.Random) -> None:
    if len(sample) < MAX_RUNS_PER_GROUP:
        sample.append(item)
    else:
        slot = rng.randrange(seen)
        if slot < MAX_RUNS_PER_GROUP:
            sample[slot] = item


class RunSamples:
    """The per-run values of evaluated runs by (agent, task), fed by the pipeline's `on_run`."""

    def __init__(self, seed: str = "0") -> None:
        self.groups: dict[tuple[str, str], _Group] = {}
        self._agent = AgentGroups()  # the Report's grouping of agents
        self._seed = seed

    def run(self, run: AgentRun) -> None:
        evaluation = run.evaluation
        if evaluation is None:
            return
        key = (self._agent(run.agent), run.task)
        group = self._group(key)
        scores = run.scores
        group.add(len(scores), math.fsum(s.static.efficiency for s in scores), math.fsum(s.static.excess_cost_usd for s in scores),
                  evaluation.cost_usd, int(evaluation.completed), evaluation.duration_s)

    def judged(self, agent: str, task: str, score: float) -> None:
        """A judged run's score (`agent` as the judging grouped it, as the Report does)."""
        group = self._group((agent, task))
        group.judged += 1
        group.judge_sum += score
        _reservoir(group.judge_scores, score, group.judged, group._rng)

    def _group(self, key: tuple[str, str]) -> _Group:
        group = self.groups.get(key)
        if group is None:
            group = self.groups[key] = _Group(random.Random(f"{self._seed}/{key[0]}/{key[1]}"))
        return group


# -- the statistics -----------------------------------------------------------------------------------------------

def _point(group: _Group | None, metric: str) -> float | None:
    if group is None or group.runs == 0:
        return None
    if metric == "efficiency":
        return group.efficiency / group.calls if group.calls else None
    if metric == "wasted_per_run_usd":
        return group.wasted / group.runs
    if metric == "cost_per_run_usd":
        return group.cost / group.runs
    if metric == "completion":
        return group.completed / group.runs
    if metric == JUDGE_SCORE:
        return group.judge_sum / group.judged if group.judged else None
    return _nearest_rank(sorted(group.durations), _QUANTILES[metric]) if group.durations else None


def _nearest_rank(ordered: Sequence[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _untested(base: _Group | None, head: _Group | None, metric: str) -> str:
    """Why `metric` cannot be tested for this group ("" when it can)."""
    if base is None or base.runs == 0:
        return "no runs in base"
    if head is None or head.runs == 0:
        return "no runs in head"
    if metric == "efficiency" and not (base.calls and head.calls):
        return "no tool calls in " + ("base" if not base.calls else "head")
    if metric == JUDGE_SCORE:
        fewest = min(base.judged, head.judged)
        return f"{fewest} judged run{'' if fewest == 1 else 's'}, {MIN_RUNS} needed" if fewest < MIN_RUNS else ""
    if metric in _QUANTILES:
        needed = math.ceil(MIN_TAIL_RUNS / (1 - _QUANTILES[metric]) - 1e-9)
        fewest = min(len(base.durations), len(head.durations))
        return f"{fewest} run{'' if fewest == 1 else 's'} with a duration, {needed} needed" if fewest < needed else ""
    fewest = min(base.runs, head.runs)
    return f"{fewest} run{'' if fewest == 1 else 's'}, {MIN_RUNS} needed" if fewest < MIN_RUNS else ""


def _resampled(group: _Group, metrics: Sequence[str], resamples: int, rng: random.Random) -> dict[str, list[float]]:
    """Each metric over `resamples` bootstrap resamples of the group's runs (the same resamples for all metrics)."""
    out: dict[str, list[float]] = {m: [] for m in metrics}
    means = [m for m in metrics if m not in _QUANTILES and m != JUDGE_SCORE]
    if means:
        n = len(group.sample)
        columns = list(zip(*group.sample))
        calls, efficiency, wasted, cost, completed = columns
        total_runs = float(n)
        choices, indices = rng.choices, range(n)
        for _ in range(resamples):
            idx = choices(indices, k=n)
            for metric in means:
                if metric == "efficiency":
                    c = sum(map(calls.__getitem__, idx))
                    out[metric].append(sum(map(efficiency.__getitem__, idx)) / c if c else math.nan)
                else:
                    column = wasted if metric == "wasted_per_run_usd" else cost if metric == "cost_per_run_usd" else completed
                    out[metric].append(sum(map(column.__getitem__, idx)) / total_runs)
    if JUDGE_SCORE in metrics:  # the judged runs, resampled on their own (a run may be judged or not)
        scores = group.judge_scores
        n = len(scores)
        for _ in range(resamples):
            out[JUDGE_SCORE].append(math.fsum(rng.choices(scores, k=n)) / n)
    quantiles = [m for m in metrics if m in _QUANTILES]
    if quantiles:
        durations = group.durations
        n = len(durations)
        choices, indices = rng.choices, range(n)
        for _ in range(resamples):
            ordered = sorted(map(durations.__getitem__, choices(indices, k=n)))
            for metric in quantiles:
                out[metric].append(_nearest_rank(ordered, _QUANTILES[metric]))
    return out


def _percentile(ordered: Sequence[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    position = p * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _compare(base: Report, base_runs: RunSamples, head: Report, head_runs: RunSamples, *,
             confidence: float, resamples: int, seed: int, metrics: Sequence[str] = tuple(METRICS)) -> Comparison:
    keys = sorted({*base_runs.groups, *head_runs.groups, *((g.agent, g.task) for g in (*base.groups, *head.groups))})
    plans = {key: {m: _untested(base_runs.groups.get(key), head_runs.groups.get(key), m) for m in metrics} for key in keys}
    tests = sum(not why for plan in plans.values() for why in plan.values())
    alpha = (1 - confidence) / max(tests, 1)  # Bonferroni: each interval at 1 - alpha, all together at `confidence`
    groups = []
    for key in keys:
        b, h = base_runs.groups.get(key), head_runs.groups.get(key)
        name = f"{key[0] or '(no agent)'}/{key[1] or '(unrouted)'}"
        tested = [m for m, why in plans[key].items() if not why]
        intervals: dict[str, tuple[float, float]] = {}
        if tested:
            assert b is not None and h is not None
            base_stats = _resampled(b, tested, resamples, random.Random(f"{seed}/base/{key[0]}/{key[1]}"))
            head_stats = _resampled(h, tested, resamples, random.Random(f"{seed}/head/{key[0]}/{key[1]}"))
            for metric in tested:
                diffs = sorted(y - x for x, y in zip(base_stats[metric], head_stats[metric]) if not (math.isnan(x) or math.isnan(y)))
                if diffs:  # efficiency: a resample of only runs without calls has none
                    intervals[metric] = (_percentile(diffs, alpha / 2), _percentile(diffs, 1 - alpha / 2))
        changes = []
        for metric in metrics:
            low, high = intervals.get(metric, (None, None))
            changes.append(Change(group=name, metric=metric, base=_point(b, metric), head=_point(h, metric), low=low, high=high,
                                  confidence=1 - alpha if metric in intervals else None,
                                  untested=plans[key][metric] or ("" if metric in intervals else "no resample had data")))
        groups.append(GroupComparison(agent=key[0], task=key[1], base_runs=b.runs if b else 0, head_runs=h.runs if h else 0,
                                      changes=tuple(changes), tools=_tools(base.group(*key), head.group(*key))))
    return Comparison(base=base, head=head, groups=tuple(groups), method=METHOD, confidence=confidence, tests=tests,
                      resamples=resamples, seed=seed)


def _tools(base: GroupSummary | None, head: GroupSummary | None) -> tuple[ToolComparison, ...]:
    mine = {t.tool: t for t in base.tools} if base else {}
    theirs = {t.tool: t for t in head.tools} if head else {}
    rows = []
    for tool in sorted({*mine, *theirs}):
        b, h = mine.get(tool), theirs.get(tool)
        some = h or b
        assert some is not None

        def per_run(summary: GroupSummary | None, value: float | None) -> float | None:
            return value / summary.runs if summary is not None and summary.runs and value is not None else None

        rows.append(ToolComparison(
            agent=some.agent, task=some.task, tool=tool, optimal_tool=some.optimal_tool,
            base_calls_per_run=per_run(base, b.calls if b else 0), head_calls_per_run=per_run(head, h.calls if h else 0),
            base_efficiency=b.efficiency if b else None, head_efficiency=h.efficiency if h else None,
            base_wasted_per_run_usd=per_run(base, b.wasted_usd if b else 0.0),
            head_wasted_per_run_usd=per_run(head, h.wasted_usd if h else 0.0),
            base_p95_s=b.p95_s if b else None, head_p95_s=h.p95_s if h else None,
            base_p99_s=b.p99_s if b else None, head_p99_s=h.p99_s if h else None))
    rows.sort(key=lambda t: (-abs((t.head_calls_per_run or 0) - (t.base_calls_per_run or 0)), t.tool))
    return tuple(rows)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"

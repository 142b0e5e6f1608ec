"""The CI gate over a `Report`: per agent and task, each metric against its levels.

Efficiency is gated by default, at the catalog's `thresholds` for the environment (below
`fail` fails, below `warn` warns); the catalog's `gates` add levels per environment for the
other metrics, the tutorial's CI/CD gate: a minimum for completion, correctness and health,
a maximum for money wasted or spent per run and run latency. `--fail-under` (higher is
better) and `--fail-over` (lower is better) set or override a fail level per metric. A group
without the data for a metric (no calls, no runs, no expected tools) is not checked on it.

    >>> result = evaluate_gate(report, parse_fail_under(["completion=0.9"]))
    >>> result.passed, [str(check) for check in result.failed]
    (False, ['support_agent/faq: efficiency 0.61 < 0.85 (production fail level)'])
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..config.catalog import GATE_LEVEL_METRICS
from .report import GroupSummary, Report

__all__ = ["GATE_METRICS", "Check", "GateResult", "evaluate_gate", "higher_is_better", "parse_fail_over", "parse_fail_under"]

TOLERANCE = 1e-9  # a mean of calls each exactly at the level may sum to a hair below it
# metric -> (what it is, its largest level or None); `higher_is_better(metric)` tells the direction
GATE_METRICS: dict[str, tuple[str, float | None]] = {
    "efficiency": ("mean tool-call efficiency, 0-1", 1.0),
    **{metric: (what, top) for metric, (_, top, what) in GATE_LEVEL_METRICS.items()},
    # `score --judge`: deepeval's ToolCorrectnessMetric with the judge, mean over the judged runs (docs/judge.md)
    "judge_score": ("mean judged tool correctness (score --judge), 0-1", 1.0),
}
_HIGHER = frozenset({"efficiency", "judge_score"})  # not catalog gate levels, both higher is better


def higher_is_better(metric: str) -> bool:
    return metric in _HIGHER or GATE_LEVEL_METRICS[metric][0]


@dataclass(frozen=True)
class Check:
    """One metric of one group against one level: a minimum, or a maximum where lower is better."""

    group: str
    metric: str
    value: float
    threshold: float
    level: str  # "fail" or "warn"
    source: str  # where the threshold comes from

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.metric)

    @property
    def passed(self) -> bool:
        if self.higher_is_better:
            return self.value >= self.threshold - TOLERANCE
        return self.value <= self.threshold * (1 + TOLERANCE) + TOLERANCE

    @property
    def reason(self) -> str:
        if self.higher_is_better:
            relation = ">=" if self.passed else "<"
        else:
            relation = "<=" if self.passed else ">"
        return f"{self.metric} {_number(self.value)} {relation} {_number(self.threshold)} ({self.source})"

    def __str__(self) -> str:
        return f"{self.group}: {self.reason}"


@dataclass(frozen=True)
class GateResult:
    checks: tuple[Check, ...]

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.level == "fail" and not c.passed]

    @property
    def warnings(self) -> list[Check]:
        failing = {(c.group, c.metric) for c in self.failed}
        return [c for c in self.checks if c.level == "warn" and not c.passed and (c.group, c.metric) not in failing]

    @property
    def passed(self) -> bool:
        return not self.failed

    def for_group(self, name: str) -> list[Check]:
        return [c for c in self.checks if c.group == name]

    def to_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "checks": [
            {"group": c.group, "metric": c.metric, "value": c.value, "threshold": c.threshold, "level": c.level,
             "source": c.source, "higher_is_better": c.higher_is_better, "passed": c.passed} for c in self.checks]}


def parse_fail_under(items: Iterable[str] | None) -> dict[str, float]:
    """`["efficiency=0.8", "health=70"]` as {metric: level}; raises ValueError with one line on a bad item.

    Only metrics where higher is better: for the others, the level is a maximum (`parse_fail_over`).
    """
    return _parse_levels(items, "--fail-under", higher=True)


def parse_fail_over(items: Iterable[str] | None) -> dict[str, float]:
    """`["p95_latency_ms=8000"]` as {metric: maximum}, for metrics where lower is better (money, latency)."""
    return _parse_levels(items, "--fail-over", higher=False)


def _parse_levels(items: Iterable[str] | None, option: str, *, higher: bool) -> dict[str, float]:
    levels: dict[str, float] = {}
    allowed = [m for m in GATE_METRICS if higher_is_better(m) == higher]
    for item in items or ():
        metric, sep, text = item.partition("=")
        metric = metric.strip()
        if sep and metric in GATE_METRICS and metric not in allowed:
            other = "--fail-over" if higher else "--fail-under"
            better = "lower" if higher else "higher"
            raise ValueError(f"{option} {item!r}: {better} is better for {metric} ({GATE_METRICS[metric][0]}): "
                             f"use {other} {metric}={text.strip()}")
        if not sep or metric not in GATE_METRICS:
            raise ValueError(f"{option} {item!r}: expected METRIC=VALUE with METRIC one of {', '.join(allowed)}")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{option} {item!r}: {text.strip()!r} is not a number") from None
        top = GATE_METRICS[metric][1]
        if math.isnan(value) or not 0 <= value <= (math.inf if top is None else top) or math.isinf(value):
            raise ValueError(f"{option} {item!r}: {metric} is {GATE_METRICS[metric][0]}; {value:g} is out of range")
        levels[metric] = value
    return levels


def evaluate_gate(report: Report, fail_under: Mapping[str, float] | None = None) -> GateResult:
    """Every check of every group: the catalog's efficiency `thresholds` and `gates` levels for the report's
    environment, each fail level replaced by `fail_under`'s (the parsed `--fail-under` and `--fail-over`)."""
    fail_under = dict(fail_under or {})
    thresholds, levels, environment = report.thresholds, report.gate_levels, report.environment
    checks: list[Check] = []
    for group in report.groups:
        for metric in GATE_METRICS:
            value = _value(group, metric)
            if value is None:
                continue
            level = levels.get(metric)
            if metric in fail_under:
                option = "--fail-under" if higher_is_better(metric) else "--fail-over"
                checks.append(Check(group.name, metric, value, fail_under[metric], "fail", f"{option} {metric}"))
            elif metric == "efficiency":
                checks.append(Check(group.name, metric, value, thresholds.fail, "fail", f"{environment} fail level"))
            elif level is not None:
                checks.append(Check(group.name, metric, value, level.fail, "fail", f"{environment} fail level"))
            if metric == "efficiency":
                checks.append(Check(group.name, metric, value, thresholds.warn, "warn", f"{environment} warn level"))
            elif level is not None and level.warn is not None:
                checks.append(Check(group.name, metric, value, level.warn, "warn", f"{environment} warn level"))
    return GateResult(tuple(checks))


def _value(group: GroupSummary, metric: str) -> float | None:
    if metric == "mean_latency_ms":
        return None if group.duration_s is None else 1000 * group.duration_s
    if metric == "p95_latency_ms":
        return None if group.p95_s is None else 1000 * group.p95_s
    value = getattr(group, metric)
    return None if value is None else float(value)


def _number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"

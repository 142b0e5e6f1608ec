"""The CI gate over a `Report`: per agent and task, each metric against its threshold.

Efficiency is gated by default, at the catalog's levels for the environment (below `fail`
fails, below `warn` warns), the tutorial's CI/CD gate; `fail_under` sets or overrides a
fail level per metric. A group without the data for a metric (no calls, no runs, no
expected tools) is not checked on it.

    >>> result = evaluate_gate(report, parse_fail_under(["completion=0.9"]))
    >>> result.passed, [str(check) for check in result.failed]
    (False, ['support_agent/faq: efficiency 0.61 < 0.85 (production fail level)'])
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .report import GroupSummary, Report

__all__ = ["GATE_METRICS", "Check", "GateResult", "evaluate_gate", "parse_fail_under"]

TOLERANCE = 1e-9  # a mean of calls each exactly at the level may sum to a hair below it
# metric -> (what it is, its range); each is an attribute of GroupSummary where higher is better
GATE_METRICS: dict[str, tuple[str, float]] = {
    "efficiency": ("mean tool-call efficiency, 0-1", 1.0),
    "completion": ("share of runs completed, 0-1", 1.0),
    "health": ("mean run health, 0-100", 100.0),
    "correctness": ("mean tool correctness against the task's expected tools, 0-1", 1.0),
}


@dataclass(frozen=True)
class Check:
    """One metric of one group against one threshold."""

    group: str
    metric: str
    value: float
    threshold: float
    level: str  # "fail" or "warn"
    source: str  # where the threshold comes from

    @property
    def passed(self) -> bool:
        return self.value >= self.threshold - TOLERANCE

    @property
    def reason(self) -> str:
        relation = ">=" if self.passed else "<"
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
             "source": c.source, "passed": c.passed} for c in self.checks]}


def parse_fail_under(items: Iterable[str] | None) -> dict[str, float]:
    """`["efficiency=0.8", "health=70"]` as {metric: level}; raises ValueError with one line on a bad item."""
    levels: dict[str, float] = {}
    for item in items or ():
        metric, sep, text = item.partition("=")
        metric = metric.strip()
        if not sep or metric not in GATE_METRICS:
            raise ValueError(f"--fail-under {item!r}: expected METRIC=VALUE with METRIC one of {', '.join(GATE_METRICS)}")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"--fail-under {item!r}: {text.strip()!r} is not a number") from None
        top = GATE_METRICS[metric][1]
        if not 0 <= value <= top or math.isnan(value):
            raise ValueError(f"--fail-under {item!r}: {metric} is {GATE_METRICS[metric][0]}; {value:g} is out of range")
        levels[metric] = value
    return levels


def evaluate_gate(report: Report, fail_under: Mapping[str, float] | None = None) -> GateResult:
    """Every check of every group: the catalog's efficiency levels, then the `fail_under` levels."""
    fail_under = dict(fail_under or {})
    thresholds = report.thresholds
    checks: list[Check] = []
    for group in report.groups:
        for metric in GATE_METRICS:
            value = _value(group, metric)
            if value is None:
                continue
            if metric in fail_under:
                checks.append(Check(group.name, metric, value, fail_under[metric], "fail", f"--fail-under {metric}"))
            elif metric == "efficiency":
                checks.append(Check(group.name, metric, value, thresholds.fail, "fail", f"{report.environment} fail level"))
            if metric == "efficiency":
                checks.append(Check(group.name, metric, value, thresholds.warn, "warn", f"{report.environment} warn level"))
    return GateResult(tuple(checks))


def _value(group: GroupSummary, metric: str) -> float | None:
    value = getattr(group, metric)
    return None if value is None else float(value)


def _number(value: float) -> str:
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"

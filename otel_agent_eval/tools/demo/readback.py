"""Reading the processor's tool metrics back from a registry, as a Prometheus scrape sees them.

It exists so the demo's table and summary (and the tests) check what the processor really
exported, not what the simulation meant to emit. The metric and label names come from
`metrics/names.py`, the table the exporters themselves use.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ...core.scoring import ERROR, OPTIMAL
from ...metrics import names

WORST_PAIRS_SHOWN = 5
NON_OPTIMAL = "non-optimal"  # the pick of a non-optimal tool whose every call failed (no outcome label)


@dataclass(frozen=True)
class ToolRow:
    """One (agent, tool) pair as the Prometheus metrics show it."""

    agent: str
    task: str
    tool: str
    optimal_tool: str
    pick: str  # optimal, acceptable, suboptimal or unknown_tool: the scorer's outcome before errors
    calls: int
    errors: int
    mean_efficiency: float
    p95_s: float
    p99_s: float
    cost_usd: float
    wasted_usd: float
    context_usd: float = 0.0  # what the calls' results cost the later model calls of their runs (docs/true-cost.md)
    context_calls: int = 0  # calls whose context cost was measured

    @property
    def true_cost_per_call_usd(self) -> float:
        """Catalog cost plus context cost, per call; NaN when no call was measured yet."""
        if not self.context_calls or not self.calls:
            return math.nan
        return self.cost_usd / self.calls + self.context_usd / self.context_calls

    @property
    def non_optimal(self) -> bool:
        return self.tool != self.optimal_tool


@dataclass(frozen=True)
class DemoMetrics:
    """One read of the registry: the rows and the processor's self-metrics (`spans_seen`, ...)."""

    rows: tuple[ToolRow, ...]
    processor: Mapping[str, float]

    @property
    def calls(self) -> int:
        return sum(r.calls for r in self.rows)

    @property
    def non_optimal_calls(self) -> int:
        return sum(r.calls for r in self.rows if r.non_optimal)

    @property
    def non_optimal_share(self) -> float:
        return self.non_optimal_calls / self.calls if self.calls else 0.0

    @property
    def cost_usd(self) -> float:
        return sum(r.cost_usd for r in self.rows)

    @property
    def wasted_usd(self) -> float:
        return sum(r.wasted_usd for r in self.rows)

    @property
    def context_usd(self) -> float:
        return sum(r.context_usd for r in self.rows)

    def calls_with_pick(self, pick: str) -> int:
        return sum(r.calls for r in self.rows if r.pick == pick)

    def worst_pairs(self, limit: int = WORST_PAIRS_SHOWN) -> list[ToolRow]:
        """Non-optimal picks, most money wasted first, then the least efficient."""
        bad = [r for r in self.rows if r.non_optimal and r.calls]
        return sorted(bad, key=lambda r: (-r.wasted_usd, r.mean_efficiency, -r.calls))[:limit]


class _Collectable(Protocol):
    def collect(self) -> Iterable[Any]: ...


# The samples read, spelled by names.py (counters with `_total`, as a scrape shows them).
TOOL, AGENT = names.TOOL, names.AGENT  # label names
PROCESSOR_PREFIX, TOTAL = names.SELF_PREFIX, "_total"
CALLS_TOTAL = names.TOOL_CALLS.sample
EFFICIENCY_SCORE = names.TOOL_EFFICIENCY.sample
EFFICIENCY_DIMENSION = "efficiency"
LATENCY_SUMMARY = names.TOOL_LATENCY.sample
P95, P99 = str(0.95), str(0.99)  # quantile labels, as prometheus-client formats them
COST_TOTAL = names.TOOL_COST.sample
EXCESS_COST_TOTAL = names.TOOL_EXCESS_COST.sample
CONTEXT_COST_TOTAL, CONTEXT_CALLS_TOTAL = names.TOOL_CONTEXT_COST.sample, names.TOOL_CONTEXT_CALLS.sample


def read_metrics(registry: _Collectable) -> DemoMetrics:
    """Read the tool metrics through one `collect()` of a registry (or of `processor.metrics`).

    Read-only and cheap enough to call twice a second: it is what a scrape computes.
    """
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    processor: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name.startswith(PROCESSOR_PREFIX) and name.endswith(TOTAL):
                processor[name[len(PROCESSOR_PREFIX):-len(TOTAL)]] = value
            elif TOOL in labels and AGENT in labels:
                _accumulate(acc.setdefault((labels[AGENT], labels[TOOL]), _empty_row()), name, labels, value)
    rows = tuple(_row(agent, tool, a) for (agent, tool), a in sorted(acc.items()) if a["calls"])
    return DemoMetrics(rows, processor)


def _empty_row() -> dict[str, Any]:
    return {"task": "", "optimal": "", "pick": "", "calls": 0, "errors": 0, "eff_sum": 0.0, "eff_count": 0,
            "p95": math.nan, "p99": math.nan, "cost": 0.0, "wasted": 0.0, "context": 0.0, "context_calls": 0}


def _accumulate(a: dict[str, Any], name: str, labels: Mapping[str, str], value: float) -> None:
    if name == CALLS_TOTAL:
        a["calls"] += int(value)
        a["task"], a["optimal"] = labels["task"], labels["optimal_tool"]
        if labels["outcome"] == ERROR:
            a["errors"] += int(value)
        else:
            a["pick"] = labels["outcome"]
    elif name.startswith(EFFICIENCY_SCORE) and labels.get("dimension") == EFFICIENCY_DIMENSION:
        if name.endswith("_sum"):
            a["eff_sum"] += value
        elif name.endswith("_count"):
            a["eff_count"] += int(value)
    elif name == LATENCY_SUMMARY and labels.get("quantile") in (P95, P99):
        a["p95" if labels["quantile"] == P95 else "p99"] = value
    elif name == COST_TOTAL:
        a["cost"] += value
    elif name == EXCESS_COST_TOTAL:
        a["wasted"] += value
    elif name == CONTEXT_COST_TOTAL:
        a["context"] += value
    elif name == CONTEXT_CALLS_TOTAL:
        a["context_calls"] += int(value)


def _row(agent: str, tool: str, a: Mapping[str, Any]) -> ToolRow:
    pick = a["pick"] or (OPTIMAL if tool == a["optimal"] else NON_OPTIMAL)  # every call failed: no outcome label
    efficiency = a["eff_sum"] / a["eff_count"] if a["eff_count"] else math.nan
    return ToolRow(agent, a["task"], tool, a["optimal"], pick, a["calls"], a["errors"], efficiency,
                   a["p95"], a["p99"], a["cost"], a["wasted"], a["context"], a["context_calls"])

"""The efficiency formulas of the design article, as pure functions.

Shared by the deepeval metrics (offline, in pytest) and the span processor
(live), so both always give the same number for the same choice of tool.

    >>> ratio_score(0.003, 0.0)        # costly tool where a free one would do
    0.0
    >>> round(ratio_score(400, 30), 3)  # ten times slower than the optimal tool
    0.075
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import ROUND_HALF_UP, Decimal

from ..config.catalog import COMPLEXITY_TIERS, Profile, Tool

_TIER = {name: i for i, name in enumerate(COMPLEXITY_TIERS)}


def ratio_score(actual: float | None, optimal: float | None) -> float:
    """The article's cost score (and, with latencies, its latency score).

    Unknown actual figure: 0. Both free: 1. Free where the optimal costs, or costly
    where the optimal is free: 0. Otherwise optimal/actual, clipped to [0, 1].
    """
    actual = math.inf if actual is None else actual
    optimal = 0.0 if optimal is None else optimal
    if actual == 0 and optimal == 0:
        return 1.0
    if actual == math.inf:
        return 0.0
    if actual == 0 and optimal > 0:
        return 0.0
    if optimal == 0 and actual > 0:
        return 0.0
    return max(0.0, min(1.0, optimal / actual))


def weighted_score(cost_score: float, latency_score: float, cost_weight: float, latency_weight: float) -> float:
    return cost_weight * cost_score + latency_weight * latency_score


def complexity_score(task_complexity: str, tool_complexity: str | None) -> float:
    """1 when the tool's tier fits the task, 0.5 one tier off, 0 two tiers off or unknown."""
    if tool_complexity not in _TIER or task_complexity not in _TIER:
        return 0.0
    return 1.0 - abs(_TIER[tool_complexity] - _TIER[task_complexity]) / (len(COMPLEXITY_TIERS) - 1)


def complexity_mismatch(task_complexity: str, tool_complexity: str | None) -> str | None:
    """The article's wording for a tier mismatch, or None when the tiers agree."""
    if tool_complexity == task_complexity:
        return None
    return f"Complexity mismatch: {task_complexity} task using {tool_complexity or 'unknown-complexity'} tool"


def best_tool(candidates: Iterable[Tool], profile: Profile) -> Tool | None:
    """The candidate with the lowest profile-weighted cost and latency.

    Figures are normalised by the largest among the candidates so that dollars and
    milliseconds weigh as the profile says; ties go to the simpler tool, then by name.
    """
    tools = list(candidates)
    if not tools:
        return None
    max_cost = max(t.true_cost_usd for t in tools) or 1.0
    max_latency = max(t.latency_ms for t in tools) or 1.0

    def burden(t: Tool) -> tuple[float, int, str]:
        weighted = profile.cost_weight * t.true_cost_usd / max_cost + profile.latency_weight * t.latency_ms / max_latency
        return (round(weighted, 12), _TIER.get(t.complexity, len(_TIER)), t.name)

    return min(tools, key=burden)


def selection_reason(outcome: str, tool: str, optimal_tool: str, cost: float, latency: float) -> str:
    """The article's reason: "Suboptimal tool 'web_search' selected. Cost efficiency: 0.00, ..."."""
    reason = f"{outcome.capitalize()} tool '{tool}' selected. Cost efficiency: {two_places(cost)}, Latency efficiency: {two_places(latency)}."
    return reason if tool == optimal_tool else f"{reason} Optimal tool: '{optimal_tool}'."


def two_places(value: float) -> str:
    """Round half up on the shortest decimal form, as a reader would: 0.075 -> "0.08"."""
    return str(Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))

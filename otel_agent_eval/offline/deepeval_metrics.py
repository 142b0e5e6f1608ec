"""The article's efficiency metrics as deepeval metrics, for pytest and `deepeval.evaluate`.

    >>> from deepeval.test_case import LLMTestCase, ToolCall
    >>> metric = ToolEfficiencyMetric(
    ...     tool_costs={"local_index": 0.0, "web_search": 0.003},
    ...     tool_latencies={"local_index": 30, "web_search": 400},
    ...     optimal_tool="local_index", threshold=0.8, cost_weight=0.2, latency_weight=0.8)
    >>> metric.measure(LLMTestCase(input="Business hours?", actual_output="9-5",
    ...                            tools_called=[ToolCall(name="web_search")]))
    0.06
    >>> metric.reason
    "Suboptimal tool 'web_search' selected. Cost efficiency: 0.00, Latency efficiency: 0.08. Optimal tool: 'local_index'."
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase

from ..config.catalog import Catalog, load_catalog
from ..core.efficiency import best_tool, complexity_mismatch, complexity_score, ratio_score, selection_reason, weighted_score


def tools_used(test_case: LLMTestCase) -> list[str]:
    """Tool names from `tools_called`, falling back to `additional_metadata["tools_used"]`."""
    if test_case.tools_called:
        return [tool.name for tool in test_case.tools_called]
    metadata = test_case.additional_metadata or {}
    return [str(name) for name in metadata.get("tools_used") or []]


class ToolEfficiencyMetric(BaseMetric):
    """Was the cheapest, fastest adequate tool chosen? Scores the first tool the agent used.

    The cost and latency scores compare the used tool with `optimal_tool`; the score is
    their weighted sum. Success: score >= threshold, or the tool is in `acceptable_tools`.
    """

    def __init__(
        self,
        tool_costs: Mapping[str, float],
        tool_latencies: Mapping[str, float],
        optimal_tool: str,
        acceptable_tools: Sequence[str] | None = None,
        threshold: float = 0.7,
        cost_weight: float = 0.5,
        latency_weight: float = 0.5,
    ) -> None:
        self.tool_costs = dict(tool_costs)
        self.tool_latencies = dict(tool_latencies)
        self.optimal_tool = optimal_tool
        self.acceptable_tools = list(acceptable_tools or [])
        self.threshold = threshold
        self.cost_weight = cost_weight
        self.latency_weight = latency_weight
        self.success = False
        self.score = 0.0
        self.reason: str | None = None
        self.async_mode = False
        self.include_reason = True
        self.evaluation_model = None

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog | None = None,
        *,
        task: str,
        environment: str | None = None,
        threshold: float | None = None,
        **kwargs: Any,
    ) -> ToolEfficiencyMetric:
        """Build the metric from a catalog task route: its optimal tool, profile weights and the
        environment's `fail` level as threshold (override with `threshold=`)."""
        catalog = catalog or load_catalog()
        route = catalog.task(task)
        if route is None:
            raise ValueError(f"{catalog.source}: no task {task!r}; tasks: {', '.join(t.name for t in catalog.tasks)}")
        profile = catalog.profile(route.profile)
        optimal = route.optimal_tool or best_tool(catalog.tools_with(route.capability), profile).name
        costs = {name: t.cost_usd for name, t in catalog.names()}
        latencies = {name: t.latency_ms for name, t in catalog.names()}
        if route.complexity is not None and issubclass(cls, ContextualComplexityMetric):
            kwargs.setdefault("task_complexity", route.complexity)
            kwargs.setdefault("catalog", catalog)
        return cls(
            tool_costs=costs,
            tool_latencies=latencies,
            optimal_tool=optimal,
            acceptable_tools=list(route.acceptable_tools),
            threshold=catalog.thresholds_for(environment).fail if threshold is None else threshold,
            cost_weight=profile.cost_weight,
            latency_weight=profile.latency_weight,
            **kwargs,
        )

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        used = tools_used(test_case)
        if not used:
            self.score, self.success, self.reason = 0.0, False, "No tools were used"
            return self.score
        tool = used[0]
        cost = self.cost_score(tool)
        latency = self.latency_score(tool)
        self.score = weighted_score(cost, latency, self.cost_weight, self.latency_weight)
        self.score_breakdown = {"cost": cost, "latency": latency}
        self.success = self.score >= self.threshold or tool in self.acceptable_tools
        self.reason = self._reason(tool, cost, latency)
        return self.score

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        return self.measure(test_case)

    def is_successful(self) -> bool:
        return bool(self.success)

    def cost_score(self, tool: str) -> float:
        return ratio_score(self.tool_costs.get(tool), self.tool_costs.get(self.optimal_tool))

    def latency_score(self, tool: str) -> float:
        return ratio_score(self.tool_latencies.get(tool), self.tool_latencies.get(self.optimal_tool))

    def _reason(self, tool: str, cost: float, latency: float) -> str:
        if tool == self.optimal_tool:
            outcome = "optimal"
        else:
            outcome = "acceptable" if tool in self.acceptable_tools else "suboptimal"
        return selection_reason(outcome, tool, self.optimal_tool, cost, latency)

    @property
    def __name__(self) -> str:
        return "Tool Efficiency"


class ContextualComplexityMetric(ToolEfficiencyMetric):
    """Does the tool's sophistication fit the task? Catches over- and under-engineering.

    The score is the efficiency score times the tier fit (1 same tier, 0.5 one tier
    off, 0 two tiers off). Tool tiers come from `tool_complexity`, else from `catalog`
    (default: the packaged catalog).
    """

    def __init__(
        self,
        task_complexity: str,
        tool_costs: Mapping[str, float],
        tool_latencies: Mapping[str, float],
        optimal_tool: str,
        acceptable_tools: Sequence[str] | None = None,
        threshold: float = 0.7,
        cost_weight: float = 0.5,
        latency_weight: float = 0.5,
        *,
        tool_complexity: Mapping[str, str] | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        super().__init__(tool_costs, tool_latencies, optimal_tool, acceptable_tools, threshold, cost_weight, latency_weight)
        self.task_complexity = task_complexity
        if tool_complexity is None:
            tool_complexity = {name: t.complexity for name, t in (catalog or load_catalog()).names()}
        self.tool_complexity = dict(tool_complexity)

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        efficiency = super().measure(test_case)
        used = tools_used(test_case)
        if not used:
            return efficiency
        tool_tier = self.tool_complexity.get(used[0])
        fit = complexity_score(self.task_complexity, tool_tier)
        self.score = efficiency * fit
        self.score_breakdown = {**self.score_breakdown, "complexity": fit}
        self.success = self.score >= self.threshold or (used[0] in self.acceptable_tools and fit == 1.0)
        mismatch = complexity_mismatch(self.task_complexity, tool_tier)
        self.reason = f"{mismatch}. {self.reason}" if mismatch else f"Complexity fits: {self.task_complexity} task. {self.reason}"
        return self.score

    @property
    def __name__(self) -> str:
        return "Contextual Complexity"



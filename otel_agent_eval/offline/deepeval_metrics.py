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

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from deepeval.metrics import BaseMetric
from deepeval.test_case import LLMTestCase

from ..config.catalog import Catalog, Profile, TaskRoute, Thresholds, Tool, load_catalog
from ..core.scoring import FAIL, OPTIMAL, UNROUTED, Scorer, StaticScore, choice_of

_TASK = "metric"  # the one task of the catalog a metric built from the article's arguments scores against


def tools_used(test_case: LLMTestCase) -> list[str]:
    """Tool names from `tools_called`, falling back to the metadata's `tools_used`."""
    if test_case.tools_called:
        return [tool.name for tool in test_case.tools_called]
    metadata = getattr(test_case, metadata_field(type(test_case))) or {}
    return [str(name) for name in metadata.get("tools_used") or []]


def metadata_field(test_case_class: type) -> str:
    """The name of a deepeval test case's free-form metadata field: `metadata` since deepeval 3.9.9, which
    deprecates the old `additional_metadata`; before, only `additional_metadata` (and test cases ignore
    unknown fields there, so `metadata=` would silently drop the data)."""
    return "metadata" if "metadata" in getattr(test_case_class, "model_fields", {}) else "additional_metadata"


class ToolEfficiencyMetric(BaseMetric):
    """Was the cheapest, fastest adequate tool chosen? Scores the first tool the agent used.

    The score is the live scorer's (`core/scoring.py`): one policy for routing, capability,
    complexity and the cost and latency ratios, online and offline. Built from the article's
    arguments, it scores against a one-task catalog of those tools; built `from_catalog`, it
    gives exactly the number the span processor gives the same call for that task. Success is
    the live `agent_eval.passed` (verdict not `fail`): the optimal tool, a tool in
    `acceptable_tools`, or score >= threshold.
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
        self._policy: tuple[Scorer, TaskRoute | None] | None = None  # built on first use, or by from_catalog

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog | str | os.PathLike[str] | None = None,
        *,
        task: str,
        environment: str | None = None,
        threshold: float | None = None,
        **kwargs: Any,
    ) -> ToolEfficiencyMetric:
        """The metric for a catalog task route: the live scorer's numbers for that task (capability,
        complexity, profile), with the environment's `fail` level as threshold (override with `threshold=`).

        `catalog` is a `Catalog` or a catalog file's path (loaded as `install(catalog=...)` loads it; None:
        the packaged one). `task=""` is what an unrouted run's `run.task` is: the live scorer's unrouted
        score (each tool against the best tool of its own capabilities), so `from_catalog(task=run.task)`
        works for any captured run."""
        if not isinstance(catalog, Catalog):
            catalog = load_catalog(catalog)
        route = catalog.task(task) if task != UNROUTED else None
        if route is None and task != UNROUTED:
            raise ValueError(f"{catalog.source}: no task {task!r}; tasks: {', '.join(t.name for t in catalog.tasks)} "
                             f"(or task='' for unrouted calls)")
        if issubclass(cls, ContextualComplexityMetric) and "task_complexity" not in kwargs and (
                route is None or route.complexity is None):
            raise ValueError(f"{catalog.source}: task {task!r} has no complexity for ContextualComplexityMetric; "
                             f"give task_complexity=, or use ToolEfficiencyMetric.from_catalog")
        scorer = Scorer(catalog, environment=environment)
        profile = catalog.profile(route.profile) if route is not None and route.profile else scorer.default_profile
        if issubclass(cls, ContextualComplexityMetric):
            if route is not None and route.complexity is not None:
                kwargs.setdefault("task_complexity", route.complexity)
            kwargs.setdefault("catalog", catalog)
        optimal = scorer.optimal_for(route) if route is not None else None
        metric = cls(
            tool_costs={name: t.cost_usd for name, t in catalog.names()},
            tool_latencies={name: t.latency_ms for name, t in catalog.names()},
            optimal_tool=optimal.name if optimal is not None else "",  # unrouted: each tool's own best
            acceptable_tools=list(route.acceptable_tools) if route is not None else [],
            threshold=scorer.thresholds.fail if threshold is None else threshold,
            cost_weight=profile.cost_weight,
            latency_weight=profile.latency_weight,
            **kwargs,
        )
        metric._policy = (scorer, route)
        return metric

    def judge(self, tool: str) -> StaticScore:
        """The live scorer's verdict on calling `tool` for this metric's task."""
        if self._policy is None:
            self._policy = self._article_policy()
        scorer, route = self._policy
        return scorer.static_score(tool, route)

    def _article_policy(self, task_complexity: str | None = None,
                        tool_complexity: Mapping[str, str] | None = None) -> tuple[Scorer, TaskRoute]:
        """A one-task catalog of the article's arguments: any listed tool can do the task."""
        names = {*self.tool_costs, *self.tool_latencies, self.optimal_tool}
        missing = lambda name: 0.0 if name == self.optimal_tool else math.inf  # noqa: E731 - unknown figures score 0
        tools = {name: Tool(name=name, cost_usd=self.tool_costs.get(name, missing(name)),
                            latency_ms=self.tool_latencies.get(name, missing(name)), capabilities=(_TASK,),
                            complexity=(tool_complexity or {}).get(name))  # type: ignore[arg-type]
                 for name in names}
        route = TaskRoute(name=_TASK, capability=_TASK, complexity=task_complexity, profile=_TASK,
                          optimal_tool=self.optimal_tool, acceptable_tools=tuple(self.acceptable_tools))
        catalog = Catalog(tools=tools, profiles={_TASK: Profile(_TASK, self.cost_weight, self.latency_weight)},
                          thresholds={_TASK: Thresholds(_TASK, self.threshold, self.threshold)},
                          default_profile=_TASK, default_environment=_TASK, tasks=(route,))
        return Scorer(catalog), route

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        used = tools_used(test_case)
        if not used:
            self.score, self.success, self.reason = 0.0, False, "No tools were used"
            return self.score
        judged = self.judge(used[0])
        self.score = judged.efficiency
        self.score_breakdown = {"cost": judged.cost_score, "latency": judged.latency_score}
        if judged.complexity_score is not None:
            self.score_breakdown["complexity"] = judged.complexity_score
        self.success = self._passed(judged)
        self.reason = judged.reason
        return self.score

    def _passed(self, judged: StaticScore) -> bool:
        """The live `agent_eval.passed` (verdict != "fail") for this call and task, so offline and live agree:
        the route's optimal tool, a tool it lists as acceptable, or efficiency at the `fail` level. An overridden
        `threshold` takes the `fail` level's place on the same ladder."""
        if self.threshold == judged.threshold or not judged.known:
            return judged.verdict != FAIL
        route = self._policy[1] if self._policy is not None else None
        listed = route is not None and judged.tool in route.acceptable_tools
        return choice_of(judged.outcome == OPTIMAL, listed, judged.efficiency,
                         Thresholds("", self.threshold, self.threshold))[1] != FAIL

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        return self.measure(test_case)

    def is_successful(self) -> bool:
        return bool(self.success)

    def cost_score(self, tool: str) -> float:
        return self.judge(tool).cost_score

    def latency_score(self, tool: str) -> float:
        return self.judge(tool).latency_score

    @property
    def __name__(self) -> str:
        return "Tool Efficiency"


class ContextualComplexityMetric(ToolEfficiencyMetric):
    """Does the tool's sophistication fit the task? Catches over- and under-engineering.

    The score is the efficiency score times the tier fit (1 same tier, 0.5 one tier
    off, 0 two tiers off). Tool tiers come from `tool_complexity`, else from `catalog`
    (default: the packaged catalog). Success is `ToolEfficiencyMetric`'s, the live verdict's:
    the optimal tool and a listed acceptable tool pass even one tier off.
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

    def _article_policy(self, task_complexity: str | None = None,
                        tool_complexity: Mapping[str, str] | None = None) -> tuple[Scorer, TaskRoute]:
        return super()._article_policy(self.task_complexity, self.tool_complexity)

    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        score = super().measure(test_case)
        used = tools_used(test_case)
        if not used:
            return score
        fit = self.score_breakdown.get("complexity", 1.0)
        if fit == 1.0:
            self.reason = f"Complexity fits: {self.task_complexity} task. {self.reason}"
        return score

    @property
    def __name__(self) -> str:
        return "Contextual Complexity"



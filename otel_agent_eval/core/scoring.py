"""Score one tool call against the catalog: which task, which optimal tool, how efficient.

Everything that depends only on the catalog (the optimal tool, the cost, latency and
complexity scores, the verdict) is computed once per (task, tool) when the `Scorer`
is built, so scoring a live call is a dict look-up plus its observed duration.

    >>> scorer = Scorer(load_catalog(), environment="staging")
    >>> score = scorer.score(record, scorer.route(agent="support_agent"))
    >>> score.outcome, score.optimal_tool, round(score.efficiency, 2)
    ('suboptimal', 'local_index', 0.03)
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import conventions as c
from ..config.catalog import Catalog, TaskRoute, Thresholds, Tool, match_text
from .efficiency import best_tool, complexity_mismatch, complexity_score, ratio_score, selection_reason, weighted_score
from .recognize import ToolCallRecord

OPTIMAL, ACCEPTABLE, SUBOPTIMAL, UNKNOWN_TOOL, ERROR = "optimal", "acceptable", "suboptimal", "unknown_tool", "error"
OUTCOMES = (OPTIMAL, ACCEPTABLE, SUBOPTIMAL, UNKNOWN_TOOL, ERROR)
PASS, WARN, FAIL = "pass", "warn", "fail"
TOOL_TYPES = frozenset({"function", "extension", "datastore"})  # the GenAI gen_ai.tool.type values
OTHER_TOOL_TYPE = "_OTHER"  # any other gen_ai.tool.type value: label values stay bounded
VERDICTS = (PASS, WARN, FAIL)
UNROUTED = ""  # task label of calls no route matched
_ROUTE_CACHE_LIMIT = 4096
_MISS = object()
_UNKNOWN_LIMIT = 1000  # distinct unknown tool names scored individually
UNKNOWN_OVERFLOW = "_other_"


@dataclass(frozen=True, eq=False)  # hashed by identity: a cheap dict key on the hot path
class StaticScore:
    """The part of a call's score fixed by the catalog for one (task, tool)."""

    tool: str  # canonical catalog name, or the name as called when unknown
    task: str
    profile: str
    optimal_tool: str
    known: bool
    cost_score: float
    latency_score: float
    complexity_score: float | None
    efficiency: float
    outcome: str  # before errors are taken into account
    verdict: str
    threshold: float
    cost_usd: float
    excess_cost_usd: float
    expected_latency_s: float | None  # the catalog's latency of this tool (None when unknown)
    optimal_latency_s: float | None  # the catalog's latency of the task's optimal tool: what excess latency is measured from
    latency_slo_s: float | None
    reason: str


class CallScore:
    """A scored call: the static part plus what was observed on this span (a plain slotted class:
    one is built per tool span, and a frozen dataclass costs four times as much to build)."""

    __slots__ = ("static", "outcome", "duration_s", "excess_latency_s", "slo_exceeded", "error_type", "tool_type")

    def __init__(self, static: StaticScore, outcome: str, duration_s: float | None, excess_latency_s: float,
                 slo_exceeded: bool, error_type: str | None = None, tool_type: str = "") -> None:
        self.static = static
        self.outcome = outcome
        self.duration_s = duration_s
        self.excess_latency_s = excess_latency_s
        self.slo_exceeded = slo_exceeded
        self.error_type = error_type
        self.tool_type = tool_type  # GenAI gen_ai.tool.type as a label value: function, extension, datastore, _OTHER or ""

    @property
    def passed(self) -> bool:
        return self.static.verdict != "fail"

    def __getattr__(self, name: str) -> Any:  # the static fields read as if they were ours
        return getattr(self.static, name)

    def __repr__(self) -> str:
        return f"CallScore(tool={self.static.tool!r}, task={self.static.task!r}, outcome={self.outcome!r}, efficiency={self.static.efficiency!r})"


class Scorer:
    """Scores tool calls against one catalog, profile and environment."""

    def __init__(self, catalog: Catalog, *, profile: str | None = None, environment: str | None = None) -> None:
        if profile is not None and profile not in catalog.profiles:
            raise ValueError(f"unknown profile {profile!r}; {catalog.source} has: {', '.join(catalog.profiles)}")
        if environment is not None and environment not in catalog.thresholds:
            raise ValueError(f"unknown environment {environment!r}; {catalog.source} has: {', '.join(catalog.thresholds)}")
        self.catalog = catalog
        self.default_profile = catalog.profile(profile)
        self.thresholds = catalog.thresholds_for(environment)
        self._route_keys = tuple(sorted({k for r in catalog.tasks for k in r.match if k != c.GEN_AI_AGENT_NAME}))
        self.uses_resource = bool(self._route_keys)  # whether any route matches on attributes other than the agent name
        self._route_cache: dict[tuple[Any, ...], TaskRoute | None] = {}
        self._routes = _RouteIndex(catalog.tasks)
        self._by_capability: dict[str, list[Tool]] = {}
        for tool in catalog.tools.values():
            for capability in tool.capabilities:
                self._by_capability.setdefault(capability, []).append(tool)
        self._best: dict[tuple[str, str], Tool | None] = {}  # (capability, profile) -> best tool
        self._optimal = {route.name: self._find_optimal(route) for route in catalog.tasks}
        # Scores fixed by the catalog, per (task, tool name): computed on first use, then a look-up.
        self._static: dict[tuple[str, str], StaticScore] = {}
        self._unknown: dict[tuple[str, str], StaticScore] = {}

    @property
    def health_pass(self) -> float:
        """The run health score (0-100) that passes: the environment's `fail` level, scaled."""
        return 100 * self.thresholds.fail

    def route(self, agent: str | None = None, attributes: Mapping[str, Any] | None = None,
              resource: Mapping[str, Any] | None = None) -> TaskRoute | None:
        """The first task route matching the call's agent and span/resource attributes (cached)."""
        if not self._route_keys:  # routes match on the agent alone (the packaged catalog's do): one look-up
            route = self._route_cache.get(agent, _MISS)
            return route if route is not _MISS else self._cached(agent, agent, {}, {})  # type: ignore[return-value]
        attributes, resource = attributes or {}, resource or {}
        return self._cached((agent, *(attributes.get(k, resource.get(k)) for k in self._route_keys)), agent, attributes, resource)

    def _cached(self, key: Any, agent: str | None, attributes: Mapping[str, Any], resource: Mapping[str, Any]) -> TaskRoute | None:
        try:
            return self._route_cache[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable attribute value: match without the cache
            return self._match(agent, attributes, resource)
        route = self._match(agent, attributes, resource)
        if len(self._route_cache) >= _ROUTE_CACHE_LIMIT:
            self._route_cache.clear()
        self._route_cache[key] = route
        return route

    def _match(self, agent: str | None, attributes: Mapping[str, Any], resource: Mapping[str, Any]) -> TaskRoute | None:
        lookup: Callable[[str], Any] = lambda k: agent if k == c.GEN_AI_AGENT_NAME else attributes.get(k, resource.get(k))  # noqa: E731
        return self._routes.first_match(lookup)

    def static_score(self, tool_name: str, route: TaskRoute | None) -> StaticScore:
        task = route.name if route else UNROUTED
        static = self._static.get((task, tool_name))
        if static is None:
            tool = self.catalog.tool(tool_name)
            if tool is not None:
                static = self._static[(task, tool_name)] = self._score_known(route, tool)
                return static
            static = self._unknown.get((task, tool_name))
            if static is None:
                static = self._remember_unknown(task, tool_name, route)
        return static

    def _remember_unknown(self, task: str, name: str, route: TaskRoute | None) -> StaticScore:
        """Unknown tools get a cached static score too, up to a cap; past it they share one."""
        if len(self._unknown) >= _UNKNOWN_LIMIT:
            name = UNKNOWN_OVERFLOW
            if (task, name) in self._unknown:
                return self._unknown[(task, name)]
        static = self._unknown[(task, name)] = self._score_unknown(name, route)
        return static

    def score(self, record: ToolCallRecord, route: TaskRoute | None) -> CallScore:
        """The call's score: the catalog-fixed part, plus what this span observed. Excess latency is the
        observed duration beyond the catalog's expected latency of the task's optimal tool, for every
        call (the optimal tool's own included); the efficiency score compares catalog latencies only."""
        static = self.static_score(record.name, route)
        duration = record.duration_s
        outcome = ERROR if record.error is not None else static.outcome
        optimal_latency = static.optimal_latency_s
        excess_latency = duration - optimal_latency if duration is not None and optimal_latency is not None else 0.0
        if excess_latency < 0.0:
            excess_latency = 0.0
        slo_exceeded = duration is not None and static.latency_slo_s is not None and duration > static.latency_slo_s
        raw_type = record.tool_type
        tool_type = "" if raw_type is None else raw_type if raw_type in TOOL_TYPES else OTHER_TOOL_TYPE
        return CallScore(static, outcome, duration, excess_latency, slo_exceeded, record.error, tool_type)

    def _score_known(self, route: TaskRoute | None, tool: Tool) -> StaticScore:
        if route is None:  # unrouted: generous, the best score over the tool's capabilities
            candidates = [self._against(None, tool, self._best_with(cap, self.default_profile)) for cap in tool.capabilities]
            return max(candidates, key=lambda s: (s.efficiency, s.optimal_tool == tool.name))
        return self._against(route, tool, self.optimal_for(route))

    def optimal_for(self, route: TaskRoute) -> Tool | None:
        """The route's `optimal_tool`, else the best tool with its capability under its profile."""
        optimal = self._optimal.get(route.name, _MISS)
        return self._find_optimal(route) if optimal is _MISS else optimal  # type: ignore[return-value]

    def _find_optimal(self, route: TaskRoute) -> Tool | None:
        """The route's `optimal_tool`, else the best by profile among the capable tools that fit the
        route's complexity best: a cheaper tool of the wrong tier is not the optimal pick (it would
        score `optimal` and the fitting tool `suboptimal`)."""
        named = self.catalog.tool(route.optimal_tool)
        if named is not None:
            return named
        profile = self.catalog.profile(route.profile) if route.profile else self.default_profile
        if route.complexity is None:
            return self._best_with(route.capability, profile)
        capable = self._by_capability.get(route.capability, ())
        fit = max((complexity_score(route.complexity, t.complexity) for t in capable), default=0.0)
        return best_tool((t for t in capable if complexity_score(route.complexity, t.complexity) == fit), profile)

    def _best_with(self, capability: str, profile: Any) -> Tool | None:
        key = (capability, profile.name)
        if key not in self._best:
            self._best[key] = best_tool(self._by_capability.get(capability, ()), profile)
        return self._best[key]

    def _against(self, route: TaskRoute | None, tool: Tool, optimal: Tool) -> StaticScore:
        profile = self.catalog.profile(route.profile) if route and route.profile else self.default_profile
        cost = ratio_score(tool.true_cost_usd, optimal.true_cost_usd)  # the price plus the measured context cost
        latency = ratio_score(tool.latency_ms, optimal.latency_ms)
        efficiency = weighted_score(cost, latency, profile.cost_weight, profile.latency_weight)
        fit = None
        if route is not None and route.complexity is not None:
            fit = complexity_score(route.complexity, tool.complexity)
            efficiency *= fit
        capable = route is None or _can_serve(route, tool)
        if not capable:  # cheaper or faster is no merit in a tool that cannot do the task
            efficiency = 0.0
        outcome, verdict = choice_of(tool.name == optimal.name, route is not None and tool.name in route.acceptable_tools,
                                     efficiency, self.thresholds)
        reason = selection_reason(outcome, tool.name, optimal.name, cost, latency)
        mismatch = complexity_mismatch(route.complexity, tool.complexity) if fit is not None else None
        if mismatch:
            reason = f"{mismatch}. {reason}"
        if not capable:
            reason = f"Capability mismatch: '{tool.name}' lacks {route.capability!r} for task {route.name!r}. {reason}"
        return StaticScore(
            tool=tool.name,
            task=route.name if route else UNROUTED,
            profile=profile.name,
            optimal_tool=optimal.name,
            known=True,
            cost_score=cost,
            latency_score=latency,
            complexity_score=fit,
            efficiency=efficiency,
            outcome=outcome,
            verdict=verdict,
            threshold=self.thresholds.fail,
            cost_usd=tool.cost_usd,
            excess_cost_usd=max(0.0, tool.true_cost_usd - optimal.true_cost_usd),
            expected_latency_s=tool.latency_ms / 1000,
            optimal_latency_s=optimal.latency_ms / 1000,
            latency_slo_s=tool.latency_slo_ms / 1000 if tool.latency_slo_ms else None,
            reason=reason,
        )

    def _score_unknown(self, name: str, route: TaskRoute | None) -> StaticScore:
        profile = self.catalog.profile(route.profile) if route and route.profile else self.default_profile
        optimal = self.optimal_for(route) if route is not None else None
        return StaticScore(
            tool=name, task=route.name if route else UNROUTED, profile=profile.name,
            optimal_tool=optimal.name if optimal else "", known=False,
            cost_score=0.0, latency_score=0.0, complexity_score=0.0 if route and route.complexity else None,
            efficiency=0.0, outcome=UNKNOWN_TOOL, verdict=FAIL, threshold=self.thresholds.fail,
            cost_usd=0.0, excess_cost_usd=0.0, expected_latency_s=None,
            optimal_latency_s=optimal.latency_ms / 1000 if optimal else None, latency_slo_s=None,
            reason=f"Unknown tool '{name}': not in the catalog {self.catalog.source}.",
        )


def choice_of(is_optimal: bool, listed_acceptable: bool, efficiency: float, thresholds: Thresholds) -> tuple[str, str]:
    """(outcome, verdict) of choosing a catalog tool: one ladder, so the two labels never disagree.

    The verdict judges the *choice of tool* in this environment: `pass` for the task's optimal
    tool, a tool the route lists in `acceptable_tools`, or any tool whose efficiency reaches the
    environment's `warn` level (outcome `optimal` or `acceptable`); otherwise the choice is
    `suboptimal`, with verdict `warn` when its efficiency still reaches the `fail` level and
    `fail` below it. Unknown tools are `unknown_tool` with verdict `fail`. A call that then
    fails keeps its choice's verdict and gets outcome `error` (`Scorer.score`).
    """
    if is_optimal:
        return OPTIMAL, PASS
    if listed_acceptable or efficiency >= thresholds.warn:
        return ACCEPTABLE, PASS
    return SUBOPTIMAL, WARN if efficiency >= thresholds.fail else FAIL


_WILDCARDS = "*?["


def _literal_ends(pattern: str) -> tuple[str, str]:
    """The literal text every value a glob matches starts and ends with ('' where it opens or closes with a
    wildcard). fnmatch has no escapes: what precedes the first `*?[` is literal, and so is what follows the
    last `*?[]` (a bracket expression closes with `]`; an unclosed `[` is literal anyway)."""
    start = next((i for i, ch in enumerate(pattern) if ch in _WILDCARDS), len(pattern))
    end = next((i for i in range(len(pattern) - 1, -1, -1) if pattern[i] in "*?[]"), -1)
    return pattern[:start], pattern[end + 1:]


class _Bucketed:
    """Route numbers filed under one attribute's exact values, literal prefixes and literal suffixes."""

    def __init__(self) -> None:
        self.exact: dict[str, list[int]] = {}
        self.prefix: dict[str, list[int]] = {}
        self.suffix: dict[str, list[int]] = {}
        self.prefix_lengths: tuple[int, ...] = ()
        self.suffix_lengths: tuple[int, ...] = ()

    def file(self, kind: str, text: str, i: int) -> None:
        bucket = getattr(self, kind).setdefault(text, [])
        if not bucket or bucket[-1] != i:
            bucket.append(i)

    def seal(self) -> None:
        self.prefix_lengths = tuple(sorted({len(t) for t in self.prefix}))
        self.suffix_lengths = tuple(sorted({len(t) for t in self.suffix}))

    def candidates(self, text: str, out: list[int]) -> None:
        out += self.exact.get(text, ())
        size = len(text)
        for n in self.prefix_lengths:  # a few distinct lengths, not one per route
            if n > size:
                break
            out += self.prefix.get(text[:n], ())
        for n in self.suffix_lengths:
            if n > size:
                break
            out += self.suffix.get(text[size - n:], ())


class _RouteIndex:
    """The routes in catalog order, each filed under one of its `match` keys, so that a call with a value
    never seen looks at a handful of candidates, not at every route.

    A pattern is filed by its text if it has no wildcards, else by its literal prefix or suffix (the
    longer): `tenant-42*` under the prefix `tenant-42`, `*-eu` under the suffix `-eu`. A value then
    finds its candidates with one dict look-up per distinct prefix or suffix length. Each route is
    filed under the key whose buckets are least crowded (any key will do: a route matches only if
    all its keys do); a route with no key whose every pattern has a literal end (`*eu*`, `[ab]*`,
    or no `match` at all) is tried on every call. The first matching route in catalog order wins,
    as a scan of them all would decide (property-tested against that scan).
    """

    def __init__(self, routes: tuple[TaskRoute, ...]) -> None:
        self._routes = routes
        self._scanned: list[int] = []
        self._by_key: dict[str, _Bucketed] = {}
        filings = [{key: _filing(patterns) for key, patterns in route.match.items()} for route in routes]
        crowd: dict[tuple[str, str, str], int] = {}
        for filed in filings:
            for key, entries in filed.items():
                for kind, text in entries or ():
                    crowd[(key, kind, text)] = crowd.get((key, kind, text), 0) + 1
        for i, filed in enumerate(filings):
            usable = [(sum(crowd[(key, kind, text)] for kind, text in entries), n, key, entries)
                      for n, (key, entries) in enumerate(filed.items()) if entries is not None]
            if not usable:
                self._scanned.append(i)
                continue
            _, _, key, entries = min(usable)
            buckets = self._by_key.setdefault(key, _Bucketed())
            for kind, text in entries:
                buckets.file(kind, text, i)
        for buckets in self._by_key.values():
            buckets.seal()

    def first_match(self, lookup: Callable[[str], Any]) -> TaskRoute | None:
        candidates = list(self._scanned)
        for key, buckets in self._by_key.items():
            value = lookup(key)
            if value is not None:
                buckets.candidates(match_text(value), candidates)
        routes = self._routes
        for i in sorted(set(candidates)) if len(candidates) > 1 else candidates:
            if routes[i].matches(lookup):
                return routes[i]
        return None


def _filing(patterns: tuple[str, ...]) -> list[tuple[str, str]] | None:
    """Where a key's patterns are filed: ("exact" | "prefix" | "suffix", text) each; None if one cannot be."""
    entries = []
    for pattern in patterns:
        if not any(ch in pattern for ch in _WILDCARDS):
            entries.append(("exact", pattern))
            continue
        prefix, suffix = _literal_ends(pattern)
        if not prefix and not suffix:
            return None
        entries.append(("prefix", prefix) if len(prefix) >= len(suffix) else ("suffix", suffix))
    return entries or None


def _can_serve(route: TaskRoute, tool: Tool) -> bool:
    """The tool has the task's capability, or the route names it explicitly."""
    return (route.capability in tool.capabilities or tool.name == route.optimal_tool
            or tool.name in route.acceptable_tools or tool.name in route.expected_tools)

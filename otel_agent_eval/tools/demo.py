"""`otel-agent-eval demo`: simulated agents emit real GenAI spans, scored live, no API key needed.

One simulated agent per task route of the catalog (`math_agent`, `support_agent`,
`analytics_agent`, `forecast_agent` with the packaged one) runs through a real
`TracerProvider` and `AgentEvalSpanProcessor`: each run is an `invoke_agent` span with
`chat` and `execute_tool` children in the OpenTelemetry GenAI conventions. Durations are
drawn around the catalog latencies and written as explicit span timestamps, so a run
costs well under a millisecond of real time while its timings look like production.

    >>> registry = CollectorRegistry()
    >>> summary = run_workload(AgentEvalSpanProcessor(registry=registry), runs=1000, seed=7)
    >>> summary.non_optimal_share                       # about the requested 0.2
    0.2032...
    >>> [(r.tool, r.optimal_tool, round(r.wasted_usd, 2)) for r in read_metrics(registry).worst_pairs(2)]
    [('ml_pipeline', 'simple_filter', 5.8), ('wolfram_alpha', 'basic_calculator', 0.25)]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode
from prometheus_client import CollectorRegistry

from ..core import conventions as c
from ..config.catalog import Catalog, TaskRoute, Tool, load_catalog
from ..otel.processor import AgentEvalSpanProcessor
from ..metrics.collector import AGENT, TOOL, serve
from ..core.scoring import ACCEPTABLE, ERROR, OPTIMAL, SUBOPTIMAL, Scorer

__all__ = [
    "DemoError",
    "DemoAgent",
    "DemoMetrics",
    "ToolRow",
    "Workload",
    "WorkloadSummary",
    "add_demo_arguments",
    "demo_agents",
    "format_summary",
    "format_table",
    "read_metrics",
    "run_demo",
    "run_workload",
    "start_metrics_server",
]

# -- defaults of the command ------------------------------------------------------------
DEFAULT_DURATION_S = 30.0
DEFAULT_RATE = 20.0  # runs per second
DEFAULT_SUBOPTIMAL_SHARE = 0.2
DEFAULT_PORT = 9464
DEFAULT_ADDR = "127.0.0.1"
LIVE_REFRESH_S = 0.5  # the TTY table
PLAIN_REFRESH_S = 5.0  # one progress line when stdout is no terminal
MAX_LAG_S = 1.0  # further behind schedule than this, the pacing starts afresh instead of bursting
OTLP_TRACES_PATH = "/v1/traces"
OTLP_TIMEOUT_S = 5.0  # bounds the flush at exit when the collector is down (the exporter's default is 10)

# -- the simulation -----------------------------------------------------------------------
LATENCY_SIGMA = 0.5  # lognormal spread of tool durations around the catalog latency
SLOW_TAIL_PROBABILITY = 0.01  # a rare slow call, as a cold start or a retry inside the tool
SLOW_TAIL_FACTOR = (3.0, 8.0)
MIN_LATENCY_MS = 1.0  # a catalog latency of 0 still gives a positive duration
CHAT_LATENCY_MS = 650.0
CHAT_SIGMA = 0.4
GAP_MS = (1.0, 8.0)  # framework overhead between spans of a run
ERROR_PROBABILITY = 0.03
ERROR_TYPES = ("TimeoutError", "RateLimitError", "ToolExecutionError")
EXTRA_CALL_PROBABILITY = 0.1  # the agent calls its tool a second time (a follow-up lookup)
PLAN_TOKENS = ((200, 1200), (15, 120))  # (input, output) ranges of the chat that picks a tool
ANSWER_TOKENS = ((300, 1600), (40, 400))
DEFAULT_MODEL = "gpt-4o-mini"
PROVIDER_NAME = "openai"
SERVICE_NAME = "otel-agent-eval-demo"
TOOL_TYPE = "function"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"  # not read by the product, so not in conventions.py
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
OP_CHAT = "chat"

# -- the report ---------------------------------------------------------------------------
WORST_PAIRS_SHOWN = 5
MIN_RATE_ELAPSED_S = 0.25  # a rate measured over less time is noise
NON_OPTIMAL = "non-optimal"
TABLE_INDENT = "  "  # tool rows under their agent
COLUMNS = (("tool", 21, "<"), ("pick", 10, "<"), ("calls", 7, ">"), ("eff", 6, ">"),  # (title, width, alignment)
           ("p95", 8, ">"), ("p99", 8, ">"), ("cost $", 9, ">"), ("wasted $", 9, ">"))
ANSI_UP_AND_CLEAR = "\x1b[{n}A\r\x1b[J"
ANSI_HIDE_CURSOR, ANSI_SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
ANSI_BOLD, ANSI_RED, ANSI_YELLOW, ANSI_RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


class DemoError(ValueError):
    """A demo option that cannot work; the CLI prints it as one line and exits 2."""


@dataclass(frozen=True)
class TaskScript:
    """What an agent of one task asks (first, and in a follow-up call), what its tool answers,
    and the worse tools it may pick instead of the optimal one."""

    query: str
    follow_up: str
    result: str
    worse_tools: tuple[str, ...] = ()
    model: str = DEFAULT_MODEL


# The article's examples for the packaged catalog's tasks. Other tasks get `GENERIC_SCRIPT`,
# and pick among the other tools with the task's capability.
TASK_SCRIPTS: dict[str, TaskScript] = {
    "arithmetic": TaskScript("1234 * 5.5", "6787 / 12", "6787", ("wolfram_alpha", "code_interpreter")),
    "faq": TaskScript("what is the return policy", "how do I print a return label",
                      "Items can be returned within 30 days.", ("web_search",)),
    "analytics": TaskScript("orders where total > 100 and status = 'shipped'", "orders where status = 'returned'",
                            '{"rows": 42}', ("ml_pipeline",), model="gpt-4.1-mini"),
    "forecasting": TaskScript("monthly_revenue", "weekly_signups", '{"next_quarter_usd": 1250000, "interval": 0.08}',
                              ("simple_filter",), model="gpt-4o"),
}
GENERIC_SCRIPT = TaskScript("sample request", "follow-up request", "ok")


@dataclass(frozen=True)
class DemoAgent:
    """One simulated agent: its name routes it to `task`, where `optimal_tool` is the right pick."""

    name: str
    task: str
    optimal_tool: str
    worse_tools: tuple[str, ...]
    script: TaskScript
    span_attributes: Mapping[str, str] = field(default_factory=dict)  # for routes matching on more than the agent


def demo_agents(catalog: Catalog) -> list[DemoAgent]:
    """One agent per task route that a simulated agent can reach, in the catalog's order.

    The agent's name comes from the route's `gen_ai.agent.name` patterns and is checked
    with the real `Scorer`, so an agent is only simulated when its spans will be routed
    to its task; the optimal tool is the one the scorer compares against.
    """
    scorer = Scorer(catalog)
    agents = []
    for route in catalog.tasks:
        name = _agent_name(route)
        extra = {k: _example_value(v) for k, v in route.match.items() if k != c.GEN_AI_AGENT_NAME}
        if scorer.route(name, extra) is not route:
            continue
        optimal = _optimal_tool(scorer, route, catalog)
        if not optimal:
            continue
        script = TASK_SCRIPTS.get(route.name, GENERIC_SCRIPT)
        worse = tuple(t for t in script.worse_tools if t in catalog.tools and t != optimal)
        if not worse:
            worse = _other_tools(catalog, route, optimal)
        agents.append(DemoAgent(name, route.name, optimal, worse, script, extra))
    if not agents:
        raise DemoError(f"{catalog.source} has no task route a simulated agent can be routed to "
                        "(the demo needs `tasks:` matching on gen_ai.agent.name)")
    return agents


def _agent_name(route: TaskRoute) -> str:
    """A name fitting the route's first agent pattern: "support*" gives "support_agent"."""
    patterns = route.match.get(c.GEN_AI_AGENT_NAME, ())
    literal = next((p for p in patterns if not any(ch in p for ch in "*?[")), None)
    if literal:
        return literal
    for pattern in patterns:
        stem = pattern.rstrip("*")
        if stem and not any(ch in stem for ch in "*?["):
            return f"{stem.rstrip('_')}_agent"
    return f"{route.name}_agent"


def _example_value(patterns: tuple[str, ...]) -> str:
    """A value matching one of a route's attribute patterns (used for routes on other attributes)."""
    for pattern in patterns:
        if not any(ch in pattern for ch in "*?["):
            return pattern
    return patterns[0].replace("*", "x").replace("?", "x") if patterns else ""


def _optimal_tool(scorer: Scorer, route: TaskRoute, catalog: Catalog) -> str:
    """The tool the scorer treats as optimal for the route (its `optimal_tool`, or the best by profile)."""
    any_tool = next(iter(catalog.tools))
    return scorer.static_score(any_tool, route).optimal_tool


def _other_tools(catalog: Catalog, route: TaskRoute, optimal: str) -> tuple[str, ...]:
    """Worse picks for a task without a script: other tools with its capability, else any other tool."""
    same = tuple(t.name for t in catalog.tools_with(route.capability) if t.name != optimal)
    return same or tuple(name for name in catalog.tools if name != optimal)


# -- one simulated run --------------------------------------------------------------------


@dataclass
class WorkloadSummary:
    """What the simulation emitted: the ground truth to compare the processor's metrics with."""

    runs: int = 0
    spans: int = 0
    tool_calls: int = 0
    non_optimal_calls: int = 0
    errors: int = 0
    requested_share: float = DEFAULT_SUBOPTIMAL_SHARE
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)  # (agent, tool) -> calls

    @property
    def non_optimal_share(self) -> float:
        return self.non_optimal_calls / self.tool_calls if self.tool_calls else 0.0


@dataclass(frozen=True)
class _Call:
    tool: Tool
    query: str
    duration_ns: int
    error_type: str | None


class Workload:
    """Emits simulated agent runs as real spans through `provider`, one `run_once()` at a time.

    With probability `suboptimal_share` a run picks one of its agent's worse tools; the
    choice, the durations and the errors come from one `random.Random(seed)`, so a seed
    reproduces the workload. Span timestamps come from `clock` (ns): each run ends "now".
    """

    def __init__(
        self,
        provider: TracerProvider,
        catalog: Catalog,
        *,
        suboptimal_share: float = DEFAULT_SUBOPTIMAL_SHARE,
        seed: int | None = None,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        check_share(suboptimal_share)
        self.catalog = catalog
        self.agents = demo_agents(catalog)
        self.suboptimal_share = suboptimal_share
        self.summary = WorkloadSummary(requested_share=suboptimal_share)
        self._tracer = provider.get_tracer(__name__)
        self._rng = random.Random(seed)
        self._clock = clock

    def run_once(self) -> None:
        """One agent run: plan with the LLM, call a tool (retry after an error, or a follow-up), answer."""
        rng = self._rng
        agent = rng.choice(self.agents)
        worse = bool(agent.worse_tools) and rng.random() < self.suboptimal_share
        tool = self.catalog.tools[rng.choice(agent.worse_tools) if worse else agent.optimal_tool]
        calls = [self._call(tool, agent.script.query)]
        if calls[0].error_type is not None:  # a retry with the same arguments
            calls.append(self._call(tool, agent.script.query))
        elif rng.random() < EXTRA_CALL_PROBABILITY:
            calls.append(self._call(tool, agent.script.follow_up))
        self._emit(agent, calls)
        self._count(agent, calls)

    def _call(self, tool: Tool, query: str) -> _Call:
        rng = self._rng
        ms = rng.lognormvariate(math.log(max(tool.latency_ms, MIN_LATENCY_MS)), LATENCY_SIGMA)
        if rng.random() < SLOW_TAIL_PROBABILITY:
            ms *= rng.uniform(*SLOW_TAIL_FACTOR)
        error = rng.choice(ERROR_TYPES) if rng.random() < ERROR_PROBABILITY else None
        return _Call(tool, query, _ns(ms), error)

    def _emit(self, agent: DemoAgent, calls: list[_Call]) -> None:
        rng = self._rng
        plan_ns, answer_ns = (_ns(rng.lognormvariate(math.log(CHAT_LATENCY_MS), CHAT_SIGMA)) for _ in range(2))
        gaps = [_ns(rng.uniform(*GAP_MS)) for _ in range(len(calls) + 3)]
        total = plan_ns + answer_ns + sum(call.duration_ns for call in calls) + sum(gaps)
        end = self._clock()
        t = end - total
        root = self._tracer.start_span(f"{c.OP_INVOKE_AGENT} {agent.name}", kind=SpanKind.INTERNAL, start_time=t,
                                       attributes=self._agent_attributes(agent))
        context = trace.set_span_in_context(root)
        t += gaps[0]
        t = self._chat(context, agent, t, plan_ns, PLAN_TOKENS, "tool_call") + gaps[1]
        for call, gap in zip(calls, gaps[2:]):
            t = self._tool(context, agent, t, call) + gap
        self._chat(context, agent, t, answer_ns, ANSWER_TOKENS, "stop")
        root.end(end_time=end)

    @staticmethod
    def _agent_attributes(agent: DemoAgent) -> dict[str, Any]:
        return {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: agent.name,
                GEN_AI_PROVIDER_NAME: PROVIDER_NAME, c.GEN_AI_REQUEST_MODEL: agent.script.model}

    def _chat(self, context: Any, agent: DemoAgent, start: int, duration: int,
              tokens: tuple[tuple[int, int], tuple[int, int]], finish: str) -> int:
        model = agent.script.model
        attributes = {
            c.GEN_AI_OPERATION_NAME: OP_CHAT, GEN_AI_PROVIDER_NAME: PROVIDER_NAME,
            c.GEN_AI_REQUEST_MODEL: model, c.GEN_AI_RESPONSE_MODEL: model,
            c.GEN_AI_USAGE_INPUT_TOKENS: self._rng.randint(*tokens[0]),
            c.GEN_AI_USAGE_OUTPUT_TOKENS: self._rng.randint(*tokens[1]),
            GEN_AI_RESPONSE_FINISH_REASONS: (finish,),
        }
        span = self._tracer.start_span(f"{OP_CHAT} {model}", context=context, kind=SpanKind.CLIENT,
                                       start_time=start, attributes=attributes)
        span.end(end_time=start + duration)
        return start + duration

    def _tool(self, context: Any, agent: DemoAgent, start: int, call: _Call) -> int:
        tool = call.tool
        attributes: dict[str, Any] = {
            **agent.span_attributes,
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: tool.name, c.GEN_AI_TOOL_TYPE: TOOL_TYPE,
            c.GEN_AI_TOOL_CALL_ID: f"call_{self._rng.getrandbits(96):024x}",
            c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(_tool_arguments(tool, call.query)),
        }
        if call.error_type is None:
            attributes[c.GEN_AI_TOOL_CALL_RESULT] = agent.script.result
        else:
            attributes[c.ERROR_TYPE] = call.error_type
        span = self._tracer.start_span(f"{c.OP_EXECUTE_TOOL} {tool.name}", context=context, kind=SpanKind.INTERNAL,
                                       start_time=start, attributes=attributes)
        end = start + call.duration_ns
        if call.error_type is not None:
            message = f"{tool.name} failed: simulated {call.error_type}"
            span.add_event("exception", {"exception.type": call.error_type, "exception.message": message}, timestamp=end)
            span.set_status(Status(StatusCode.ERROR, message))
        span.end(end_time=end)
        return end

    def _count(self, agent: DemoAgent, calls: list[_Call]) -> None:
        summary = self.summary
        summary.runs += 1
        summary.spans += 3 + len(calls)  # agent, two chats, the tool calls
        for call in calls:
            summary.tool_calls += 1
            summary.calls[(agent.name, call.tool.name)] += 1
            summary.non_optimal_calls += call.tool.name != agent.optimal_tool
            summary.errors += call.error_type is not None


def _tool_arguments(tool: Tool, query: str) -> dict[str, Any]:
    """Arguments fitting the tool's catalog JSON Schema, so argument checks see valid calls."""
    properties = (tool.parameters or {}).get("properties") or {"query": {"type": "string"}}
    by_type: dict[str, Any] = {"integer": 5, "number": 1.0, "boolean": True}
    return {name: by_type.get(spec.get("type") if isinstance(spec, Mapping) else None, query)
            for name, spec in properties.items()}


def _ns(ms: float) -> int:
    return max(1, int(ms * 1_000_000))


def check_share(share: float) -> None:
    """The share is a probability; NaN or a percentage (20 for 0.2) is a mistake worth one clear line."""
    if not 0.0 <= share <= 1.0:  # also rejects NaN
        raise DemoError(f"--suboptimal-share must be a fraction from 0 to 1 (got {share:g})")


def run_workload(
    target: SpanProcessor | TracerProvider,
    *,
    runs: int,
    suboptimal_share: float = DEFAULT_SUBOPTIMAL_SHARE,
    seed: int | None = None,
    catalog: Catalog | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> WorkloadSummary:
    """Emit `runs` simulated agent runs as fast as possible (no sleeping) and flush.

    `target` is a span processor (typically an `AgentEvalSpanProcessor`; a private
    `TracerProvider` is built around it and it is not shut down) or a provider that
    already has one. The agents come from `catalog`, else the processor's, else the
    packaged one. Returns the ground truth of what was emitted.
    """
    if runs < 0:
        raise DemoError(f"runs must be >= 0 (got {runs!r})")
    provider = target if isinstance(target, TracerProvider) else _private_provider(target)
    catalog = catalog or getattr(target, "catalog", None) or load_catalog()
    workload = Workload(provider, catalog, suboptimal_share=suboptimal_share, seed=seed, clock=clock)
    for _ in range(runs):
        workload.run_once()
    provider.force_flush()
    return workload.summary


def _private_provider(*processors: SpanProcessor) -> TracerProvider:
    """A provider that is not the global one and does not shut its processors down at exit."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}), shutdown_on_exit=False)
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


# -- reading the processor's metrics back from Prometheus -----------------------------


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

    def calls_with_pick(self, pick: str) -> int:
        return sum(r.calls for r in self.rows if r.pick == pick)

    def worst_pairs(self, limit: int = WORST_PAIRS_SHOWN) -> list[ToolRow]:
        """Non-optimal picks, most money wasted first, then the least efficient."""
        bad = [r for r in self.rows if r.non_optimal and r.calls]
        return sorted(bad, key=lambda r: (-r.wasted_usd, r.mean_efficiency, -r.calls))[:limit]


class _Collectable(Protocol):
    def collect(self) -> Iterable[Any]: ...


# Sample names of the processor's metrics (prometheus.py spells them inline).
PROCESSOR_PREFIX, TOTAL = "agent_eval_processor_", "_total"
CALLS_TOTAL = "agent_eval_tool_calls_total"
EFFICIENCY_SCORE = "agent_eval_tool_efficiency_score"
EFFICIENCY_DIMENSION = "efficiency"
LATENCY_SUMMARY = "agent_eval_tool_latency_seconds"
P95, P99 = str(0.95), str(0.99)  # quantile labels, as prometheus.py formats them
COST_TOTAL = "agent_eval_tool_cost_usd_total"
EXCESS_COST_TOTAL = "agent_eval_tool_excess_cost_usd_total"


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
            "p95": math.nan, "p99": math.nan, "cost": 0.0, "wasted": 0.0}


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


def _row(agent: str, tool: str, a: Mapping[str, Any]) -> ToolRow:
    pick = a["pick"] or (OPTIMAL if tool == a["optimal"] else NON_OPTIMAL)  # every call failed: no outcome label
    efficiency = a["eff_sum"] / a["eff_count"] if a["eff_count"] else math.nan
    return ToolRow(agent, a["task"], tool, a["optimal"], pick, a["calls"], a["errors"], efficiency,
                   a["p95"], a["p99"], a["cost"], a["wasted"])


# -- text output --------------------------------------------------------------------------


def format_table(metrics: DemoMetrics, *, agents: Sequence[str] = (), color: bool = False,
                 width: int | None = None) -> list[str]:
    """The table grouped by agent (in the given order), optimal pick first, and a total line.

    78 columns wide, so it fits an 80-column terminal without wrapping (wrapping would
    break the in-place redraw); longer lines are clipped to `width`.
    """
    rank = {name: i for i, name in enumerate(agents)}
    rows = sorted(metrics.rows, key=lambda r: (rank.get(r.agent, len(rank)), r.agent, r.non_optimal, r.tool))
    lines = [_paint(_clip(_cells([title for title, _, _ in COLUMNS]), width), ANSI_BOLD, color)]
    group = None
    for r in rows:
        if r.agent != group:
            group = r.agent
            lines.append(_clip(f"{r.agent} ({r.task or 'no task'})", width))
        cells = [f"{TABLE_INDENT}{r.tool}", r.pick, f"{r.calls:,}", _score(r.mean_efficiency), _duration(r.p95_s),
                 _duration(r.p99_s), f"{r.cost_usd:.4f}", f"{r.wasted_usd:.4f}"]
        tint = ANSI_RED if r.wasted_usd > 0 else ANSI_YELLOW if r.non_optimal else ""
        lines.append(_paint(_clip(_cells(cells), width), tint, color))
    total = ["total", "", f"{metrics.calls:,}", "", "", "", f"{metrics.cost_usd:.4f}", f"{metrics.wasted_usd:.4f}"]
    lines.append(_clip(_cells(total), width))
    return lines


def _cells(values: Sequence[str]) -> str:
    return "".join(f"{value:{align}{w}}" for value, (_, w, align) in zip(values, COLUMNS)).rstrip()


def format_progress(runs: int, elapsed_s: float, duration_s: float, *, bar: bool = False) -> str:
    """Elapsed over planned time, runs done and the achieved rate."""
    rate = f"{runs / elapsed_s:.1f}" if elapsed_s >= MIN_RATE_ELAPSED_S else "-"
    planned = f"{duration_s:g}s" if duration_s else "until Ctrl-C"
    text = f"{elapsed_s:5.1f}s / {planned}  {runs:,} runs  {rate} runs/s"
    if bar and duration_s:
        done = min(1.0, elapsed_s / duration_s)
        width = 24
        text = f"[{'#' * round(done * width):<{width}}] {text}"
    return text


def format_plain_line(metrics: DemoMetrics, runs: int, elapsed_s: float, duration_s: float) -> str:
    """The periodic line when stdout is no terminal: progress and the headline numbers."""
    return (f"{format_progress(runs, elapsed_s, duration_s)}  {metrics.calls:,} tool calls  "
            f"{metrics.non_optimal_share:.1%} non-optimal  ${metrics.wasted_usd:.4f} wasted")


def format_summary(metrics: DemoMetrics, workload: WorkloadSummary, elapsed_s: float) -> str:
    """The closing report: totals, non-optimal share, money wasted, worst tool -> optimal tool pairs."""
    p = metrics.processor
    rate = workload.runs / elapsed_s if elapsed_s > 0 else 0.0
    calls = metrics.calls
    lines = [
        f"Summary: {workload.runs:,} agent runs in {elapsed_s:.1f} s ({rate:.1f} runs/s), {workload.spans:,} spans emitted",
        f"  processor: {p.get('spans_seen', 0):,.0f} spans seen, {p.get('spans_scored', 0):,.0f} tool calls scored, "
        f"{p.get('spans_ignored', 0):,.0f} agent/chat spans passed through, "
        f"{p.get('malformed_tool_spans', 0):,.0f} malformed, {p.get('internal_errors', 0):,.0f} internal errors",
        f"  non-optimal tool picks: {metrics.non_optimal_calls:,} of {calls:,} calls ({metrics.non_optimal_share:.1%}, "
        f"requested {workload.requested_share:.0%}): {metrics.calls_with_pick(ACCEPTABLE):,} acceptable, "
        f"{metrics.calls_with_pick(SUBOPTIMAL):,} suboptimal; {sum(r.errors for r in metrics.rows):,} calls failed",
        _cost_line(metrics),
        *_worst_lines(metrics.worst_pairs()),
    ]
    return "\n".join(lines)


def _cost_line(metrics: DemoMetrics) -> str:
    if not metrics.cost_usd:
        return "  tool cost $0.0000, nothing wasted"
    return (f"  tool cost ${metrics.cost_usd:.4f}, of which wasted ${metrics.wasted_usd:.4f} "
            f"({metrics.wasted_usd / metrics.cost_usd:.0%} spent beyond the optimal tools)")


def _worst_lines(worst: list[ToolRow]) -> list[str]:
    if not worst:
        return []
    pairs = [f"{r.tool} -> {r.optimal_tool}" for r in worst]
    pad, agent_pad = max(map(len, pairs)), max(len(r.agent) for r in worst)
    return ["  worst picks (tool -> optimal tool):"] + [
        f"    {pair:<{pad}}  {r.agent:<{agent_pad}} {r.calls:>7,} calls  efficiency {_score(r.mean_efficiency)}"
        f"  wasted ${r.wasted_usd:.4f}" for pair, r in zip(pairs, worst)]


def _score(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.2f}s"


def _clip(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: max(0, width - 1)] + "~"  # ASCII: any encoding


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{ANSI_RESET}" if color and code else text


# -- the command ----------------------------------------------------------------------------


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The `demo` options; defined here so the command and its defaults live in one module."""
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, metavar="SECONDS",
                        help="how long to run (default %(default)g; 0 runs until Ctrl-C)")
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, metavar="RUNS_PER_SECOND",
                        help="simulated agent runs per second (default %(default)g)")
    parser.add_argument("--suboptimal-share", type=float, default=DEFAULT_SUBOPTIMAL_SHARE, metavar="FRACTION",
                        help="share of runs that pick a worse tool than the optimal one, 0 to 1 (default %(default)g)")
    parser.add_argument("--catalog", metavar="FILE", help="catalog YAML (default: the packaged catalog)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT,
                        help="port of the /metrics endpoint (default %(default)s; 0 picks a free one)")
    parser.add_argument("--addr", default=DEFAULT_ADDR, help="address of the /metrics endpoint (default %(default)s)")
    parser.add_argument("--otlp-endpoint", metavar="URL",
                        help="also export the enriched spans over OTLP http/protobuf, e.g. http://localhost:4318 "
                             f"({OTLP_TRACES_PATH} is added to a URL without a path)")
    parser.add_argument("--seed", type=int, help="seed of the simulation, for a reproducible workload")
    parser.add_argument("--no-live", action="store_true",
                        help="plain progress lines instead of the live table (automatic when stdout is no terminal)")


def check_options(args: argparse.Namespace) -> None:
    """Reject values the demo cannot run with, before anything is started."""
    if not (0 <= args.duration < math.inf):
        raise DemoError(f"--duration must be a number of seconds >= 0, 0 for until Ctrl-C (got {args.duration:g})")
    if not (0 < args.rate < math.inf):
        raise DemoError(f"--rate must be a positive number of runs per second (got {args.rate:g})")
    check_share(args.suboptimal_share)
    if not 0 <= args.port <= 65535:
        raise DemoError(f"--port must be from 0 to 65535, 0 for a free port (got {args.port!r})")
    if args.otlp_endpoint is not None:
        otlp_traces_url(args.otlp_endpoint)


def otlp_traces_url(endpoint: str) -> str:
    """The traces URL for an OTLP/HTTP endpoint: a bare `http://host:4318` gets `/v1/traces`."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise DemoError(f"--otlp-endpoint must be an http:// or https:// URL, e.g. http://localhost:4318 (got {endpoint!r})")
    if parts.path in ("", "/"):
        parts = parts._replace(path=OTLP_TRACES_PATH)
    return urlunsplit(parts)


def otlp_forwarder(endpoint: str) -> SpanProcessor:
    """`BatchSpanProcessor(OTLPSpanExporter(...))` over http/protobuf; imported only when asked for."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    return BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_traces_url(endpoint), timeout=OTLP_TIMEOUT_S))


def start_metrics_server(registry: CollectorRegistry, *, port: int = DEFAULT_PORT, addr: str = DEFAULT_ADDR) -> tuple[Any, str]:
    """Serve `registry` on /metrics; returns the server (call `shutdown()`) and the URL actually bound.

    A busy port or a bad address is a `DemoError` (one line), not a traceback; port 0
    binds a free port, which the URL shows.
    """
    try:
        server, _thread = serve(registry, port=port, addr=addr)
    except (OSError, OverflowError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise DemoError(f"cannot serve /metrics on {addr}:{port}: {reason}") from None
    host = f"[{addr}]" if ":" in addr else addr
    return server, f"http://{host}:{server.server_port}/metrics"


def run_demo(args: argparse.Namespace, *, out: TextIO | None = None) -> int:
    """The `demo` command: serve /metrics, run the paced workload with a live view, print a summary.

    Raises `DemoError` or `CatalogError` for unusable options before starting anything.
    Ctrl-C (or SIGTERM) stops the workload early; the summary is printed all the same,
    before the OTLP exporter is flushed (which may take a while if the collector is down).
    """
    out = out or sys.stdout
    check_options(args)
    catalog = load_catalog(args.catalog)
    agents = demo_agents(catalog)
    registry = CollectorRegistry()
    server, url = start_metrics_server(registry, port=args.port, addr=args.addr)
    provider = None
    try:
        forward = otlp_forwarder(args.otlp_endpoint) if args.otlp_endpoint else None
        provider = _private_provider(AgentEvalSpanProcessor(catalog, registry=registry, forward_to=forward))
        workload = Workload(provider, catalog, suboptimal_share=args.suboptimal_share, seed=args.seed)
        names = [a.name for a in agents]
        live = not args.no_live and out.isatty()
        display: _Display = _LiveDisplay(out, args.duration, names) if live else _PlainDisplay(out, args.duration, names)
        elapsed = _run_interruptibly(workload, registry, display, args,
                                     header=lambda: _print_header(out, args, agents, catalog, url))
        metrics = read_metrics(registry)
        display.finish(metrics, workload.summary.runs, elapsed)
        print(format_summary(metrics, workload.summary, elapsed), file=out, flush=True)
    finally:
        server.shutdown()
        server.server_close()
        if provider is not None:
            provider.shutdown()  # flushes the OTLP exporter, if any
    return 0


def _run_interruptibly(workload: Workload, registry: CollectorRegistry, display: _Display, args: argparse.Namespace,
                       *, header: Callable[[], None]) -> float:
    """Print the header and drive the workload; Ctrl-C or SIGTERM ends it early. Returns the seconds run.

    The header is printed inside the interruptible part, so once a user (or a test) has
    seen it, an interrupt always leads to the summary.
    """
    started = time.monotonic()
    try:
        with _sigterm_as_interrupt():
            header()
            display.start()
            return _drive(workload, registry, display, duration_s=args.duration, rate=args.rate)
    except KeyboardInterrupt:
        display.interrupted()
        return time.monotonic() - started
    finally:
        display.close()


def _print_header(out: TextIO, args: argparse.Namespace, agents: list[DemoAgent], catalog: Catalog, url: str) -> None:
    planned = f"for {args.duration:g} s" if args.duration else "until Ctrl-C"
    lines = [
        f"otel-agent-eval demo: {len(agents)} simulated agents ({', '.join(a.name for a in agents)}), "
        f"{args.rate:g} runs/s {planned}, {args.suboptimal_share:.0%} of runs pick a worse tool",
        f"  catalog: {catalog.source}",
        f"  metrics: curl {url}",
    ]
    if args.otlp_endpoint:
        lines.append(f"  spans:   exported to {otlp_traces_url(args.otlp_endpoint)} (OTLP http/protobuf)")
    lines.append("  Ctrl-C stops early and prints the summary.")
    print("\n".join(lines), file=out, flush=True)


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let `kill` and `docker stop` (SIGTERM) end the demo like Ctrl-C: with the summary."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _drive(workload: Workload, registry: CollectorRegistry, display: _Display, *, duration_s: float, rate: float,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> float:
    """Run the workload at `rate` runs/s until `duration_s` (0: until Ctrl-C); returns the seconds run.

    Between runs it really sleeps (the spans carry simulated timings instead), and it
    refreshes the display every `display.interval` seconds. Ctrl-C propagates to the caller.
    """
    start = clock()
    end = start + duration_s if duration_s else math.inf
    period = 1.0 / rate
    next_run, next_show = start, start + display.first_after
    while (now := clock()) < end:
        if now >= next_run:
            workload.run_once()
            next_run = max(next_run + period, now - MAX_LAG_S)
        if now >= next_show:
            display.update(read_metrics(registry), workload.summary.runs, now - start)
            next_show = now + display.interval
        wait = min(next_run, next_show, end) - clock()
        if wait > 0:
            sleep(wait)
    return clock() - start


class _Display(Protocol):
    interval: float
    first_after: float

    def start(self) -> None: ...
    def update(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None: ...
    def interrupted(self) -> None: ...
    def close(self) -> None: ...
    def finish(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None: ...


class _PlainDisplay:
    """For pipes and logs: one progress line every few seconds, the table once at the end."""

    interval = PLAIN_REFRESH_S
    first_after = PLAIN_REFRESH_S

    def __init__(self, out: TextIO, duration_s: float, agents: Sequence[str]) -> None:
        self._out = out
        self._duration_s = duration_s
        self._agents = agents

    def start(self) -> None:
        pass

    def update(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        print(format_plain_line(metrics, runs, elapsed_s, self._duration_s), file=self._out, flush=True)

    def interrupted(self) -> None:
        print("interrupted", file=self._out, flush=True)

    def close(self) -> None:
        pass

    def finish(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        print("\n".join(["", *format_table(metrics, agents=self._agents), ""]), file=self._out, flush=True)


class _LiveDisplay:
    """For a terminal: the table redrawn in place with ANSI escapes about twice a second."""

    interval = LIVE_REFRESH_S
    first_after = 0.0

    def __init__(self, out: TextIO, duration_s: float, agents: Sequence[str]) -> None:
        self._out = out
        self._duration_s = duration_s
        self._agents = agents
        self._drawn = 0
        self._color = "NO_COLOR" not in os.environ

    def start(self) -> None:
        self._out.write(ANSI_HIDE_CURSOR)

    def update(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        width = shutil.get_terminal_size().columns - 1
        headline = (f"{metrics.calls:,} tool calls, {metrics.non_optimal_share:.1%} on a non-optimal tool, "
                    f"${metrics.wasted_usd:.4f} wasted")
        lines = ["", _clip(format_progress(runs, elapsed_s, self._duration_s, bar=True), width), _clip(headline, width), "",
                 *format_table(metrics, agents=self._agents, color=self._color, width=width)]
        erase = ANSI_UP_AND_CLEAR.format(n=self._drawn) if self._drawn else ""
        self._out.write(erase + "\n".join(lines) + "\n")
        self._out.flush()
        self._drawn = len(lines)

    def interrupted(self) -> None:
        pass

    def close(self) -> None:
        self._out.write(ANSI_SHOW_CURSOR)
        self._out.flush()

    def finish(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        self.update(metrics, runs, elapsed_s)
        self._out.write("\n")

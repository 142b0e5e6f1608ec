"""The simulated agent fleet: agents that emit real OpenTelemetry GenAI spans, no API key needed.

It exists so the demo, the tests and the ops checks share one workload with a known ground
truth. One simulated agent per task route of the catalog (`math_agent`, `support_agent`,
`analytics_agent`, `forecast_agent` with the packaged one) runs through a real
`TracerProvider`: each run is an `invoke_agent` span with `chat` and `execute_tool`
children in the OpenTelemetry GenAI conventions. Durations are drawn around the catalog
latencies and written as explicit span timestamps, so a run costs well under a
millisecond of real time while its timings look like production.
"""
from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode

from ...config.catalog import Catalog, TaskRoute, Tool, load_catalog
from ...core import conventions as c
from ...core.scoring import Scorer

DEFAULT_SUBOPTIMAL_SHARE = 0.2  # also the default of the command's --suboptimal-share

# -- the simulation -----------------------------------------------------------------------
# The packaged catalog's SLOs are 3.75x (ml_pipeline, code_interpreter) to 5x its latencies: the
# calm demo keeps every tool's p99 below its SLO (no AgentEvalToolLatencyOverSLO), with a slow
# tail that only now and then crosses it (tests/test_demo.py checks it on 5-minute windows).
LATENCY_SIGMA = 0.3  # lognormal spread of tool durations around the catalog latency (p99 at 2x)
SLOW_TAIL_PROBABILITY = 0.002  # a rare slow call, as a cold start or a retry inside the tool
SLOW_TAIL_FACTOR = (2.0, 3.0)
MIN_LATENCY_MS = 1.0  # a catalog latency of 0 still gives a positive duration
CHAT_LATENCY_MS = 650.0
CHAT_SIGMA = 0.4
GAP_MS = (1.0, 8.0)  # framework overhead between spans of a run
ERROR_PROBABILITY = 0.03
ERROR_TYPES = ("TimeoutError", "RateLimitError", "ToolExecutionError")
EXTRA_CALL_PROBABILITY = 0.1  # the agent calls its tool a second time (a follow-up lookup)
PLAN_TOKENS = ((200, 1200), (15, 120))  # (input, output) ranges of the chat that picks a tool
ANSWER_TOKENS = ((300, 1600), (40, 400))  # the output range of the chat that answers; its input is the plan's plus
# the tool results (core/context_cost.py measures what each result adds to it: the tools' true cost)
RESULT_TOKENS = (40, 0.25, 2_000)  # a result's tokens: 40 + a quarter of the tool's catalog latency in ms, at most 2,000
ERROR_RESULT_TOKENS = 25  # a failed call's error text, context too
DEFAULT_MODEL = "gpt-4o-mini"
PROVIDER_NAME = "openai"
SERVICE_NAME = "otel-agent-eval-demo"
TOOL_TYPE = "function"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"  # not read by the product, so not in conventions.py
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
OP_CHAT = "chat"


class DemoError(ValueError):
    """A demo option that cannot work; the CLI prints it as one line and exits 2.

    Defined with the workload, not in `command`, because the workload itself rejects bad
    values (a share that is no fraction, a catalog without agent routes), and the command
    imports the workload, never the other way round.
    """


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


NOISE_LEAVES = 3  # the realistic mix: HTTP and database client spans under every chat and tool span (~70 % of all)
_NOISE_SPANS = (  # (name, kind, attributes): what an instrumented HTTP client and database driver write
    ("POST", SpanKind.CLIENT, {"http.request.method": "POST", "url.full": "https://api.openai.com/v1/chat/completions",
                               "server.address": "api.openai.com", "server.port": 443, "http.response.status_code": 200}),
    ("SELECT orders", SpanKind.CLIENT, {"db.system": "postgresql", "db.namespace": "shop", "db.operation.name": "SELECT",
                                        "db.query.text": "SELECT id, status, total FROM orders WHERE customer_id = $1"}),
    ("GET", SpanKind.CLIENT, {"http.request.method": "GET", "url.full": "https://search.internal/v2/query?q=returns",
                              "server.address": "search.internal", "server.port": 443, "http.response.status_code": 200}),
)


class Workload:
    """Emits simulated agent runs as real spans through `provider`, one `run_once()` at a time.

    With probability `suboptimal_share` a run picks one of its agent's worse tools; the
    choice, the durations and the errors come from one `random.Random(seed)`, so a seed
    reproduces the workload. Span timestamps come from `clock` (ns): each run ends "now".
    `noise_leaves` HTTP and database client spans are written under every chat and tool span
    (`NOISE_LEAVES` for the realistic mix: real traces are mostly such spans); they draw nothing from the
    seed's sequence, so the agent spans are the same with them or without.
    """

    def __init__(
        self,
        provider: TracerProvider,
        catalog: Catalog,
        *,
        suboptimal_share: float = DEFAULT_SUBOPTIMAL_SHARE,
        seed: int | None = None,
        clock: Callable[[], int] = time.time_ns,
        noise_leaves: int = 0,
    ) -> None:
        check_share(suboptimal_share)
        self.noise_leaves = noise_leaves
        self.catalog = catalog
        self.agents = demo_agents(catalog)
        self.suboptimal_share = suboptimal_share
        self.summary = WorkloadSummary(requested_share=suboptimal_share)
        self._tracer = provider.get_tracer(__package__)  # the scope the spans always had
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
        plan = (self._rng.randint(*PLAN_TOKENS[0]), self._rng.randint(*PLAN_TOKENS[1]))
        t = self._chat(context, agent, t, plan_ns, plan, "tool_call") + gaps[1]
        for call, gap in zip(calls, gaps[2:]):
            t = self._tool(context, agent, t, call) + gap
        answer_in = sum(plan) + sum(result_tokens(call.tool) if call.error_type is None else ERROR_RESULT_TOKENS
                                    for call in calls)
        self._chat(context, agent, t, answer_ns, (answer_in, self._rng.randint(*ANSWER_TOKENS[1])), "stop")
        root.end(end_time=end)

    @staticmethod
    def _agent_attributes(agent: DemoAgent) -> dict[str, Any]:
        return {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: agent.name,
                GEN_AI_PROVIDER_NAME: PROVIDER_NAME, c.GEN_AI_REQUEST_MODEL: agent.script.model}

    def _chat(self, context: Any, agent: DemoAgent, start: int, duration: int, tokens: tuple[int, int], finish: str) -> int:
        model = agent.script.model
        attributes = {
            c.GEN_AI_OPERATION_NAME: OP_CHAT, GEN_AI_PROVIDER_NAME: PROVIDER_NAME,
            c.GEN_AI_REQUEST_MODEL: model, c.GEN_AI_RESPONSE_MODEL: model,
            c.GEN_AI_USAGE_INPUT_TOKENS: tokens[0], c.GEN_AI_USAGE_OUTPUT_TOKENS: tokens[1],
            GEN_AI_RESPONSE_FINISH_REASONS: (finish,),
        }
        span = self._tracer.start_span(f"{OP_CHAT} {model}", context=context, kind=SpanKind.CLIENT,
                                       start_time=start, attributes=attributes)
        self._noise(span, start, duration)
        span.end(end_time=start + duration)
        return start + duration

    def _noise(self, parent: Any, start: int, duration: int) -> None:
        """`noise_leaves` client spans one after another inside the parent's time (none drawn from the seed)."""
        n = self.noise_leaves
        if not n:
            return
        context, step = trace.set_span_in_context(parent), duration // (n + 1)
        for i in range(n):
            name, kind, attributes = _NOISE_SPANS[i % len(_NOISE_SPANS)]
            at = start + step // 2 + i * step
            self._tracer.start_span(name, context=context, kind=kind, start_time=at,
                                    attributes=attributes).end(end_time=at + max(1, step // 2))
        self.summary.spans += n

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
        self._noise(span, start, call.duration_ns)
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


def result_tokens(tool: Tool) -> int:
    """The tokens a simulated call's result adds to the answering model call: slower tools return more."""
    base, per_ms, cap = RESULT_TOKENS
    return min(cap, base + round(per_ms * tool.latency_ms))


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
    noise_leaves: int = 0,
) -> WorkloadSummary:
    """Emit `runs` simulated agent runs as fast as possible (no sleeping) and flush (`noise_leaves`: `Workload`'s).

    `target` is a span processor (typically an `AgentEvalSpanProcessor`; a private
    `TracerProvider` is built around it and it is not shut down) or a provider that
    already has one. The agents come from `catalog`, else the processor's, else the
    packaged one. Returns the ground truth of what was emitted.
    """
    if runs < 0:
        raise DemoError(f"runs must be >= 0 (got {runs!r})")
    provider = target if isinstance(target, TracerProvider) else private_provider(target)
    catalog = catalog or getattr(target, "catalog", None) or load_catalog()
    workload = Workload(provider, catalog, suboptimal_share=suboptimal_share, seed=seed, clock=clock,
                        noise_leaves=noise_leaves)
    for _ in range(runs):
        workload.run_once()
    provider.force_flush()
    return workload.summary


def private_provider(*processors: SpanProcessor) -> TracerProvider:
    """A provider that is not the global one and does not shut its processors down at exit."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}), shutdown_on_exit=False)
    for processor in processors:
        provider.add_span_processor(processor)
    return provider

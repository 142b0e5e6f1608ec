"""One pipeline: the span processor, the zero-code exporter and the offline metrics agree exactly.

The same live spans (real SDK, one TracerProvider) reach an `AgentEvalSpanProcessor` and an
`AgentEvalSpanExporter` behind a `BatchSpanProcessor`. Random traces of every supported
convention, agent runs, plain roots and roots that are tool spans themselves must come out
with identical scores, identical redaction and every tool span enriched exactly once in
both; each call's score equals what the offline deepeval metric gives it.
"""
from __future__ import annotations

import json
import math
import random
from collections import Counter
from typing import Any

from deepeval.test_case import LLMTestCase, ToolCall
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context
from prometheus_client import CollectorRegistry

from otel_agent_eval import (AgentEvalSpanExporter, AgentEvalSpanProcessor, ContextualComplexityMetric, ToolEfficiencyMetric,
                             load_catalog)
from otel_agent_eval.config.catalog import parse_catalog
from otel_agent_eval.config.settings import Settings

SECRET = "hunter2-SECRET"
REDACT = "password|token|secret|api_key"
CATALOG = load_catalog()
TOOLS = [*CATALOG.tools, "mystery_tool"]
AGENTS = ["support_agent", "math_agent", "analytics_bot", "forecaster", "unrouted_agent"]
CONVENTIONS = ("genai", "openinference", "openllmetry")


def agent_attributes(convention: str, agent: str) -> dict[str, Any]:
    if convention == "genai":
        return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
    if convention == "openinference":
        return {"openinference.span.kind": "AGENT", "agent.name": agent}
    return {"traceloop.span.kind": "agent", "gen_ai.agent.name": agent}


def tool_attributes(convention: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(arguments)
    if convention == "genai":
        return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.arguments": text,
                "gen_ai.tool.call.result": json.dumps({"answer": "ok", "token": SECRET})}
    if convention == "openinference":
        return {"openinference.span.kind": "TOOL", "tool.name": tool, "input.value": text, "output.value": "ok"}
    return {"traceloop.span.kind": "tool", "gen_ai.tool.name": tool, "traceloop.entity.input": text}


call = st.fixed_dictionaries({
    "tool": st.sampled_from(TOOLS),
    "convention": st.sampled_from(CONVENTIONS),
    "query": st.sampled_from(["return policy", "2+2", "orders in May"]),
    "error": st.booleans(),
    "duration_ms": st.integers(1, 5_000),
})
trace_shape = st.fixed_dictionaries({
    "root": st.sampled_from(["agent", "plain", "tool"]),
    "convention": st.sampled_from(CONVENTIONS),
    "agent": st.sampled_from(AGENTS),
    "calls": st.lists(call, min_size=1, max_size=5),
    "llm_tokens": st.one_of(st.none(), st.tuples(st.integers(1, 5_000), st.integers(1, 2_000))),
    "failed": st.booleans(),
})


class Both:
    """One provider, both entry points on it: the processor (forwarding to memory) and the exporter."""

    def __init__(self, queue: int = 2_048) -> None:
        self.processed, self.exported = InMemorySpanExporter(), InMemorySpanExporter()
        self.processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(self.processed),
                                                redact_keys=REDACT, queue_limit=queue)
        self.exporter = AgentEvalSpanExporter(self.exported, registry=CollectorRegistry(),
                                              settings=Settings(metrics_enabled=False, redact_keys=REDACT))
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter, max_queue_size=queue, schedule_delay_millis=10))
        self.tracer = self.provider.get_tracer("test")
        self.clock = 1_000_000_000_000

    def tick(self, ms: int) -> int:
        self.clock += ms * 1_000_000
        return self.clock

    def emit(self, shape: dict[str, Any], secret_everywhere: bool = True) -> int:
        """One trace; returns the number of tool spans in it."""
        tracer, conv = self.tracer, shape["convention"]
        calls = shape["calls"]
        if shape["root"] == "tool":  # a tool span with no parent: a run of one call
            c = calls[0]
            args = {"query": c["query"], "api_key": SECRET}
            span = tracer.start_span(f"execute_tool {c['tool']}", start_time=self.tick(1),
                                     attributes=tool_attributes(c["convention"], c["tool"], args))
            span.end(end_time=self.tick(c["duration_ms"]))
            return 1
        attrs = agent_attributes(conv, shape["agent"]) if shape["root"] == "agent" else {"http.route": "/chat"}
        attrs["app.api_key"] = SECRET
        root = tracer.start_span(f"invoke_agent {shape['agent']}" if shape["root"] == "agent" else "POST /chat",
                                 start_time=self.tick(1), attributes=attrs)
        context = set_span_in_context(root)
        if shape["llm_tokens"]:
            llm = tracer.start_span("chat gpt-4o-mini", context=context, start_time=self.tick(1), attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": shape["llm_tokens"][0], "gen_ai.usage.output_tokens": shape["llm_tokens"][1],
                "gen_ai.input.messages": json.dumps([{"role": "assistant", "parts": [
                    {"type": "tool_call", "name": "web_search", "arguments": {"query": "q", "token": SECRET}}]}])})
            llm.end(end_time=self.tick(300))
        for c in calls:
            args = {"query": c["query"], "api_key": SECRET}
            span = tracer.start_span(f"execute_tool {c['tool']}", context=context, start_time=self.tick(1),
                                     attributes=tool_attributes(c["convention"], c["tool"], args))
            span.add_event("gen_ai.tool.message", {"content": json.dumps({"echo": {"password": SECRET}})})
            if c["error"]:
                span.set_status(Status(StatusCode.ERROR, "boom"))
            span.end(end_time=self.tick(c["duration_ms"]))
        if shape["failed"]:
            root.set_status(Status(StatusCode.ERROR, "failed"))
        root.end(end_time=self.tick(5))
        return len(calls)

    def finish(self) -> tuple[list[Any], list[Any], list[dict[Any, float]]]:
        """The spans each side forwarded and the scored series each side exposes (read before shutdown)."""
        self.provider.force_flush()
        scraped = [series(self.processor.metrics.registry, SCORED_FAMILIES), series(self.exporter.metrics.registry, SCORED_FAMILIES)]
        self.provider.shutdown()
        return list(self.processed.get_finished_spans()), list(self.exported.get_finished_spans()), scraped


def by_span_id(spans: list[Any]) -> dict[int, Any]:
    out: dict[int, Any] = {}
    for span in spans:
        assert span.context.span_id not in out, f"{span.name} forwarded twice"
        out[span.context.span_id] = span
    return out


def view(span: Any) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    return dict(span.attributes), [(e.name, dict(e.attributes)) for e in span.events]


def series(registry: CollectorRegistry, prefixes: tuple[str, ...]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples
            if s.name.startswith(prefixes)}


SCORED_FAMILIES = ("agent_eval_tool_", "gen_ai_execute_tool_duration", "agent_eval_run", "agent_eval_redundant",
                   "agent_eval_spurious", "agent_eval_processor_spans_scored", "agent_eval_processor_spans_seen")


def assert_identical(both: Both, tool_spans: int) -> None:
    processed, exported, (mine_series, their_series) = both.finish()
    mine, theirs = by_span_id(processed), by_span_id(exported)
    assert mine.keys() == theirs.keys()  # every span forwarded once by each
    enriched = [sid for sid, span in mine.items() if "agent_eval.efficiency_score" in span.attributes]
    assert len(enriched) == tool_spans
    for span_id, span in mine.items():
        assert view(span) == view(theirs[span_id]), span.name
        text = json.dumps(view(span), default=str)
        assert SECRET not in text, f"secret left in {span.name}: {text}"
    assert mine_series.keys() == their_series.keys()
    for key, value in mine_series.items():  # counts exactly; sums of durations may differ in the last bits by order
        assert value == their_series[key] if not key[0].endswith("_sum") else math.isclose(value, their_series[key], rel_tol=1e-9), key
    # Offline, the deepeval metric for the same task (routed or not) gives every call the same number and verdict.
    metrics: dict[str, ToolEfficiencyMetric] = {}
    for span_id in enriched:
        attrs = mine[span_id].attributes
        task = attrs["agent_eval.task"]  # '' for an unrouted call: from_catalog(task=run.task) scores it too
        metric = metrics.setdefault(task, ToolEfficiencyMetric.from_catalog(CATALOG, task=task))
        name = attrs.get("gen_ai.tool.name") or attrs.get("tool.name")
        metric.measure(LLMTestCase(input="q", actual_output="a", tools_called=[ToolCall(name=name)]))
        assert (metric.score, metric.reason) == (attrs["agent_eval.efficiency_score"], attrs["agent_eval.reason"])
        assert metric.is_successful() == attrs["agent_eval.passed"], (task, name)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces=st.lists(trace_shape, min_size=1, max_size=12))
def test_processor_exporter_and_offline_metrics_agree_on_random_traces(traces):
    both = Both()
    tool_spans = sum(both.emit(shape) for shape in traces)
    assert_identical(both, tool_spans)


def test_a_burst_of_20000_spans_is_enriched_exactly_once_in_both():
    rng = random.Random(9)
    both = Both(queue=32_768)  # both queues hold the burst: what a full queue passes on unscored is counted, not enriched
    tool_spans = 0
    while tool_spans < 20_000:
        calls = [{"tool": rng.choice(TOOLS), "convention": rng.choice(CONVENTIONS), "query": "q", "error": rng.random() < 0.05,
                  "duration_ms": rng.randint(1, 900)} for _ in range(rng.randint(1, 4))]
        shape = {"root": rng.choice(["agent", "agent", "plain", "tool"]), "convention": rng.choice(CONVENTIONS),
                 "agent": rng.choice(AGENTS), "calls": calls, "llm_tokens": (100, 20), "failed": False}
        tool_spans += both.emit(shape)
    assert_identical(both, tool_spans)
    scored = both.exporter.metrics.registry.get_sample_value("agent_eval_processor_spans_scored_total")
    assert scored == tool_spans and not both.exporter.pipeline.runs.tracked  # nothing left behind
    assert Counter(s.name.split()[0] for s in both.exported.get_finished_spans())["execute_tool"] == tool_spans


TIER_CATALOG = parse_catalog("""
tools:
  big_search: {cost_usd: 0.01, latency_ms: 500, capabilities: [search], complexity: advanced}
  mid_search: {cost_usd: 0.004, latency_ms: 200, capabilities: [search], complexity: moderate}
  small_search: {cost_usd: 0.001, latency_ms: 50, capabilities: [search], complexity: simple}
  calc: {cost_usd: 0.0, latency_ms: 5, capabilities: [math], complexity: simple}
tasks:
  lookup: {match: {gen_ai.agent.name: agent1}, capability: search, complexity: simple, optimal_tool: big_search}
  find: {match: {gen_ai.agent.name: agent2}, capability: search, complexity: moderate,
         acceptable_tools: [small_search, big_search]}
  sum: {match: {gen_ai.agent.name: agent3}, capability: math, complexity: moderate, acceptable_tools: [mid_search]}
""", source="<tiers>")


def test_offline_success_is_the_live_passed_for_every_tool_and_task_across_tiers():
    """`is_successful()` is `agent_eval.passed` (verdict != fail) for the same call and task: the route's optimal tool
    of another tier than the task (efficiency 0.0 and still `optimal`), acceptable tools one tier off, the rest."""
    seen = []
    processor = AgentEvalSpanProcessor(TIER_CATALOG, registry=None, background=False, on_call=lambda r, s: seen.append(s))
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    agents = {"lookup": "agent1", "find": "agent2", "sum": "agent3"}
    tools = [*TIER_CATALOG.tools, "mystery_tool"]
    for task, agent in agents.items():
        for tool in tools:
            tracer.start_span(f"execute_tool {tool}", attributes={"gen_ai.operation.name": "execute_tool",
                                                                  "gen_ai.tool.name": tool, "gen_ai.agent.name": agent}).end()
    provider.shutdown()
    live = {(s.task, s.tool): s for s in seen}
    assert len(live) == len(agents) * len(tools)
    assert live[("lookup", "big_search")].efficiency == 0.0 and live[("lookup", "big_search")].passed
    assert live[("find", "small_search")].passed and live[("find", "small_search")].efficiency < 1
    for (task, tool), score in live.items():
        for cls in (ToolEfficiencyMetric, ContextualComplexityMetric):
            metric = cls.from_catalog(TIER_CATALOG, task=task)
            metric.measure(LLMTestCase(input="q", actual_output="a", tools_called=[ToolCall(name=tool)]))
            assert (metric.score, metric.is_successful()) == (score.efficiency, score.passed), (cls.__name__, task, tool)


def test_catalog_check_warns_about_an_optimal_tool_of_another_tier_than_its_task():
    """Live, such a route's optimal tool scores `optimal`/pass with efficiency 0.0: `catalog check` says so."""
    warnings = TIER_CATALOG.warnings()
    assert [w for w in warnings if "optimal_tool '" in w] == [
        "tasks.lookup: optimal_tool 'big_search' is advanced, the task is simple: its calls score optimal with "
        "efficiency scaled by the tier fit; set the task's complexity or another optimal_tool"]
    assert not [w for w in CATALOG.warnings() if "optimal_tool '" in w]

"""What the labels mean, as properties over random catalogs and calls through the real SDK.

`outcome` says what happened to the call against its route (optimal, acceptable, suboptimal,
unknown_tool, or error when the call failed); `verdict` says whether the *choice of tool*
passes the environment's thresholds: `pass` exactly for optimal and acceptable choices,
`warn`/`fail` for suboptimal ones by the efficiency's level, `fail` for unknown tools, and
for a failed call the verdict its choice had. No exported span and no Prometheus series may
carry a combination outside that meaning.

Excess latency is the observed duration beyond the catalog's expected latency of the task's
optimal tool, for every call, the optimal tool's own included.
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, CatalogError
from otel_agent_eval.config.catalog import parse_catalog

# The documented meaning, as a table: which verdicts each outcome may carry.
ALLOWED = {
    "optimal": {"pass"},
    "acceptable": {"pass"},
    "suboptimal": {"warn", "fail"},
    "unknown_tool": {"fail"},
    "error": {"pass", "warn", "fail"},  # the verdict of the choice; the call itself failed
}
TOOLS = [f"t{i}" for i in range(5)]
AGENTS = ["a0", "a1", "a2"]

_tool = st.fixed_dictionaries({
    "cost_usd": st.sampled_from([0.0, 0.001, 0.003, 0.01]),
    "latency_ms": st.sampled_from([10, 50, 200, 800]),
    "capabilities": st.lists(st.sampled_from(["c0", "c1"]), min_size=1, max_size=2, unique=True),
    "complexity": st.sampled_from(["simple", "moderate", "advanced"]),
})


@st.composite
def catalogs(draw):
    tools = {name: draw(_tool) for name in TOOLS[: draw(st.integers(1, len(TOOLS)))]}
    fail = draw(st.sampled_from([0.0, 0.3, 0.6, 0.85, 1.0]))
    warn = draw(st.sampled_from([w for w in (0.0, 0.3, 0.6, 0.85, 0.95, 1.0) if w >= fail]))
    weight = draw(st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0]))
    tasks = {}
    for i, agent in enumerate(draw(st.lists(st.sampled_from(AGENTS), max_size=3, unique=True))):
        route = {"match": {"gen_ai.agent.name": agent}, "capability": draw(st.sampled_from(["c0", "c1"])),
                 "profile": "p"}
        if draw(st.booleans()):
            route["complexity"] = draw(st.sampled_from(["simple", "moderate", "advanced"]))
        if draw(st.booleans()):
            route["optimal_tool"] = draw(st.sampled_from(sorted(tools)))
        route["acceptable_tools"] = draw(st.lists(st.sampled_from(sorted(tools)), max_size=2, unique=True))
        tasks[f"task{i}"] = route
    data = {"tools": tools, "profiles": {"p": {"cost_weight": weight, "latency_weight": round(1 - weight, 1)}},
            "default_profile": "p", "thresholds": {"env": {"warn": warn, "fail": fail}}, "default_environment": "env",
            "tasks": tasks}
    try:
        return parse_catalog(json.dumps(data))
    except CatalogError:
        assume(False)


_call = st.tuples(st.sampled_from([*TOOLS, "not_in_catalog"]), st.booleans(), st.integers(1, 2_000))  # name, error, ms
_runs = st.lists(st.tuples(st.sampled_from([None, *AGENTS]), st.lists(_call, min_size=1, max_size=4)), min_size=1, max_size=4)


def _replay(catalog, runs):
    registry, exported = CollectorRegistry(), InMemorySpanExporter()
    processor = AgentEvalSpanProcessor(catalog, registry=registry, forward_to=SimpleSpanProcessor(exported), background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("semantics")
    t = 1_000_000_000
    for agent, calls in runs:
        root = tracer.start_span(f"invoke_agent {agent}" if agent else "request", start_time=t,
                                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent} if agent else {})
        context = set_span_in_context(root)
        for name, error, ms in calls:
            span = tracer.start_span(f"execute_tool {name}", context=context, start_time=t,
                                     attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name})
            if error:
                span.set_status(Status(StatusCode.ERROR, "boom"))
            t += ms * 1_000_000
            span.end(end_time=t)
        root.end(end_time=t + 1)
        t += 10
    provider.shutdown()
    tool_spans = [s for s in exported.get_finished_spans() if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    return registry, tool_spans


def _expected_choice(catalog, attrs):
    """The documented ladder, read from what the span carries: (outcome without errors, verdict)."""
    name = attrs["gen_ai.tool.name"]
    tool = catalog.tool(name)
    if tool is None:
        return "unknown_tool", "fail"
    thresholds = catalog.thresholds_for()
    route = catalog.task(attrs["agent_eval.task"])
    efficiency = attrs["agent_eval.efficiency_score"]
    if tool.name == attrs["agent_eval.optimal_tool"]:
        return "optimal", "pass"
    if (route is not None and tool.name in route.acceptable_tools) or efficiency >= thresholds.warn:
        return "acceptable", "pass"
    return "suboptimal", "warn" if efficiency >= thresholds.fail else "fail"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(catalog=catalogs(), runs=_runs)
def test_outcome_and_verdict_never_contradict_each_other(catalog, runs):
    registry, spans = _replay(catalog, runs)
    assert len(spans) == sum(len(calls) for _, calls in runs)
    for span in spans:
        attrs = span.attributes
        outcome, verdict = attrs["agent_eval.outcome"], attrs["agent_eval.verdict"]
        assert verdict in ALLOWED[outcome], (outcome, verdict)
        choice, choice_verdict = _expected_choice(catalog, attrs)
        failed = span.status.status_code is StatusCode.ERROR
        assert outcome == ("error" if failed else choice)
        assert verdict == choice_verdict  # an error never changes the verdict of the choice
        assert attrs["agent_eval.passed"] is (verdict != "fail")
        (event,) = [e for e in span.events if e.name == "gen_ai.evaluation.result"]
        assert event.attributes["gen_ai.evaluation.score.label"] == ("fail" if verdict == "fail" else "pass")
    calls = [m for m in registry.collect() if m.name == "agent_eval_tool_calls"]
    samples = [s for m in calls for s in m.samples if s.name.endswith("_total")]
    assert sum(s.value for s in samples) == len(spans)
    for sample in samples:
        assert sample.labels["verdict"] in ALLOWED[sample.labels["outcome"]], sample.labels


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(catalog=catalogs(), runs=_runs)
def test_excess_latency_is_observed_minus_the_optimal_tools_catalog_latency_for_every_call(catalog, runs):
    registry, spans = _replay(catalog, runs)
    total = 0.0
    for span in spans:
        attrs = span.attributes
        optimal = catalog.tool(attrs["agent_eval.optimal_tool"]) if attrs["agent_eval.optimal_tool"] else None
        observed = (span.end_time - span.start_time) / 1e9
        expected = max(0.0, observed - optimal.latency_ms / 1000) if optimal is not None else 0.0
        assert abs(attrs["agent_eval.excess_latency_s"] - expected) < 1e-9
        total += attrs["agent_eval.excess_latency_s"]
    exposed = sum(s.value for m in registry.collect() if m.name == "agent_eval_tool_excess_latency_seconds"
                  for s in m.samples if s.name.endswith("_total"))
    assert abs(exposed - total) < 1e-6


def test_the_optimal_tool_called_slower_than_its_catalog_latency_has_excess_latency():
    catalog = parse_catalog(json.dumps({
        "tools": {"fast": {"cost_usd": 0.0, "latency_ms": 100, "capabilities": ["c"], "complexity": "simple"}},
        "tasks": {"t": {"match": {"gen_ai.agent.name": "a"}, "capability": "c"}}}))
    _, (slow, quick) = _replay(catalog, [("a", [("fast", False, 350), ("fast", False, 40)])])
    assert slow.attributes["agent_eval.outcome"] == "optimal"
    assert abs(slow.attributes["agent_eval.excess_latency_s"] - 0.25) < 1e-9
    assert quick.attributes["agent_eval.excess_latency_s"] == 0.0


def test_a_listed_acceptable_tool_below_the_thresholds_passes_and_an_unlisted_one_does_not():
    tools = {"cheap": {"cost_usd": 0.0, "latency_ms": 10, "capabilities": ["c"], "complexity": "simple"},
             "pricey": {"cost_usd": 0.01, "latency_ms": 800, "capabilities": ["c"], "complexity": "simple"},
             "other": {"cost_usd": 0.01, "latency_ms": 800, "capabilities": ["c"], "complexity": "simple"}}
    catalog = parse_catalog(json.dumps({"tools": tools, "tasks": {"t": {
        "match": {"gen_ai.agent.name": "a"}, "capability": "c", "acceptable_tools": ["pricey"]}}}))
    _, spans = _replay(catalog, [("a", [("pricey", False, 5), ("other", False, 5), ("cheap", True, 5)])])
    got = {s.attributes["gen_ai.tool.name"]: (s.attributes["agent_eval.outcome"], s.attributes["agent_eval.verdict"]) for s in spans}
    assert got == {"pricey": ("acceptable", "pass"), "other": ("suboptimal", "fail"), "cheap": ("error", "pass")}


def test_gen_ai_tool_type_is_a_bounded_label_of_the_tool_duration_histogram():
    registry, exported = CollectorRegistry(), InMemorySpanExporter()
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=SimpleSpanProcessor(exported), background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("semantics")
    for tool_type in ("function", "datastore", "FunctionTool", f"free text {'x' * 300}", None):
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}
        if tool_type is not None:
            attrs["gen_ai.tool.type"] = tool_type
        tracer.start_span("execute_tool local_index", attributes=attrs).end()
    provider.shutdown()
    counts = {s.labels["gen_ai_tool_type"]: s.value for m in registry.collect() if m.name == "gen_ai_execute_tool_duration_seconds"
              for s in m.samples if s.name.endswith("_count")}
    assert counts == {"function": 1, "datastore": 1, "_OTHER": 2, "": 1}

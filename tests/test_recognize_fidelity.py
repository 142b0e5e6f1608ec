"""What real frameworks write, read right: enum-typed values, bound calls, schemas that are none,
agent names from span names, framework-internal tools, and qualified tool names."""
from __future__ import annotations

import json
import re
from enum import Enum
from importlib import resources

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, tool_call_from_span
from otel_agent_eval.config.catalog import DEFAULT_IGNORE_TOOLS, CatalogError, load_catalog, parse_catalog
from otel_agent_eval.core.recognize import agent_name_of, convention_of, llm_call_of, name_from_span_name
from otel_agent_eval.core.run_eval import RunEvaluator
from otel_agent_eval.offline.testing import capture_runs
from spans import finished_span


class Operation(str, Enum):
    """As Microsoft agent-framework sets `gen_ai.operation.name`: a str-mixin enum, whose str() is 'Operation.CHAT'."""

    CHAT = "chat"
    EXECUTE_TOOL = "execute_tool"
    INVOKE_AGENT = "invoke_agent"


class Text(str):
    """Any other str subclass."""


# --- str subclasses -----------------------------------------------------------------------------


def test_enum_valued_attributes_read_as_their_text():
    record = tool_call_from_span(finished_span({
        "gen_ai.operation.name": Operation.EXECUTE_TOOL, "gen_ai.tool.name": Text("local_index"),
        "gen_ai.agent.name": Text("support_agent"), "gen_ai.tool.call.id": Text("call_1"),
        "gen_ai.tool.type": Text("function"), "error.type": Text("TimeoutError"),
        "gen_ai.tool.call.arguments": Text('{"query": "return policy"}')}))
    values = (record.name, record.agent, record.call_id, record.tool_type, record.error)
    assert values == ("local_index", "support_agent", "call_1", "function", "TimeoutError")
    assert all(type(v) is str for v in values) and record.problems == []
    assert record.arguments == {"query": "return policy"}


def test_enum_operation_names_mark_llm_calls_and_agents():
    call = llm_call_of({"gen_ai.operation.name": Operation.CHAT, "gen_ai.request.model": Text("gpt-4o-mini"),
                        "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5})
    assert (call.model, call.input_tokens, call.output_tokens) == ("gpt-4o-mini", 10, 5) and type(call.model) is str
    assert agent_name_of({"gen_ai.operation.name": Operation.INVOKE_AGENT, "gen_ai.agent.name": Text("support_agent")}) == "support_agent"


def test_an_agent_framework_style_run_counts_its_llm_calls_and_routes_by_enum_values():
    provider = TracerProvider()
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("agent_framework")
    with capture_runs(processor) as runs:
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": Operation.INVOKE_AGENT, "gen_ai.agent.name": "support_agent"}):
            for _ in range(3):
                tracer.start_span("chat gpt-4o-mini", attributes={
                    "gen_ai.operation.name": Operation.CHAT, "gen_ai.request.model": "gpt-4o-mini",
                    "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 100}).end()
            tracer.start_span("execute_tool local_index", attributes={
                "gen_ai.operation.name": Operation.EXECUTE_TOOL, "gen_ai.tool.name": "local_index"}).end()
    (run,) = runs
    assert (run.agent, run.task, len(run.llm_calls)) == ("support_agent", "faq", 3)
    assert run.evaluation.llm_cost_usd == pytest.approx(3 * (0.00015 + 0.1 * 0.0006))
    assert run.scores[0].outcome == "optimal"


def test_routes_match_enum_values_by_their_text():
    catalog = parse_catalog("""
tools:
  local_index: {cost_usd: 0, latency_ms: 30, capabilities: [faq_lookup], complexity: simple}
tasks:
  chat:
    match: {gen_ai.operation.name: execute_tool}
    capability: faq_lookup
""")
    (route,) = catalog.tasks
    assert route.matches({"gen_ai.operation.name": Operation.EXECUTE_TOOL}.get)


# --- OpenInference: bound calls and parameters that are no JSON Schema -------------------------------


def _oi_tool(input_value, parameters=None):
    attrs = {"openinference.span.kind": "TOOL", "tool.name": "local_index", "input.value": input_value}
    if parameters is not None:
        attrs["tool.parameters"] = parameters
    return tool_call_from_span(finished_span(attrs))


@pytest.mark.parametrize("input_value,arguments", [
    ('{"args": [], "sanitize_inputs_outputs": true, "kwargs": {"query": "x"}}', {"query": "x"}),  # smolagents
    ('{"kwargs": {"query": "x"}}', {"query": "x"}),  # llama-index
    ('{"args": ["x"], "kwargs": {}}', {"input": "x"}),  # one positional argument: plain input
    ('{"args": ["x", 2], "kwargs": {"k": 1}}', {"k": 1, "args": ["x", 2]}),
    ('{"kwargs": {"query": "x"}, "other": 1}', {"kwargs": {"query": "x"}, "other": 1}),  # no envelope
    ('{"kwargs": "x"}', {"kwargs": "x"}),
])
def test_bound_calls_give_their_keyword_arguments(input_value, arguments):
    assert _oi_tool(input_value).arguments == arguments


def test_a_tool_whose_argument_is_called_kwargs_keeps_it():
    schema = json.dumps({"type": "object", "properties": {"kwargs": {"type": "object"}}})
    assert _oi_tool('{"kwargs": {"a": 1}}', schema).arguments == {"kwargs": {"a": 1}}


def test_gen_ai_arguments_are_never_unwrapped():
    record = tool_call_from_span(finished_span({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t",
                                                "gen_ai.tool.call.arguments": '{"kwargs": {"a": 1}}'}))
    assert record.arguments == {"kwargs": {"a": 1}}


@pytest.mark.parametrize("parameters,schema", [
    ('{"query": {"type": "string", "description": "What to look for."}}', None),  # smolagents inputs
    ('{"type": {"type": "string", "description": "A kind."}}', None),  # an argument named "type"
    ('{"properties": {"type": "string", "description": "x"}}', None),  # an argument named "properties"
    ('{"type": "object", "properties": {"query": {"type": "string"}}}', {"type": "object", "properties": {"query": {"type": "string"}}}),
    ('{"properties": {"query": {"title": "Query", "type": "string"}}, "required": ["query"], "type": "object"}',
     {"properties": {"query": {"title": "Query", "type": "string"}}, "required": ["query"], "type": "object"}),
    ("{}", {}),
    ("not json", None),
])
def test_only_a_json_schema_is_used_as_one(parameters, schema):
    assert _oi_tool("x", parameters).parameters_schema == schema


# --- agent names from span names ----------------------------------------------------------------


@pytest.mark.parametrize("span_name,name", [
    ("invoke_agent support_agent", "support_agent"),
    ("support_agent.run", "support_agent"),  # smolagents
    ("FunctionAgent.run", "FunctionAgent"),  # llama-index
    ("invoke_agent Answer the customer's question about the return policy", None),  # free text
    ("What is your return policy?", None),
    ("a" * 65, None),
    ("invoke_agent", None),
    ("", None),
    (None, None),
])
def test_names_from_span_names_are_names_or_nothing(span_name, name):
    assert name_from_span_name(span_name) == name


def test_an_agent_span_named_with_free_text_gives_no_label():
    free_text = "invoke_agent Answer the customer's question"
    assert agent_name_of({"gen_ai.operation.name": "invoke_agent"}, free_text) is None
    assert agent_name_of({"traceloop.span.kind": "workflow", "traceloop.entity.name": free_text}, free_text) is None
    assert agent_name_of({"openinference.span.kind": "AGENT"}, "support_agent.run") == "support_agent"
    assert agent_name_of({"openinference.span.kind": "CHAIN"}, "support_agent.run") is None  # no agent span
    # the attribute, when there, is the name: whatever the span is called
    assert agent_name_of({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Support Agent"}, free_text) == "Support Agent"


def test_free_text_never_becomes_a_label():
    provider = TracerProvider()
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with capture_runs(processor) as runs:
        with tracer.start_as_current_span("invoke_agent Answer the customer's question about returns",
                                          attributes={"gen_ai.operation.name": "invoke_agent"}):
            tracer.start_span("execute_tool local_index", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}).end()
    (run,) = runs
    assert run.agent is None and [r.agent for r in run.tool_calls] == [None]
    labels = {s.labels.get("gen_ai_agent_name") for m in registry.collect() for s in m.samples}
    assert not any(label and "Answer" in label for label in labels)


def test_only_a_root_with_a_known_suffix_names_its_run():
    provider = TracerProvider()
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}
    with capture_runs(processor) as runs:
        for root in ("FunctionAgent.run", "handle_request", "Answer the customer.run"):
            with tracer.start_as_current_span(root):
                tracer.start_span("execute_tool local_index", attributes=tool).end()
    assert [(r.kind, r.agent) for r in runs] == [("trace", "FunctionAgent"), ("trace", None), ("trace", None)]


# --- framework-internal tools: ignore_tools -------------------------------------------------------

CATALOG = """
tools:
  local_index: {cost_usd: 0, latency_ms: 30, capabilities: [faq_lookup], complexity: simple, aliases: [kb_search]}
"""


def test_ignore_tools_defaults_to_framework_internal_tools():
    assert load_catalog().ignore_tools == DEFAULT_IGNORE_TOOLS == frozenset(
        {"final_answer", "final_output", "Delegate work to coworker", "Ask question to coworker"})
    assert parse_catalog(CATALOG).ignores("final_answer")
    assert parse_catalog(CATALOG + "ignore_tools: [handoff, think]\n").ignore_tools == {"handoff", "think"}
    assert not parse_catalog(CATALOG + "ignore_tools: []\n").ignores("final_answer")
    own = parse_catalog(CATALOG + "  final_answer: {cost_usd: 0, latency_ms: 1, capabilities: [answer], complexity: simple}\n")
    assert not own.ignores("final_answer")  # a tool the catalog lists is scored


@pytest.mark.parametrize("listed,message", [
    ("local_index", "ignore_tools.0: 'local_index' is a name of catalog tool 'local_index'"),
    ("kb_search", "ignore_tools.0: 'kb_search' is a name of catalog tool 'local_index'"),
    ("''", "ignore_tools.0: must not be empty"),
])
def test_ignoring_a_catalog_tool_is_refused(listed, message):
    with pytest.raises(CatalogError, match=message.replace("(", r"\(")):
        parse_catalog(CATALOG + f"ignore_tools: [{listed}]\n")


def test_a_framework_internal_tool_call_is_no_tool_call():
    attrs = {"openinference.span.kind": "TOOL", "tool.name": "final_answer"}
    assert convention_of(attrs) is None
    assert convention_of(attrs, ignored=()) is not None
    assert convention_of({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": Text("think")}, ignored={"think"}) is None


def _support_run(catalog=None):
    provider = TracerProvider()
    processor = AgentEvalSpanProcessor(catalog, registry=CollectorRegistry())
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with capture_runs(processor) as runs:
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
            for name in ("local_index", "think"):
                tracer.start_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.arguments": '{"query": "return policy"}'}).end()
    (run,) = runs
    return run


def test_run_metrics_leave_out_the_catalogs_ignored_tools():
    default = resources.files("otel_agent_eval.config").joinpath("default_catalog.yaml").read_text("utf-8")
    ignoring = parse_catalog(re.sub(r"ignore_tools: \[.*\]", "ignore_tools: [final_answer, think]", default))
    assert ignoring.ignore_tools == {"final_answer", "think"}
    e = RunEvaluator(ignoring).evaluate(_support_run(), ignoring.task("faq"))
    assert e.spurious_calls == () and e.call_precision == 1.0 and not e.over_budget and e.tool_correctness == 1.0
    assert _support_run().evaluation.spurious_calls == ("think",)  # the packaged catalog scores it


# --- qualified tool names and aliases ---------------------------------------------------------


def test_qualified_names_resolve_to_catalog_tools():
    catalog = parse_catalog(CATALOG + "  web-search: {cost_usd: 0.003, latency_ms: 400, capabilities: [web], complexity: moderate}\n")
    assert catalog.tool("support-local_index").name == "local_index"  # semantic-kernel `plugin-function`
    assert catalog.tool("support-kb_search").name == "local_index"  # an alias, qualified
    assert catalog.tool("web-search").name == "web-search"  # a name of its own wins
    assert catalog.tool("tools-web-search").name == "web-search"
    for unknown in ("support-nothing", "-local_index", "a b-local_index", "local_index-support"):
        assert catalog.tool(unknown) is None, unknown


def test_a_semantic_kernel_call_is_scored_as_its_catalog_tool():
    provider = TracerProvider()
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("semantic_kernel")
    with capture_runs(processor) as runs:
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
            tracer.start_span("execute_tool support-local_index", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "support-local_index"}).end()
    (run,) = runs
    assert (run.scores[0].tool, run.scores[0].outcome) == ("local_index", "optimal")
    assert run.evaluation.spurious_calls == () and run.evaluation.tool_correctness == 1.0
    assert registry.get_sample_value("agent_eval_tool_calls_total", dict(
        gen_ai_tool_name="local_index", gen_ai_agent_name="support_agent", task="faq", outcome="optimal",
        verdict="pass", optimal_tool="local_index")) == 1


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**18, max_value=10**40)
    | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_json_values, before=st.sampled_from(["", " ", "\n", "\t "]), after=st.sampled_from(["", " ", "\n", "x", ",", "}"]),
       cut=st.integers(min_value=0, max_value=40))
def test_arguments_are_parsed_exactly_as_json_loads_parses_them(value, before, after, cut):
    """The C-scanner shortcut for argument strings gives json.loads' value, or its error, for any text:
    whole values, values in whitespace, trailing junk, and values cut short."""
    from otel_agent_eval.core.recognize import _loads

    text = before + json.dumps(value) + after
    for candidate in (text, text[:cut]):
        try:
            expected = ("ok", json.loads(candidate))
        except ValueError as exc:
            expected = ("error", str(exc))
        try:
            got = ("ok", _loads(candidate))
        except ValueError as exc:
            got = ("error", str(exc))
        assert got == expected, candidate


def test_run_counters_label_a_qualified_or_aliased_tool_as_its_catalog_tool():
    """As the call's own series do: a run's spurious and redundant calls of `tools-web_search` or the alias
    `calculator` are counted under the catalog tool (semantic-kernel's `plugin-function` names)."""
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        for name in ("tools-web_search", "calculator", "calculator"):
            with tracer.start_as_current_span(f"execute_tool {name}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                    "gen_ai.tool.call.arguments": json.dumps({"expression": "1+1"})}):
                pass
    labels = {"gen_ai_agent_name": "support_agent", "task": "faq"}
    sample = registry.get_sample_value
    assert sample("agent_eval_spurious_tool_calls_total", {**labels, "gen_ai_tool_name": "web_search"}) == 1
    assert sample("agent_eval_spurious_tool_calls_total", {**labels, "gen_ai_tool_name": "basic_calculator"}) == 2
    assert sample("agent_eval_redundant_tool_calls_total", {**labels, "gen_ai_tool_name": "basic_calculator"}) == 1
    assert sample("agent_eval_spurious_tool_calls_total", {**labels, "gen_ai_tool_name": "tools-web_search"}) is None
    assert sample("agent_eval_tool_calls_total", {"gen_ai_tool_name": "web_search", "gen_ai_agent_name": "support_agent",
                                                  "task": "faq", "outcome": "suboptimal", "verdict": "fail",
                                                  "optimal_tool": "local_index"}) == 1

"""Edge cases of reading tool-call spans (the real libraries' spans are in test_recognize_instrumented.py)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, tool_call_from_span
from otel_agent_eval.config.catalog import AttributeMapping
from otel_agent_eval.core.recognize import MAX_ARGUMENT_CHARS, SpanFacts, attribute_dict, span_facts
from spans import finished_span

GENAI_TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "web_search",
    "gen_ai.tool.call.id": "call_1",
    "gen_ai.tool.type": "function",
    "gen_ai.tool.call.arguments": '{"query": "return policy", "max_results": 3}',
    "gen_ai.tool.call.result": "30 days",
}


def test_non_tool_spans_are_ignored():
    assert tool_call_from_span(finished_span({"http.method": "GET"})) is None
    assert tool_call_from_span(finished_span({"gen_ai.operation.name": "chat"})) is None
    assert tool_call_from_span(finished_span()) is None


def test_genai_tool_span_becomes_a_record_with_a_deepeval_tool_call():
    span = finished_span(GENAI_TOOL, name="execute_tool web_search", duration_ns=412_000_000)
    record = tool_call_from_span(span)
    assert record.convention == "gen_ai"
    assert (record.name, record.call_id, record.tool_type) == ("web_search", "call_1", "function")
    assert record.arguments == {"query": "return policy", "max_results": 3}
    assert record.duration_s == pytest.approx(0.412)
    assert (record.start_ns, record.end_ns) == (1_000_000_000, 1_412_000_000)
    assert record.trace_id == span.context.trace_id and record.span_id == span.context.span_id
    assert record.error is None and record.problems == []
    tool_call = record.tool_call
    assert (tool_call.name, tool_call.input_parameters, tool_call.output) == ("web_search", {"query": "return policy", "max_results": 3}, "30 days")


def test_error_from_status_and_error_type():
    record = tool_call_from_span(finished_span(GENAI_TOOL, error="boom"))
    assert (record.error, record.error_message) == ("_OTHER", "boom")
    record = tool_call_from_span(finished_span({**GENAI_TOOL, "error.type": "TimeoutError"}))
    assert record.error == "TimeoutError"


def test_openinference_plain_text_input_is_not_a_problem():
    span = finished_span({"openinference.span.kind": "TOOL", "tool.name": "local_index", "input.value": "return policy",
                          "output.value": "30 days", "tool.parameters": '{"type": "object", "required": ["query"]}'})
    record = tool_call_from_span(span)
    assert record.convention == "openinference"
    assert record.arguments == {"input": "return policy"}
    assert record.parameters_schema == {"type": "object", "required": ["query"]}
    assert record.problems == []


def test_openllmetry_entity_attributes():
    span = finished_span({"traceloop.span.kind": "tool", "traceloop.entity.name": "local_index",
                          "traceloop.entity.input": '{"query": "faq"}', "traceloop.entity.output": "ok"})
    record = tool_call_from_span(span)
    assert (record.convention, record.name, record.arguments, record.output) == ("openllmetry", "local_index", {"query": "faq"}, "ok")


def test_custom_mapping_for_in_house_names():
    mapping = AttributeMapping(tool_name="acme.tool", arguments="acme.args", agent_name="acme.agent")
    span = finished_span({"acme.tool": "ledger", "acme.args": '{"id": 7}', "acme.agent": "billing"})
    assert tool_call_from_span(span) is None
    record = tool_call_from_span(span, mapping)
    assert (record.convention, record.name, record.arguments, record.agent) == ("custom", "ledger", {"id": 7}, "billing")


@pytest.mark.parametrize("raw,arguments,problem", [
    ("{not json", {"input": "{not json"}, "not valid JSON"),
    ('["a", 1]', {"input": ["a", 1]}, None),
    ("x" * (MAX_ARGUMENT_CHARS + 1), None, "over the 65536 limit"),  # too large to read: unknown, not {}
    (("a", "b"), {"input": ["a", "b"]}, "not a JSON object string"),
    (42, {"input": 42}, "not a JSON object string"),
])
def test_malformed_arguments_are_noted_not_raised(raw, arguments, problem):
    record = tool_call_from_span(finished_span({**GENAI_TOOL, "gen_ai.tool.call.arguments": raw}))
    assert record.arguments == arguments
    assert record.arguments_captured is (arguments is not None)
    assert (problem is None and record.problems == []) or any(problem in p for p in record.problems)
    assert record.tool_call.input_parameters == arguments


def test_arguments_too_large_to_read_are_unknown_in_the_run_and_on_the_forwarded_span():
    """Over MAX_ARGUMENT_CHARS the arguments are not read: like arguments not captured, never `{}` (which
    failed the tool's schema and made two different large calls look like a repeat)."""
    exporter, runs = InMemorySpanExporter(), []
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(exporter),
                                       on_run=runs.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}
    large = [json.dumps({"query": letter * MAX_ARGUMENT_CHARS}) for letter in "ab"]
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        for arguments in large:
            tracer.start_span("execute_tool local_index", attributes={**tool, "gen_ai.tool.call.arguments": arguments}).end()
    provider.force_flush()
    processor.drain()
    (run,) = runs
    assert [r.arguments for r in run.tool_calls] == [None, None]
    assert all(any("over the 65536 limit" in p for p in r.problems) for r in run.tool_calls)
    e = run.evaluation
    assert e.arguments_not_captured == ("local_index", "local_index") and e.argument_validity is None
    assert e.invalid_calls == () and e.redundant_calls == ()
    tools = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    assert [s.attributes.get("agent_eval.arguments_captured") for s in tools] == [False, False]
    provider.shutdown()


def test_missing_tool_name_falls_back_to_the_span_name():
    attrs = {k: v for k, v in GENAI_TOOL.items() if k != "gen_ai.tool.name"}
    record = tool_call_from_span(finished_span(attrs, name="execute_tool web_search"))
    assert record.name == "web_search"
    assert "tool name missing" in record.problems[0]
    record = tool_call_from_span(finished_span({**attrs, "gen_ai.tool.name": 5}, name="odd"))
    assert record.name == "odd"


def test_unended_and_hand_made_spans_never_raise():
    span = ReadableSpan(name="execute_tool x", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "x"})
    record = tool_call_from_span(span)
    assert record.duration_s is None and record.trace_id == 0
    assert "no valid start/end time" in record.problems[0]


def test_attribute_dict_reads_the_sdk_dict_without_copying():
    # Pins the SDK internals the fast path relies on (ReadableSpan._attributes._dict).
    span = finished_span(GENAI_TOOL)
    inner = attribute_dict(span)
    assert type(inner) is dict and inner == dict(span.attributes)
    assert inner is span._attributes._dict


def test_span_facts_read_the_sdk_fields_as_the_properties_do():
    # Pins the SDK internals the fast path relies on (_context, _parent, _start_time, _end_time; SpanContext a tuple
    # of trace id, span id, is_remote), against the public properties, for a local child, a local root and a
    # span under a remote parent; a span of another implementation is read through its properties.
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root"):
        tracer.start_span("child").end()
    sampled = trace.TraceFlags(trace.TraceFlags.SAMPLED)
    remote = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(7, 9, is_remote=True, trace_flags=sampled)))
    tracer.start_span("under a remote parent", context=remote).end()
    for span in exporter.get_finished_spans():
        parent = span.parent
        expected = SpanFacts(span.context.trace_id, span.context.span_id, parent.span_id if parent else None,
                             parent is None or parent.is_remote, span.start_time, span.end_time)
        assert span_facts(span) == expected

        class Other:  # no SDK fields: only the properties
            context, parent, start_time, end_time = span.context, span.parent, span.start_time, span.end_time

        assert span_facts(Other()) == expected
    assert [span_facts(s).is_root for s in exporter.get_finished_spans()] == [False, True, True]


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=50),
                    st.lists(st.text(max_size=5), max_size=3), st.lists(st.integers(), max_size=3))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(GENAI_TOOL) + ["error.type", "tool.name", "input.value"]), _values))
def test_any_attribute_values_are_read_without_raising(overrides):
    attrs = {**GENAI_TOOL, **{k: v for k, v in overrides.items() if v is not None}}
    record = tool_call_from_span(finished_span(attrs))
    if record is not None:
        assert isinstance(record.name, str) and isinstance(record.arguments, dict)
        json.dumps(record.problems)

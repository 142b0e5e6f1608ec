"""Tool calls read from spans the real instrumentation libraries produce, offline with their test models."""
from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

import instrumented
from otel_agent_eval import AgentEvalSpanProcessor, tool_call_from_span

SOURCES = {
    "pydantic-ai (GenAI)": (instrumented.pydantic_ai_spans, "gen_ai", {"query": "return policy"}),
    "openai-agents (OpenInference)": (instrumented.openai_agents_openinference_spans, "openinference", {"query": "return policy"}),
    "openai-agents (OpenLLMetry)": (instrumented.openai_agents_openllmetry_spans, "openllmetry", {"query": "return policy"}),
    # the LangChain tool takes one string, which OpenInference records as plain text
    "langchain (OpenInference)": (instrumented.langchain_openinference_spans, "openinference", {"input": "return policy"}),
}


@pytest.mark.parametrize("source", SOURCES)
def test_tool_calls_are_read_from_real_spans(source):
    produce, convention, arguments = SOURCES[source]
    records = [r for r in map(tool_call_from_span, produce()) if r is not None]
    assert [r.name for r in records] == ["local_index", "local_index", "web_search"]
    for record in records:
        assert record.convention == convention
        assert record.arguments == arguments and record.problems == []
        assert record.error is None and record.duration_s > 0
        assert record.trace_id and record.span_id
        assert "return" in str(record.output).lower()
        assert record.tool_call.name == record.name and record.tool_call.input_parameters == arguments


@pytest.mark.parametrize("source", SOURCES)
def test_live_scores_route_real_runs_by_their_agent(source):
    produce = SOURCES[source][0]
    registry = CollectorRegistry()
    produce(processors=[AgentEvalSpanProcessor(registry=registry)])
    calls = lambda tool, outcome: registry.get_sample_value("agent_eval_tool_calls_total", dict(  # noqa: E731
        gen_ai_tool_name=tool, gen_ai_agent_name="support_agent", task="faq", outcome=outcome,
        verdict="pass" if outcome == "optimal" else "fail", optimal_tool="local_index"))
    assert calls("local_index", "optimal") == 2
    assert calls("web_search", "suboptimal") == 1
    assert registry.get_sample_value("agent_eval_processor_malformed_tool_spans_total") == 0


@pytest.mark.parametrize("source", SOURCES)
def test_tool_errors_are_read_from_real_spans(source):
    spans = SOURCES[source][0](instrumented.FLAKY_RUN)
    (record,) = [r for r in map(tool_call_from_span, spans) if r is not None]
    assert record.name == "flaky_tool" and record.error is not None

"""smolagents and llama-index, instrumented by OpenInference in their default settings, read right.

Both drive an agent with two tools offline (see instrumented_openinference.py). What was misread
before: the bound call `{"args": [], "kwargs": {...}}` taken for the arguments, smolagents' inputs
dict taken for a JSON Schema, `support_agent.run` as the agent label, llama-index's nameless CHAIN
root, two LLM spans per llama-index model call, and smolagents' own `final_answer` scored as an
unknown, spurious tool.
"""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

import instrumented
import instrumented_openinference as oi
from otel_agent_eval import AgentEvalSpanProcessor, tool_call_from_span
from otel_agent_eval.core.recognize import agent_name_of, attribute_dict, llm_call_of
from otel_agent_eval.offline.testing import capture_runs

CALLS = [(s.tool, s.arguments) for s in oi.RUN]
# smolagents names its agent span after the agent; llama-index's `FunctionAgent(name="support_agent")` only
# in its workflow events (`current_agent_name=` in each `BaseWorkflowAgent.setup_agent` step's input), the
# workflow class in the root span's name (`FunctionAgent.run`) being the fallback.
LABELS = {"smolagents": instrumented.AGENT_NAME, "llama_index": instrumented.AGENT_NAME}
MODEL_CALLS = 4  # three tool calls and the answer


@pytest.fixture(scope="module", params=sorted(oi.SOURCES))
def captured(request):
    """One live run of the framework through a processor that forwards enriched copies."""
    registry, exporter, scored = CollectorRegistry(), InMemorySpanExporter(), []
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=SimpleSpanProcessor(exporter),
                                       on_call=lambda record, score: scored.append((record, score)))
    with capture_runs(processor) as runs:
        spans = oi.SOURCES[request.param](processors=[processor])
    processor.force_flush()
    return request.param, spans, runs, scored, registry, exporter.get_finished_spans()


def test_each_tool_span_is_read_with_its_real_arguments(captured):
    _, spans, *_ = captured
    records = [r for r in map(tool_call_from_span, spans) if r is not None]
    assert [(r.name, r.arguments) for r in records] == CALLS  # final_answer is smolagents' own: no tool call
    for record in records:
        assert record.convention == "openinference" and record.arguments_captured and record.problems == []
        assert record.tool_call.input_parameters == record.arguments and record.error is None


def test_a_parameters_value_that_is_no_json_schema_is_not_used_as_one(captured):
    source, spans, *_ = captured
    schemas = [r.parameters_schema for r in map(tool_call_from_span, spans) if r is not None]
    if source == "smolagents":  # its inputs dict, {"query": {"type": "string", "description": ...}}
        assert schemas == [None, None, None]
    else:
        assert all(s["type"] == "object" and s["required"] == ["query"] for s in schemas)


def test_every_call_is_scored_once_under_the_agent_label(captured):
    source, _, _, scored, registry, _ = captured
    assert [(r.name, r.arguments, r.agent) for r, _ in scored] == [(*call, LABELS[source]) for call in CALLS]
    assert all(score.outcome != "unknown_tool" for _, score in scored)
    samples = [s for metric in registry.collect() if metric.name == "agent_eval_tool_calls" for s in metric.samples
               if s.name == "agent_eval_tool_calls_total"]
    assert sum(s.value for s in samples) == len(CALLS)
    assert {s.labels["gen_ai_tool_name"] for s in samples} == {"local_index", "web_search"}
    assert {s.labels["gen_ai_agent_name"] for s in samples} == {LABELS[source]}


def test_one_run_with_its_calls_in_order_and_one_llm_call_per_model_call(captured):
    source, _, runs, *_ = captured
    (run,) = runs
    assert run.agent == LABELS[source] and run.status == "ok"
    assert [(r.name, r.arguments) for r in run.tool_calls] == CALLS
    assert len(run.llm_calls) == MODEL_CALLS
    assert {(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls} == {
        (instrumented.MODEL, instrumented.INPUT_TOKENS, instrumented.OUTPUT_TOKENS)}


def test_no_false_argument_failure_redundancy_or_unknown_tool(captured):
    source, _, (run,), *_ = captured
    e = run.evaluation
    assert e.completed and e.argument_validity == 1.0 and e.invalid_calls == ()
    assert e.redundant_calls == () and e.arguments_not_captured == ()
    assert e.unpriced_models == ()
    # both routed by their agent name to the faq task, where web_search is not expected
    assert run.task == "faq" and e.spurious_calls == ("web_search",), source


def test_no_self_errors(captured):
    *_, registry, forwarded = captured
    for counter in ("internal_errors", "malformed_tool_spans", "enrichments_dropped", "forward_errors"):
        assert registry.get_sample_value(f"agent_eval_processor_{counter}_total") == 0, counter
    enriched = [s for s in forwarded if "agent_eval.outcome" in (s.attributes or {})]
    assert [s.attributes["agent_eval.agent"] for s in enriched] == [LABELS[captured[0]]] * len(CALLS)


def test_the_agent_label_comes_from_the_span_names_known_suffix():
    spans = oi.smolagents_spans()
    (agent_span,) = [s for s in spans if s.parent is None]
    assert agent_span.name == "support_agent.run"
    assert agent_name_of(attribute_dict(agent_span), agent_span.name) == "support_agent"


def test_llama_index_helper_spans_of_the_llm_are_no_model_calls():
    spans = oi.llama_index_spans()
    llm_kind = [s for s in spans if (s.attributes or {}).get("openinference.span.kind") == "LLM"]
    assert len(llm_kind) == 2 * MODEL_CALLS  # `_prepare_chat_with_tools` and `astream_chat` for each call
    calls = [llm_call_of(attribute_dict(s)) for s in llm_kind]
    assert sum(c is not None for c in calls) == MODEL_CALLS
    assert all(s.name.endswith("astream_chat") for s, c in zip(llm_kind, calls) if c is not None)


def test_the_openinference_names_read_here_are_openinferences():
    """Drift check against openinference-semantic-conventions."""
    from openinference.semconv.trace import MessageAttributes, OpenInferenceSpanKindValues, SpanAttributes

    from otel_agent_eval.core import conventions as c

    assert c.OI_KIND_CHAIN == OpenInferenceSpanKindValues.CHAIN.value
    assert (c.OI_LLM_TOKEN_COUNT_TOTAL, c.OI_LLM_PROMPTS) == (SpanAttributes.LLM_TOKEN_COUNT_TOTAL, SpanAttributes.LLM_PROMPTS)
    assert c.OI_FIRST_INPUT_MESSAGE_ROLE == f"{SpanAttributes.LLM_INPUT_MESSAGES}.0.{MessageAttributes.MESSAGE_ROLE}"
    assert c.OI_FIRST_OUTPUT_MESSAGE_ROLE == f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0.{MessageAttributes.MESSAGE_ROLE}"


def test_score_labels_the_recorded_run_as_live(captured, tmp_path):
    """The file route (`score`) names the agent as the live processor does: llama-index's from its workflow events."""
    from test_score import collector_lines, write  # noqa: PLC0415

    from otel_agent_eval.offline.score import score_traces  # noqa: PLC0415

    source, spans, (run,), scored, *_ = captured
    calls, runs = [], []
    score_traces(write(tmp_path / "run.jsonl", collector_lines(list(spans))), on_run=runs.append,
                 on_call=lambda record, score: calls.append((record.name, record.agent)))
    assert calls == [(record.name, record.agent) for record, _ in scored]
    assert [(r.agent, len(r.tool_calls)) for r in runs] == [(LABELS[source], len(CALLS))] == [(run.agent, len(run.tool_calls))]

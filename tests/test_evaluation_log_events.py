"""`gen_ai.evaluation.result` as log records (OpenTelemetry Logs API) with the real SDK LoggerProvider.

`evaluation_events` (`OTEL_AGENT_EVAL_EVALUATION_EVENTS`) chooses span events (default), log
records parented to the evaluated span, or both; the processor and the zero-code exporter read it alike.
"""
from __future__ import annotations

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.otel.exporter import AgentEvalSpanExporter

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}


def _tool(name):
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}


def _logs():
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return provider, exporter


def _run(tracer):
    with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
        with tracer.start_as_current_span("execute_tool local_index", attributes=_tool("local_index")):
            pass
        with tracer.start_as_current_span("execute_tool web_search", attributes={**_tool("web_search"), "error.type": "timeout"}):
            pass


def _app(mode, logger_provider):
    spans = InMemorySpanExporter()
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(spans), background=False,
                                       evaluation_events=mode, logger_provider=logger_provider)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, spans


def _evaluations(records):
    return [(r.log_record.attributes["gen_ai.evaluation.name"], r.log_record.attributes["gen_ai.evaluation.score.label"],
             r.log_record.span_id) for r in records]


@pytest.mark.parametrize("mode", ["log", "both"])
def test_evaluation_results_are_log_records_parented_to_the_evaluated_span(mode):
    logger_provider, logs = _logs()
    provider, spans = _app(mode, logger_provider)
    _run(provider.get_tracer("app"))
    provider.shutdown()
    by_name = {s.name: s for s in spans.get_finished_spans()}
    records = logs.get_finished_logs()
    assert all(r.log_record.event_name == "gen_ai.evaluation.result" for r in records)
    assert {r.log_record.trace_id for r in records} == {by_name["invoke_agent support_agent"].context.trace_id}
    tool_id = lambda name: by_name[f"execute_tool {name}"].context.span_id  # noqa: E731
    root_id = by_name["invoke_agent support_agent"].context.span_id
    assert _evaluations(records) == [
        ("agent_eval.tool_efficiency", "pass", tool_id("local_index")),
        ("agent_eval.tool_efficiency", "fail", tool_id("web_search")),
        ("agent_eval.task_completion", "fail", root_id),  # the web_search error was not recovered
        ("agent_eval.run_health", "fail", root_id),
        ("agent_eval.tool_correctness", "pass", root_id),  # the faq route expects local_index
    ]
    failed = records[1].log_record
    assert failed.attributes["gen_ai.evaluation.explanation"].startswith("Tool call failed (timeout).")
    assert failed.timestamp == by_name["execute_tool web_search"].end_time
    span_events = [e for s in spans.get_finished_spans() for e in s.events if e.name == "gen_ai.evaluation.result"]
    assert len(span_events) == (5 if mode == "both" else 0)
    assert by_name["execute_tool local_index"].attributes["agent_eval.outcome"] == "optimal"  # scores stay on the span


def test_by_default_evaluation_results_are_span_events_only():
    logger_provider, logs = _logs()
    provider, spans = _app("span", logger_provider)
    _run(provider.get_tracer("app"))
    provider.shutdown()
    assert logs.get_finished_logs() == ()
    assert len([e for s in spans.get_finished_spans() for e in s.events if e.name == "gen_ai.evaluation.result"]) == 5


def test_the_setting_reaches_the_zero_code_exporter_and_bad_values_fall_back():
    settings = Settings.from_env({"OTEL_AGENT_EVAL_EVALUATION_EVENTS": "LOG", "OTEL_AGENT_EVAL_METRICS_ENABLED": "false"})
    assert settings.evaluation_events == "log"
    assert Settings.from_env({"OTEL_AGENT_EVAL_EVALUATION_EVENTS": "stdout"}).evaluation_events == "span"
    logger_provider, logs = _logs()
    spans = InMemorySpanExporter()
    exporter = AgentEvalSpanExporter(spans, settings=settings, registry=CollectorRegistry(), logger_provider=logger_provider)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run(provider.get_tracer("app"))
    provider.shutdown()
    assert [name for name, _, _ in _evaluations(logs.get_finished_logs())] == [
        "agent_eval.tool_efficiency", "agent_eval.tool_efficiency", "agent_eval.task_completion", "agent_eval.run_health",
        "agent_eval.tool_correctness"]
    assert not [e for s in spans.get_finished_spans() for e in s.events if e.name == "gen_ai.evaluation.result"]


def test_an_unknown_mode_is_refused_at_construction():
    with pytest.raises(ValueError, match="span, log, both"):
        AgentEvalSpanProcessor(registry=CollectorRegistry(), evaluation_events="stdout")


def test_the_health_explanation_never_rounds_up_to_a_perfect_or_passing_score():
    """Health 99.6 must not be explained as 100/100, nor 69.96 as a passing 70: one decimal, rounded down."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter as Memory

    from otel_agent_eval.core.enrich import health_text

    assert [health_text(h) for h in (99.99, 99.5998, 69.96, 75.3, 100.0, 0.0)] == [
        "99.9", "99.5", "69.9", "75.3", "100.0", "0.0"]
    spans = Memory()
    processor = AgentEvalSpanProcessor(registry=None, forward_to=SimpleSpanProcessor(spans), background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        tracer.start_span("execute_tool web_search", attributes={"gen_ai.operation.name": "execute_tool",
                                                                  "gen_ai.tool.name": "web_search"}).end()
    provider.shutdown()
    root = next(s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent"))
    health = root.attributes["agent_eval.run.health_score"]
    (explanation,) = [e.attributes["gen_ai.evaluation.explanation"] for e in root.events
                      if e.attributes.get("gen_ai.evaluation.name") == "agent_eval.run_health"]
    shown = float(explanation.split()[1].split("/")[0])
    assert shown <= health < shown + 0.1 and explanation.startswith(f"Health {health_text(health)}/100")

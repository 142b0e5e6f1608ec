"""The judge's settings, like every other: OTEL_AGENT_EVAL_JUDGE_* variables, install() and processor arguments,
off by default, a bad value one clear message naming it; and the zero-code exporter judging from them."""
from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from judge_server import VERDICTS_MARK, JudgeServer
from otel_agent_eval import AgentEvalSpanProcessor, install
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.judge.online import OUTCOMES, OnlineJudge
from otel_agent_eval.otel.exporter import AgentEvalSpanExporter

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}


@pytest.fixture
def server():
    with JudgeServer() as running:
        yield running


def _runs(tracer, n: int) -> None:
    for _ in range(n):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
            with tracer.start_as_current_span("execute_tool local_index", attributes=TOOL):
                pass


def test_every_judge_variable_is_read():
    settings = Settings.from_env({
        "OTEL_AGENT_EVAL_JUDGE_MODEL": "gpt-4.1-mini", "OTEL_AGENT_EVAL_JUDGE_BASE_URL": "http://127.0.0.1:8000/v1",
        "OTEL_AGENT_EVAL_JUDGE_SAMPLE_RATE": "0.25", "OTEL_AGENT_EVAL_JUDGE_MAX_PER_MINUTE": "12",
        "OTEL_AGENT_EVAL_JUDGE_MAX_USD_PER_HOUR": "0.5", "OTEL_AGENT_EVAL_JUDGE_TIMEOUT_SECONDS": "7.5",
        "OTEL_AGENT_EVAL_JUDGE_QUEUE": "9", "OTEL_AGENT_EVAL_JUDGE_ARGUMENTS": "false"})
    assert (settings.judge_model, settings.judge_base_url, settings.judge_sample_rate, settings.judge_max_per_minute,
            settings.judge_max_usd_per_hour, settings.judge_timeout_seconds, settings.judge_queue, settings.judge_arguments) == (
        "gpt-4.1-mini", "http://127.0.0.1:8000/v1", 0.25, 12, 0.5, 7.5, 9, False)
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), settings=settings)
    online = processor.pipeline.judge_run
    assert isinstance(online, OnlineJudge)
    assert (online.sample_rate, online.budget.per_minute, online.budget.usd_per_hour, online.timeout_s,
            online.queue_limit) == (0.25, 12, 0.5, 7.5, 9)
    processor.shutdown()


@pytest.mark.parametrize("name, value, default", [
    ("JUDGE_SAMPLE_RATE", "1.5", 0.1), ("JUDGE_SAMPLE_RATE", "often", 0.1), ("JUDGE_MAX_PER_MINUTE", "0", 60),
    ("JUDGE_MAX_USD_PER_HOUR", "-1", 1.0), ("JUDGE_TIMEOUT_SECONDS", "0", 30.0), ("JUDGE_QUEUE", "2.5", 100),
    ("JUDGE_BASE_URL", "localhost:8000", None)])
def test_a_bad_variable_is_one_line_naming_it_and_the_default_is_used(name, value, default, caplog):
    with caplog.at_level(logging.WARNING):
        settings = Settings.from_env({"OTEL_AGENT_EVAL_" + name: value})
    field = {"JUDGE_TIMEOUT_SECONDS": "judge_timeout_seconds", "JUDGE_QUEUE": "judge_queue"}.get(name, name.lower())
    assert getattr(settings, field) == default
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith(f"otel-agent-eval: ignoring OTEL_AGENT_EVAL_{name}={value!r}") and "Traceback" not in line


@pytest.mark.parametrize("name, value, why", [
    ("judge_sample_rate", 1.5, "expected a number from 0 to 1"), ("judge_max_per_minute", 0, "expected a whole number >= 1"),
    ("judge_max_usd_per_hour", 0, "expected a positive number"), ("judge_timeout_s", -1, "expected a positive number"),
    ("judge_queue_limit", 0, "expected a whole number >= 1"), ("judge_base_url", "ftp://x", "expected an http:// or https:// URL"),
    ("judge", "gpt-4.1-mini", "expected a judge"), ("judge_arguments", "maybe", "expected true or false")])
def test_a_bad_argument_is_one_error_naming_it(name, value, why):
    with pytest.raises(ValueError, match=f"otel-agent-eval: {name}={value!r}: {why}"):
        AgentEvalSpanProcessor(registry=CollectorRegistry(), **{name: value})


def test_install_logs_a_bad_judge_argument_and_keeps_judging_off(caplog):
    with caplog.at_level(logging.WARNING):
        processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False,
                            judge_sample_rate=7, judge_modle="gpt-4.1-mini")
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "ignoring install(judge_sample_rate=7) (expected a number from 0 to 1)" in messages
    assert "unknown argument judge_modle (did you mean judge_model?)" in messages
    assert processor.pipeline.judge_run is None
    processor.shutdown()


@pytest.mark.parametrize("arguments", [True, "false"])
def test_install_judges_with_a_model_from_its_arguments(server, arguments):
    provider = TracerProvider()
    registry = CollectorRegistry()
    processor = install(tracer_provider=provider, registry=registry, serve_metrics=False, judge_model="judge-model",
                        judge_base_url=server.base_url, judge_sample_rate=1.0, judge_arguments=arguments)
    tracer = provider.get_tracer("app")
    for _ in range(3):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
            with tracer.start_as_current_span("execute_tool local_index", attributes={**TOOL, "gen_ai.tool.call.arguments": '{"q": 1}'}):
                pass
    processor.force_flush()
    assert processor.pipeline.judge_run.flush(60)
    assert registry.get_sample_value("agent_eval_judgements_total", {"outcome": "judged"}) == 3
    assert len(server.prompts()) == 3
    assert len(server.prompts(VERDICTS_MARK)) == (3 if arguments is True else 0)  # the argument judge's prompts
    processor.shutdown()


def test_a_hosted_model_without_a_key_is_counted_failed_with_one_line_naming_the_key(monkeypatch, caplog):
    for name in ("OPENAI_API_KEY", "OTEL_AGENT_EVAL_JUDGE_API_KEY", "OTEL_AGENT_EVAL_JUDGE_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    provider = TracerProvider()
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, background=False, judge_model="gpt-4.1-mini", judge_sample_rate=1.0)
    provider.add_span_processor(processor)
    with caplog.at_level(logging.WARNING, logger="otel_agent_eval.judge"):
        _runs(provider.get_tracer("app"), 2)
        assert processor.pipeline.judge_run.flush(60)
    assert registry.get_sample_value("agent_eval_judgements_total", {"outcome": "failed"}) == 2
    (line,) = [r.getMessage() for r in caplog.records if "judgement failed" in r.getMessage()]
    assert "JudgeModelError" in line and "OTEL_AGENT_EVAL_JUDGE_API_KEY" in line
    processor.shutdown()


def test_the_zero_code_exporter_judges_from_the_environment_and_stops_at_shutdown(server, monkeypatch):
    monkeypatch.setenv("OTEL_AGENT_EVAL_JUDGE_MODEL", "judge-model")
    monkeypatch.setenv("OTEL_AGENT_EVAL_JUDGE_BASE_URL", server.base_url)
    monkeypatch.setenv("OTEL_AGENT_EVAL_JUDGE_SAMPLE_RATE", "1")
    monkeypatch.setenv("OTEL_AGENT_EVAL_METRICS_ENABLED", "false")
    registry = CollectorRegistry()
    exporter = AgentEvalSpanExporter(InMemorySpanExporter(), registry=registry, otlp_metrics=False)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # each span a batch: the run closes at its root
    _runs(provider.get_tracer("app"), 4)
    online = exporter.pipeline.judge_run
    assert online.flush(60)
    provider.shutdown()
    assert not online._thread.is_alive()
    outcomes = {o: registry.get_sample_value("agent_eval_judgements_total", {"outcome": o}) for o in OUTCOMES}
    assert outcomes == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 4.0}

"""install() and OTEL_AGENT_EVAL_* settings: explicit beats environment beats default; bad values are logged."""
from __future__ import annotations

import json
import logging
import re
import socket
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, install
from otel_agent_eval.config.catalog import load_catalog
from otel_agent_eval.config.settings import ENV_VARS, Settings

CONFIGURATION = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_settings_from_env_parse_and_fall_back(caplog):
    env = {"OTEL_AGENT_EVAL_METRICS_PORT": "9999", "OTEL_AGENT_EVAL_ENRICH": "off", "OTEL_AGENT_EVAL_WINDOW_SECONDS": "-5",
           "OTEL_AGENT_EVAL_MAX_AGENTS": "lots", "OTEL_AGENT_EVAL_PROFILE": "cost_critical"}
    with caplog.at_level(logging.WARNING):
        settings = Settings.from_env(env)
    assert (settings.metrics_port, settings.enrich, settings.profile) == (9999, False, "cost_critical")
    assert (settings.window_seconds, settings.max_agents) == (300.0, 100)
    messages = [r.getMessage() for r in caplog.records]
    assert any("OTEL_AGENT_EVAL_WINDOW_SECONDS='-5' (expected a positive number); using the default 300.0" in m for m in messages)
    assert any("OTEL_AGENT_EVAL_MAX_AGENTS='lots'" in m for m in messages)
    assert Settings.from_env({"OTEL_AGENT_EVAL_METRICS_PORT": "70000"}).metrics_port == 9464


def test_every_env_var_is_in_the_configuration_table():
    from otel_agent_eval.judge.models import API_KEY_ENV, API_KEY_FILE_ENV

    text = CONFIGURATION.read_text()
    for name in [var.name for var in ENV_VARS] + [API_KEY_ENV, API_KEY_FILE_ENV]:  # the judge's key: read where it is used
        assert re.search(rf"\|\s*`{name}`\s*\|", text), f"{name} missing from the table of docs/configuration.md"


def test_install_uses_env_catalog_profile_and_environment(tmp_path, monkeypatch):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("tools:\n  lookup: {cost_usd: 0.001, latency_ms: 20, capabilities: [s], complexity: simple}\n")
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", str(catalog))
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENVIRONMENT", "development")
    processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False)
    assert list(processor.catalog.tools) == ["lookup"]
    assert processor.scorer.thresholds.environment == "development"
    explicit = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False, environment="staging")
    assert explicit.scorer.thresholds.environment == "staging"


def test_broken_env_catalog_is_logged_and_the_default_used(tmp_path, monkeypatch, caplog):
    broken = tmp_path / "broken.yaml"
    broken.write_text("tools: {x: {cost_usd: -1, latency_ms: 1, capabilities: [a], complexity: simple}}\n")
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", str(broken))
    monkeypatch.setenv("OTEL_AGENT_EVAL_PROFILE", "thrifty")
    with caplog.at_level(logging.WARNING):
        processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False)
    assert "web_search" in processor.catalog.tools
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "broken.yaml:1: tools.x.cost_usd: must be >= 0" in messages
    assert "OTEL_AGENT_EVAL_PROFILE='thrifty' is not in the catalog" in messages


def test_an_explicit_broken_catalog_never_stops_the_app_and_the_fallback_shows(tmp_path, caplog):
    broken = tmp_path / "broken.yaml"
    broken.write_text("tools: 3\n")
    registry = CollectorRegistry()
    with caplog.at_level(logging.ERROR):
        processor = install(broken, tracer_provider=TracerProvider(), registry=registry, serve_metrics=False)
    assert "web_search" in processor.catalog.tools  # the packaged catalog scores
    assert "broken.yaml" in caplog.text and "packaged default catalog" in caplog.text
    assert registry.get_sample_value("agent_eval_catalog_fallback") == 1.0
    good = tmp_path / "good.yaml"
    good.write_text("tools: {calc: {cost_usd: 0, latency_ms: 1, capabilities: [math], complexity: simple}}\n")
    assert processor.reload_catalog(good)
    assert registry.get_sample_value("agent_eval_catalog_fallback") == 0.0  # a good reload ends it
    by_hand = CollectorRegistry()  # the processor built by hand falls back the same way: a broken file never stops the app
    assert "web_search" in AgentEvalSpanProcessor(broken, registry=by_hand).catalog.tools
    assert by_hand.get_sample_value("agent_eval_catalog_fallback") == 1.0
    processor.shutdown()


def _forwarding(**options):
    """A processor built by hand, as the README's explicit form, on a real provider with an in-memory exporter behind it."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(exporter), **options)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        tracer.start_span("execute_tool web_search", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search",
            "gen_ai.tool.call.arguments": json.dumps({"query": "q", "api_key": "sk-LEAKED-123"})}).end()
    provider.force_flush()
    (tool,) = [s for s in exporter.get_finished_spans() if s.name.startswith("execute_tool")]
    provider.shutdown()
    return processor, dict(tool.attributes)


def test_a_processor_built_by_hand_reads_the_environment_and_redacts(monkeypatch):
    """The README's explicit `AgentEvalSpanProcessor(...)` ignored every OTEL_AGENT_EVAL_* variable: the api_key
    left in the exported arguments although OTEL_AGENT_EVAL_REDACT_KEYS named it."""
    monkeypatch.setenv("OTEL_AGENT_EVAL_REDACT_KEYS", "api_key|token(?!s)")
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENVIRONMENT", "staging")
    processor, tool = _forwarding()
    assert "sk-LEAKED-123" not in json.dumps(tool)
    assert json.loads(tool["gen_ai.tool.call.arguments"]) == {"query": "q", "api_key": "[REDACTED]"}
    assert processor.scorer.thresholds.environment == "staging" and tool["agent_eval.threshold"] == 0.75
    assert processor.metrics_address is None  # serving stays install()'s
    monkeypatch.setenv("OTEL_AGENT_EVAL_DROP_TOOL_IO", "true")
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENRICH", "false")
    _, tool = _forwarding()
    assert "gen_ai.tool.call.arguments" not in tool and "agent_eval.outcome" not in tool


def test_a_processors_arguments_win_over_the_environment(tmp_path, monkeypatch):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("tools:\n  lookup: {cost_usd: 0.001, latency_ms: 20, capabilities: [s], complexity: simple}\n")
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", str(catalog))
    monkeypatch.setenv("OTEL_AGENT_EVAL_ENVIRONMENT", "staging")
    monkeypatch.setenv("OTEL_AGENT_EVAL_DROP_TOOL_IO", "true")
    from_env = AgentEvalSpanProcessor(registry=None)
    assert list(from_env.catalog.tools) == ["lookup"] and from_env.scorer.thresholds.environment == "staging"
    processor, tool = _forwarding(catalog=load_catalog(), environment="development", drop_tool_io=False, enrich=True)
    assert "web_search" in processor.catalog.tools and processor.scorer.thresholds.environment == "development"
    assert json.loads(tool["gen_ai.tool.call.arguments"])["query"] == "q" and "agent_eval.outcome" in tool


def test_after_a_fallback_a_reload_without_arguments_reads_the_configured_file_again(tmp_path):
    """Fix the file, call reload_catalog(): the configured file scores and the fallback ends. It re-read
    the packaged catalog and showed the fallback as ended while still scoring with the packaged one."""
    path = tmp_path / "catalog.yaml"
    path.write_text("tools: 3\n")
    registry = CollectorRegistry()
    processor = install(path, tracer_provider=TracerProvider(), registry=registry, serve_metrics=False)
    assert registry.get_sample_value("agent_eval_catalog_fallback") == 1.0
    assert not processor.reload_catalog()  # still broken: rejected, the packaged catalog goes on
    assert registry.get_sample_value("agent_eval_catalog_fallback") == 1.0
    path.write_text("tools: {calc: {cost_usd: 0, latency_ms: 1, capabilities: [math], complexity: simple}}\n")
    assert processor.reload_catalog()
    assert processor.catalog.source == str(path) and list(processor.catalog.tools) == ["calc"]
    assert registry.get_sample_value("agent_eval_catalog_fallback") == 0.0
    assert processor.reload_catalog() and processor.catalog.source == str(path)  # and later reloads read it too
    processor.shutdown()


def test_busy_metrics_port_is_logged_and_scoring_goes_on(caplog):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        provider = TracerProvider()
        with caplog.at_level(logging.ERROR):
            processor = install(tracer_provider=provider, registry=CollectorRegistry(), port=port)
    assert f"cannot serve metrics on 127.0.0.1:{port}" in caplog.text
    provider.get_tracer("t").start_span("x", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"}).end()
    assert processor.metrics.registry.get_sample_value("agent_eval_processor_spans_scored_total") == 1


def test_shutdown_stops_the_metrics_endpoint():
    import urllib.error
    import urllib.request

    processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), port=0)
    host, port = processor.metrics_address
    assert urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).status == 200
    processor.shutdown()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2)


@pytest.mark.parametrize("argument, named", [
    (dict(otlp_metrics="yes"), "install(otlp_metrics='yes') (expected a MetricExporter, a MeterProvider, True or False); using the default 'auto'"),
    (dict(otlp_histograms="exp"), "install(otlp_histograms='exp') (expected one of exponential, explicit)"),
    (dict(registry="default"), "install(registry='default') (expected a prometheus_client CollectorRegistry or None); using the default prometheus_client.REGISTRY"),
    (dict(run_ttl=60), "install(run_ttl=60): unknown argument run_ttl (did you mean run_ttl_s?)"),
    (dict(enrich="maybe"), "install(enrich='maybe') (expected true or false)"),
    (dict(background=2), "install(background=2) (expected True or False, got int)"),
], ids=lambda v: next(iter(v)) if isinstance(v, dict) else None)
def test_an_install_argument_that_cannot_be_used_is_logged_naming_it_never_raised(argument, named, caplog):
    """Each of these raised into the app (ValueError, TypeError from a weak reference or an unknown keyword)."""
    argument.setdefault("registry", CollectorRegistry())
    with caplog.at_level(logging.WARNING):
        processor = install(tracer_provider=TracerProvider(), serve_metrics=False, **argument)
    assert [r.getMessage() for r in caplog.records if named in r.getMessage()], caplog.text
    processor.shutdown()


def test_boolean_install_arguments_given_as_text_read_as_the_environment_reads_them():
    """`serve_metrics="false"` served /metrics and `enrich="false"` enriched: a non-empty string is truthy."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    processor = install(tracer_provider=provider, registry=CollectorRegistry(), serve_metrics="false", port=0,
                        enrich="0", drop_tool_io="true", forward_to=SimpleSpanProcessor(exporter))
    assert processor.metrics_address is None
    with provider.get_tracer("t").start_as_current_span("execute_tool web_search", attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search", "gen_ai.tool.call.arguments": "{}"}):
        pass
    provider.force_flush()
    (tool,) = exporter.get_finished_spans()
    assert "agent_eval.outcome" not in tool.attributes and "gen_ai.tool.call.arguments" not in tool.attributes
    processor.shutdown()
    served = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics="1", port=0)
    assert served.metrics_address is not None
    served.shutdown()


def test_install_on_a_registry_another_processor_holds_scores_without_it(caplog):
    registry = CollectorRegistry()
    first = install(tracer_provider=TracerProvider(), registry=registry, serve_metrics=False)
    with caplog.at_level(logging.ERROR):
        second = install(tracer_provider=TracerProvider(), registry=registry, serve_metrics=False)
    assert second.metrics.registry is None and "already holds otel-agent-eval's metrics" in caplog.text
    first.shutdown()
    second.shutdown()

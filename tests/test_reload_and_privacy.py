"""Catalog reloads (API, file watch, SIGHUP) and keeping secrets out of exported spans."""
from __future__ import annotations

import json
import logging
import os
import signal
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, install
from otel_agent_eval.otel.reload import CatalogWatcher, reload_on_sighup

V1 = "tools:\n  lookup: {cost_usd: 0.001, latency_ms: 20, capabilities: [s], complexity: simple}\n"
V2 = V1 + "  premium: {cost_usd: 0.01, latency_ms: 200, capabilities: [s], complexity: advanced}\n"


def call(tracer, tool, **attrs):
    tracer.start_span(f"execute_tool {tool}", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, **attrs}).end()


def calls(registry, tool, outcome, verdict, optimal):
    return registry.get_sample_value("agent_eval_tool_calls_total", dict(
        gen_ai_tool_name=tool, gen_ai_agent_name="", task="", outcome=outcome, verdict=verdict, optimal_tool=optimal))


@pytest.fixture
def scored(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text(V1)
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(path, registry=registry)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return path, registry, processor, provider.get_tracer("t")


def test_reload_swaps_the_catalog_and_a_broken_file_keeps_the_last_good(scored, caplog):
    path, registry, processor, tracer = scored
    call(tracer, "premium")
    assert calls(registry, "premium", "unknown_tool", "fail", "") == 1
    path.write_text(V2)
    assert processor.reload_catalog() is True
    call(tracer, "premium")
    assert calls(registry, "premium", "suboptimal", "fail", "lookup") == 1  # now known, and dearer than lookup
    path.write_text(V2.replace("0.01", "-1"))
    with caplog.at_level(logging.ERROR):
        assert processor.reload_catalog() is False
    assert "catalog reload rejected, still scoring with" in caplog.text and "tools.premium.cost_usd: must be >= 0" in caplog.text
    call(tracer, "premium")
    assert calls(registry, "premium", "suboptimal", "fail", "lookup") == 2
    assert registry.get_sample_value("agent_eval_processor_catalog_reloads_total") == 1
    assert registry.get_sample_value("agent_eval_processor_catalog_reloads_rejected_total") == 1
    assert registry.get_sample_value("agent_eval_tool_cost_per_call_usd", {"gen_ai_tool_name": "premium"}) == 0.01


def test_the_watcher_reloads_when_the_file_changes(scored):
    path, registry, processor, tracer = scored
    watcher = CatalogWatcher(processor, path, interval_s=60)
    assert watcher.check() is None
    path.write_text(V2)
    os.utime(path, (1, 1))  # a different mtime even on coarse clocks
    assert watcher.check() is True
    assert "premium" in processor.catalog.tools
    assert watcher.check() is None


def test_sighup_reloads(scored):
    path, registry, processor, tracer = scored
    previous = signal.getsignal(signal.SIGHUP)
    try:
        assert reload_on_sighup(processor)
        path.write_text(V2)
        os.kill(os.getpid(), signal.SIGHUP)
        _until(lambda: "premium" in processor.catalog.tools)  # the reload runs on a thread of its own
        path.write_text("tools: {broken")  # a broken catalog on SIGHUP: nothing reaches the main thread
        os.kill(os.getpid(), signal.SIGHUP)
        _until(lambda: registry.get_sample_value("agent_eval_processor_catalog_reloads_rejected_total") == 1)
        assert "premium" in processor.catalog.tools  # the last good one keeps scoring
    finally:
        signal.signal(signal.SIGHUP, previous)


def _until(condition) -> None:
    """Wait (bounded) for something another thread does; fails rather than hangs."""
    for _ in range(500):
        if condition():
            return
        time.sleep(0.01)
    assert condition()


def test_install_wires_reloads_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "catalog.yaml"
    path.write_text(V1)
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", str(path))
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG_POLL_SECONDS", "0.05")
    processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), serve_metrics=False)
    path.write_text(V2)
    os.utime(path, (2, 2))
    import threading
    done = threading.Event()
    for _ in range(200):  # bounded wait for the watcher thread
        if "premium" in processor.catalog.tools:
            done.set()
            break
        done.wait(0.05)
    processor.shutdown()
    assert "premium" in processor.catalog.tools


SECRET_ARGS = json.dumps({"query": "balance", "api_key": "sk-live-123", "auth": {"password": "hunter2"}})


def exported(**options):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(exporter), **options))
    call(provider.get_tracer("t"), "web_search", **{"gen_ai.tool.call.arguments": SECRET_ARGS, "gen_ai.tool.call.result": "ok",
                                                     "app.session_token": "abc"})
    provider.force_flush()
    (span,) = exporter.get_finished_spans()
    return span.attributes


def test_redaction_masks_matching_keys_inside_arguments_and_attributes():
    attrs = exported(redact_keys="password|token|secret|api_key")
    assert json.loads(attrs["gen_ai.tool.call.arguments"]) == {"query": "balance", "api_key": "[REDACTED]", "auth": {"password": "[REDACTED]"}}
    assert attrs["app.session_token"] == "[REDACTED]"
    assert attrs["agent_eval.outcome"]  # scores still added
    assert "sk-live-123" not in str(dict(attrs)) and "hunter2" not in str(dict(attrs))


def test_tool_io_can_be_dropped_even_without_scores():
    attrs = exported(drop_tool_io=True, enrich=False)
    assert "gen_ai.tool.call.arguments" not in attrs and "gen_ai.tool.call.result" not in attrs
    assert not any(k.startswith("agent_eval.") for k in attrs)
    assert attrs["gen_ai.tool.name"] == "web_search"


def test_without_options_nothing_is_redacted():
    assert exported()["gen_ai.tool.call.arguments"] == SECRET_ARGS

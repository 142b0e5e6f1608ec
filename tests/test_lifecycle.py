"""Lifecycle: install() twice, registries shared by mistake, the metrics endpoint under idle and trickling connections."""
from __future__ import annotations

import socket
import threading
import time
import urllib.request

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, install
from otel_agent_eval.metrics.endpoint import MAX_CONNECTIONS

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"}


def test_install_twice_on_one_provider_returns_the_running_processor_and_scores_once():
    provider, registry = TracerProvider(), CollectorRegistry()
    first = install(tracer_provider=provider, registry=registry, serve_metrics=False)
    again = install(tracer_provider=provider, registry=CollectorRegistry(), serve_metrics=False)
    assert again is first
    for _ in range(10):
        provider.get_tracer("t").start_span("execute_tool", attributes=TOOL).end()
    first.force_flush()
    assert registry.get_sample_value("agent_eval_processor_spans_scored_total") == 10
    first.shutdown()
    assert install(tracer_provider=provider, registry=registry, serve_metrics=False) is not first  # after shutdown: anew


def test_a_second_processor_on_one_registry_gets_one_short_clear_error():
    registry = CollectorRegistry()
    first = AgentEvalSpanProcessor(registry=registry)
    with pytest.raises(ValueError, match="already holds otel-agent-eval's metrics") as raised:
        AgentEvalSpanProcessor(registry=registry)
    assert len(str(raised.value)) < 300
    first.shutdown()
    AgentEvalSpanProcessor(registry=registry).shutdown()  # shut down, its metrics left the registry


def test_idle_connections_cannot_pile_up_threads_on_the_metrics_endpoint():
    processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), port=0)
    host, port = processor.metrics_address
    before = threading.active_count()
    idle = [socket.create_connection((host, port)) for _ in range(150)]  # connect, send nothing
    time.sleep(0.5)  # let the server accept them (not a timing assertion: the bound below holds at any moment)
    assert threading.active_count() - before <= MAX_CONNECTIONS
    for s in idle:
        s.close()
    body = ""
    for _ in range(100):  # the slots free up as the idle connections close; then a scrape answers
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
                body = response.read().decode()
            break
        except OSError:
            time.sleep(0.05)
    assert "agent_eval_processor_spans_seen_total" in body
    processor.shutdown()


def test_clients_that_trickle_a_request_cannot_keep_a_scrape_out():
    """Every slot held by a client sending a header line now and then (never idle long enough to be dropped):
    a scrape closes the one that has waited longest for its request and is answered."""
    processor = install(tracer_provider=TracerProvider(), registry=CollectorRegistry(), port=0)
    host, port = processor.metrics_address
    stop = threading.Event()
    tricklers = [socket.create_connection((host, port)) for _ in range(MAX_CONNECTIONS)]

    def trickle() -> None:
        for s in tricklers:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
        while not stop.wait(0.5):
            for s in tricklers:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:  # closed to make room
                    pass

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        time.sleep(1.0)  # all slots taken and trickling (not a timing assertion)
        for _ in range(3):
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
                assert "agent_eval_processor_spans_seen_total" in response.read().decode()
    finally:
        stop.set()
        thread.join()
        for s in tricklers:
            s.close()
        processor.shutdown()

"""The real exposition over HTTP: values, not just names; quantile accuracy; bounded labels; exemplars."""
from __future__ import annotations

import math
import random
import urllib.request
from collections import Counter

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from otel_agent_eval import install

TOOL_ATTRS = {"gen_ai.operation.name": "execute_tool"}


@pytest.fixture
def app():
    provider = TracerProvider()
    registry = CollectorRegistry()
    processor = install(tracer_provider=provider, registry=registry, port=0, max_unknown_tools=2, max_agents=2)
    yield provider.get_tracer("app"), processor
    processor.shutdown()


def emit(tracer, tool, duration_s, agent="support_agent", error=None):
    attrs = {**TOOL_ATTRS, "gen_ai.tool.name": tool, "gen_ai.agent.name": agent}
    if error:
        attrs["error.type"] = error
    span = tracer.start_span(f"execute_tool {tool}", attributes=attrs, start_time=10**18)
    span.end(end_time=10**18 + int(duration_s * 1e9))
    return span


def scrape(processor, openmetrics=False):
    processor.force_flush()  # a scrape shows what the processor's thread has scored; flush to see every span just ended
    host, port = processor.metrics_address
    request = urllib.request.Request(f"http://{host}:{port}/metrics")
    if openmetrics:
        request.add_header("Accept", "application/openmetrics-text; version=1.0.0")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def samples(text):
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found, name, **labels):
    return found[(name, tuple(sorted(labels.items())))]


def test_endpoint_binds_to_localhost_by_default(app):
    _, processor = app
    assert processor.metrics_address[0] == "127.0.0.1"


def test_exposition_values_for_a_mixed_workload(app):
    tracer, processor = app
    for _ in range(3):
        emit(tracer, "local_index", 0.020)
    emit(tracer, "web_search", 0.500)
    emit(tracer, "web_search", 3.0, error="TimeoutError")
    found = samples(scrape(processor))
    who = dict(gen_ai_tool_name="web_search", gen_ai_agent_name="support_agent")
    assert value(found, "agent_eval_tool_calls_total", **who, task="faq", outcome="suboptimal", verdict="fail", optimal_tool="local_index") == 1
    assert value(found, "agent_eval_tool_calls_total", **who, task="faq", outcome="error", verdict="fail", optimal_tool="local_index") == 1
    assert value(found, "agent_eval_tool_cost_usd_total", **who) == pytest.approx(0.006)
    assert value(found, "agent_eval_tool_excess_cost_usd_total", **who, optimal_tool="local_index") == pytest.approx(0.006)
    # observed minus the optimal tool's expected 30 ms
    assert value(found, "agent_eval_tool_excess_latency_seconds_total", **who) == pytest.approx(0.470 + 2.970)
    assert value(found, "agent_eval_tool_slo_violations_total", **who) == 1  # 3 s > 2 s SLO
    assert value(found, "gen_ai_execute_tool_duration_seconds_count", gen_ai_tool_name="web_search", gen_ai_tool_type="", error_type="TimeoutError") == 1
    assert value(found, "gen_ai_execute_tool_duration_seconds_bucket", gen_ai_tool_name="web_search", gen_ai_tool_type="", error_type="", le="0.5") == 1
    assert value(found, "gen_ai_execute_tool_duration_seconds_bucket", gen_ai_tool_name="web_search", gen_ai_tool_type="", error_type="", le="0.4585") == 0
    local = dict(gen_ai_tool_name="local_index", gen_ai_agent_name="support_agent", profile="latency_critical")
    assert value(found, "agent_eval_tool_efficiency_score_count", **local, dimension="efficiency") == 3
    assert value(found, "agent_eval_tool_efficiency_score_sum", **local, dimension="efficiency") == 3.0
    assert value(found, "agent_eval_tool_efficiency_score_bucket", **local, dimension="cost", le="0.9") == 0
    assert value(found, "agent_eval_tool_latency_seconds", gen_ai_tool_name="local_index", gen_ai_agent_name="support_agent", quantile="0.99") == pytest.approx(0.020)
    assert value(found, "agent_eval_tool_latency_seconds_count", gen_ai_tool_name="local_index", gen_ai_agent_name="support_agent") == 3
    assert value(found, "agent_eval_processor_spans_scored_total") == 5
    assert value(found, "agent_eval_tool_latency_slo_seconds", gen_ai_tool_name="web_search") == 2.0
    assert value(found, "agent_eval_efficiency_threshold", environment="production", level="fail") == 0.85


def test_summary_quantiles_match_the_exact_window_quantiles(app):
    tracer, processor = app
    rng = random.Random(7)
    durations = [rng.lognormvariate(math.log(0.2), 1.0) for _ in range(2000)]
    for d in durations:
        emit(tracer, "local_index", d)
    found = samples(scrape(processor))
    ordered = sorted(durations)
    for q in (0.5, 0.95, 0.99):
        exact = ordered[max(1, math.ceil(q * len(ordered))) - 1]
        got = value(found, "agent_eval_tool_latency_seconds", gen_ai_tool_name="local_index",
                    gen_ai_agent_name="support_agent", quantile=str(q))
        assert abs(got - exact) / exact <= 0.01, (q, got, exact)


def test_labels_stay_bounded_and_never_carry_arguments(app):
    tracer, processor = app
    for i in range(6):
        span_attrs = {**TOOL_ATTRS, "gen_ai.tool.name": f"tool{i}", "gen_ai.agent.name": f"agent{i}",
                      "gen_ai.tool.call.arguments": '{"password": "hunter2"}'}
        tracer.start_span("t", attributes=span_attrs).end()
    text = scrape(processor)
    found = samples(text)
    tools = {dict(labels).get("gen_ai_tool_name") for (name, labels) in found if name == "agent_eval_tool_calls_total"}
    agents = {dict(labels).get("gen_ai_agent_name") for (name, labels) in found if name == "agent_eval_tool_calls_total"}
    assert tools == {"tool0", "tool1", "_other_"} and agents == {"agent0", "agent1", "_other_"}
    assert value(found, "agent_eval_processor_labels_folded_total") == 12  # 4 tool and 4 agent names of calls, 4 of runs
    assert "hunter2" not in text


def test_openmetrics_scrape_carries_trace_id_exemplars(app):
    tracer, processor = app
    span = emit(tracer, "local_index", 0.02)
    text = scrape(processor, openmetrics=True)
    trace_id = format(span.context.trace_id, "032x")
    bucket_lines = [l for l in text.splitlines() if l.startswith("gen_ai_execute_tool_duration_seconds_bucket") and "#" in l]
    assert any(f'trace_id="{trace_id}"' in l for l in bucket_lines)
    assert "trace_id" not in scrape(processor)  # the classic text format has no exemplars


def test_mountable_in_an_existing_wsgi_app(app):
    from prometheus_client import make_wsgi_app
    from wsgiref.util import setup_testing_defaults

    tracer, processor = app
    emit(tracer, "local_index", 0.02)
    environ = {}
    setup_testing_defaults(environ)
    environ["PATH_INFO"] = "/metrics"
    body = b"".join(make_wsgi_app(processor.metrics.registry)(environ, lambda status, headers: None))
    assert b"agent_eval_tool_calls_total" in body


def test_repeated_runs_find_their_series_and_folded_ones_fold_each_time(app):
    tracer, processor = app
    for _ in range(2):  # the second round finds the runs' series remembered from the first
        for i in range(6):
            span_attrs = {**TOOL_ATTRS, "gen_ai.tool.name": f"tool{i}", "gen_ai.agent.name": f"agent{i}"}
            tracer.start_span("t", attributes=span_attrs).end()
    found = samples(scrape(processor))
    runs = Counter()
    for (name, labels), v in found.items():
        if name == "agent_eval_runs_total":
            runs[dict(labels)["gen_ai_agent_name"]] += v
    assert runs == {"agent0": 2, "agent1": 2, "_other_": 8}
    assert value(found, "agent_eval_processor_labels_folded_total") == 24  # as in one round, twice: nothing remembered

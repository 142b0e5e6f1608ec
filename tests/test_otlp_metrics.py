"""Every metric of /metrics also over OTLP: from the processor (its own exporter, or the app's MeterProvider),
under `opentelemetry-instrument`, cumulative and delta, into a real OTLP receiver on localhost."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, generate_latest

from otel_agent_eval import AgentEvalSpanProcessor, install
from otel_agent_eval.metrics import names as n
from otel_agent_eval.metrics.otlp import otel_name
from otel_agent_eval.tools.demo.workload import run_workload
from otlp_metrics_receiver import Histo, running_metrics_receiver, scrape_view
from test_zero_code import free_port

TEMPORALITY = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"


def exporter_for(receiver, protocol):
    if protocol == "grpc":
        return GrpcMetricExporter(endpoint=receiver.endpoint, insecure=True)
    return HttpMetricExporter(endpoint=receiver.endpoint)


def as_prometheus_names(view):
    """The Collector's names for our USD metrics carry the unit as UCUM spells it (`_USD`); /metrics says `_usd`."""
    return {(name.replace("_USD", "_usd"), labels): value for (name, labels), value in view.items()}


def assert_same_series(scraped: str, received: dict, *, exact_buckets: bool) -> None:
    """Every series of our /metrics text is in `received` with the same value: counts exact, sums to float
    rounding, a histogram's count exact and its p99 within 1 % (its buckets identical when `exact_buckets`)."""
    ours = scrape_view(scraped)
    received = as_prometheus_names(received)
    assert set(ours) == set(received), (sorted(set(ours) - set(received))[:5], sorted(set(received) - set(ours))[:5])
    for key, value in ours.items():
        got = received[key]
        if isinstance(value, Histo):
            assert got.count == value.count, key
            assert got.sum == pytest.approx(value.sum, rel=1e-9, abs=1e-12), key
            if exact_buckets:
                assert {b: c for b, c in got.buckets.items() if c} == {b: c for b, c in value.buckets.items() if c}, key
            assert got.quantile(0.99) == pytest.approx(value.quantile(0.99), rel=0.01), key
        elif math.isnan(value):  # a latency quantile while its window is empty
            assert math.isnan(got), key
        else:
            assert got == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("temporality", ["cumulative", "delta", "lowmemory"])
def test_the_processors_own_exporter_sends_every_series_of_metrics(monkeypatch, protocol, temporality):
    monkeypatch.setenv(TEMPORALITY, temporality)
    registry = CollectorRegistry()
    with running_metrics_receiver(protocol) as receiver:
        exporter = exporter_for(receiver, protocol)
        processor = AgentEvalSpanProcessor(registry=registry, otlp_metrics=exporter, max_samples=3_000)
        link = processor.otlp_metrics
        run_workload(processor, runs=150, seed=1)
        link.force_flush()
        run_workload(processor, runs=150, seed=2)
        link.force_flush()
        scraped = generate_latest(registry).decode()
        assert 'gen_ai_tool_name="_other_"' in scraped  # the small budget folded label sets: the same ones over OTLP
        assert_same_series(scraped, receiver.prometheus_view(), exact_buckets=False)
        processor.shutdown()  # its own reader exports once more, then stops
        assert_same_series(scraped, receiver.prometheus_view(), exact_buckets=False)
    metrics = {m.name: m for _, m in receiver.metrics()}
    duration = metrics["gen_ai.execute_tool.duration"]
    assert (duration.unit, duration.WhichOneof("data")) == ("s", "exponential_histogram")
    assert {p.scale for p in duration.exponential_histogram.data_points} == {3}
    sent = {"cumulative": 2, "delta": 1, "lowmemory": 1}[temporality]  # lowmemory: delta for counters and histograms
    assert duration.exponential_histogram.aggregation_temporality == sent
    assert metrics["agent_eval.tool.calls"].sum.aggregation_temporality == sent
    assert metrics["agent_eval.tool.calls"].sum.is_monotonic
    point = metrics["agent_eval.tool.calls"].sum.data_points[0]
    keys = {kv.key for kv in point.attributes}
    assert {"gen_ai.tool.name", "gen_ai.agent.name", "task", "outcome", "verdict"} <= keys


def test_explicit_histograms_carry_the_buckets_of_metrics(monkeypatch):
    monkeypatch.setenv(TEMPORALITY, "delta")
    registry = CollectorRegistry()
    with running_metrics_receiver("grpc") as receiver:
        processor = AgentEvalSpanProcessor(registry=registry, otlp_metrics=exporter_for(receiver, "grpc"),
                                           otlp_histograms="explicit")
        for seed in (3, 4, 5):
            run_workload(processor, runs=100, seed=seed)
            processor.otlp_metrics.force_flush()
        assert_same_series(generate_latest(registry).decode(), receiver.prometheus_view(), exact_buckets=True)
        processor.shutdown()
    kinds = {m.name: m.WhichOneof("data") for _, m in receiver.metrics()}
    assert kinds["gen_ai.execute_tool.duration"] == kinds["gen_ai.invoke_agent.duration"] == "histogram"
    bounds = next(m for _, m in receiver.metrics() if m.name == "gen_ai.invoke_agent.duration").histogram.data_points[0].explicit_bounds
    assert list(bounds) == pytest.approx([0.1 * 2**i for i in range(13)])  # the GenAI conventions' advice


def test_install_adds_our_metrics_to_the_apps_otlp_reader_in_the_same_export(monkeypatch):
    """The app's MeterProvider exports its own metrics and ours together, under its resource and temporality."""
    monkeypatch.setenv(TEMPORALITY, "delta")
    with running_metrics_receiver("http") as receiver:
        reader = PeriodicExportingMetricReader(exporter_for(receiver, "http"), export_interval_millis=math.inf)
        meters = MeterProvider(metric_readers=[reader], resource=Resource.create({"service.name": "support-app"}),
                               shutdown_on_exit=False)
        app_counter = meters.get_meter("support-app").create_counter("app.requests")
        registry = CollectorRegistry()
        processor = install(tracer_provider=TracerProvider(), registry=registry, serve_metrics=False, otlp_metrics=meters)
        run_workload(processor, runs=80, seed=6)
        app_counter.add(3)
        reader.collect()
        run_workload(processor, runs=80, seed=7)
        reader.collect()
        assert_same_series(generate_latest(registry).decode(), receiver.prometheus_view(), exact_buckets=False)
        processor.shutdown()
        meters.shutdown()
    first = receiver.requests[0].resource_metrics
    assert len(first) == 1  # one resource: the app's
    scopes = {sm.scope.name: sm for sm in first[0].scope_metrics}
    assert set(scopes) == {"support-app", "otel_agent_eval"}
    resource = {kv.key: kv.value.string_value for kv in first[0].resource.attributes}
    assert resource["service.name"] == "support-app"


def test_a_provider_without_an_otlp_reader_is_left_alone(caplog):
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    console = PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=math.inf)
    meters = MeterProvider(metric_readers=[console], shutdown_on_exit=False)
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), otlp_metrics=meters)
    assert processor.otlp_metrics.readers == []
    assert "has no OTLP metric reader" in caplog.text
    processor.shutdown()
    meters.shutdown()


def test_bad_histogram_choice_is_one_clear_error():
    with pytest.raises(ValueError, match="otlp_histograms='native'"):
        AgentEvalSpanProcessor(registry=CollectorRegistry(), otlp_histograms="native")


def test_every_family_has_an_otel_name_with_dots_and_a_unit_apart():
    for spec in n.SPECS.values():
        name, unit = otel_name(spec.name)
        assert "." in name and not name.endswith(("_seconds", "_usd", "_total")), spec.name
        assert unit in ("s", "USD", "1", "") or unit.startswith("{"), spec.name
    assert otel_name("agent_eval_processor_spans_seen") == ("agent_eval.processor.spans_seen", "")
    assert otel_name("agent_eval_serve_forwarded_spans") == ("agent_eval.serve.forwarded_spans", "")
    assert otel_name(n.TOOL_DURATION.name) == ("gen_ai.execute_tool.duration", "s")


ZERO_CODE_APP = textwrap.dedent('''
    """An agent app that knows nothing of otel-agent-eval: many runs, then /metrics printed."""
    import os, urllib.request
    from opentelemetry import trace

    tracer = trace.get_tracer("support-app")
    for i in range(40):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
            for tool in ("local_index", "web_search")[: 1 + i % 2]:
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                    pass
    trace.get_tracer_provider().force_flush()
    port = os.environ["OTEL_AGENT_EVAL_METRICS_PORT"]
    print(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
''')  # at exit the SDK's MeterProvider exports once more: ours with its own metrics


@pytest.mark.parametrize("temporality", ["cumulative", "delta"])
def test_opentelemetry_instrument_with_otlp_metrics_sends_ours_too(tmp_path, temporality):
    app = tmp_path / "app.py"
    app.write_text(ZERO_CODE_APP)
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    with running_metrics_receiver("http") as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_"))}
        env.update({
            "OTEL_TRACES_EXPORTER": "agent_eval", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "support-app", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{free_port()}/v1/traces",  # nothing listens: spans fail
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.endpoint, TEMPORALITY: temporality,
            "OTEL_METRIC_EXPORT_INTERVAL": "600000", "OTEL_AGENT_EVAL_METRICS_PORT": str(free_port()),
            "NO_PROXY": "127.0.0.1,localhost",
        })
        run = subprocess.run([str(instrument), sys.executable, str(app)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        receiver.wait_for_requests(1)
        scraped = run.stdout
        assert 'agent_eval_tool_calls_total{gen_ai_agent_name="support_agent",gen_ai_tool_name="web_search"' in scraped
        assert_same_series(scraped, receiver.prometheus_view(), exact_buckets=False)
    (resource, _), *_ = receiver.metrics()
    assert resource["service.name"] == "support-app"


@pytest.mark.parametrize(("workers", "temporality"), [("1", "cumulative"), ("1", "delta"), ("2", "delta")])
def test_serve_sends_every_series_of_its_metrics_to_the_otlp_endpoint(monkeypatch, workers, temporality):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_agent_eval.tools.demo.workload import private_provider
    from serve_process import local_only, serving, stop_cleanly

    local_only(monkeypatch)
    with running_metrics_receiver("http") as receiver:
        env = {**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", TEMPORALITY: temporality}
        with serving("--no-grpc", "--http-port", "0", "--metrics-port", "0", "--workers", workers,
                     "--otlp-metrics-to", receiver.base_url, "--otlp-metrics-interval", "3600", env=env) as (process, where):
            provider = private_provider(SimpleSpanProcessor(OTLPSpanExporter(endpoint=where["OTLP/HTTP"])))
            run_workload(provider, runs=120, seed=8)
            provider.shutdown()
            scraped = evaluated_scrape(where["metrics"])
            stop_cleanly(process)  # the last export happens at shutdown, after every accepted span was evaluated
        assert_same_series(scraped, receiver.prometheus_view(), exact_buckets=False)
    (resource, _), *_ = receiver.metrics()
    assert resource["service.name"] == "otel-agent-eval"


def evaluated_scrape(url: str, timeout_s: float = 20.0) -> str:
    """/metrics once every span serve accepted was evaluated (a scrape waits only briefly for queued spans)."""
    import time

    from otlp_metrics_receiver import scrape

    deadline = time.monotonic() + timeout_s
    while True:
        text = scrape(url)
        view = scrape_view(text)
        accepted = view[("agent_eval_serve_spans_total", (("outcome", "accepted"), ("transport", "http")))]
        if view[("agent_eval_processor_spans_seen_total", ())] == accepted > 0:
            return text
        assert time.monotonic() < deadline, f"serve evaluated {view[('agent_eval_processor_spans_seen_total', ())]} of {accepted}"


def test_serve_refuses_a_forward_url_that_says_nothing_of_metrics(monkeypatch):
    from serve_process import local_only

    local_only(monkeypatch)
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--forward-to",
                          "http://127.0.0.1:4318/custom/path"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    assert run.returncode == 2
    assert "--otlp-metrics-to" in run.stderr and "Traceback" not in run.stderr


def test_the_docs_table_maps_every_metric():
    text = (Path(__file__).resolve().parents[1] / "docs" / "otlp-metrics.md").read_text()
    for spec in n.SPECS.values():
        name, unit = otel_name(spec.name)
        assert f"| `{spec.sample}` | `{name}` | `{unit}` |" in text, spec.name

"""A short-lived app that never flushes (a CLI, a batch or CI job) still delivers every metric and evaluation event.

Each app runs 40 agent runs (60 tool calls) in a child process and exits normally, with no `force_flush()`
or `shutdown()` of its own; the SDK's providers shut down from their `atexit` handlers in whatever order the app
made them. A real OTLP endpoint on 127.0.0.1 (tests/otlp_endpoint.py) receives the traces, the metrics and the
`gen_ai.evaluation.result` log records, and the counts must be exact: one path per entry point (zero code,
`install()`, the processor with `otlp_metrics=`, `serve` on SIGTERM).
"""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from otlp_endpoint import OtlpEndpoint, running_endpoint

def agent_runs(tracer):
    """40 runs: 40 local_index calls, 20 web_search calls; no flush, no shutdown: the app just ends."""
    for i in range(40):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
            for tool in ("local_index", "web_search")[: 1 + i % 2]:
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}):
                    pass


RUNS = "\n" + inspect.getsource(agent_runs) + "\n\nagent_runs(tracer)\n"  # the child apps' own code

ZERO_CODE_APP = 'from opentelemetry import trace\ntracer = trace.get_tracer("support-app")\n' + RUNS

SDK_SETUP = textwrap.dedent('''
    import sys
    from opentelemetry import _logs, metrics, trace
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    def logger_provider():
        provider = LoggerProvider()
        provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        return provider

    def meter_provider():
        return MeterProvider(metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
''')

INSTALL_APP = SDK_SETUP + textwrap.dedent('''
    import otel_agent_eval

    made = {"traces": lambda: trace.set_tracer_provider(TracerProvider()),
            "metrics": lambda: metrics.set_meter_provider(meter_provider()),
            "logs": lambda: _logs.set_logger_provider(logger_provider())}
    for signal in sys.argv[1].split(","):  # the order the app makes its providers in
        made[signal]()
    otel_agent_eval.install(forward_to=BatchSpanProcessor(OTLPSpanExporter()), serve_metrics=False)
    tracer = trace.get_tracer("support-app")
''') + RUNS

PROCESSOR_APP = SDK_SETUP + textwrap.dedent('''
    from otel_agent_eval import AgentEvalSpanProcessor

    provider = TracerProvider()  # first: its exit handler runs last
    logs = logger_provider()
    target = OTLPMetricExporter() if sys.argv[1] == "exporter" else meter_provider()
    provider.add_span_processor(AgentEvalSpanProcessor(registry=None, forward_to=BatchSpanProcessor(OTLPSpanExporter()),
                                                       otlp_metrics=target, logger_provider=logs))
    tracer = provider.get_tracer("support-app")
''') + RUNS


def child_env(endpoint: OtlpEndpoint, protocol: str = "http") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_"))}
    env.update({
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint.url, "OTEL_SERVICE_NAME": "support-app",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf" if protocol == "http" else "grpc",
        "OTEL_AGENT_EVAL_EVALUATION_EVENTS": "both", "OTEL_AGENT_EVAL_METRICS_ENABLED": "false",
        "OTEL_AGENT_EVAL_CATALOG": "", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    })
    return env


def run_app(tmp_path: Path, source: str, *args: str, env: dict[str, str], instrument: bool = False) -> None:
    app = tmp_path / "app.py"
    app.write_text(source)
    command = [sys.executable, str(app), *args]
    if instrument:
        command.insert(0, str(Path(sys.executable).with_name("opentelemetry-instrument")))
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr, run.stderr


def assert_every_metric_arrived(endpoint: OtlpEndpoint) -> None:
    """The exact counts of the 40 runs, in one export of ours (the last one), not two."""
    view = endpoint.metrics.prometheus_view()
    calls: Counter[str] = Counter()
    for (name, labels), value in view.items():
        if name == "agent_eval_tool_calls_total":
            calls[dict(labels)["gen_ai_tool_name"]] += value
    assert calls == {"local_index": 40, "web_search": 20}
    assert sum(v for (name, _), v in view.items() if name == "agent_eval_runs_total") == 40
    assert sum(v.count for (name, _), v in view.items() if name == "gen_ai_execute_tool_duration_seconds") == 60
    assert view[("agent_eval_processor_spans_seen_total", ())] == 100
    ours = [r for r in endpoint.metrics.requests
            if any(sm.scope.name == "otel_agent_eval" for rm in r.resource_metrics for sm in rm.scope_metrics)]
    assert len(ours) == 1


EVENTS = {"agent_eval.tool_efficiency": 60, "agent_eval.task_completion": 40, "agent_eval.run_health": 40,
          "agent_eval.tool_correctness": 40}


def assert_every_event_arrived(endpoint: OtlpEndpoint) -> None:
    """Each evaluation once as a log record and once as a span event (`OTEL_AGENT_EVAL_EVALUATION_EVENTS=both`)."""
    records = [r for r in endpoint.log_records() if r["event_name"] == "gen_ai.evaluation.result"]
    assert Counter(r["attributes"]["gen_ai.evaluation.name"] for r in records) == EVENTS
    spans = endpoint.traces.spans()
    assert len(spans) == 100
    span_events = [e for s in spans for e in s["events"] if e["name"] == "gen_ai.evaluation.result"]
    assert Counter(e["attributes"]["gen_ai.evaluation.name"] for e in span_events) == EVENTS
    by_span = {s["span_id"]: s["name"] for s in spans}
    assert all(r["span_id"] in by_span for r in records)  # parented to spans that were exported


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_zero_code_app_that_never_flushes_delivers_every_metric_and_event(tmp_path, protocol):
    with running_endpoint(protocol) as endpoint:
        env = child_env(endpoint, protocol)
        env.update({"OTEL_TRACES_EXPORTER": "agent_eval", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "otlp"})
        run_app(tmp_path, ZERO_CODE_APP, env=env, instrument=True)
    assert_every_metric_arrived(endpoint)
    assert_every_event_arrived(endpoint)


@pytest.mark.parametrize("order", ["traces,metrics,logs", "logs,metrics,traces", "metrics,traces,logs"])
def test_install_in_an_app_that_never_flushes_delivers_every_metric_and_event(tmp_path, order):
    with running_endpoint("http") as endpoint:
        run_app(tmp_path, INSTALL_APP, order, env=child_env(endpoint))
    assert_every_metric_arrived(endpoint)
    assert_every_event_arrived(endpoint)


@pytest.mark.parametrize("target", ["exporter", "meter_provider"])
def test_processor_with_otlp_metrics_in_an_app_that_never_flushes_delivers_every_metric_and_event(tmp_path, target):
    with running_endpoint("http") as endpoint:
        run_app(tmp_path, PROCESSOR_APP, target, env=child_env(endpoint))
    assert_every_metric_arrived(endpoint)
    assert_every_event_arrived(endpoint)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_stopped_by_sigterm_right_after_the_spans_delivers_every_metric_and_event(monkeypatch, workers):
    """SIGTERM as soon as the last span was accepted: the accepted spans are evaluated and forwarded (with their
    evaluation events) before the last metrics export, which goes to the next hop too."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_agent_eval.tools.demo.workload import private_provider
    from serve_process import local_only, serving, stop_cleanly

    local_only(monkeypatch)
    with running_endpoint("http") as endpoint:
        env = {**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""}
        with serving("--no-grpc", "--http-port", "0", "--metrics-port", "0", "--workers", workers,
                     "--forward-to", endpoint.url + "/v1/traces", "--otlp-metrics-interval", "3600",
                     env=env) as (process, where):
            provider = private_provider(SimpleSpanProcessor(OTLPSpanExporter(endpoint=where["OTLP/HTTP"])))
            agent_runs(provider.get_tracer("support-app"))  # each span is sent, and accepted, as it ends
            provider.shutdown()
            stop_cleanly(process)
    assert_every_metric_arrived(endpoint)
    spans = endpoint.traces.spans()
    assert len(spans) == 100
    span_events = [e for s in spans for e in s["events"] if e["name"] == "gen_ai.evaluation.result"]
    assert Counter(e["attributes"]["gen_ai.evaluation.name"] for e in span_events) == EVENTS


METERS_FIRST = textwrap.dedent('''
    from opentelemetry import metrics, trace
    metrics.get_meter_provider().shutdown()  # the app shuts its providers down itself, the MeterProvider first
    trace.get_tracer_provider().shutdown()
''')


EXPORTER_APP = SDK_SETUP + textwrap.dedent('''
    from otel_agent_eval import AgentEvalSpanExporter

    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    _logs.set_logger_provider(logger_provider())
    meters = meter_provider()
    provider.add_span_processor(BatchSpanProcessor(AgentEvalSpanExporter(OTLPSpanExporter(), otlp_metrics=meters)))
    tracer = provider.get_tracer("support-app")
''') + RUNS + "\nmeters.shutdown()\nprovider.shutdown()\n"


@pytest.mark.parametrize("app", ["exporter", "install", "processor"])
def test_an_app_that_shuts_its_meter_provider_down_first_still_delivers_every_metric_and_event(tmp_path, app):
    """The reader's last collection has the spans still held evaluated first (for the exporter: those still in the
    BatchSpanProcessor before it); the LoggerProvider is shut down at exit after the TracerProvider was, so the
    evaluation log records go out too. (Zero code links the exporter to the SDK's MeterProvider on its first batch or
    TTL tick, 50 ms: an app that shuts the MeterProvider down before that is not covered, so not tested here.)"""
    with running_endpoint("http") as endpoint:
        env = child_env(endpoint)
        if app == "exporter":
            run_app(tmp_path, EXPORTER_APP, env=env)
        elif app == "install":
            run_app(tmp_path, INSTALL_APP + METERS_FIRST, "traces,metrics,logs", env=env)
        else:
            run_app(tmp_path, PROCESSOR_APP + "\ntarget.shutdown()\nprovider.shutdown()\n", "meter_provider", env=env)
    assert_every_metric_arrived(endpoint)
    assert_every_event_arrived(endpoint)


def test_a_meter_providers_shutdown_evaluates_the_queued_spans_but_leaves_open_runs_open():
    """Before a reader's last collection the processor evaluates what it queued; a run still open stays open (the app
    may go on), and its metrics are the tracer provider's shutdown's."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from otel_agent_eval import AgentEvalSpanProcessor

    with running_endpoint("http") as endpoint:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint.url + "/v1/metrics"),
                                               export_interval_millis=3_600_000)
        meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
        processor = AgentEvalSpanProcessor(registry=None, otlp_metrics=meters)
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(processor)
        tracer = provider.get_tracer("support-app")
        agent_runs(tracer)
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
            meters.shutdown()  # the app's last export, with this run still going
            assert len(processor.runs) == 1
        provider.shutdown()
    assert_every_metric_arrived(endpoint)


def test_our_metrics_go_once_on_a_reader_however_often_we_link_to_it():
    import math

    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from otel_agent_eval.otel.otlp_metrics import OtlpMetricsLink

    with running_endpoint("http") as endpoint:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint.url + "/v1/metrics"),
                                               export_interval_millis=math.inf)
        meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
        link = OtlpMetricsLink(lambda: [])
        assert link.to_provider(meters) and link.to_provider(meters)  # the exporter's batch and its TTL tick, say
        assert link.readers == [reader]
        assert [link_ for link_, _ in reader._collect.sources] == [link]
        meters.shutdown()


class _Evaluator:
    """An evaluator whose flush waits for `release` (a downstream that hangs) and says when it was called."""

    is_shut_down = False

    def __init__(self, release=None):
        import threading

        self.release = release or threading.Event()
        self.calls = []

    def flush_for_exit(self, timeout_s, close_runs=True):
        self.calls.append(close_runs)
        return self.release.wait(3600)


def test_the_exit_step_never_waits_past_its_timeout_for_a_hanging_evaluator(monkeypatch, caplog):
    import threading
    import weakref

    from otel_agent_eval.otel import exit_flush

    hanging, shut = _Evaluator(), _Evaluator(threading.Event())
    shut.is_shut_down = True
    monkeypatch.setattr(exit_flush, "_evaluators", weakref.WeakSet([hanging, shut]))
    try:
        exit_flush.flush_all(timeout_s=0.05)  # returns: the hanging flush is left on its own thread
        assert hanging.calls == [True] and shut.calls == []
        assert "exit flush did not finish" in caplog.text
    finally:
        hanging.release.set()


def test_the_exit_step_evaluates_the_queue_and_closes_open_runs():
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from otel_agent_eval import AgentEvalSpanProcessor

    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("support-app")
    agent = tracer.start_span("invoke_agent support_agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
    agent_runs(tracer)
    assert processor.flush_for_exit(10.0)
    assert len(processor.runs) == 0  # the run still open at exit was closed and evaluated
    text = generate_latest(registry).decode()
    assert 'agent_eval_processor_runs_closed_early_total{reason="shutdown"} 1.0' in text
    assert 'agent_eval_processor_spans_seen_total 100.0' in text
    agent.end()
    provider.shutdown()

"""Zero code: an unmodified app under `opentelemetry-instrument` with OTEL_TRACES_EXPORTER=agent_eval."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import urllib.request
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from otlp_receiver import running_receiver
from prometheus_client.parser import text_string_to_metric_families
from serve_process import serving

APP = textwrap.dedent('''
    """A small agent app that knows nothing of otel-agent-eval."""
    import os, urllib.request
    from opentelemetry import trace

    tracer = trace.get_tracer("support-app")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}):
        for tool in ("local_index", "web_search"):
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                    "gen_ai.tool.call.arguments": '{"query": "return policy"}'}):
                pass
    trace.get_tracer_provider().force_flush()  # what the SDK's batch worker does every 5 s on its own
    port = os.environ["OTEL_AGENT_EVAL_METRICS_PORT"]
    print(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
''')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_exporter_entry_point_loads():
    (entry,) = [e for e in entry_points(group="opentelemetry_traces_exporter") if e.name == "agent_eval"]
    from otel_agent_eval import AgentEvalSpanExporter

    assert entry.load() is AgentEvalSpanExporter


def run_app(tmp_path: Path, protocol: str, endpoint: str, text: str = APP) -> subprocess.CompletedProcess[str]:
    """APP under `opentelemetry-instrument` with the zero-code exporter (staging thresholds), sending to `endpoint`."""
    app = tmp_path / "app.py"
    app.write_text(text)
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_"))}
    env.update({
        "OTEL_TRACES_EXPORTER": "agent_eval",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "support-app",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf" if protocol == "http" else "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_AGENT_EVAL_METRICS_PORT": str(free_port()),
        "OTEL_AGENT_EVAL_ENVIRONMENT": "staging",
        "NO_PROXY": "127.0.0.1,localhost",
    })
    run = subprocess.run([str(instrument), sys.executable, str(app)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_opentelemetry_instrument_scores_an_unmodified_app(tmp_path, protocol):
    with running_receiver(protocol) as receiver:
        run = run_app(tmp_path, protocol, receiver.endpoint if protocol == "http" else f"http://{receiver.endpoint}")
        spans = {s["name"]: s for s in receiver.wait_for_spans(3, timeout=20)}
    web = spans["execute_tool web_search"]["attributes"]
    assert (web["agent_eval.outcome"], web["agent_eval.optimal_tool"], web["agent_eval.threshold"]) == ("suboptimal", "local_index", 0.75)
    assert spans["execute_tool local_index"]["attributes"]["agent_eval.outcome"] == "optimal"
    assert [e["name"] for e in spans["execute_tool web_search"]["events"]] == ["gen_ai.evaluation.result"]
    root = spans["invoke_agent support_agent"]
    assert root["resource"]["service.name"] == "support-app"
    assert (root["attributes"]["agent_eval.run.outcome"], root["attributes"]["agent_eval.run.tool_calls"]) == ("completed", 2)
    assert ('agent_eval_tool_calls_total{gen_ai_agent_name="support_agent",gen_ai_tool_name="web_search",'
            'optimal_tool="local_index",outcome="suboptimal",task="faq",verdict="fail"} 1.0') in run.stdout


def test_an_app_scoring_in_front_of_serve_sends_on_one_evaluation_per_span(tmp_path):
    """The zero-code exporter scores in the app (staging thresholds) and `serve` scores again (development): the
    next hop gets each span with serve's evaluation only, one `gen_ai.evaluation.result` per metric, and serve
    counts each call once."""
    with running_receiver("http") as receiver, serving(
            "--no-grpc", "--http-port", "0", "--metrics-port", "0", "--environment", "development",
            "--forward-to", receiver.endpoint, "--forward-delay", "0.05",
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}) as (process, where):
        run_app(tmp_path, "http", where["OTLP/HTTP"])
        spans = {s["name"]: s for s in receiver.wait_for_spans(3, timeout=20)}
        metrics = urllib.request.urlopen(where["metrics"], timeout=10).read().decode()
    for name in ("execute_tool web_search", "execute_tool local_index"):
        attributes, events = spans[name]["attributes"], spans[name]["events"]
        assert attributes["agent_eval.threshold"] == 0.6, name  # development's fail threshold, not staging's 0.75
        assert [(e["name"], e["attributes"]["gen_ai.evaluation.name"]) for e in events] == [
            ("gen_ai.evaluation.result", "agent_eval.tool_efficiency")], name
    assert spans["execute_tool web_search"]["events"][0]["attributes"]["gen_ai.evaluation.score.label"] == "fail"
    root = spans["invoke_agent support_agent"]
    names = [e["attributes"]["gen_ai.evaluation.name"] for e in root["events"]]
    assert sorted(names) == sorted(set(names)) and "agent_eval.run_health" in names
    assert root["attributes"]["agent_eval.run.tool_calls"] == 2
    calls = [s for f in text_string_to_metric_families(metrics) for s in f.samples if s.name == "agent_eval_tool_calls_total"]
    assert sum(s.value for s in calls) == 2 and {s.labels["gen_ai_tool_name"] for s in calls} == {"web_search", "local_index"}


def test_install_under_the_zero_code_exporter_adds_nothing_and_says_why(tmp_path):
    """README way 1 (install() in the app) deployed with way 2 (OTEL_TRACES_EXPORTER=agent_eval): install() died with
    a traceback ("this Prometheus registry already holds otel-agent-eval's metrics"). Now it logs that the zero-code
    exporter already scores, returns that exporter, and each call is scored once."""
    app = textwrap.dedent('''
        import otel_agent_eval
        running = otel_agent_eval.install(catalog="unused.yaml")
        print("install returned", type(running).__name__, running.metrics_address is not None)
        assert otel_agent_eval.install() is running
    ''') + APP
    with running_receiver("http") as receiver:
        run = run_app(tmp_path, "http", receiver.endpoint, app)
        spans = {s["name"]: s for s in receiver.wait_for_spans(3, timeout=20)}
    assert "install returned AgentEvalSpanExporter True" in run.stdout
    assert "Traceback" not in run.stderr
    said = [line for line in run.stderr.splitlines() if "zero-code exporter" in line]
    assert len(said) == 2 and "AgentEvalSpanExporter" in said[0], run.stderr
    assert [e["name"] for e in spans["execute_tool web_search"]["events"]] == ["gen_ai.evaluation.result"]
    calls = [s for f in text_string_to_metric_families(run.stdout.split("True", 1)[1]) for s in f.samples
             if s.name == "agent_eval_tool_calls_total"]
    assert sum(s.value for s in calls) == 2


def test_the_exporter_releases_a_tool_span_whose_agent_never_ends_once_the_ttl_passes_in_a_quiet_process():
    """A tool span waiting for an agent span that never ends stayed unexported and unscored until some other span
    happened to arrive: the exporter expired runs only on a batch. Its own timer now closes them after run_ttl_s."""
    import time

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    from otel_agent_eval import AgentEvalSpanExporter
    from otel_agent_eval.config.settings import Settings

    inner, registry = InMemorySpanExporter(), CollectorRegistry()
    exporter = AgentEvalSpanExporter(inner, settings=Settings(metrics_enabled=False), registry=registry, run_ttl_s=0.5)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=50))
    tracer = provider.get_tracer("t")
    agent = tracer.start_span("invoke_agent support_agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})  # never ends
    tracer.start_span("execute_tool local_index", context=trace.set_span_in_context(agent), attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}).end()
    provider.force_flush()
    assert registry.get_sample_value("agent_eval_processor_held_back_calls") == 1.0
    deadline = time.monotonic() + 30  # liveness bound only: released ~0.5 s after the trace opened
    while not inner.get_finished_spans() and time.monotonic() < deadline:
        time.sleep(0.05)
    (tool,) = inner.get_finished_spans()  # no other span arrived
    assert tool.name == "execute_tool local_index" and tool.attributes["agent_eval.outcome"] == "optimal"
    assert registry.get_sample_value("agent_eval_processor_runs_closed_early_total", {"reason": "ttl"}) == 1.0
    assert registry.get_sample_value("agent_eval_processor_held_back_calls") == 0.0
    calls = [s for f in registry.collect() for s in f.samples if s.name == "agent_eval_tool_calls_total"]
    assert [(s.labels["gen_ai_tool_name"], s.labels["gen_ai_agent_name"], s.value) for s in calls] == [
        ("local_index", "", 1.0)]  # scored and counted; its agent never ended, so the exporter never learnt its name
    provider.shutdown()
    assert not exporter._expirer.is_alive()  # shutdown stops the timer

"""Zero code: an unmodified app under `opentelemetry-instrument` with OTEL_TRACES_EXPORTER=agent_eval."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from otlp_receiver import running_receiver

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


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_opentelemetry_instrument_scores_an_unmodified_app(tmp_path, protocol):
    app = tmp_path / "app.py"
    app.write_text(APP)
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    metrics_port = free_port()
    with running_receiver(protocol) as receiver:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_"))}
        env.update({
            "OTEL_TRACES_EXPORTER": "agent_eval",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": "support-app",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf" if protocol == "http" else "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint if protocol == "http" else f"http://{receiver.endpoint}",
            "OTEL_AGENT_EVAL_METRICS_PORT": str(metrics_port),
            "OTEL_AGENT_EVAL_ENVIRONMENT": "staging",
            "NO_PROXY": "127.0.0.1,localhost",
        })
        run = subprocess.run([str(instrument), sys.executable, str(app)], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
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

"""`serve` sends the judge's `gen_ai.evaluation.result` events as OTLP log records to the next hop, as its metrics.

Real processes and real OTLP: the SDK's OTLP/HTTP exporter sends whole agent runs to a real `serve` process,
deepeval's judge in it asks the scripted local OpenAI-compatible server (tests/judge_server.py), and a real OTLP
endpoint on localhost (tests/otlp_endpoint.py, HTTP or gRPC) is the next hop for traces, metrics and logs.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import urllib.request
from collections import Counter

import pytest
from prometheus_client import CollectorRegistry

from judge_server import JudgeServer
from otlp_endpoint import running_endpoint
from serve_process import FREE_PORTS, local_only, serving
from test_judge_online_serve import RATE, RUNS, _outcomes, agent_runs, send
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.judge.events import EVALUATION_NAME, JUDGE_MODEL, METRIC, METRIC_VERSION, PART, PROMPT_VERSION, SAMPLE_RATE
from otel_agent_eval.judge.sampling import chosen
from otel_agent_eval.serve import ServeConfig, Service
from otel_agent_eval.serve.next_hop import GRPC, NextHop

ROOT_NAME = "invoke_agent support_agent"


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


@pytest.fixture(scope="module")
def server():
    with JudgeServer() as running:
        yield running


def judge_env(server: JudgeServer) -> dict[str, str]:
    return {**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", "OTEL_AGENT_EVAL_JUDGE_MODEL": "judge-model",
            "OTEL_AGENT_EVAL_JUDGE_BASE_URL": server.base_url, "OTEL_AGENT_EVAL_JUDGE_SAMPLE_RATE": str(RATE),
            "OTEL_AGENT_EVAL_JUDGE_MAX_PER_MINUTE": "1000", "OTEL_AGENT_EVAL_JUDGE_ARGUMENTS": "false"}


def judged_by_serve(server: JudgeServer, spans, *args: str, **env: str) -> tuple[dict[str, float], str]:
    """Run `serve` with `args` (and `env`) and the judge on, send the runs, wait for every run's outcome, stop it with
    SIGTERM; the outcomes and what serve wrote on stderr."""
    with serving(*FREE_PORTS, *args, env={**judge_env(server), **env}) as (process, where):
        send(where["OTLP/HTTP"], spans)
        outcomes = _outcomes("")
        for _ in range(600):  # until every run has its outcome (workers write their files every second)
            outcomes = _outcomes(urllib.request.urlopen(where["metrics"], timeout=10).read().decode())
            if sum(outcomes.values()) >= RUNS:
                break
            threading.Event().wait(0.1)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        err = process.stderr.read()
    assert "Traceback" not in err, err
    return outcomes, err


@pytest.mark.parametrize(("protocol", "workers"), [("http", "1"), ("grpc", "1"), ("http", "2")])
def test_each_judgement_reaches_the_next_hop_once_as_a_log_record_of_its_run(server, protocol, workers):
    spans, trace_ids = agent_runs()
    roots = {s.context.trace_id: s.context.span_id for s in spans if s.name == ROOT_NAME}
    wanted = {t for t in trace_ids if chosen(t, RATE)}
    with running_endpoint(protocol) as endpoint:
        hop = ("--forward-protocol", "grpc", "--forward-to", endpoint.url) if protocol == GRPC else (
            "--forward-to", endpoint.url)
        # no export before the shutdown (the batch delay is an hour): SIGTERM's flush sends them all
        outcomes, _ = judged_by_serve(server, spans, *hop, "--workers", workers, OTEL_BLRP_SCHEDULE_DELAY="3600000")
        records = endpoint.log_records()
        forwarded = endpoint.traces.spans()
    assert outcomes["judged"] == len(wanted) and sum(outcomes.values()) == RUNS
    assert len(forwarded) == len(spans)  # the spans went on as ever
    judged = [r for r in records if r["event_name"] == c.GEN_AI_EVALUATION_RESULT]
    assert Counter(r["trace_id"] for r in judged) == Counter(wanted)  # every judged run once, no other
    for record in judged:
        attrs = record["attributes"]
        assert record["span_id"] == roots[record["trace_id"]]  # parented to the run's root span
        assert record["scope"] == "otel_agent_eval.judge"
        assert attrs[c.GEN_AI_EVALUATION_NAME] == EVALUATION_NAME
        assert attrs[c.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0 and attrs[c.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
        assert attrs[c.GEN_AI_EVALUATION_EXPLANATION]
        assert (attrs[JUDGE_MODEL], attrs[METRIC], attrs[SAMPLE_RATE]) == ("judge-model", "ToolCorrectnessMetric", RATE)
        assert attrs[PROMPT_VERSION].startswith("sha256:") and attrs[METRIC_VERSION] and attrs[PART] in ("judge", "deterministic")
        assert attrs[c.GEN_AI_AGENT_NAME] == "support_agent"
    resources = {resource_logs.resource.attributes[0].value.string_value
                 for request in endpoint.logs.requests for resource_logs in request.resource_logs
                 if resource_logs.resource.attributes and resource_logs.resource.attributes[0].key == "service.name"}
    assert resources <= {"otel-agent-eval"}


def test_a_logs_endpoint_that_refuses_or_hangs_costs_one_line_and_stalls_nothing(server):
    spans, trace_ids = agent_runs()
    wanted = {t for t in trace_ids if chosen(t, RATE)}
    with socket.socket() as closed:  # a port nobody listens on: connection refused
        closed.bind(("127.0.0.1", 0))
        refused_port = closed.getsockname()[1]
    hanging = socket.socket()  # accepts connections (the backlog), never answers
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(64)
    try:
        for logs_url in (f"http://127.0.0.1:{refused_port}/v1/logs", f"http://127.0.0.1:{hanging.getsockname()[1]}/v1/logs"):
            with running_endpoint("http") as endpoint:
                outcomes, err = judged_by_serve(server, spans, "--forward-to", endpoint.url, "--otlp-logs-to", logs_url,
                                                "--forward-timeout", "2")
                forwarded = endpoint.traces.spans()
                assert not endpoint.log_records()
            assert outcomes["judged"] == len(wanted)  # judging went on
            assert len(forwarded) == len(spans)  # and forwarding
            ours = [line for line in err.splitlines() if "judge events" in line]
            assert len(ours) == 1 and logs_url in ours[0], err
    finally:
        hanging.close()


def test_without_a_judge_serve_makes_no_logger_provider_and_no_thread(server):
    before = {t.ident for t in threading.enumerate()}
    hop = NextHop.parse("http://127.0.0.1:9/v1/traces")
    service = Service(ServeConfig(grpc_port=None, http_port=None, metrics_port=None, otlp_logs=hop),
                      settings=Settings(metrics_enabled=False), registry=CollectorRegistry())
    try:
        assert service.otlp_logs is None and service.pipeline.judge_run is None
        assert not [t.name for t in threading.enumerate() if t.ident not in before and "Log" in t.name]
    finally:
        service.stop()
    judging = Service(ServeConfig(grpc_port=None, http_port=None, metrics_port=None, otlp_logs=hop),
                      settings=Settings(metrics_enabled=False), registry=CollectorRegistry(),
                      judge_model="judge-model", judge_base_url=server.base_url)
    try:
        assert judging.otlp_logs is not None and judging.otlp_logs.url == "http://127.0.0.1:9/v1/logs"
    finally:
        judging.stop()


def test_the_logs_url_follows_the_hop_as_the_metrics_url_does():
    assert NextHop.parse("http://collector:4318").logs_url == "http://collector:4318/v1/logs"
    assert NextHop.parse("https://gw/otlp/v1/traces").logs_url == "https://gw/otlp/v1/logs"
    assert NextHop.parse("http://logs:4318/v1/logs", flag="--otlp-logs-to").logs_url == "http://logs:4318/v1/logs"
    assert NextHop.parse("grpc://collector:4317").logs_url == "http://collector:4317"
    with pytest.raises(ValueError, match="cannot tell the logs URL .* give --otlp-logs-to"):
        NextHop.parse("http://collector:4318/custom/path").logs_url  # noqa: B018


def test_a_forward_url_that_says_nothing_of_logs_is_refused_only_while_judging():
    import subprocess
    import sys

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--no-otlp-metrics",
                               "--forward-to", "http://127.0.0.1:9/custom/path", "--bearer-token-file", "/nonexistent/token"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", **env})

    judging = run(OTEL_AGENT_EVAL_JUDGE_MODEL="judge-model")
    assert judging.returncode == 2 and "--otlp-logs-to" in judging.stderr and "Traceback" not in judging.stderr
    plain = run()  # gets past the logs URL, to the missing token file
    assert plain.returncode == 2 and "--otlp-logs-to" not in plain.stderr and "/nonexistent/token" in plain.stderr

"""The online judge in `serve`: its intake and shutdown never wait on the judge, and `serve --workers 2` judges the
very runs one process would (the sample is a hash of the trace id, the same in every worker and every re-run).

Real processes and real OTLP: the SDK's OTLP/HTTP exporter sends, `serve` (in this process, or the command with
two worker processes) evaluates and forwards, a local HTTP judge endpoint answers or hangs.
"""
from __future__ import annotations

import json
import os
import urllib.request

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from judge_endpoint import Endpoint, HttpJudge
from serve_process import FREE_PORTS, local_only, serving, stop_cleanly
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.judge.online import OUTCOMES
from otel_agent_eval.judge.sampling import chosen
from otel_agent_eval.serve import ServeConfig, Service

RUNS = 80
RATE = 0.4


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


@pytest.fixture
def endpoint():
    served = Endpoint()
    yield served
    served.close()


def agent_runs(n: int = RUNS) -> tuple[list[ReadableSpan], list[int]]:
    """`n` agent runs of two tool calls each, as a sender would send them; and their trace ids."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "judged-app"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    trace_ids = []
    for r in range(n):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent"}) as root:
            for tool in ("local_index", "web_search"):
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: tool,
                        c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"query": f"q{r}"})}):
                    pass
        trace_ids.append(root.context.trace_id)
    provider.shutdown()
    return list(memory.get_finished_spans()), trace_ids


def send(http_endpoint: str, spans: list[ReadableSpan]) -> None:
    exporter = HttpSpanExporter(endpoint=http_endpoint, timeout=10)
    try:
        for i in range(0, len(spans), 60):
            assert exporter.export(spans[i:i + 60]) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def test_serve_intake_and_shutdown_never_wait_on_a_hanging_judge(endpoint):
    endpoint.mode = "hang"
    forwarded = InMemorySpanExporter()
    registry = CollectorRegistry()
    service = Service(ServeConfig(grpc_port=None, http_port=0, metrics_port=None, forward_delay_s=0.01),
                      settings=Settings(metrics_enabled=False), registry=registry, exporter=forwarded,
                      judge=HttpJudge(endpoint.url), judge_sample_rate=1.0, judge_timeout_s=0.2, judge_queue_limit=4).start()
    online = service.pipeline.judge_run
    online.shutdown_timeout_s = 0.5
    spans, _ = agent_runs(40)
    try:
        send(service.http.endpoint, spans)  # every request acknowledged while the judge hangs
        assert service.drain(30)  # ... and every span evaluated and forwarded
        assert len(forwarded.get_finished_spans()) == len(spans)
        assert endpoint.wait_hanging(1) and not endpoint.release.is_set()
    finally:
        service.stop()
    assert not endpoint.release.is_set() and not online._thread.is_alive()  # stopped with the judge still hung
    outcomes = {o: registry.get_sample_value("agent_eval_judgements_total", {"outcome": o}) for o in OUTCOMES}
    assert sum(outcomes.values()) == 40 and outcomes["timed_out"] >= 1 and outcomes["judged"] == 0


def _outcomes(text: str) -> dict[str, float]:
    out = dict.fromkeys(OUTCOMES, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "agent_eval_judgements_total":
                out[sample.labels["outcome"]] = sample.value
    return out


def _judged_by_serve(endpoint: Endpoint, spans: list[ReadableSpan], *args: str) -> tuple[dict[str, float], set[str]]:
    """Run `serve` (with `args`) with the judge on at RATE, send the runs, wait for every outcome; the outcomes and
    the trace ids the endpoint was asked to judge."""
    endpoint.requests.clear()
    env = {**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", "OTEL_AGENT_EVAL_JUDGE_MODEL": "scripted-judge",
           "OTEL_AGENT_EVAL_JUDGE_BASE_URL": endpoint.url.rsplit("/", 1)[0],
           "OTEL_AGENT_EVAL_JUDGE_SAMPLE_RATE": str(RATE), "OTEL_AGENT_EVAL_JUDGE_MAX_PER_MINUTE": "1000"}
    with serving(*FREE_PORTS, *args, env=env) as (process, where):
        send(where["OTLP/HTTP"], spans)
        outcomes = dict.fromkeys(OUTCOMES, 0.0)
        for _ in range(600):  # until every run has its outcome (the workers write their files every second)
            outcomes = _outcomes(urllib.request.urlopen(where["metrics"], timeout=10).read().decode())
            if sum(outcomes.values()) >= RUNS:
                break
            endpoint.release.wait(0.1)
        stop_cleanly(process)
    return outcomes, {r.get("trace_id") for r in endpoint.requests}


def test_two_serve_workers_and_a_re_run_choose_the_same_runs_as_one_process(endpoint):
    spans, trace_ids = agent_runs()
    wanted = sum(chosen(t, RATE) for t in trace_ids)
    assert 0 < wanted < RUNS
    one, _ = _judged_by_serve(endpoint, spans)
    two, _ = _judged_by_serve(endpoint, spans, "--workers", "2")
    again, _ = _judged_by_serve(endpoint, spans, "--workers", "2")
    for outcomes in (one, two, again):
        assert sum(outcomes.values()) == RUNS
        assert outcomes["sampled_out"] == RUNS - wanted
        assert outcomes["over_budget"] == outcomes["dropped"] == outcomes["timed_out"] == 0
    assert one == two == again

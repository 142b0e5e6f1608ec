"""The online judge in `serve`: its intake and shutdown never wait on the judge, and `serve --workers 2` judges the
very runs one process would (the sample is a hash of the trace id, the same in every worker and every re-run).

Real processes and real OTLP: the SDK's OTLP/HTTP exporter sends, `serve` (in this process, or the command with
two worker processes) evaluates and forwards; deepeval's judge asks the scripted local OpenAI-compatible server
(tests/judge_server.py), which answers or hangs.
"""
from __future__ import annotations

import json
import os
import re
import urllib.request

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from judge_server import JudgeServer, Reply
from serve_process import FREE_PORTS, local_only, serving, stop_cleanly
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.judge.deepeval_judge import DeepEvalJudge
from otel_agent_eval.judge.models import judge_model
from otel_agent_eval.judge.online import OUTCOMES
from otel_agent_eval.judge.sampling import chosen
from otel_agent_eval.serve import ServeConfig, Service

RUNS = 80
RATE = 0.4


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


@pytest.fixture
def server():
    with JudgeServer() as running:
        yield running


def questions(server: JudgeServer) -> set[int]:
    """The run numbers in the tool-selection prompts the server got (each run's input names its number)."""
    return {int(n) for prompt in server.prompts() for n in re.findall(r"Question #(\d+)\b", prompt)[:1]}


def agent_runs(n: int = RUNS) -> tuple[list[ReadableSpan], list[int]]:
    """`n` agent runs of two tool calls each, as a sender would send them; and their trace ids."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "judged-app"}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    trace_ids = []
    for r in range(n):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent",
                "input.value": f"Question #{r}: where is my order?"}) as root:
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


def test_serve_intake_and_shutdown_never_wait_on_a_hanging_judge(server):
    server.queue(*[Reply(hang=True) for _ in range(40)])
    forwarded = InMemorySpanExporter()
    registry = CollectorRegistry()
    service = Service(ServeConfig(grpc_port=None, http_port=0, metrics_port=None, forward_delay_s=0.01),
                      settings=Settings(metrics_enabled=False), registry=registry, exporter=forwarded,
                      judge=DeepEvalJudge(judge_model("judge-model", base_url=server.base_url)), judge_sample_rate=1.0,
                      judge_timeout_s=0.2, judge_queue_limit=4).start()
    online = service.pipeline.judge_run
    online.shutdown_timeout_s = 0.5
    spans, _ = agent_runs(40)
    try:
        send(service.http.endpoint, spans)  # every request acknowledged while the judge hangs
        assert service.drain(30)  # ... and every span evaluated and forwarded
        assert len(forwarded.get_finished_spans()) == len(spans)
        for _ in range(1500):  # the first judgement imports deepeval on its thread, then asks the server
            if server.requests:
                break
            server._released.wait(0.02)
        assert server.requests and not server._released.is_set()  # the judge is held meanwhile
    finally:
        service.stop()
    assert not server._released.is_set() and not online._thread.is_alive()  # stopped with the judge still held
    outcomes = {o: registry.get_sample_value("agent_eval_judgements_total", {"outcome": o}) for o in OUTCOMES}
    assert sum(outcomes.values()) == 40 and outcomes["timed_out"] >= 1 and outcomes["judged"] == 0


def _outcomes(text: str) -> dict[str, float]:
    out = dict.fromkeys(OUTCOMES, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "agent_eval_judgements_total":
                out[sample.labels["outcome"]] = sample.value
    return out


def _judged_by_serve(server: JudgeServer, spans: list[ReadableSpan], *args: str) -> tuple[dict[str, float], set[int]]:
    """Run `serve` (with `args`) with deepeval's judge on at RATE, send the runs, wait for every outcome; the outcomes
    and the runs the judge was asked about."""
    server.requests.clear()
    env = {**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", "OTEL_AGENT_EVAL_JUDGE_MODEL": "judge-model",
           "OTEL_AGENT_EVAL_JUDGE_BASE_URL": server.base_url,
           "OTEL_AGENT_EVAL_JUDGE_SAMPLE_RATE": str(RATE), "OTEL_AGENT_EVAL_JUDGE_MAX_PER_MINUTE": "1000"}
    with serving(*FREE_PORTS, *args, env=env) as (process, where):
        send(where["OTLP/HTTP"], spans)
        outcomes = dict.fromkeys(OUTCOMES, 0.0)
        for _ in range(600):  # until every run has its outcome (the workers write their files every second)
            outcomes = _outcomes(urllib.request.urlopen(where["metrics"], timeout=10).read().decode())
            if sum(outcomes.values()) >= RUNS:
                break
            server._released.wait(0.1)
        stop_cleanly(process)
    return outcomes, questions(server)


def test_two_serve_workers_and_a_re_run_choose_the_same_runs_as_one_process(server):
    spans, trace_ids = agent_runs()
    wanted = {r for r, t in enumerate(trace_ids) if chosen(t, RATE)}
    assert 0 < len(wanted) < RUNS
    one, judged_one = _judged_by_serve(server, spans)
    two, judged_two = _judged_by_serve(server, spans, "--workers", "2")
    again, judged_again = _judged_by_serve(server, spans, "--workers", "2")
    assert judged_one == judged_two == judged_again == wanted  # the very runs, in every layout and re-run
    for outcomes in (one, two, again):
        assert outcomes == {**dict.fromkeys(OUTCOMES, 0.0), "judged": len(wanted), "sampled_out": RUNS - len(wanted)}


def test_serve_makes_the_judges_model_at_its_start_and_one_without_a_key_is_still_counted_failed(server, monkeypatch):
    def service(**options) -> Service:
        return Service(ServeConfig(grpc_port=None, http_port=0, metrics_port=None, forward_delay_s=0.01),
                       settings=Settings(metrics_enabled=False), registry=registry, exporter=InMemorySpanExporter(),
                       judge_sample_rate=1.0, **options)

    registry = CollectorRegistry()
    made = service(judge_model="judge-model", judge_base_url=server.base_url)
    try:
        assert made.pipeline.judge_run.judge._judge is not None  # deepeval imported and the model made before serving
    finally:
        made.stop()
    for name in ("OPENAI_API_KEY", "OTEL_AGENT_EVAL_JUDGE_API_KEY", "OTEL_AGENT_EVAL_JUDGE_API_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    registry = CollectorRegistry()
    keyless = service(judge_model="gpt-4.1-mini").start()  # a hosted model without a key: serve starts all the same
    try:
        assert keyless.pipeline.judge_run.judge._judge is None
        send(keyless.http.endpoint, agent_runs(3)[0])
        assert keyless.drain(30) and keyless.pipeline.judge_run.flush(60)
    finally:
        keyless.stop()
    assert registry.get_sample_value("agent_eval_judgements_total", {"outcome": "failed"}) == 3

"""`otel-agent-eval serve --workers N`: the evaluation in N worker processes, traces routed by trace id.

Real processes throughout: the command as a subprocess, or `WorkerService` in this process
with its real worker subprocesses; spans from the SDK's real OTLP exporters (HTTP and gRPC)
and OTLP/JSON posted as a sender would; the next hop a real OTLP receiver (`otlp_receiver.py`).
The reference is today's single-process `Service` fed the very same spans.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import HttpReceiver, running_receiver
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from serve_process import FREE_PORTS, local_only, serving, stop_cleanly
from test_serve import SPAN_COUNT, emit_traces, evaluation_of

from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.serve import ServeConfig, Service
from otel_agent_eval.serve.workers import WorkerService

SETTINGS = Settings(metrics_enabled=False)
NOT_MERGED = ("agent_eval_tool_latency_seconds",)  # sliding-window quantiles: they cannot be added across processes
PER_PROCESS = ("agent_eval_serve_", "agent_eval_processor_open_runs", "agent_eval_processor_held_back_calls")


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def start_cli(*args: str):
    return serving(*FREE_PORTS, *args)


def finished(emit: Any, name: str = "workers") -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": name}), shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    emit(provider.get_tracer(name))
    provider.shutdown()
    return list(memory.get_finished_spans())


def samples(text: str, *, skip: tuple[str, ...] = ()) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and labels (values rounded: sums add in another order)."""
    out = {}
    for metric in text_string_to_metric_families(text):
        for sample in metric.samples:
            if sample.name.startswith(skip) or sample.name.endswith("_created"):
                continue
            out[(sample.name, tuple(sorted(sample.labels.items())))] = round(sample.value, 9)
    return out


def post_json(endpoint: str, spans: list[ReadableSpan]) -> int:
    body = json_format.MessageToJson(encode_spans(spans)).encode()
    host_port = endpoint.split("//", 1)[1].split("/", 1)[0]
    connection = http.client.HTTPConnection(host_port, timeout=10)
    try:
        connection.request("POST", "/v1/traces", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def send_all(grpc_endpoint: str, http_endpoint: str, sets: list[list[ReadableSpan]]) -> None:
    """One set through each transport: the SDK's OTLP/HTTP exporter, its OTLP/gRPC exporter, OTLP/JSON."""
    http_exporter = HttpSpanExporter(endpoint=http_endpoint, timeout=10)
    grpc_exporter = GrpcSpanExporter(endpoint=grpc_endpoint, insecure=True, timeout=10)
    try:
        assert http_exporter.export(sets[0]) is SpanExportResult.SUCCESS
        assert grpc_exporter.export(sets[1]) is SpanExportResult.SUCCESS
        assert post_json(http_endpoint, sets[2]) == 200
    finally:
        http_exporter.shutdown()
        grpc_exporter.shutdown()


def evaluations(spans: Iterable[dict[str, Any]]) -> dict[int, Any]:
    return {s["span_id"]: evaluation_of(s["attributes"], [(e["name"], e["attributes"]) for e in s["events"]]) for s in spans}


def scrape(url: str) -> str:
    return urllib.request.urlopen(url, timeout=10).read().decode()


# -- (1) the same series and the same enriched spans as one process ----------------------------------------

def test_two_workers_score_and_forward_exactly_what_one_process_does() -> None:
    sets = [finished(emit_traces, f"set-{i}") for i in range(3)]
    total = sum(len(s) for s in sets)
    assert total == 3 * SPAN_COUNT

    with running_receiver("http") as reference_hop:  # today's single process, in this process
        registry = CollectorRegistry()
        single = Service(ServeConfig(grpc_port=0, http_port=0, metrics_port=None, forward_to=reference_hop.endpoint,
                                     forward_delay_s=0.05), settings=SETTINGS, registry=registry).start()
        try:
            send_all(single.grpc.endpoint, single.http.endpoint, sets)
            assert single.drain()
            reference_spans = reference_hop.wait_for_spans(total)
        finally:
            single.stop()
        reference = generate_latest(registry).decode()

    with running_receiver("http") as hop:
        with start_cli("--workers", "2", "--forward-to", hop.endpoint, "--forward-delay", "0.05") as (process, where):
            send_all(where["OTLP/gRPC"], where["OTLP/HTTP"], sets)
            received = hop.wait_for_spans(total, timeout=15)
            text = scrape(where["metrics"])
            stop_cleanly(process)
        received = hop.spans()

    # the next hop: every span once, enriched exactly as one process enriches it
    assert len(received) == total and len({s["span_id"] for s in received}) == total
    assert evaluations(received) == evaluations(reference_spans)
    assert sum(1 for attrs, _ in evaluations(received).values() if attrs) == 30

    # /metrics: every scored series (and the evaluation's own counters) equal, summed over the workers
    ours, theirs = samples(text, skip=PER_PROCESS + NOT_MERGED), samples(reference, skip=PER_PROCESS + NOT_MERGED)
    assert ours == theirs
    assert any(name == "agent_eval_tool_calls_total" for name, _ in ours) and any(name == "agent_eval_runs_total" for name, _ in ours)
    serve = samples(text)
    for transport, n in (("http", 2 * SPAN_COUNT), ("grpc", SPAN_COUNT)):
        assert serve[("agent_eval_serve_spans_total", (("outcome", "accepted"), ("transport", transport)))] == n
    assert serve[("agent_eval_processor_spans_seen_total", ())] == total


# -- (2) every span of a trace reaches the same worker: runs are whole ----------------------------------

RUNS, CALLS = 24, 4


def emit_runs(tracer: trace.Tracer) -> None:
    t0 = 1_700_000_000_000_000_000
    for r in range(RUNS):
        agent = tracer.start_span("invoke_agent support_agent", start_time=t0, attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent"})
        inside = trace.set_span_in_context(agent)
        for i in range(CALLS):
            tracer.start_span("execute_tool web_search", context=inside, start_time=t0 + (i + 1) * 1_000_000, attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "web_search",
                c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"query": f"q{r}-{i}"})}).end(end_time=t0 + (i + 2) * 1_000_000)
        agent.end(end_time=t0 + (CALLS + 3) * 1_000_000)


def test_every_span_of_a_trace_reaches_one_worker_so_runs_are_whole() -> None:
    spans = finished(emit_runs)  # in the order they ended, as a sender sends them: a run's calls, then its root
    with running_receiver("http") as hop:
        svc = WorkerService(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_to=hop.endpoint, forward_delay_s=0.05),
                            workers=2, settings=SETTINGS).start()
        try:
            exporter = HttpSpanExporter(endpoint=svc.http.endpoint, timeout=10)
            for i in range(0, len(spans), 7):  # requests of 7 spans: a run's spans come in two requests, split over workers
                assert exporter.export(spans[i:i + 7]) is SpanExportResult.SUCCESS
            exporter.shutdown()
            received = hop.wait_for_spans(len(spans), timeout=15)
            per_worker = [w.taken for w in svc.pool.workers]
            text = scrape("http://{}:{}/metrics".format(*svc.metrics_address))
        finally:
            svc.stop()
    by_trace: dict[int, int] = {}
    for span in spans:
        by_trace[span.context.trace_id] = by_trace.get(span.context.trace_id, 0) + 1
    expected = [sum(n for trace_id, n in by_trace.items() if trace_id % 2 == w) for w in range(2)]
    assert per_worker == expected and all(expected)  # each worker took exactly the spans of its traces
    roots = [s for s in received if s["parent_span_id"] is None]
    assert len(roots) == RUNS
    assert all(s["attributes"]["agent_eval.run.tool_calls"] == CALLS for s in roots)  # no run split in halves
    runs = [v for (name, _), v in samples(text).items() if name == "agent_eval_runs_total"]
    assert sum(runs) == RUNS


def test_a_worker_writes_its_metric_files_unasked() -> None:
    """Nobody scrapes: each worker's timer still writes what it evaluated to the files (FLUSH_INTERVAL_S)."""
    from prometheus_client.multiprocess import MultiProcessCollector

    spans = finished(emit_runs)
    with running_receiver("http") as hop:
        svc = WorkerService(ServeConfig(grpc_port=0, http_port=0, metrics_port=None, forward_to=hop.endpoint, forward_delay_s=0.05),
                            workers=2, settings=SETTINGS).start()
        try:
            exporter = HttpSpanExporter(endpoint=svc.http.endpoint, timeout=10)
            assert exporter.export(spans) is SpanExportResult.SUCCESS
            exporter.shutdown()
            hop.wait_for_spans(len(spans), timeout=15)
            files_only = CollectorRegistry()  # the files as they are: collecting these asks no worker to write
            MultiProcessCollector(files_only, path=svc.pool.directory)

            def runs_in_files() -> float:
                return sum(v for (name, _), v in samples(generate_latest(files_only).decode()).items() if name == "agent_eval_runs_total")

            deadline = time.monotonic() + 30
            while runs_in_files() < RUNS and time.monotonic() < deadline:
                time.sleep(0.05)
            assert runs_in_files() == RUNS
            assert all(w.flushed == 0 for w in svc.pool.workers)  # written by the workers' timers, not asked for
        finally:
            svc.stop()


# -- (3) a hanging next hop: senders are told to retry, every span is counted -------------------------------

class HangingHop(HttpReceiver):
    """An OTLP/HTTP next hop that holds every export until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release, self.entered = threading.Event(), threading.Event()

    def store(self, request: Any) -> None:
        self.entered.set()
        self.release.wait(60)
        super().store(request)


def request_body(n: int) -> bytes:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):  # each its own trace: the request is split over both workers
        provider.get_tracer("bp").start_span(f"tool {i}", attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                                                                      c.GEN_AI_TOOL_NAME: "web_search"}).end()
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def post(address: tuple[str, int], body: bytes) -> tuple[int, dict[str, str]]:
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
        response = connection.getresponse()
        response.read()
        return response.status, dict(response.getheaders())
    finally:
        connection.close()


def test_a_hanging_next_hop_makes_senders_retry_and_accepted_plus_refused_is_sent() -> None:
    hop = HangingHop().start()
    svc = WorkerService(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_to=hop.endpoint, forward_delay_s=0.05,
                                    queue_spans=20, forward_queue_spans=10, ack="received"),  # on receipt: the queues fill
                        workers=2, settings=SETTINGS).start()
    try:
        codes, sent, refused_in_a_row = [], 0, 0
        deadline = time.monotonic() + 60  # liveness only
        while refused_in_a_row < 20:  # the queues are bounded: once everything is held, every request is refused
            status, headers = post(svc.http.address, request_body(5))
            sent += 5
            codes.append(status)
            assert status in (200, 429), status
            if status == 429:
                assert headers.get("Retry-After") == "1"
                refused_in_a_row += 1
                time.sleep(0.01)
            else:
                refused_in_a_row = 0
            assert time.monotonic() < deadline, codes[-20:]
        assert hop.entered.is_set() and codes.count(200) >= 2
        grpc_exporter = GrpcSpanExporter(endpoint=svc.grpc.endpoint, insecure=True, timeout=0.5)
        assert grpc_exporter.export(finished(emit_traces)) is SpanExportResult.FAILURE  # RESOURCE_EXHAUSTED, retried, given up
        grpc_exporter.shutdown()

        m = svc.serve_metrics
        accepted, refused = m.span_count("accepted"), m.span_count("refused")
        assert accepted == 5 * codes.count(200)
        assert accepted + refused == sent + SPAN_COUNT  # every span offered counted once
        assert m.span_count("invalid") == 0
        assert svc.pool.queued() <= svc.pool.limit
        hop.release.set()  # the hop recovers: every accepted span reaches it, once
        svc.stop()
        got = [s["span_id"] for s in hop.spans()]
        assert len(got) == len(set(got)) == accepted
        assert m.forward_count("exported") == accepted and m.forward_count("abandoned") == 0
    finally:
        hop.release.set()
        svc.stop()
        hop.stop()


# -- (4) SIGTERM: receivers stop, workers drain into the next hop, exit 0 --------------------------------------

def test_sigterm_drains_every_worker_into_the_next_hop() -> None:
    spans = finished(emit_traces) + finished(emit_traces)
    with running_receiver("http") as hop:
        # acknowledged on receipt, so that the spans wait in the workers for the batch delay
        with start_cli("--workers", "2", "--forward-to", hop.endpoint, "--forward-delay", "60", "--ack", "received") as (process, where):
            exporter = HttpSpanExporter(endpoint=where["OTLP/HTTP"], timeout=10)
            assert exporter.export(spans) is SpanExportResult.SUCCESS
            exporter.shutdown()
            assert hop.span_count() == 0  # held for the 60 s batch delay ...
            metrics_url = where["metrics"]
            ready = urllib.request.urlopen(metrics_url.replace("/metrics", "/readyz"), timeout=5).status
            assert ready == 200
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) == 0  # ... and flushed by every worker's graceful shutdown
            log = process.stderr.read()
        got = hop.spans()
    assert len(got) == len(spans) == len({s["span_id"] for s in got})
    assert sum(1 for s in got if any(k.startswith("agent_eval.") for k in s["attributes"])) == 20
    assert "Traceback" not in log
    assert f"stopped; spans accepted {len(spans)}, refused 0, invalid 0; forwarded {len(spans)}, failed 0, abandoned 0" in log


# -- (5) bad values: one line, exit 2 --------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "x", "65", "1.5", ""])
def test_bad_workers_values_end_in_one_line(value: str) -> None:
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--workers", value], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        f"otel-agent-eval: serve: --workers {value!r}: expected a whole number of processes from 1 to 64"]


def test_a_queue_smaller_than_the_workers_ends_in_one_line() -> None:
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--workers", "4", "--queue-spans", "3"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "otel-agent-eval: serve: --queue-spans (3) must be at least --workers (4): each worker holds its share"]


# -- a worker that dies is started again; what it held is counted abandoned --------------------------------------

def test_a_worker_that_dies_is_restarted_and_what_it_held_is_abandoned(caplog: pytest.LogCaptureFixture) -> None:
    hop = HangingHop().start()
    svc = WorkerService(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_to=hop.endpoint, forward_delay_s=0.05,
                                    ack="received"),  # on receipt: the worker holds what the hanging hop does not take
                        workers=2, settings=SETTINGS).start()
    try:
        assert post(svc.http.address, request_body(40))[0] == 200
        assert hop.entered.wait(15)
        worker = svc.pool.workers[0]
        held, pid = worker.taken, worker.pid
        assert held > 0
        with caplog.at_level("ERROR", logger="otel_agent_eval.serve.workers"):
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 15  # liveness only
            while not (worker.alive and worker.pid != pid):
                assert time.monotonic() < deadline, "the worker was not started again"
                time.sleep(0.02)
        lines = [r.getMessage() for r in caplog.records if "worker 0" in r.getMessage()]
        assert len(lines) == 1 and f"the {held} spans it had accepted" in lines[0]
        assert svc.serve_metrics.forward_count("abandoned") == held
        hop.release.set()
        assert post(svc.http.address, request_body(40))[0] == 200  # both workers take spans again
        svc.stop()
        m = svc.serve_metrics
        assert m.forward_count("exported") + m.forward_count("abandoned") == m.span_count("accepted") == 80
    finally:
        hop.release.set()
        svc.stop()
        hop.stop()


# -- what one process answers, the workers' front answers too ------------------------------------------------

def workers_service(exporter: Any = None, **config: Any) -> WorkerService:
    assert exporter is None, "an in-process exporter cannot reach a worker process"
    options = dict(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.05, **config)
    return WorkerService(ServeConfig(**options), workers=2, settings=SETTINGS).start()


@pytest.mark.parametrize("case", ["test_hostile_payloads_get_errors_and_the_service_keeps_serving",
                                  "test_bearer_token_is_required_on_both_transports",
                                  "test_empty_requests_are_fine_and_health_follows_shutdown",
                                  "test_chunked_bodies_are_read_within_the_limit_and_bad_framing_is_counted"])
def test_the_single_process_answers_hold_with_workers(monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """test_serve.py's own tests of answers and counts, run against `--workers 2`."""
    import test_serve

    monkeypatch.setattr(test_serve, "service", workers_service)
    getattr(test_serve, case)()


# -- SIGHUP: the catalog is reloaded in every worker and for the catalog gauges --------------------------------

CATALOG = """
tools:
  web_search: {{cost_usd: {cost}, latency_ms: 400, latency_slo_ms: 2000, complexity: simple, capabilities: [search]}}
"""


def test_sighup_reloads_the_catalog_in_every_worker(tmp_path: Any) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.format(cost=0.003))
    env = {**os.environ, "OTEL_AGENT_EVAL_RELOAD_ON_SIGHUP": "true"}
    with serving(*FREE_PORTS, "--workers", "2", "--catalog", str(catalog), env=env) as (process, where):
        metrics_url = where["metrics"]
        cost = ("agent_eval_tool_cost_per_call_usd", (("gen_ai_tool_name", "web_search"),))
        reloads = ("agent_eval_processor_catalog_reloads_total", ())
        assert samples(scrape(metrics_url))[cost] == 0.003
        catalog.write_text(CATALOG.format(cost=0.005))
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 15  # liveness only
        while True:
            now = samples(scrape(metrics_url))
            if now.get(reloads) == 2 and now[cost] == 0.005:
                break  # counted once by each worker; the gauge from the new file
            assert time.monotonic() < deadline, (now.get(reloads), now[cost])
            time.sleep(0.05)
        stop_cleanly(process)


# -- TLS in, TLS and headers out: the receivers stay in this process, the next hop is each worker's ------------

def test_tls_in_and_grpc_tls_out_with_workers(tmp_path: Any) -> None:
    import test_serve_tls as t
    from tls_helpers import make_pki

    from otel_agent_eval.serve.auth import BearerToken
    from otel_agent_eval.serve.next_hop import NextHop
    from otel_agent_eval.serve.tls import ServerTls

    pki = make_pki(tmp_path)
    arrived = InMemorySpanExporter()
    last = t.service(arrived, tls=ServerTls.load(pki.server_cert, pki.server_key), bearer_token=BearerToken("t0ken"))
    hop = NextHop.parse(last.grpc.url.replace("https://", "grpcs://"), ca_file=pki.ca, headers=["authorization=Bearer t0ken"])
    svc = workers_service(tls=ServerTls.load(pki.server_cert, pki.server_key), next_hop=hop)
    try:
        t.test_both_receivers_speak_tls_to_the_sdk_exporters(pki, svc)  # 3 spans over HTTPS, 4 over gRPC with TLS
        svc.stop()  # the workers flush to the next hop over gRPC with TLS and the header
        accepted = svc.serve_metrics.span_count("accepted")
        assert last.drain()
        assert len(arrived.get_finished_spans()) == accepted == svc.serve_metrics.forward_count("exported")
    finally:
        svc.stop()
        last.stop()


# -- the split itself: the parts read back to exactly the spans and problems of the whole request ---------------

def _read_back(parts: list[Any], kind: str) -> tuple[list[tuple[int, int, str, Any]], list[str]]:
    from otel_agent_eval.serve.payload import PROTOBUF, json_spans, protobuf_spans

    spans, problems = [], []
    for _, body, _ in parts:
        got, why = (protobuf_spans if kind == PROTOBUF else json_spans)(body)
        spans += got
        problems += why
    return sorted(_key(s) for s in spans), sorted(problems)


def _key(span: ReadableSpan) -> tuple[int, int, str, Any]:
    scope = span.instrumentation_scope
    return (span.context.trace_id, span.context.span_id, span.name,
            repr((sorted(span.attributes.items()), sorted(span.resource.attributes.items()), scope and (scope.name, scope.version))))


@pytest.mark.parametrize("workers", [2, 3])
def test_split_parts_read_back_to_the_whole_request(workers: int) -> None:
    from otel_agent_eval.serve.payload import JSON, PROTOBUF, spans_of_body
    from otel_agent_eval.serve.split import split_body

    spans = finished(emit_traces) + finished(emit_runs, "other")
    message = encode_spans(spans)
    message.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01\x02"  # unreadable: goes to worker 0, reported there
    data = message.SerializeToString()
    whole, whole_problems = spans_of_body(data, PROTOBUF)
    parts = split_body(data, PROTOBUF, workers)
    assert len(parts) == workers and sum(n for _, _, n in parts) == len(spans)
    assert _read_back(parts, PROTOBUF) == (sorted(_key(s) for s in whole), sorted(whole_problems))
    for w, body, _ in parts:  # every trace on its worker
        assert all(s.context.trace_id % workers == w for s in spans_of_body(body, PROTOBUF)[0])

    request = json_format.MessageToDict(encode_spans(spans))
    first = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    first[0]["traceId"] = "zz"  # unreadable id
    first[1]["attributes"].append({"key": "nan", "value": {"doubleValue": "NaN"}})
    request["resourceSpans"].append({"resource": {"attributes": "not a list"}, "scopeSpans": [{"spans": [first[2]]}]})
    request["resourceSpans"].append({"scopeSpans": [7, {"scope": {"name": "s"}, "spans": [first[3]]}]})
    for text in (json.dumps(request), json.dumps(request).replace('"NaN"', "NaN")):  # orjson's path, the standard library's
        whole, whole_problems = spans_of_body(text.encode(), JSON)
        parts = split_body(text.encode(), JSON, workers)
        assert _read_back(parts, JSON) == (sorted(_key(s) for s in whole), sorted(whole_problems))
        assert len(whole_problems) == 3  # the id, the resource, the scope: each reported once, as by one process

"""`otel-agent-eval serve`: real OTLP exporters in, the processor's very results out, retryable refusals when full.

The service runs in this process on free ports (and once as a real subprocess through the
CLI); spans come from the Python SDK through its real OTLP/HTTP and OTLP/gRPC exporters;
the next hop is a real OTLP/HTTP receiver in this process (`otlp_receiver.py`).
"""
from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import HttpReceiver, running_receiver
from prometheus_client import CollectorRegistry
from serve_process import FREE_PORTS, local_only, serving, stop_cleanly

import otel_agent_eval.config
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.otel.processor import AgentEvalSpanProcessor
from otel_agent_eval.serve import ServeConfig, Service
from otel_agent_eval.serve.auth import BearerToken

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
SETTINGS = Settings(metrics_enabled=False)  # the environment of the test run must not change the service


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def service(exporter: SpanExporter | None = None, **config: Any) -> Service:
    options = dict(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.05, **config)
    return Service(ServeConfig(**options), settings=SETTINGS, registry=CollectorRegistry(), exporter=exporter).start()


@pytest.fixture
def hop() -> Iterator[tuple[Service, HttpReceiver]]:
    """A service forwarding to an in-test OTLP/HTTP receiver through the standard OTLP exporter."""
    with running_receiver("http") as receiver:
        svc = service(forward_to=receiver.endpoint)
        try:
            yield svc, receiver
        finally:
            svc.stop()


def sender(protocol: str, svc: Service, **options: Any) -> SpanExporter:
    if protocol == "grpc":
        return GrpcSpanExporter(endpoint=svc.grpc.endpoint, insecure=True, **options)
    return HttpSpanExporter(endpoint=svc.http.endpoint, **options)


# -- traces of every convention, with explicit times (scores are deterministic) -----------------------

def emit_traces(tracer: trace.Tracer) -> None:
    """A GenAI agent run (optimal, suboptimal and failing calls, an LLM call, a plain step), an OpenInference
    run, an OpenLLMetry run, a tool span as its own root, and a plain trace."""
    def run(agent_attrs: dict[str, Any], calls: Sequence[tuple[str, dict[str, Any], int, bool]], t0: int) -> None:
        agent = tracer.start_span("agent", start_time=t0, attributes=agent_attrs)
        inside = trace.set_span_in_context(agent)
        start = t0 + MS
        for name, attrs, duration_ms, failed in calls:
            span = tracer.start_span(name, context=inside, start_time=start, attributes=attrs)
            if failed:
                span.set_status(trace.Status(trace.StatusCode.ERROR, "boom"))
            span.end(end_time=start + duration_ms * MS)
            start += (duration_ms + 1) * MS
        agent.end(end_time=start + MS)

    def genai(tool: str, query: str = "refund policy") -> dict[str, Any]:
        return {c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: tool,
                c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"query": query})}

    run({c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent"}, [
        ("execute_tool local_index", genai("local_index"), 20, False),
        ("execute_tool web_search", genai("web_search"), 500, False),
        ("execute_tool web_search", genai("web_search", "again"), 700, True),
        ("chat", {c.GEN_AI_OPERATION_NAME: "chat", "gen_ai.request.model": "gpt-4o-mini",
                  "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300}, 900, False),
        ("format_answer", {"app.step": "format"}, 5, False),
    ], T0)
    run({"openinference.span.kind": "AGENT", "agent.name": "math_agent"}, [
        ("calc", {"openinference.span.kind": "TOOL", "tool.name": "basic_calculator", "input.value": '{"expression": "2+2"}'}, 3, False),
        ("mystery", {"openinference.span.kind": "TOOL", "tool.name": "mystery_tool", "input.value": "x"}, 40, False),
    ], T0 + 10_000 * MS)
    run({"traceloop.span.kind": "agent", "gen_ai.agent.name": "analytics_bot"}, [
        ("sql", {"traceloop.span.kind": "tool", "gen_ai.tool.name": "sql_query", "traceloop.entity.input": "{}"}, 120, False),
    ], T0 + 20_000 * MS)
    root_tool = tracer.start_span("execute_tool web_search", start_time=T0 + 30_000 * MS, attributes=genai("web_search"))
    root_tool.end(end_time=T0 + 30_300 * MS)
    plain = tracer.start_span("GET /health", start_time=T0 + 40_000 * MS)
    plain.end(end_time=T0 + 40_001 * MS)


SPAN_COUNT = 13


def scored_samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every scored series (not the self-metrics, which describe each entry point itself)."""
    out = []
    for metric in registry.collect():
        for sample in metric.samples:
            if sample.name.startswith("agent_eval_") and not sample.name.startswith(("agent_eval_processor_", "agent_eval_serve_")):
                out.append((sample.name, tuple(sorted(sample.labels.items())), round(sample.value, 9)))
    return sorted(out)


def plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def evaluation_of(attributes: dict[str, Any], events: Sequence[tuple[str, dict[str, Any]]]) -> tuple[Any, ...]:
    ours = {k: plain(v) for k, v in attributes.items() if k.startswith("agent_eval.")}
    return ours, sorted((name, sorted((k, plain(v)) for k, v in attrs.items())) for name, attrs in events)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_serve_produces_exactly_what_the_python_processor_produces(hop: tuple[Service, HttpReceiver], protocol: str) -> None:
    svc, receiver = hop
    processed, registry = InMemorySpanExporter(), CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=SimpleSpanProcessor(processed))
    provider = TracerProvider(resource=Resource.create({"service.name": "serve-test"}), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(sender(protocol, svc)))
    emit_traces(provider.get_tracer("serve-test"))
    assert provider.force_flush()
    processor.drain()

    received = receiver.wait_for_spans(SPAN_COUNT)
    assert svc.drain()
    assert len(received) == SPAN_COUNT  # every span forwarded once
    theirs = {s["span_id"]: evaluation_of(s["attributes"], [(e["name"], e["attributes"]) for e in s["events"]]) for s in received}
    ours = {s.context.span_id: evaluation_of(dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
            for s in processed.get_finished_spans()}
    assert theirs == ours
    assert sum(1 for attrs, _ in ours.values() if attrs) == 10  # 7 tool spans (one a root, its run on it too) and 3 agent roots
    assert scored_samples(svc.registry) == scored_samples(registry)
    for tool in ("mystery_tool", "sql_query"):  # coverage: what the catalog lacks, to draft
        assert svc.registry.get_sample_value("agent_eval_catalog_unknown_tool_calls_total", {"gen_ai_tool_name": tool}) == 1
    assert svc.registry.get_sample_value("agent_eval_catalog_unknown_tool_calls_total", {"gen_ai_tool_name": "web_search"}) is None
    assert svc.registry.get_sample_value("agent_eval_serve_spans_total", {"transport": protocol, "outcome": "accepted"}) == SPAN_COUNT
    assert svc.registry.get_sample_value("agent_eval_processor_spans_seen_total") == SPAN_COUNT
    assert svc.registry.get_sample_value("agent_eval_serve_forwarded_spans_total", {"outcome": "exported"}) == SPAN_COUNT
    provider.shutdown()


# -- back-pressure: a next hop that hangs fills the queues; senders are told to retry, every span is counted ----

class HangingExporter(SpanExporter):
    """Holds every export until `release`; then keeps what it was given."""

    def __init__(self) -> None:
        self.release, self.entered = threading.Event(), threading.Event()
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(30)
        self.spans += spans
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def request_body(n: int) -> bytes:
    """One serialized ExportTraceServiceRequest of `n` tool spans, made by the SDK and the OTLP encoder."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        provider.get_tracer("bp").start_span(f"tool {i}", attributes={c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                                                                      c.GEN_AI_TOOL_NAME: "web_search"}).end()
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def post(svc: Service, body: bytes, headers: dict[str, str] | None = None, path: str = "/v1/traces") -> tuple[int, dict[str, str], bytes]:
    host, port = svc.http.address
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/x-protobuf", **(headers or {})})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_a_hanging_next_hop_makes_senders_retry_and_every_span_is_counted() -> None:
    hanging = HangingExporter()
    svc = service(hanging, queue_spans=20, forward_queue_spans=10, ack="received")  # acknowledged on receipt: the queues fill
    try:
        body = request_body(5)
        answers = []
        deadline = time.monotonic() + 60  # liveness only
        while True:  # until nothing can move: the hop holds an export, its queue (10) is full, so the intake's
            answers.append(post(svc, body))  # thread waits with a request, and our queue is full
            if (answers[-1][0] == 429 and hanging.entered.is_set() and svc.forwarder.waiting == 10
                    and not svc.intake.has_room(1)):
                break
            assert time.monotonic() < deadline, f"the queues never filled: {[a[0] for a in answers][-10:]}"
            if answers[-1][0] == 429:
                time.sleep(0.01)  # the forwarder gathers its first batch for up to --forward-delay
        codes = [status for status, _, _ in answers]
        assert codes.count(200) >= 4 and codes[-1] == 429, codes  # at least what the intake holds
        refused = [(headers, reply) for status, headers, reply in answers if status == 429]
        assert all(headers.get("Retry-After") == "1" for headers, _ in refused)
        assert "queue is full" in status_pb2.Status.FromString(refused[0][1]).message

        # the real exporters get the retryable answer and give up within their timeout (Retry-After 1 s > 0.5 s)
        for protocol in ("grpc", "http"):
            exporter = sender(protocol, svc, timeout=0.5)
            assert exporter.export(_spans(3)) is SpanExportResult.FAILURE
            exporter.shutdown()

        value = svc.registry.get_sample_value
        accepted = value("agent_eval_serve_spans_total", {"transport": "http", "outcome": "accepted"})
        refused_http = value("agent_eval_serve_spans_total", {"transport": "http", "outcome": "refused"})
        refused_grpc = value("agent_eval_serve_spans_total", {"transport": "grpc", "outcome": "refused"})
        assert accepted == 5 * codes.count(200)
        assert refused_http == 5 * codes.count(429) + 3  # the requests above, and the HTTP exporter's 3 spans
        assert refused_grpc == 3
        assert value("agent_eval_serve_requests_total", {"transport": "grpc", "answer": "queue_full"}) == 1

        hanging.release.set()  # the hop recovers: every accepted span reaches it, none twice
        assert svc.drain()
        assert len(hanging.spans) == accepted
        assert value("agent_eval_serve_forwarded_spans_total", {"outcome": "exported"}) == accepted
    finally:
        hanging.release.set()
        svc.stop()


def test_grpc_refusal_carries_retry_info() -> None:
    hanging = HangingExporter()
    svc = service(hanging, queue_spans=1, forward_queue_spans=1, ack="received")  # acknowledged on receipt: the queue fills
    try:
        body = request_body(1)
        with grpc.insecure_channel(svc.grpc.endpoint) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            errors = []
            for _ in range(6):
                try:
                    export(body, timeout=5)
                except grpc.RpcError as error:
                    errors.append(error)
        assert errors and errors[0].code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(errors[0].trailing_metadata())
        details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
        from google.rpc.error_details_pb2 import RetryInfo

        info = RetryInfo()
        assert details.details[0].Unpack(info) and info.retry_delay.seconds == 1
    finally:
        hanging.release.set()
        svc.stop()


# -- hostile and odd payloads: one clear error each, and the service goes on ---------------------------

def test_hostile_payloads_get_errors_and_the_service_keeps_serving() -> None:
    svc = service(max_request_bytes=64 * 1024)
    try:
        status, _, reply = post(svc, b"\x0a\xff\xff\xff\xff\x0f garbage")
        assert status == 400 and "not an OTLP ExportTraceServiceRequest" in status_pb2.Status.FromString(reply).message
        deep = b"[" * 30_000 + b"]" * 30_000
        status, _, reply = post(svc, gzip.compress(deep), {"Content-Type": "application/json", "Content-Encoding": "gzip"})
        assert status == 400 and "nested too deeply" in json.loads(reply)["message"]
        status, _, reply = post(svc, b"x" * (64 * 1024 + 1))
        assert status == 413 and "over the limit" in status_pb2.Status.FromString(reply).message
        bomb = gzip.compress(b"\0" * (10 * 1024 * 1024))
        status, _, reply = post(svc, bomb, {"Content-Encoding": "gzip"})
        assert status == 413 and "inflates past the limit" in status_pb2.Status.FromString(reply).message
        status, _, _ = post(svc, b"{}", {"Content-Type": "text/plain"})
        assert status == 415
        status, _, _ = post(svc, b"", path="/v1/metrics")
        assert status == 404
        status, _, reply = post(svc, b"\x00\x01", {"Content-Encoding": "gzip"})
        assert status == 400 and "not valid gzip" in status_pb2.Status.FromString(reply).message

        # JSON with one unreadable span: the others are taken, the sender is told which were not
        request = json_format.MessageToDict(encode_spans(_spans(2)))
        request["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz"
        status, _, reply = post(svc, json.dumps(request).encode(), {"Content-Type": "application/json"})
        answer = json.loads(reply)
        assert status == 200 and answer["partialSuccess"]["rejectedSpans"] == "1" and "traceId" in answer["partialSuccess"]["errorMessage"]

        with grpc.insecure_channel(svc.grpc.endpoint) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as error:
                export(b"\x0a\xff\xff\xff\xff\x0f garbage", timeout=5)
            assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "not an OTLP ExportTraceServiceRequest" in error.value.details()
            with pytest.raises(grpc.RpcError) as error:
                export(b"\x0a" + b"\x00" * (64 * 1024 + 10), timeout=5)
            # grpcio's own size limit, before the handler: not INVALID_ARGUMENT, not counted (docs/serve.md says so)
            assert error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in error.value.details()

        for protocol in ("http", "grpc"):  # still serving, on both transports
            assert sender(protocol, svc, timeout=5).export(_spans(2)) is SpanExportResult.SUCCESS
        assert svc.drain()
        value = svc.registry.get_sample_value
        assert value("agent_eval_serve_spans_total", {"transport": "http", "outcome": "invalid"}) == 1
        assert value("agent_eval_serve_requests_total", {"transport": "http", "answer": "invalid"}) == 3
        assert value("agent_eval_processor_spans_seen_total") == 1 + 2 + 2
    finally:
        svc.stop()


def _spans(n: int) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        provider.get_tracer("t").start_span(f"step {i}").end()
    return list(memory.get_finished_spans())


def test_bearer_token_is_required_on_both_transports() -> None:
    svc = service(bearer_token=BearerToken("s3cret"))
    try:
        status, headers, _ = post(svc, encode_spans(_spans(1)).SerializeToString())
        assert status == 401 and headers.get("WWW-Authenticate", "").startswith("Bearer")
        assert post(svc, b"", {"Authorization": "Bearer wrong"})[0] == 401
        assert sender("http", svc, headers={"Authorization": "Bearer s3cret"}).export(_spans(1)) is SpanExportResult.SUCCESS
        assert sender("grpc", svc, headers={"authorization": "Bearer s3cret"}).export(_spans(1)) is SpanExportResult.SUCCESS
        with grpc.insecure_channel(svc.grpc.endpoint) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as error:
                export(b"", timeout=5)
            assert error.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert svc.registry.get_sample_value("agent_eval_serve_spans_total", {"transport": "http", "outcome": "accepted"}) == 1
    finally:
        svc.stop()


def test_empty_requests_are_fine_and_health_follows_shutdown() -> None:
    svc = service()
    host, port = svc.metrics_address
    try:
        status, _, reply = post(svc, b"")
        assert status == 200 and ExportTraceServiceResponse.FromString(reply) == ExportTraceServiceResponse()

        def get(path: str) -> int:
            connection = http.client.HTTPConnection(host, port, timeout=5)
            connection.request("GET", path)
            return connection.getresponse().status

        assert (get("/healthz"), get("/readyz"), get("/metrics")) == (200, 200, 200)
        svc.receiving.stopping = True  # as stop() begins
        assert get("/readyz") == 503 and post(svc, b"")[0] == 503
    finally:
        svc.stop()


# -- the command: a real process, SIGTERM drains; bad arguments in one line -------------------------------

def start_cli(*args: str, env: dict[str, str] | None = None):
    return serving(*FREE_PORTS, *args, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", **(env or {})})


def test_the_command_serves_and_sigterm_drains_into_the_next_hop() -> None:
    with running_receiver("http") as receiver:
        # acknowledged on receipt, so that the spans wait in serve for the batch delay
        with start_cli("--forward-to", receiver.endpoint, "--forward-delay", "60", "--ack", "received") as (process, where):
            exporter = HttpSpanExporter(endpoint=where["OTLP/HTTP"], timeout=5)
            provider = TracerProvider(shutdown_on_exit=False)
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            emit_traces(provider.get_tracer("cli"))
            provider.shutdown()
            assert receiver.span_count() == 0  # held for the 60 s batch delay ...
            stop_cleanly(process)  # ... and flushed by the graceful shutdown
            spans = receiver.spans()
            assert len(spans) == SPAN_COUNT
            assert sum(1 for s in spans if any(k.startswith("agent_eval.") for k in s["attributes"])) == 10


def test_bad_arguments_end_in_one_line(tmp_path) -> None:
    missing = tmp_path / "missing-token"
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--bearer-token-file", str(missing)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1] == f"otel-agent-eval: --bearer-token-file {missing}: cannot read it (No such file or directory)"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--grpc-port", "0", "--metrics-port", "0",
                              "--http-port", str(port)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == f"otel-agent-eval: serve: cannot listen for OTLP/HTTP on 127.0.0.1:{port}: Address already in use"


def test_connections_past_the_limit_get_a_quick_retryable_answer() -> None:
    from otel_agent_eval.serve.http_receiver import HttpReceiver

    svc = service()
    receiver = HttpReceiver(svc.receiving, port=0, max_connections=1, idle_timeout_s=30).start()
    try:
        with socket.create_connection(receiver.address) as idle:  # holds the only slot, mid-request (an idle one would
            body = request_body(1)                                 # be closed to make room)
            idle.sendall(f"POST /v1/traces HTTP/1.1\r\nContent-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode())
            idle.settimeout(10)
            assert idle.recv(64).startswith(b"HTTP/1.1 100")  # its headers read: mid-request, not one to close
            connection = http.client.HTTPConnection(*receiver.address, timeout=10)
            for _ in range(200):  # liveness only: until the idle connection has taken its slot
                try:
                    connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
                    response = connection.getresponse()
                except (ConnectionError, http.client.HTTPException):
                    connection.close()
                    continue
                if response.status == 503:
                    break
                response.read()
                time.sleep(0.01)
            assert (response.status, response.getheader("Retry-After")) == (503, "1")
            connection.close()
            assert idle.fileno() >= 0
        assert svc.registry.get_sample_value("agent_eval_serve_requests_total", {"transport": "http", "answer": "busy"}) >= 1
    finally:
        receiver.stop()
        svc.stop()


def raw_post(svc: Service, head: bytes, body: bytes) -> bytes:
    """Bytes straight onto the socket: framings http.client would not produce."""
    with socket.create_connection(svc.http.address, timeout=10) as sock:
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n" + head + b"\r\n" + body)
        sock.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: sock.recv(65536), b""))


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def test_chunked_bodies_are_read_within_the_limit_and_bad_framing_is_counted() -> None:
    """The OTel JS SDK streams its request body (no Content-Length): HTTP/1.1 chunked, as RFC 9112 says a server reads."""
    svc = service(max_request_bytes=64 * 1024)
    try:
        body = request_body(3)
        host, port = svc.http.address
        connection = http.client.HTTPConnection(host, port, timeout=10)
        connection.request("POST", "/v1/traces", iter([body[:10], body[10:]]), {"Content-Type": "application/x-protobuf"},
                           encode_chunked=True)
        assert connection.getresponse().status == 200
        connection.close()
        over = b"8000\r\n" + b"x" * 0x8000 + b"\r\n"
        assert status_of(raw_post(svc, b"Transfer-Encoding: chunked\r\n", over * 2 + b"1\r\nx\r\n0\r\n\r\n")) == 413
        assert status_of(raw_post(svc, b"Transfer-Encoding: chunked\r\n", b"zz\r\nabc\r\n0\r\n\r\n")) == 400
        assert status_of(raw_post(svc, b"Transfer-Encoding: chunked\r\n", b"10\r\nabc")) == 400  # cut short
        assert status_of(raw_post(svc, b"Transfer-Encoding: gzip\r\n", b"")) == 400
        assert status_of(raw_post(svc, b"", b"")) == 411  # neither a length nor chunks
        assert svc.drain()
        value = svc.registry.get_sample_value
        assert value("agent_eval_serve_spans_total", {"transport": "http", "outcome": "accepted"}) == 3
        assert value("agent_eval_serve_requests_total", {"transport": "http", "answer": "too_large"}) == 1
        assert value("agent_eval_serve_requests_total", {"transport": "http", "answer": "invalid"}) == 4
    finally:
        svc.stop()


def test_sighup_reloads_the_catalog_and_the_service_goes_on(tmp_path) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text((Path(otel_agent_eval.config.__file__).parent / "default_catalog.yaml").read_text())
    with start_cli(env={"OTEL_AGENT_EVAL_CATALOG": str(catalog), "OTEL_AGENT_EVAL_RELOAD_ON_SIGHUP": "true"}) as (process, where):
        metrics_url = where["metrics"]

        def reloads() -> float:
            text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
            return next((float(line.split()[-1]) for line in text.splitlines()
                         if line.startswith("agent_eval_processor_catalog_reloads_total ")), 0.0)

        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while reloads() < 1 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        assert process.poll() is None and reloads() == 1
        exporter = HttpSpanExporter(endpoint=where["OTLP/HTTP"], timeout=5)
        assert exporter.export(_spans(2)) is SpanExportResult.SUCCESS  # still serving
        stop_cleanly(process)

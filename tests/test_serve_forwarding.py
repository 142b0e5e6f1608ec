"""The forwarder against real SDK exporters and real receivers on 127.0.0.1: a span that cannot be encoded,
batches over the next hop's size limit, and a hop busy for longer than the exporter's own attempts."""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import OtlpReceiver, _TraceService, running_receiver
from prometheus_client import CollectorRegistry
from serve_process import local_only

from otel_agent_eval.serve.forward import Forwarder
from otel_agent_eval.serve.next_hop import NextHop
from otel_agent_eval.serve.self_metrics import ServeMetrics


@pytest.fixture(autouse=True)
def _local(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def spans(count: int, *, names: Callable[[int], str] = lambda i: f"tool {i}", payload: int = 0) -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(count):
        tracer.start_span(names(i), attributes={"payload": "x" * payload} if payload else None).end()
    return list(exporter.get_finished_spans())


def forward(hop: NextHop, batch: list, **options) -> ServeMetrics:
    metrics = ServeMetrics(registry=CollectorRegistry())
    forwarder = Forwarder(hop.exporter(keep_messages=False), metrics, delay_s=0.05, **options)
    forwarder.put(batch)
    assert forwarder.flush(60)
    forwarder.shutdown(5)
    return metrics


class Policy(OtlpReceiver):
    """OTLP/HTTP whose answer to each request `answer(body, count)` picks (200 stores it); `sizes` of all bodies."""

    def __init__(self, answer: Callable[[bytes, int], int]) -> None:
        super().__init__()
        self.sizes: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.sizes.append(len(body))
                status = answer(body, len(receiver.sizes))
                if status == 200:
                    receiver.store(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "0")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"

    @contextmanager
    def running(self) -> Iterator[Policy]:
        thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(5)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_span_that_cannot_be_encoded_fails_alone(protocol: str, caplog: pytest.LogCaptureFixture) -> None:
    batch = spans(40, names=lambda i: "bad \ud800" if i == 17 else f"tool {i}")
    with running_receiver(protocol) as receiver, caplog.at_level(logging.ERROR):
        hop = NextHop.parse(f"grpc://{receiver.endpoint}" if protocol == "grpc" else receiver.endpoint)
        metrics = forward(hop, batch)
        got = receiver.wait_for_spans(39)
    assert sorted(s["name"] for s in got) == sorted(f"tool {i}" for i in range(40) if i != 17)
    assert (metrics.forward_count("exported"), metrics.forward_count("failed")) == (39, 1)
    assert "cannot be encoded" in caplog.text and "next hop refused" not in caplog.text


def test_batches_stay_under_the_size_limit_and_a_413_splits_them() -> None:
    limit = 100_000
    batch = spans(60, payload=10_000)  # ~600 kB
    with Policy(lambda body, _: 413 if len(body) > limit else 200).running() as hop_413:
        metrics = forward(NextHop.parse(hop_413.endpoint), batch)  # the exporter's limit (4 MiB) is above the hop's
        assert len(hop_413.wait_for_spans(60)) == 60
    assert (metrics.forward_count("exported"), metrics.forward_count("failed")) == (60, 0)
    with Policy(lambda body, _: 200).running() as hop:
        metrics = forward(NextHop.parse(hop.endpoint, max_request_bytes=limit), batch)
        assert len(hop.wait_for_spans(60)) == 60
    assert max(hop.sizes) <= limit and metrics.forward_count("exported") == 60


def test_a_grpc_hop_refusing_larger_than_max_gets_the_batch_in_parts() -> None:
    receiver = OtlpReceiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=[("grpc.max_receive_message_length", 100_000)])
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(receiver), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        metrics = forward(NextHop.parse(f"grpc://127.0.0.1:{port}"), spans(60, payload=10_000))
        assert len(receiver.wait_for_spans(60)) == 60
    finally:
        server.stop(None).wait(5)
    assert (metrics.forward_count("exported"), metrics.forward_count("failed")) == (60, 0)


def test_a_hop_busy_past_the_exporters_attempts_gets_the_batch_within_the_budget() -> None:
    with Policy(lambda _, n: 429 if n <= 8 else 200).running() as hop:  # the SDK gives up after 6 attempts
        metrics = forward(NextHop.parse(hop.endpoint, timeout_s=60), spans(20), budget_s=60)
        assert len(hop.wait_for_spans(20)) == 20
    assert (metrics.forward_count("exported"), metrics.forward_count("failed")) == (20, 0)


def test_the_budget_ends_the_retries() -> None:
    with Policy(lambda _, n: 429).running() as hop:
        metrics = forward(NextHop.parse(hop.endpoint, timeout_s=1), spans(5), budget_s=1)
    assert (metrics.forward_count("exported"), metrics.forward_count("failed")) == (0, 5)


def test_a_second_signal_during_the_drain_is_a_forced_stop_that_says_what_it_abandons() -> None:
    import signal
    import urllib.error
    import urllib.request

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from serve_process import FREE_PORTS, serving

    # acknowledged on receipt (--ack received): the spans are held in serve when the second signal comes
    with Policy(lambda _, n: 503).running() as hop, \
            serving(*FREE_PORTS, "--forward-to", hop.endpoint, "--forward-timeout", "600", "--forward-delay", "0.05",
                    "--ack", "received") as (process, where):
        assert OTLPSpanExporter(endpoint=where["OTLP/HTTP"], timeout=10).export(spans(7)).name == "SUCCESS"
        process.send_signal(signal.SIGTERM)
        for _ in range(300):  # /readyz turns 503 when the drain starts (bounded poll)
            try:
                urllib.request.urlopen(where["metrics"].replace("/metrics", "/readyz"), timeout=2).close()
            except OSError:  # HTTPError 503, or no longer listening
                break
            threading.Event().wait(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 128 + signal.SIGTERM
        err = process.stderr.read()
    assert "SIGTERM again during the drain: forced stop; 7 accepted spans not forwarded are abandoned" in err, err
    assert "Traceback" not in err


def test_errors_name_the_flag_and_the_url_as_typed() -> None:
    import os
    import subprocess
    import sys

    def error(*args: str) -> str:
        run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", *args], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
        assert run.returncode == 2, run
        return run.stderr.strip().splitlines()[-1]

    assert error("--forward-to", "http://127.0.0.1:9", "--otlp-metrics-to", "ftp://metrics.example").startswith(
        "otel-agent-eval: serve: --otlp-metrics-to 'ftp://metrics.example': expected")
    assert error("--forward-protocol", "grpc", "--forward-to", "http://127.0.0.1:9",
                 "--otlp-metrics-to", "http://127.0.0.1:9/v1/metrics").startswith(
        "otel-agent-eval: serve: --otlp-metrics-to 'http://127.0.0.1:9/v1/metrics': gRPC takes")
    assert error("--forward-to", "grpc://collector:4317/v1/traces").startswith(
        "otel-agent-eval: serve: --forward-to 'grpc://collector:4317/v1/traces': gRPC takes")
    port = error("--grpc-port", "abc")
    assert "--grpc-port: 'abc': not a port number" in port and "_port" not in port

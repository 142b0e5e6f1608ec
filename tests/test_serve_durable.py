"""A fleet hop that loses nothing it acknowledged, even when SIGKILLed (issue 44), on the real Collector.

An app's OTLP exporter sends whole agent runs to the real Collector (the kit's otelcol-fleet.yaml:
`load_balancing` by trace id, sending queue, retry on) in front of two `serve` replicas (`--ack forwarded`, the
default), which forward to a counting sink. While the app sends, a replica (or one worker of a `--workers 2`
replica) is SIGKILLed and started again, ten times. Every span the app's exporter had acknowledged must reach
the sink at least once, evaluated; the duplicates are counted exactly (and bounded). Each request holds whole
runs, so no run is open across requests: with `--ack forwarded` a crash loses exactly the runs open at that
moment (`serve/ack.py`), and here there are none, so nothing may be lost.
"""
from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from collector_fleet import FLEET_COLLECTOR, Collector, balance_to, fleet_overrides, grpc_endpoint
from ops_helpers import free_port, wait_for
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from serve_process import local_only
from test_collector_fleet import Replica, replicas

KILLS = 10
RUNS_PER_REQUEST, TOOLS_PER_RUN = 4, 2
REQUEST_SPANS = RUNS_PER_REQUEST * (1 + TOOLS_PER_RUN)
SEND_EVERY_S = 0.02
COLLECTOR_CONSUMERS = 10  # the sending queue's num_consumers (default): requests in flight to one replica at most
DEADLINE_S = 90.0  # liveness only


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


class CountingSink(trace_service_pb2_grpc.TraceServiceServicer):
    """The next hop: an OTLP/gRPC receiver that counts each (trace id, span id) it gets, and the evaluated ones."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[bytes, bytes]] = Counter()
        self.evaluated: set[tuple[bytes, bytes]] = set()
        self.lock = threading.Lock()
        self.port = free_port()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any) -> Any:  # noqa: N802
        with self.lock:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        key = (span.trace_id, span.span_id)
                        self.seen[key] += 1
                        if any(kv.key in ("agent_eval.outcome", "agent_eval.run.outcome") for kv in span.attributes):
                            self.evaluated.add(key)
        return trace_service_pb2.ExportTraceServiceResponse()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def run_requests(tag: str, count: int) -> Iterator[list[ReadableSpan]]:
    """`count` requests, each of RUNS_PER_REQUEST whole runs (an `invoke_agent` root and its tool calls)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("durable")
    for r in range(count):
        for run in range(RUNS_PER_REQUEST):
            agent = ("support_agent", "math_agent")[run % 2]
            tool = ("web_search", "calculator")[run % 2]
            with tracer.start_as_current_span(f"invoke_agent {agent}", attributes={
                    "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}):
                for call in range(TOOLS_PER_RUN):
                    with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                            "gen_ai.tool.call.id": f"{tag}{r}-{run}-{call}", "gen_ai.tool.call.arguments": '{"query": "q"}'}):
                        pass
        yield list(memory.get_finished_spans())
        memory.clear()


class App:
    """The app's OTLP/gRPC exporter, sending whole runs to the Collector on a thread; `acknowledged` are the
    (trace id, span id) of every span in a request the exporter saw succeed."""

    def __init__(self, endpoint: str) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        self.exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
        self.acknowledged: set[tuple[bytes, bytes]] = set()
        self.refused = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._send, daemon=True)

    def _send(self) -> None:
        for requests in (run_requests(f"r{i}-", 50) for i in itertools.count()):
            for spans in requests:
                if self.stopping.is_set():
                    return
                if self.exporter.export(spans) is SpanExportResult.SUCCESS:
                    self.acknowledged.update((s.context.trace_id.to_bytes(16, "big"), s.context.span_id.to_bytes(8, "big"))
                                             for s in spans)
                else:
                    self.refused += 1
                time.sleep(SEND_EVERY_S)

    def __enter__(self) -> App:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(30)
        self.exporter.shutdown()


@contextmanager
def fleet(tmp_path: Path, *serve_args: str) -> Iterator[tuple[CountingSink, list[Replica], dict[str, Any]]]:
    sink = CountingSink()
    sink.server.start()
    with ExitStack() as stack:
        stack.callback(sink.server.stop, None)
        front = fleet_overrides(sink.endpoint)
        evaluated = grpc_endpoint(front, "otlp/evaluated")
        pair = [Replica(evaluated, "--forward-delay", "0.05", "--no-otlp-metrics", *serve_args) for _ in range(2)]
        balance_to(front, [r.endpoint for r in pair])
        stack.enter_context(replicas(*pair))
        stack.enter_context(Collector(tmp_path, "front", front, base=FLEET_COLLECTOR))
        yield sink, pair, front


def accepted(replica: Replica) -> float:
    return replica.metric("agent_eval_serve_spans_total", outcome="accepted")


def worker_pids(replica: Replica) -> list[int]:
    assert replica.process is not None
    pid = replica.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return sorted(int(c) for c in children)


def check_delivery(sink: CountingSink, app: App) -> tuple[int, int]:
    """Wait until every acknowledged span reached the sink; (acknowledged spans, duplicates delivered)."""
    acknowledged = app.acknowledged
    wait_for(lambda: acknowledged <= sink.seen.keys(), timeout_s=DEADLINE_S,
             what=f"{len(acknowledged)} acknowledged spans at the sink "
                  f"({len(acknowledged - sink.seen.keys())} missing)")
    time.sleep(0.5)  # a late duplicate still in a queue
    with sink.lock:
        assert acknowledged <= sink.evaluated  # every span arrived evaluated (tool calls and run roots)
        duplicates = sum(count - 1 for count in sink.seen.values())
    assert duplicates <= KILLS * COLLECTOR_CONSUMERS * REQUEST_SPANS  # at-least-once, bounded by what was in flight
    return len(acknowledged), duplicates


def test_replicas_sigkilled_mid_stream_lose_nothing_acknowledged(tmp_path: Path) -> None:
    with fleet(tmp_path) as (sink, pair, front):
        with App(grpc_endpoint(front)) as app:
            for kill in range(KILLS):
                victim = pair[kill % 2]
                wait_for(lambda v=victim: accepted(v) > 0, timeout_s=DEADLINE_S, what="the replica to take spans")
                victim.kill()  # SIGKILL while the app sends: requests in flight in it, spans in its queues
                time.sleep(0.2)
                victim.start()  # same ports; the Collector's retries find it
            wait_for(lambda: all(accepted(r) > 0 for r in pair), timeout_s=DEADLINE_S, what="both replicas to take spans")
        total, duplicates = check_delivery(sink, app)
    print(f"{KILLS} replica kills: {total} spans acknowledged, all delivered; {duplicates} duplicates")
    assert total > KILLS * REQUEST_SPANS


def test_workers_sigkilled_mid_stream_lose_nothing_acknowledged(tmp_path: Path) -> None:
    with fleet(tmp_path, "--workers", "2") as (sink, pair, front):
        replica = pair[0]
        with App(grpc_endpoint(front)) as app:
            for kill in range(KILLS):
                wait_for(lambda: len(worker_pids(replica)) == 2, timeout_s=DEADLINE_S, what="both workers running")
                before = accepted(replica)
                wait_for(lambda b=before: accepted(replica) > b, timeout_s=DEADLINE_S, what="the replica to take spans")
                victim = worker_pids(replica)[kill % 2]
                os.kill(victim, signal.SIGKILL)  # its parent starts it again within about a second
                wait_for(lambda v=victim: v not in worker_pids(replica), timeout_s=DEADLINE_S, what="the worker to die")
            wait_for(lambda: len(worker_pids(replica)) == 2, timeout_s=DEADLINE_S, what="both workers running")
            before = accepted(replica)
            wait_for(lambda: accepted(replica) > before, timeout_s=DEADLINE_S, what="the replica to take spans again")
        total, duplicates = check_delivery(sink, app)
        abandoned = replica.metric("agent_eval_serve_forwarded_spans_total", outcome="abandoned")
    print(f"{KILLS} worker kills: {total} spans acknowledged, all delivered; {duplicates} duplicates; "
          f"{abandoned:.0f} spans abandoned by killed workers (none acknowledged)")
    assert total > KILLS * REQUEST_SPANS

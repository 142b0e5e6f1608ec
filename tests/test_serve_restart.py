"""What a restart of `serve --ack received` (the old path) costs: SIGKILL mid-stream, restart on the same port, and
account for every span (tests/test_serve_durable.py holds the default, `--ack forwarded`, to losing nothing).

A real `serve` process receives spans from the SDK's OTLP/HTTP exporter while it is killed
with SIGKILL and restarted on the same port. The exporter retries through the gap (its own
backoff); the killed process's next hop and the restarted one's are two in-test OTLP
receivers, so each span's fate is known. The only loss is what the killed process had
accepted and not yet forwarded (its queues, bounded), nothing sent after the kill is lost,
and the restarted process's own counters agree with what its hop received.
"""
from __future__ import annotations

import re
import signal
import subprocess
import threading
import urllib.request
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import running_receiver
from serve_process import local_only, start_serve

from otel_agent_eval.core import conventions as c

BATCHES, BATCH_SPANS = 60, 50
KILL_AFTER = 15  # batches acknowledged before the kill
HOLD_AT = 30  # the sender does not start this batch before the kill, so the kill is surely mid-stream
QUEUE_SPANS, FORWARD_QUEUE_SPANS, FORWARD_BATCH = 4096, 8192, 512
STOPPED = re.compile(r"stopped; spans accepted (\d+), refused (\d+), invalid (\d+); forwarded (\d+), failed (\d+), abandoned (\d+)")


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def start(http_port: int, forward_to: str) -> tuple[subprocess.Popen[str], dict[str, str]]:
    return start_serve("--no-grpc", "--http-port", str(http_port), "--metrics-port", "0", "--forward-to", forward_to,
                       "--forward-delay", "60", "--queue-spans", str(QUEUE_SPANS),
                       "--ack", "received")  # the old path: acknowledged on receipt (test_serve_durable.py: forwarded)


def tool_batches(count: int, size: int = BATCH_SPANS, tag: str = "") -> list[list[ReadableSpan]]:
    """`count` batches of `size` finished `web_search` tool spans, named `execute_tool web_search <tag><i>`."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("restart")
    for i in range(count * size):
        tracer.start_span(f"execute_tool web_search {tag}{i}", attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "web_search"}).end()
    spans = list(memory.get_finished_spans())
    return [spans[i:i + size] for i in range(0, len(spans), size)]


def metric(metrics_url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{name}{{{selector}}} (\S+)$", text, re.MULTILINE) if labels else \
        re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_sigkill_mid_stream_loses_only_what_the_killed_process_held(tmp_path: Any) -> None:
    requests = tool_batches(BATCHES)
    ids = [[s.context.span_id for s in batch] for batch in requests]
    sent = {i for batch in ids for i in batch}
    acked: list[int] = []  # batch numbers, in the order their export returned SUCCESS
    results: dict[int, Any] = {}
    started_after_kill: set[int] = set()
    killed = threading.Event()
    progress = threading.Condition()

    with running_receiver("http") as hop1, running_receiver("http") as hop2:
        first, where = start(0, hop1.endpoint)
        port = int(where["OTLP/HTTP"].rsplit(":", 1)[1].split("/", 1)[0])
        second = None
        exporter = HttpSpanExporter(endpoint=where["OTLP/HTTP"], timeout=60)  # retries (backoff) across the restart

        def send() -> None:
            for n, batch in enumerate(requests):
                if n == HOLD_AT:
                    killed.wait(60)
                if killed.is_set():
                    started_after_kill.add(n)
                results[n] = exporter.export(batch)
                with progress:
                    if results[n] is SpanExportResult.SUCCESS:
                        acked.append(n)
                    progress.notify_all()

        sender = threading.Thread(target=send, name="restart-test-sender", daemon=True)
        try:
            sender.start()
            with progress:
                assert progress.wait_for(lambda: len(acked) >= KILL_AFTER, timeout=60)
            first.send_signal(signal.SIGKILL)  # mid-stream: the sender goes on at once
            killed.set()
            first.wait(timeout=30)
            second, where2 = start(port, hop2.endpoint)  # the same port: the sender's retries find it
            assert where2["OTLP/HTTP"] == where["OTLP/HTTP"]
            sender.join(timeout=120)
            assert not sender.is_alive()
            assert all(result is SpanExportResult.SUCCESS for result in results.values()) and len(results) == BATCHES

            metrics_url = where2["metrics"]
            accepted2 = metric(metrics_url, "agent_eval_serve_spans_total", transport="http", outcome="accepted")
            refused2 = metric(metrics_url, "agent_eval_serve_spans_total", transport="http", outcome="refused")
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
            log = second.stderr.read()
            assert "Traceback" not in log
            stopped = STOPPED.search(log)
            assert stopped, log[-2000:]
            accepted_log, _, invalid, exported2, failed2, abandoned2 = map(int, stopped.groups())
        finally:
            for process in (first, second):
                if process is not None and process.poll() is None:
                    process.kill()
                    process.wait()
            exporter.shutdown()

        got1 = [s["span_id"] for s in hop1.spans()]
        got2 = [s["span_id"] for s in hop2.spans()]

    # the restarted process: its counters agree with its hop, and it lost nothing (graceful stop)
    assert accepted2 == accepted_log == exported2 == len(got2) == len(set(got2))
    assert (refused2, invalid, failed2, abandoned2) == (0, 0, 0, 0)
    # the killed process forwarded whole batches only (the 60 s delay): the partial one and its queue were lost
    assert len(got1) == len(set(got1)) and len(got1) % FORWARD_BATCH == 0
    lost = sent - set(got1) - set(got2)
    after_kill = {i for n in started_after_kill for i in ids[n]}
    assert after_kill and not lost & after_kill, "a span sent after the kill was lost"
    assert after_kill <= set(got2), "everything sent after the kill reached the restarted process's hop"
    assert 0 < len(lost) <= QUEUE_SPANS + FORWARD_QUEUE_SPANS
    # the accounts add up: what the senders had acknowledged = the first hop's + the restarted process's + the lost,
    # less the spans of a request in flight at the kill that the killed process had taken and the sender sent again
    duplicates = set(got1) & set(got2)
    assert len(duplicates) <= BATCH_SPANS
    assert len(sent) == len(got1) + int(accepted2) + len(lost) - len(duplicates)
    # first in, first out: the killed process forwarded the oldest spans it had taken; it lost the newest
    position = {span_id: i for i, span_id in enumerate(i for batch in ids for i in batch)}
    assert not got1 or max(position[i] for i in got1) < min(position[i] for i in lost)

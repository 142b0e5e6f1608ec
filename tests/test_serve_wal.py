"""The write-ahead log (serve/wal.py) under the faults a disk has: full, cut mid-record, corrupt, another version.

Each fault gives one line, a count, and every record that can be read back. The full disk is a real tmpfs of
64 KiB, mounted by the test (it runs as root, as the project's machine and CI do).
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ops_helpers import wait_for

from otel_agent_eval.serve.wal import (DISK_FULL, FULL, RECORD, SEGMENT_HEADER, WriteAheadLog, encode, read_log,
                                       segment_numbers, segment_path)

REQUEST = b"R"
PROTOBUF = "application/x-protobuf"


def payloads(n: int, size: int = 100) -> list[bytes]:
    return [bytes([i % 251]) * (size + i) for i in range(n)]


def written(directory: Path, records: list[bytes], **options: object) -> WriteAheadLog:
    log = WriteAheadLog(directory, **options)  # type: ignore[arg-type]
    log.open()
    for payload in records:
        assert log.append(REQUEST, payload) is None
    log.close()
    return log


def test_records_come_back_in_order_across_segments_and_released_segments_are_gone(tmp_path: Path) -> None:
    records = payloads(50)
    log = written(tmp_path, records, segment_bytes=1024)
    assert len(segment_numbers(tmp_path)) > 5
    back, recovery = read_log(tmp_path)
    assert [r.payload for r in back] == records and recovery.lines == [] and recovery.records == 50
    again = WriteAheadLog(tmp_path, segment_bytes=1024)
    back, _ = again.open()  # a new segment for the new process; the old ones stay until released
    assert [r.payload for r in back] == records
    first_needed = back[30].segment
    freed = again.release(first_needed)
    assert freed > 0 and min(segment_numbers(tmp_path)) == first_needed
    assert [r.payload for r in read_log(tmp_path)[0]] == records[[r.segment for r in back].index(first_needed):]
    again.close()
    del log


def test_the_log_never_grows_past_its_bound(tmp_path: Path) -> None:
    log = WriteAheadLog(tmp_path, max_bytes=4096, segment_bytes=1024)  # segments of at most a quarter of it
    log.open()
    answers = [log.append(REQUEST, b"x" * 200) for _ in range(40)]
    assert FULL in answers and log.size <= 4096
    assert log.refused[FULL] == answers.count(FULL)
    log.release(log.rotate())  # what was needed is forwarded: released, room again
    assert log.append(REQUEST, b"x" * 200) is None
    log.close()


def test_a_log_cut_at_every_byte_of_its_last_record_keeps_every_record_before_it(tmp_path: Path,
                                                                                   caplog: pytest.LogCaptureFixture) -> None:
    records = payloads(5, size=20)
    source = tmp_path / "source"
    written(source, records)
    [number] = segment_numbers(source)
    data = segment_path(source, number).read_bytes()
    last_start = len(data) - len(encode(REQUEST, records[-1]))
    for cut in range(last_start, len(data)):
        log_dir = tmp_path / f"cut-{cut}"
        log_dir.mkdir()
        segment_path(log_dir, number).write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="otel_agent_eval.serve.wal"):
            back, recovery = read_log(log_dir)
        assert [r.payload for r in back] == records[:-1], cut
        if cut == last_start:  # cut exactly between records: nothing to recover
            assert recovery.lines == [] and caplog.records == []
            continue
        assert recovery.truncated == 1 and recovery.corrupt == 0, (cut, recovery)
        [line] = [r.getMessage() for r in caplog.records]
        assert f"ends mid-record at byte {last_start:,} (a power cut?): its last {cut - last_start:,} bytes dropped" in line
        assert segment_path(log_dir, number).stat().st_size == last_start  # cut back: the next process appends after it
        assert read_log(log_dir)[1].lines == []
        shutil.rmtree(log_dir)


@pytest.mark.parametrize("where", ["payload", "length", "crc", "type"])
def test_a_corrupt_record_in_the_middle_is_skipped_and_every_other_one_read(tmp_path: Path, where: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    records = payloads(9, size=30)
    written(tmp_path, records)
    [number] = segment_numbers(tmp_path)
    path = segment_path(tmp_path, number)
    data = bytearray(path.read_bytes())
    start = len(SEGMENT_HEADER) + sum(len(encode(REQUEST, p)) for p in records[:4])  # the 5th record
    flip = {"payload": RECORD.size + 7, "length": 2, "crc": 5, "type": 8}[where]
    data[start + flip] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, logger="otel_agent_eval.serve.wal"):
        back, recovery = read_log(tmp_path)
    assert [r.payload for r in back] == records[:4] + records[5:]
    assert recovery.corrupt == 1 and recovery.truncated == 0
    [line] = [r.getMessage() for r in caplog.records]
    assert f"a corrupt record at byte {start:,} (CRC mismatch); {len(encode(REQUEST, records[4])):,} bytes skipped" in line


def test_a_segment_of_another_version_is_set_aside_and_the_others_read(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    written(tmp_path, payloads(3), segment_bytes=150)
    numbers = segment_numbers(tmp_path)
    assert len(numbers) == 3
    middle = segment_path(tmp_path, numbers[1])
    data = bytearray(middle.read_bytes())
    data[len(SEGMENT_HEADER) - 1] = 2  # the version byte
    middle.write_bytes(bytes(data))
    with caplog.at_level(logging.ERROR, logger="otel_agent_eval.serve.wal"):
        back, recovery = read_log(tmp_path)
    assert [r.payload for r in back] == [payloads(3)[0], payloads(3)[2]]
    assert recovery.other_version == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"otel-agent-eval serve: write-ahead log segment {middle} was written by format version 2 (this one reads 1); "
        f"set aside as {middle.name}.v2, not replayed"]
    assert middle.with_name(middle.name + ".v2").exists() and not middle.exists()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, mounted for this test and unmounted after it; the test fails where the machine allows none."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here ({done.stderr.strip()}); run as root where mounts are allowed", pytrace=False)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_refuses_appends_whole_keeps_what_was_written_and_takes_records_again_once_freed(
        small_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    log = WriteAheadLog(small_disk / "wal", segment_bytes=16 << 10, max_bytes=1 << 30)
    log.open()
    answers: list[str | None] = []
    with caplog.at_level(logging.WARNING, logger="otel_agent_eval.serve.wal"):
        while len(answers) < 1000 and (not answers or answers[-1] is None):
            answers.append(log.append(REQUEST, os.urandom(1500)))
        assert answers[-1] == DISK_FULL and log.refused[DISK_FULL] == 1
        assert log.append(REQUEST, os.urandom(1500)) == DISK_FULL  # still full: refused again, logged once
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1 and "cannot be written (No space left on device)" in lines[0]
        assert "agent_eval_serve_wal_refused_total{reason='disk_full'}" in lines[0]
        kept = sum(a is None for a in answers)
        back, recovery = read_log(small_disk / "wal")
        assert len(back) == kept and recovery.lines == []  # no partial record left behind
        log.release(log.rotate())  # everything written is forwarded: released
        assert log.append(REQUEST, os.urandom(1500)) is None
        assert "takes records again" in caplog.records[-1].getMessage()
    log.close()


# -- the log behind a Service: a crash (the disk as it was) and the replay -----------------------------------

def _total(registry: Any, name: str) -> float:
    return sum(s.value for family in registry.collect() for s in family.samples if s.name == name)


def _service(directory: Path, exporter: Any, registry: Any) -> Any:
    from otel_agent_eval.serve import ServeConfig, Service

    return Service(ServeConfig(grpc_port=None, http_port=0, metrics_port=None, forward_delay_s=0.05,
                               wal_dir=str(directory)), registry=registry, exporter=exporter).start()


def test_a_replay_evaluates_the_open_runs_whole_and_counts_nothing_twice(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry
    from test_serve_durable import run_requests

    closed, open_ = next(run_requests("closed", 1)), next(run_requests("open", 1))
    tools = [s for s in open_ if s.parent is not None]
    roots = [s for s in open_ if s.parent is None]

    def body(spans: list[Any]) -> bytes:
        return encode_spans(spans).SerializeToString()

    first, registry = InMemorySpanExporter(), CollectorRegistry()
    killed = _service(tmp_path / "killed", first, registry)
    try:
        assert killed.receiving.take("http", body(tools), PROTOBUF).kind == "accepted"  # 4 runs left open
        assert killed.receiving.take("http", body(closed), PROTOBUF).kind == "accepted"  # 4 whole runs
        wait_for(lambda: len(first.get_finished_spans()) == len(closed) and killed.durable.forwarded == 2,
                 timeout_s=30, what="the whole runs forwarded and checkpointed")
        assert _total(registry, "agent_eval_runs_total") == 4
        shutil.copytree(tmp_path / "killed", tmp_path / "disk")  # the disk as a SIGKILL leaves it
    finally:
        killed.stop()
    again, registry = InMemorySpanExporter(), CollectorRegistry()
    with caplog.at_level(logging.WARNING, logger="otel_agent_eval.serve.durable"):
        restarted = _service(tmp_path / "disk", again, registry)
    try:
        assert any("replayed 2 requests from the write-ahead log" in r.getMessage() for r in caplog.records)
        restarted.drain()
        assert again.get_finished_spans() == ()  # the whole runs were forwarded before: not again
        # the killed process's counts go on, none counted twice (the open runs' calls wait for their roots)
        assert _total(registry, "agent_eval_runs_total") == 4 and _total(registry, "agent_eval_tool_calls_total") == 8
        assert _total(registry, "agent_eval_serve_wal_replays_total") == 1
        assert restarted.receiving.take("http", body(roots), PROTOBUF).kind == "accepted"  # the open runs' roots
        wait_for(lambda: len(again.get_finished_spans()) == len(open_), timeout_s=30, what="the open runs forwarded")
        runs = [s for s in again.get_finished_spans() if s.parent is None]
        assert [s.attributes["agent_eval.run.tool_calls"] for s in runs] == [2] * 4  # evaluated whole
        assert _total(registry, "agent_eval_runs_total") == 8 and _total(registry, "agent_eval_tool_calls_total") == 16
    finally:
        restarted.stop()
    registry = CollectorRegistry()  # after a clean stop, the next start has nothing to replay
    calm = _service(tmp_path / "disk", InMemorySpanExporter(), registry)
    try:
        assert _total(registry, "agent_eval_serve_wal_replays_total") == 0
    finally:
        calm.stop()


def test_runs_left_open_never_fill_the_log_for_good(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Traces whose runs stay open (their roots never come) pin their requests for a replay; past 75 % of the bound
    the forwarded ones are let go, with one line and a count, and the log goes on taking requests within its bound."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry
    from test_serve_durable import run_requests

    from otel_agent_eval.serve import ServeConfig, Service

    bound = 64 << 10
    registry = CollectorRegistry()
    service = Service(ServeConfig(grpc_port=None, http_port=0, metrics_port=None, forward_delay_s=0.05,
                                  wal_dir=str(tmp_path), wal_max_bytes=bound), registry=registry,
                      exporter=InMemorySpanExporter()).start()
    try:
        bodies = [encode_spans([s for s in spans if s.parent is not None]).SerializeToString()
                  for spans in run_requests("open", 120)]  # tool calls only: every run stays open
        assert sum(map(len, bodies)) > 3 * bound
        with caplog.at_level(logging.WARNING, logger="otel_agent_eval.serve.durable"):
            for body in bodies:
                answers = []
                wait_for(lambda b=body: answers.append(service.receiving.take("http", b, PROTOBUF).kind) or answers[-1] == "accepted",
                         timeout_s=30, interval_s=0.05, what="the log to take the request")
                assert set(answers) <= {"accepted", "queue_full"}  # full for a moment at most: told to retry
                assert service.durable.wal.size <= bound + 1024  # checkpoints may pass the bound by their few bytes
        assert _total(registry, "agent_eval_serve_wal_runs_unpinned_total") > 0
        assert len(service.pipeline.runs) > 0  # the runs are still open: only the log let their requests go
        assert [r.getMessage() for r in caplog.records if "no longer kept for a replay" in r.getMessage()][:1]
    finally:
        service.stop()


def _last_checkpoint(directory: Path) -> Any:
    from otel_agent_eval.serve.durable import CHECKPOINT, Checkpoint

    return [Checkpoint.read(r.payload) for r in read_log(directory)[0] if r.kind == CHECKPOINT][-1]


EXACT = ("agent_eval_tool_calls_total", "agent_eval_runs_total", "agent_eval_run_tool_calls_count",
         "agent_eval_processor_spans_seen_total", "agent_eval_processor_spans_scored_total")


def test_a_crash_after_a_checkpoint_counts_every_request_once_and_forwards_none_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log's last checkpoint holds the metric state of 3 requests; 2 more were evaluated, counted and forwarded
    after it when the process died. The next process starts from that state, counts the 2 (and only them) as it
    replays them, and forwards neither again: the progress records say they were."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry
    from test_serve_durable import REQUEST_SPANS, RUNS_PER_REQUEST, TOOLS_PER_RUN, run_requests

    from otel_agent_eval.serve import durable

    monkeypatch.setattr(durable, "CHECKPOINT_EVERY_S", 3600.0)  # checkpoints only when the test says
    bodies = [encode_spans(spans).SerializeToString() for spans in run_requests("exact", 6)]
    first, registry = InMemorySpanExporter(), CollectorRegistry()
    killed = _service(tmp_path / "killed", first, registry)
    try:
        for body in bodies[:3]:
            assert killed.receiving.take("http", body, PROTOBUF).kind == "accepted"
        assert killed.drain()
        killed.durable.checkpoint()
        for body in bodies[3:5]:
            assert killed.receiving.take("http", body, PROTOBUF).kind == "accepted"
        assert killed.drain()
        wait_for(lambda: _last_progress(tmp_path / "killed") == 5, timeout_s=30, what="the forwarding progress recorded")
        exposed = {name: _total(registry, name) for name in EXACT}
        assert exposed["agent_eval_runs_total"] == 5 * RUNS_PER_REQUEST
        shutil.copytree(tmp_path / "killed", tmp_path / "disk")  # the disk as a SIGKILL leaves it
    finally:
        killed.stop()
    point = _last_checkpoint(tmp_path / "disk")
    assert point.counted == 3 and point.forwarded == 3 and point.state  # the 2 later requests are past it
    again, registry = InMemorySpanExporter(), CollectorRegistry()
    restarted = _service(tmp_path / "disk", again, registry)
    try:
        assert {name: _total(registry, name) for name in EXACT} == exposed  # exactly what the killed one counted
        restarted.drain()
        assert again.get_finished_spans() == ()  # forwarded before the crash, as its progress records say
        assert restarted.receiving.take("http", bodies[5], PROTOBUF).kind == "accepted"
        restarted.drain()
        assert len(again.get_finished_spans()) == REQUEST_SPANS
        assert _total(registry, "agent_eval_runs_total") == 6 * RUNS_PER_REQUEST
        assert _total(registry, "agent_eval_tool_calls_total") == 6 * RUNS_PER_REQUEST * TOOLS_PER_RUN
    finally:
        restarted.stop()


def _last_progress(directory: Path) -> int:
    from otel_agent_eval.serve.durable import PROGRESS

    marks = [int.from_bytes(r.payload, "big") for r in read_log(directory)[0] if r.kind == PROGRESS]
    return marks[-1] if marks else 0


def test_a_slow_disk_refuses_requests_with_retry_advice_and_loses_none_it_took(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A sync that does not return (a disk that hangs: the test holds it) past `slow_s`: the next request is refused
    with 429 and Retry-After, counted `disk_slow`, with one line; once the sync returns, the request waiting on it is
    answered, the refused one is taken when sent again, and both reach the next hop once."""
    import threading

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry
    from test_serve import post
    from test_serve_durable import REQUEST_SPANS, key, run_requests

    from otel_agent_eval.serve import wal

    sync, hanging, returns = os.fsync, threading.Event(), threading.Event()

    def slow_fsync(fd: int) -> None:
        if hanging.is_set():
            returns.wait()
        sync(fd)

    monkeypatch.setattr(wal.os, "fsync", slow_fsync)
    sent = list(run_requests("slow", 2))
    a, b = (encode_spans(spans).SerializeToString() for spans in sent)
    exporter, registry = InMemorySpanExporter(), CollectorRegistry()
    service = _service(tmp_path, exporter, registry)
    service.durable.wal.slow_s = 0.05
    try:
        with caplog.at_level(logging.WARNING, logger="otel_agent_eval.serve.wal"):
            hanging.set()
            answers: list[int] = []
            waiting = threading.Thread(target=lambda: answers.append(post(service, a)[0]))
            waiting.start()  # its sync hangs
            wait_for(lambda: not service.durable.wal.has_room(), timeout_s=30, what="the sync to be slow")
            status, headers, _ = post(service, b)
            assert status == 429 and headers["Retry-After"] == "1"
            assert _total(registry, "agent_eval_serve_wal_refused_requests_total") == 1
            refused = [s.value for f in registry.collect() for s in f.samples
                       if s.name == "agent_eval_serve_wal_refused_requests_total" and s.labels["reason"] == wal.SLOW]
            assert refused == [1]
            assert [r.getMessage() for r in caplog.records] == [
                f"otel-agent-eval serve: the write-ahead log in {tmp_path} has been syncing for over 0.05 s (a slow disk): "
                "requests are refused with a retryable answer until the sync returns "
                "(agent_eval_serve_wal_refused_total{reason='disk_slow'})"]
            assert answers == []  # the first is answered only once its sync returns
            returns.set()
            waiting.join(30)
            assert answers == [200]
            assert post(service, b)[0] == 200  # the sender's retry
            assert "takes records again" in caplog.records[-1].getMessage()
        assert service.drain()
        forwarded = [key(s) for s in exporter.get_finished_spans()]
        assert sorted(forwarded) == sorted(key(s) for spans in sent for s in spans) and len(forwarded) == 2 * REQUEST_SPANS
    finally:
        returns.set()
        service.stop()

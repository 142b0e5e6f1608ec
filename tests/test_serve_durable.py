"""A fleet hop that loses nothing it acknowledged, even when SIGKILLed (issue 44), on the real Collector.

An app's OTLP exporter sends whole agent runs to the real Collector (the kit's otelcol-fleet.yaml:
`load_balancing` by trace id, sending queue, retry on) in front of two `serve` replicas (`--ack forwarded`, the
default), which forward to a counting sink. While the app sends, a replica (or one worker of a `--workers 2`
replica) is SIGKILLed and started again, ten times. Every span the app's exporter had acknowledged must reach
the sink at least once, evaluated; the duplicates are counted exactly (and bounded). Each request holds whole
runs, so no run is open across requests: with `--ack forwarded` a crash loses exactly the runs open at that
moment (`serve/ack.py`), and here there are none, so nothing may be lost.

Meanwhile each replica's /metrics is scraped every 0.1 s, as Prometheus would. With the log, no evaluation series
may ever go below what the same replica showed before (the process started again goes on from the killed one's
counts), and at the end the replicas count exactly the tool calls and runs the app's exporter had acknowledged. With
`--ack forwarded` a kill takes the killed process's counts with it (its counters start from zero: a reset, which
Prometheus's `rate()` absorbs), and what it had evaluated and not yet answered is evaluated again when the Collector
resends it: the figures are printed, not asserted.
"""
from __future__ import annotations

import http.client
import itertools
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import early
import grpc
import pytest
from collector_fleet import (BALANCER, FLEET_COLLECTOR, Collector, balance_to, fleet_overrides, grpc_endpoint, metric_sum,
                             scrape)
from ops_helpers import free_port, wait_for
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from serve_process import local_only
from test_collector_fleet import Replica, replicas

KILLS = int(os.environ.get("DURABLE_KILLS", "10"))
RUNS_PER_REQUEST, TOOLS_PER_RUN = 4, 2
REQUEST_SPANS = RUNS_PER_REQUEST * (1 + TOOLS_PER_RUN)
SEND_EVERY_S = 0.02
COLLECTOR_CONSUMERS = 10  # the sending queue's num_consumers (default): requests in flight to one replica at most
DEADLINE_S = float(os.environ.get("AGENT_EVAL_TESTS_LIVENESS_S", 90))  # liveness only (longer as an early workload)
SCRAPE_EVERY_S = 0.1


def local_env() -> None:
    """What `serve_process.local_only` does for a test, for a workload in a fresh interpreter (`KILL_LOOPS`)."""
    monkeypatch = pytest.MonkeyPatch()
    local_only(monkeypatch)  # undone when the interpreter ends


class CountingSink(trace_service_pb2_grpc.TraceServiceServicer):
    """The next hop: an OTLP/gRPC receiver that counts each (trace id, span id) it gets, and the evaluated ones."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[bytes, bytes]] = Counter()
        self.evaluated: set[tuple[bytes, bytes]] = set()
        self.run_calls: dict[tuple[bytes, bytes], list[int]] = {}  # run root -> its evaluations' tool call counts
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
                        for kv in span.attributes:
                            if kv.key == "agent_eval.run.tool_calls":  # a run evaluated: with how many calls
                                self.run_calls.setdefault(key, []).append(kv.value.int_value)
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


class OnAThread:
    """`_run` on a thread of its own, from `with` until `stopping` is set at its end."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> OnAThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(30)


class App(OnAThread):
    """The app's OTLP/gRPC exporter, sending whole runs to the Collector on a thread; `acknowledged` are the
    (trace id, span id) of every span in a request the exporter saw succeed."""

    def __init__(self, endpoint: str, *, split_runs: bool = False) -> None:
        super().__init__()
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        self.exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
        self.split_runs = split_runs  # each run's tool calls in one request, its root in the next: runs open across requests
        self.calls_of_root: dict[tuple[bytes, bytes], int] = {}
        self.acknowledged: set[tuple[bytes, bytes]] = set()
        self.refused = 0

    def _run(self) -> None:
        roots: list[ReadableSpan] = []
        for requests in (run_requests(f"r{i}-", 50) for i in itertools.count()):
            for spans in requests:
                if self.stopping.is_set():
                    self._export(roots)  # the last runs' roots: their runs close
                    return
                for root in (s for s in spans if s.parent is None):
                    self.calls_of_root[key(root)] = TOOLS_PER_RUN
                if self.split_runs:
                    spans, roots = [s for s in spans if s.parent is not None] + roots, [s for s in spans if s.parent is None]
                self._export(spans)
                time.sleep(SEND_EVERY_S)

    def _export(self, spans: list[ReadableSpan]) -> None:
        """Export until acknowledged (the Collector acknowledges what its queue takes), as a batch processor retries."""
        for _ in range(100):
            if not spans or self.exporter.export(spans) is SpanExportResult.SUCCESS:
                self.acknowledged.update(key(s) for s in spans)
                return
            self.refused += 1
            time.sleep(0.1)

    def __enter__(self) -> App:
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__()
        self.exporter.shutdown()


def key(span: ReadableSpan) -> tuple[bytes, bytes]:
    return span.context.trace_id.to_bytes(16, "big"), span.context.span_id.to_bytes(8, "big")


MODES = {  # the mode's flags (a log directory of its own per replica), and whether runs are open across requests
    "forwarded": ((), False),  # whole runs a request: --ack forwarded loses exactly the runs open at a crash, here none
    "forwarded-open": ((), True),  # runs open across requests: --ack forwarded loses exactly those open at a kill
    "wal": (("--wal-dir",), True),  # runs open across requests: the log's replay evaluates them whole
}


@contextmanager
def fleet(tmp_path: Path, mode: str, *serve_args: str) -> Iterator[tuple[CountingSink, list[Replica], dict[str, Any]]]:
    sink = CountingSink()
    sink.server.start()
    with ExitStack() as stack:
        stack.callback(sink.server.stop, None)
        front = fleet_overrides(sink.endpoint)
        if MODES[mode][1]:  # runs open across requests: a retried request must not pass a later one of its trace
            front["exporters"][BALANCER]["protocol"]["otlp"]["sending_queue"] = {"num_consumers": 1}
        evaluated = grpc_endpoint(front, "otlp/evaluated")
        flags = lambda i: [f"{flag} {tmp_path / f'wal-{i}'}".split() for flag in MODES[mode][0]]  # noqa: E731
        pair = [Replica(evaluated, "--forward-delay", "0.05", "--no-otlp-metrics", *serve_args,
                        *itertools.chain.from_iterable(flags(i))) for i in range(2)]
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


def check_delivery(sink: CountingSink, app: App, *, open_runs_lost: bool = False) -> tuple[int, int, int]:
    """Wait until every acknowledged span reached the sink (with `open_runs_lost`, all but the held tool calls of the
    runs open at a kill); (acknowledged spans, duplicates delivered, runs lost)."""
    acknowledged = app.acknowledged

    def missing() -> set[tuple[bytes, bytes]]:
        return acknowledged - sink.seen.keys()

    def lost_runs() -> dict[bytes, list[tuple[bytes, bytes]]]:
        """The traces whose tool calls are missing, once their roots have arrived (the runs open at a kill)."""
        roots = {k[0]: k for k in app.calls_of_root}
        lost: dict[bytes, list[tuple[bytes, bytes]]] = {}
        for k in missing():
            lost.setdefault(k[0], []).append(k)
        return lost if all(roots.get(t) not in missing() and t in roots for t in lost) else {}

    def delivered() -> bool:
        return not missing() or (open_runs_lost and bool(lost_runs()))

    try:
        wait_for(delivered, timeout_s=DEADLINE_S, what="every acknowledged span at the sink")
    except AssertionError:
        lost = missing()
        roots = sum(k in app.calls_of_root for k in lost)
        raise AssertionError(f"of {len(acknowledged)} acknowledged spans, {len(lost)} missing: {roots} run roots, "
                             f"{len(lost) - roots} tool calls, of {len({t for t, _ in lost})} traces") from None
    time.sleep(1.0)  # a late span or duplicate still in a queue
    with sink.lock:
        runs_lost = lost_runs() if open_runs_lost else {}
        roots = {k[0]: k for k in app.calls_of_root}
        for trace_id, spans in runs_lost.items():
            # exactly an open run: all its held tool calls, and its evaluation made without them (0 calls)
            assert len(spans) == TOOLS_PER_RUN and 0 in sink.run_calls[roots[trace_id]], (spans, sink.run_calls.get(roots[trace_id]))
        kept = acknowledged - {k for spans in runs_lost.values() for k in spans}
        assert kept <= sink.seen.keys() and kept <= sink.evaluated  # the rest arrived, evaluated
        if not open_runs_lost:  # every run evaluated whole: each evaluation delivered counts all its calls
            bad = [(k, sink.run_calls.get(k)) for k in kept & app.calls_of_root.keys()
                   if not sink.run_calls.get(k) or set(sink.run_calls[k]) != {app.calls_of_root[k]}]
            assert not bad, bad[:5]
        duplicates = sum(count - 1 for count in sink.seen.values())
    return len(acknowledged), duplicates, len(runs_lost)


Series = tuple[str, tuple[tuple[str, str], ...]]


def evaluation_series(exposition: str) -> dict[Series, float]:
    """The evaluation's series that only ever grow, in a /metrics text: counters, histogram buckets and counts
    (agent_eval_* and gen_ai_*; not serve's own agent_eval_serve_*, which start from zero with each process)."""
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(exposition)
            if family.name.startswith(("agent_eval_", "gen_ai_")) and not family.name.startswith("agent_eval_serve_")
            for sample in family.samples if sample.name.endswith(("_total", "_count", "_bucket"))}


class Scraper(OnAThread):
    """Scrapes each replica's /metrics every SCRAPE_EVERY_S, as Prometheus would, across the kills and restarts, and
    keeps every evaluation series that went below what the same replica had shown before (a counter reset)."""

    def __init__(self, pair: list[Replica]) -> None:
        super().__init__()
        self.pair = pair
        self.shown: list[dict[Series, float]] = [{} for _ in pair]
        self.scrapes = [0] * len(pair)
        self.went_back: list[tuple[int, Series, float, float]] = []  # (replica, series, shown before, shown now)

    def _run(self) -> None:
        while not self.stopping.wait(SCRAPE_EVERY_S):
            for i, replica in enumerate(self.pair):
                try:
                    now = evaluation_series(scrape(f"http://{replica.target}/metrics"))
                except (OSError, http.client.HTTPException, ValueError):  # killed, or not listening yet
                    continue
                shown = self.shown[i]
                self.went_back += [(i, series, shown[series], value) for series, value in now.items()
                                   if value < shown.get(series, 0.0)]
                shown.update(now)
                self.scrapes[i] += 1

    def __enter__(self) -> Scraper:
        super().__enter__()
        return self


def counted(pair: list[Replica]) -> tuple[float, float]:
    """The tool calls and runs the replicas' metrics count, summed."""
    texts = [scrape(f"http://{r.target}/metrics") for r in pair]
    return (sum(metric_sum(t, "agent_eval_tool_calls_total") for t in texts),
            sum(metric_sum(t, "agent_eval_runs_total") for t in texts))


def check_counts(pair: list[Replica], app: App, scraper: Scraper, *, exact: bool) -> tuple[str, dict[str, Any]]:
    """The tool calls and runs acknowledged, and those the replicas count: a line to print, and the figures. With the
    log (`exact`): each counted once, whatever the kills, and no series ever went back; without it a kill loses the
    killed process's counts (its counters start from zero: a reset), so the figures are only reported."""
    roots = app.calls_of_root.keys()
    runs = len(app.acknowledged & roots)
    calls = len(app.acknowledged) - runs
    if exact:
        wait_for(lambda: counted(pair)[0] >= calls and counted(pair)[1] >= runs, timeout_s=DEADLINE_S,
                 what="every acknowledged tool call and run counted")
        time.sleep(1.0)  # a late double count
    tool_calls, run_count = counted(pair)
    if exact:
        assert scraper.went_back == [], scraper.went_back[:10]
        assert (tool_calls, run_count) == (calls, runs)
        assert min(scraper.scrapes) > KILLS  # scraped throughout
    line = (f"{calls} tool calls and {runs} runs acknowledged, {tool_calls:.0f} and {run_count:.0f} counted at the end, "
            f"{len(scraper.went_back)} series went back in {sum(scraper.scrapes)} scrapes")
    return line, {"counted": (tool_calls, run_count), "sent": (calls, runs), "went_back": len(scraper.went_back)}


def again(replica: Replica) -> float:
    """Spans the replica's log replays forwarded again (0 without a log): a bound on the duplicates they made."""
    return replica.metric("agent_eval_serve_wal_replayed_spans_total", forwarded="again")


def check_duplicates(mode: str, duplicates: int, replayed_again: float) -> None:
    """At least once, and bounded. With the log, a sender's resend of what a killed process had taken is dropped by
    span id, so the only duplicates are spans a replay forwarded again (an export the kill interrupted: its progress
    record not written yet). Without it, what was in flight in the Collector at each kill may come twice."""
    if mode == "wal":
        assert duplicates <= replayed_again
    else:
        assert duplicates <= KILLS * COLLECTOR_CONSUMERS * REQUEST_SPANS


def replica_kill_loop(mode: str) -> dict[str, Any]:
    """Replicas SIGKILLed mid-stream and started again, KILLS times; asserts the promise, returns the counts."""
    local_env()
    tmp_path = Path(tempfile.mkdtemp(prefix="durable-"))
    replayed_again, replays = 0.0, 0.0
    with fleet(tmp_path, mode) as (sink, pair, front), Scraper(pair) as scraper:
        with App(grpc_endpoint(front), split_runs=MODES[mode][1]) as app:
            for kill in range(KILLS):
                victim = pair[kill % 2]
                wait_for(lambda v=victim: accepted(v) > 0, timeout_s=DEADLINE_S, what="the replica to take spans")
                replayed_again += again(victim)  # what this life's replay forwarded again, counted by now
                victim.kill()  # SIGKILL while the app sends: requests in flight in it, spans in its queues
                time.sleep(0.2)
                victim.start()  # same ports; the Collector's retries find it; with a log, it replayed it first
                replays += victim.metric("agent_eval_serve_wal_replays_total")
            wait_for(lambda: all(accepted(r) > 0 for r in pair), timeout_s=DEADLINE_S, what="both replicas to take spans")
        total, duplicates, runs_lost = check_delivery(sink, app, open_runs_lost=mode == "forwarded-open")
        replayed_again += sum(again(r) for r in pair)
        line, counts = check_counts(pair, app, scraper, exact=mode == "wal")
    print(f"{mode}: {KILLS} replica kills: {total} spans acknowledged, all delivered but the {runs_lost} runs open at a "
          f"kill; {duplicates} duplicates ({duplicates / total:.1%})"
          + (f"; {replays:.0f} replays forwarded {replayed_again:.0f} spans again" if mode == "wal" else "") + f"; {line}")
    assert total > KILLS * REQUEST_SPANS
    # a restart replays when its log holds a request not yet forwarded or one an open run needs: nearly always here
    assert (0 < replays <= KILLS) if mode == "wal" else replays == 0
    check_duplicates(mode, duplicates, replayed_again)
    shutil.rmtree(tmp_path, ignore_errors=True)
    return {"acknowledged": total, "duplicates": duplicates, "replays": replays, "replayed_again": replayed_again,
            "runs_lost": runs_lost, **counts}


def worker_kill_loop(mode: str) -> dict[str, Any]:
    """A worker of a `--workers 2` replica SIGKILLed mid-stream KILLS times (its parent starts it again)."""
    local_env()
    tmp_path = Path(tempfile.mkdtemp(prefix="durable-"))
    with fleet(tmp_path, mode, "--workers", "2") as (sink, pair, front), Scraper(pair) as scraper:
        replica = pair[0]
        with App(grpc_endpoint(front), split_runs=MODES[mode][1]) as app:
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
        total, duplicates, _ = check_delivery(sink, app)
        replayed_again, replays = again(replica), replica.metric("agent_eval_serve_wal_replays_total")
        line, counts = check_counts(pair, app, scraper, exact=mode == "wal")
    print(f"{mode}: {KILLS} worker kills: {total} spans acknowledged, all delivered; {duplicates} duplicates "
          f"({duplicates / total:.1%})"
          + (f"; {replays:.0f} replays forwarded {replayed_again:.0f} spans again" if mode == "wal" else "") + f"; {line}")
    assert total > KILLS * REQUEST_SPANS
    assert (0 < replays <= KILLS) if mode == "wal" else replays == 0  # as above, per worker started again
    check_duplicates(mode, duplicates, replayed_again)
    shutil.rmtree(tmp_path, ignore_errors=True)
    return {"acknowledged": total, "duplicates": duplicates, "replays": replays, "replayed_again": replayed_again, **counts}


# The loops take a minute or more each (a replica or worker started 10 times, on the real Collector): they run as
# early workloads (tests/early.py), in fresh interpreters beside the rest of the suite, on the CPU it leaves idle.
KILL_LOOPS = {(where, mode): partial(early.fresh_process, "test_serve_durable", f"{where}_kill_loop({mode!r})")
              for where, modes in (("replica", MODES), ("worker", ("forwarded", "wal"))) for mode in modes}


@pytest.mark.early(KILL_LOOPS["replica", "forwarded"])
def test_replicas_sigkilled_mid_stream_lose_nothing_acknowledged_forwarded() -> None:
    assert early.result(KILL_LOOPS["replica", "forwarded"])["acknowledged"] > KILLS * REQUEST_SPANS


@pytest.mark.early(KILL_LOOPS["replica", "forwarded-open"])
def test_replicas_sigkilled_with_runs_open_lose_exactly_those_runs_forwarded() -> None:
    """--ack forwarded with runs open across requests: what a kill costs is the runs open then, nothing else."""
    assert early.result(KILL_LOOPS["replica", "forwarded-open"])["acknowledged"] > KILLS * REQUEST_SPANS


@pytest.mark.early(KILL_LOOPS["replica", "wal"])
def test_replicas_sigkilled_mid_stream_lose_nothing_acknowledged_and_count_each_call_once_wal() -> None:
    result = early.result(KILL_LOOPS["replica", "wal"])
    assert result["replays"] > 0 and result["counted"] == result["sent"] and result["went_back"] == 0


@pytest.mark.early(KILL_LOOPS["worker", "forwarded"])
def test_workers_sigkilled_mid_stream_lose_nothing_acknowledged_forwarded() -> None:
    assert early.result(KILL_LOOPS["worker", "forwarded"])["acknowledged"] > KILLS * REQUEST_SPANS


@pytest.mark.early(KILL_LOOPS["worker", "wal"])
def test_workers_sigkilled_mid_stream_lose_nothing_acknowledged_and_count_each_call_once_wal() -> None:
    result = early.result(KILL_LOOPS["worker", "wal"])
    assert result["replays"] > 0 and result["counted"] == result["sent"] and result["went_back"] == 0


def test_the_fleet_kit_runs_the_log_and_the_docs_say_so() -> None:
    from test_ops_fleet import parsed
    from test_ops_fleet import replicas as compose_replicas

    for name, service in compose_replicas().items():
        args = parsed(service)
        assert args.wal_dir and args.wal_fsync == "always", f"{name} runs without its write-ahead log"
    serve_md = (Path(__file__).resolve().parents[1] / "docs" / "serve.md").read_text()
    assert "`collector-config/docker-compose.fleet.yml` runs its replicas with `--wal-dir`" in serve_md

"""Load figures of `otel-agent-eval serve` on localhost: sustained spans/s per core, ingest latency, and overload.

    python tests/benchmarks/bench_serve.py [--seconds 10] [--connections 4] [--spans-per-request 512] [--workers N]
    python tests/benchmarks/bench_serve.py --capacity-only --workers 2   # phase 1 alone, e.g. to compare --workers

Not a test (pytest collects only test_*.py): the figures depend on the machine, so nothing
here is compared with a number of the machine's; it checks only the accounting. It starts
`serve` as a real process forwarding to a counting OTLP/HTTP sink in this process, and
sends pre-encoded OTLP/HTTP requests of whole agent runs (the demo's simulated agents) in
three phases:

1. capacity: as fast as `--connections` keep-alive connections go; the evaluated spans per
   second (from serve's own counters) and per CPU-second of the serve process (utime +
   stime from /proc: every thread, receivers, evaluation and forwarding included);
2. latency: open loop at half that rate; p50 / p99 / max of the request round trip
   (send to the 200 answer), i.e. the ingest latency a sender sees;
3. overload: open loop at twice the capacity; how many requests were told to retry (429),
   the serve process's peak resident memory against the bound its queues imply, and that
   no accepted span was lost: after a graceful stop, spans accepted = spans forwarded =
   spans the sink counted, and the senders' acknowledged spans = spans accepted.

With `--workers N` serve runs N evaluation processes; CPU and resident memory are then those
of the whole process tree (serve and its workers), and the memory bound counts each worker's
forward queue.
"""
from __future__ import annotations

import argparse
import http.client
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agent_eval.tools.demo import run_workload

FORWARD_QUEUE_SPANS = 8_192  # serve's default
# A queued span: decoded 1.7 KiB (tracemalloc, demo spans), its enriched copy about as much, and the allocator's
# overhead on top (resident memory, not Python objects): 6 KiB is the bound this script holds serve to.
SPAN_KIB = 6
STOPPED = re.compile(r"stopped; spans accepted (\d+), refused (\d+), invalid (\d+); forwarded (\d+), failed (\d+), abandoned (\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Sink:
    """An OTLP/HTTP receiver that only counts spans (the next hop)."""

    def __init__(self) -> None:
        self.spans = 0
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                with sink.lock:
                    sink.spans += n
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def requests_of(spans_per_request: int, runs: int = 2_000) -> list[tuple[bytes, int]]:
    """Pre-encoded requests of whole agent runs (a run is never split over two requests)."""
    memory = InMemorySpanExporter()
    run_workload(SimpleSpanProcessor(memory), runs=runs, suboptimal_share=0.1, seed=3)
    traces: dict[int, list[Any]] = {}
    for span in memory.get_finished_spans():
        traces.setdefault(span.context.trace_id, []).append(span)
    out, batch = [], []
    for trace_spans in traces.values():
        if batch and len(batch) + len(trace_spans) > spans_per_request:
            out.append((encode_spans(batch).SerializeToString(), len(batch)))
            batch = []
        batch += trace_spans
    if batch:
        out.append((encode_spans(batch).SerializeToString(), len(batch)))
    return out


def tree(pid: int) -> list[int]:
    """`pid` and its children (serve's workers)."""
    pids = [pid]
    for stat in os.listdir("/proc"):
        if stat.isdigit():
            try:
                fields = open(f"/proc/{stat}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                pids.append(int(stat))
    return pids


def cpu_seconds(pid: int, *, children: bool = True) -> float:
    total = 0.0
    for one in tree(pid) if children else [pid]:
        try:
            fields = open(f"/proc/{one}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    return total


def rss_mib(pid: int, key: str = "VmRSS") -> float:
    total = 0.0
    for one in tree(pid):
        try:
            for line in open(f"/proc/{one}/status"):
                if line.startswith(key + ":"):
                    total += int(line.split()[1]) / 1024
        except OSError:
            continue
    return total


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{name}{{{selector}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


class Load:
    """Senders on keep-alive connections; counts what was acknowledged and refused, and each request's round trip."""

    def __init__(self, address: tuple[str, int], requests: list[tuple[bytes, int]]) -> None:
        self.address, self.requests = address, requests
        self.acked_spans = self.refused_spans = self.acked_requests = self.refused_requests = 0
        self.latencies: list[float] = []
        self.lock = threading.Lock()
        self.next = 0

    def _take(self) -> tuple[bytes, int]:
        with self.lock:
            self.next += 1
            return self.requests[self.next % len(self.requests)]

    def run(self, connections: int, seconds: float, rate_spans: float | None = None) -> None:
        """Closed loop (as fast as answers come) or, with `rate_spans`, open loop at that rate over all connections."""
        deadline = time.monotonic() + seconds
        per_connection = None if rate_spans is None else rate_spans / connections

        def sender() -> None:
            connection = http.client.HTTPConnection(*self.address, timeout=30)
            due = time.monotonic()
            while True:
                body, n = self._take()
                if per_connection is not None:
                    due += n / per_connection
                    pause = due - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                if time.monotonic() >= deadline:
                    break
                t0 = time.perf_counter()
                try:
                    connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
                    response = connection.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):
                    connection.close()
                    connection = http.client.HTTPConnection(*self.address, timeout=30)
                    continue
                elapsed = time.perf_counter() - t0
                with self.lock:
                    if response.status == 200:
                        self.acked_spans += n
                        self.acked_requests += 1
                        self.latencies.append(elapsed)
                    else:
                        self.refused_spans += n
                        self.refused_requests += 1
            connection.close()

        threads = [threading.Thread(target=sender, daemon=True) for _ in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


class _Done(Exception):
    """Only the capacity phase was asked for."""


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase (default 10)")
    parser.add_argument("--connections", type=int, default=4, help="sender connections (default 4)")
    parser.add_argument("--spans-per-request", type=int, default=512, help="spans per request (default 512, as BatchSpanProcessor)")
    parser.add_argument("--latency-spans-per-request", type=int, default=64,
                        help="spans per request in the latency phase (default 64: more requests to take quantiles over)")
    parser.add_argument("--queue-spans", type=int, default=4096,
                        help="serve --queue-spans (default 4096, so that twice the capacity fills it within a phase)")
    parser.add_argument("--workers", type=int, default=1, help="serve --workers (default 1)")
    parser.add_argument("--capacity-only", action="store_true", help="run phase 1 (capacity) only")
    args = parser.parse_args()

    print("encoding requests ...", flush=True)
    requests = requests_of(args.spans_per_request)
    sink = Sink()
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--no-grpc", "--http-port", "0", "--metrics-port", "0",
         "--forward-to", sink.url, "--forward-delay", "0.2", "--queue-spans", str(args.queue_spans),
         "--workers", str(args.workers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    line = process.stdout.readline()
    where = dict(part.split(" on ", 1) for part in line.strip().split(": ", 1)[1].split(", ") if " on " in part)
    url = where["OTLP/HTTP"]
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    metrics_url = where["metrics"]
    load = Load((host, int(port)), requests)
    baseline_mib = rss_mib(process.pid)
    try:
        # 1. capacity
        main0 = cpu_seconds(process.pid, children=False)
        seen0, cpu0, t0 = metric(metrics_url, "agent_eval_processor_spans_seen_total"), cpu_seconds(process.pid), time.monotonic()
        load.run(args.connections, args.seconds)  # the queue fills, then serve takes what it evaluates
        seen1, cpu1, t1 = metric(metrics_url, "agent_eval_processor_spans_seen_total"), cpu_seconds(process.pid), time.monotonic()
        main_cpu = cpu_seconds(process.pid, children=False) - main0
        evaluated = seen1 - seen0
        capacity = evaluated / (t1 - t0)
        per_core = evaluated / max(cpu1 - cpu0, 1e-9)
        print(f"capacity: {evaluated:,.0f} spans evaluated in {t1 - t0:.1f} s = {capacity:,.0f} spans/s; serve used "
              f"{cpu1 - cpu0:.1f} CPU-s = {per_core:,.0f} spans per CPU-second; "
              f"{load.acked_spans:,} spans acknowledged, {load.refused_requests} of {load.acked_requests + load.refused_requests} "
              f"requests told to retry "
              f"(--workers {args.workers}" + (f"; the receiving process {main_cpu:.1f} CPU-s, the workers "
                                               f"{cpu1 - cpu0 - main_cpu:.1f})" if args.workers > 1 else ")"), flush=True)
        time.sleep(2)  # let the queue drain
        acked = load.acked_spans
        growth = bound = 0.0
        if args.capacity_only:
            raise _Done

        # 2. latency at half the capacity
        half = Load(load.address, requests_of(args.latency_spans_per_request, runs=500))
        half.run(args.connections, args.seconds, rate_spans=capacity / 2)
        lat = half.latencies
        print(f"ingest latency at {capacity / 2:,.0f} spans/s ({args.latency_spans_per_request} spans a request): "
              f"p50 {quantile(lat, 0.5) * 1000:.1f} ms, p99 {quantile(lat, 0.99) * 1000:.1f} ms, "
              f"max {max(lat) * 1000:.1f} ms over {len(lat)} requests; {half.refused_requests} told to retry", flush=True)
        time.sleep(2)

        # 3. overload at twice the capacity
        double = Load(load.address, requests)
        peak = [0.0]
        samples: list[tuple[float, float]] = []
        stop_watch = threading.Event()

        def watch() -> None:
            while not stop_watch.wait(0.05):
                samples.append((time.monotonic(), rss_mib(process.pid)))
                peak[0] = max(peak[0], samples[-1][1])

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        double.run(args.connections * 2, args.seconds, rate_spans=capacity * 2)
        stop_watch.set()
        watcher.join()
        offered = double.acked_spans + double.refused_spans
        body_mib = max(len(body) for body, _ in requests) / 2**20
        bound = (args.queue_spans + args.workers * FORWARD_QUEUE_SPANS) * SPAN_KIB / 1024 + args.connections * 2 * body_mib * 4  # + requests being read
        growth = rss_mib(process.pid, "VmHWM") - baseline_mib
        middle = (samples[0][0] + samples[-1][0]) / 2
        late_growth = max(r for t, r in samples if t >= middle) - max(r for t, r in samples if t < middle)
        print(f"overload at {capacity * 2:,.0f} spans/s offered: {double.acked_spans:,} spans accepted, "
              f"{double.refused_spans:,} ({double.refused_spans / max(offered, 1):.0%}) told to retry (429) in "
              f"{double.refused_requests} requests; serve's resident memory {baseline_mib:.0f} MiB at start, "
              f"peak {peak[0]:.0f} MiB (VmHWM {rss_mib(process.pid, 'VmHWM'):.0f} MiB): grew {growth:.0f} MiB, bound "
              f"{bound:.0f} MiB (queues {args.queue_spans:,} + {args.workers} x {FORWARD_QUEUE_SPANS:,} spans x {SPAN_KIB} KiB, requests in "
              f"flight) {'kept' if growth <= bound else 'EXCEEDED'}; grew {late_growth:+.0f} MiB in the second half of the phase",
              flush=True)

        acked = load.acked_spans + half.acked_spans + double.acked_spans
    except _Done:
        pass
    finally:
        accepted = metric(metrics_url, "agent_eval_serve_spans_total", transport="http", outcome="accepted")
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
    stopped = STOPPED.search(process.stderr.read())
    if code != 0 or stopped is None:
        print(f"serve exited {code} without its shutdown line", file=sys.stderr)
        return 1
    accepted_final, _, _, exported, failed, abandoned = map(int, stopped.groups())
    deadline = time.monotonic() + 10
    while sink.spans < exported and time.monotonic() < deadline:
        time.sleep(0.05)
    ok = acked == accepted == accepted_final == exported == sink.spans and failed == abandoned == 0 and growth <= bound
    print(f"accounting: senders acknowledged {acked:,} spans; serve accepted {accepted_final:,}, forwarded {exported:,} "
          f"(failed {failed}, abandoned {abandoned}); the next hop counted {sink.spans:,}: "
          + ("no accepted span lost" if ok else "MISMATCH"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

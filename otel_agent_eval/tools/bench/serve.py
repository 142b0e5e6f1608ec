"""The serve section: `otel-agent-eval serve` as a real process, beside the real OpenTelemetry Collector doing the same hop.

Both are fed the same pre-encoded OTLP/protobuf requests of whole demo agent runs (512 spans a request, as a
`BatchSpanProcessor` sends them) over keep-alive connections, as fast as answers come, and both forward to a
counting OTLP/HTTP sink in this process: serve evaluates and forwards the spans (and sends its metrics over OTLP,
as it does by default); the Collector receives OTLP/HTTP, derives metrics with the `span_metrics` connector and
exports traces and metrics over OTLP/HTTP. The figure is spans per CPU-second of each process tree (utime + stime
from /proc, every thread and worker), over the load and the drain that follows it; the ratio is serve's over the
Collector's. Then each takes an open-loop load at half serve's capacity (64-span requests) for the ingest latency,
serve runs again in its other acknowledgement modes (on receipt, the old path; after a write-ahead log's fsync),
and with `--workers 2` for the scaling. Nothing is lost: after a graceful stop, the spans the
senders saw acknowledged = accepted = forwarded = counted by the sink, for each.

The sink accepts /v1/metrics (serve's and the connector's metrics) and counts only /v1/traces spans: running serve
with `--no-otlp-metrics` instead would leave out work that the Collector's side does (its connector's metrics).
"""
from __future__ import annotations

import hashlib
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from ...serve.os_threads import FORWARD, INTAKE
from ..demo import run_workload

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "collector-config" / "builder-config.yaml"
BUILD_COMMAND = "bash .ci/collector"
METRICS_INTERVAL_S = 1.0  # serve's OTLP metrics and the connector's flush: the same, and often enough to count
STOPPED = re.compile(r"stopped; spans accepted (\d+), refused (\d+), invalid (\d+); forwarded (\d+), failed (\d+), abandoned (\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")
START_S = 60.0  # liveness only
DRAIN_S = 30.0
NAMED_THREADS = (INTAKE, FORWARD)  # what the bench reports by thread; the rest of the process beside them
STEP_REQUESTS = 30  # of the section's requests, in-process: serve's own steps per span


# -- the Collector binary, by the rule of .ci/collector ------------------------------------------

def collector_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otel-agent-eval"


def collector_path(manifest: Path = MANIFEST) -> Path:
    """Where `.ci/collector` puts the binary built from `manifest`: a cache directory keyed by the manifest's hash."""
    key = hashlib.sha256(manifest.read_bytes()).hexdigest()[:16]
    return collector_cache() / f"otelcol-{key}" / yaml.safe_load(manifest.read_text())["dist"]["name"]


def find_collector() -> tuple[str | None, str]:
    """(the built Collector, "") or (None, why not)."""
    if not MANIFEST.is_file():
        return None, f"no {MANIFEST.relative_to(REPO)} beside this package (run the bench from the repository)"
    path = collector_path()
    if not os.access(path, os.X_OK):
        return None, f"the Collector is not built for this manifest ({path}): run `{BUILD_COMMAND}`"
    return str(path), ""


# -- the next hop: counts spans, takes metrics ---------------------------------------------------------

class Sink:
    """An OTLP/HTTP receiver that counts the spans of /v1/traces and the requests of /v1/metrics and /v1/logs (the next
    hop)."""

    def __init__(self) -> None:
        self.spans = self.metric_requests = self.log_requests = 0
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0]
                if path == "/v1/traces":
                    request = ExportTraceServiceRequest.FromString(body)
                    n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
                    with sink.lock:
                        sink.spans += n
                elif path == "/v1/metrics":
                    with sink.lock:
                        sink.metric_requests += 1
                elif path == "/v1/logs":  # the judge's events (the serve-judge section)
                    with sink.lock:
                        sink.log_requests += 1
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- the load ------------------------------------------------------------------------------------------

def requests_of(spans_per_request: int, runs: int, noise_leaves: int = 0) -> list[tuple[bytes, int]]:
    """Pre-encoded requests of whole demo agent runs (a run is never split over two requests); `noise_leaves`: HTTP/DB
    client spans under every chat and tool span (3: the realistic mix)."""
    memory = InMemorySpanExporter()
    run_workload(SimpleSpanProcessor(memory), runs=runs, suboptimal_share=0.1, seed=3, noise_leaves=noise_leaves)
    traces: dict[int, list[Any]] = {}
    for span in memory.get_finished_spans():
        traces.setdefault(span.context.trace_id, []).append(span)
    out: list[tuple[bytes, int]] = []
    batch: list[Any] = []
    for trace_spans in traces.values():
        if batch and len(batch) + len(trace_spans) > spans_per_request:
            out.append((encode_spans(batch).SerializeToString(), len(batch)))
            batch = []
        batch += trace_spans
    if batch:
        out.append((encode_spans(batch).SerializeToString(), len(batch)))
    return out


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
            while time.monotonic() < deadline:  # each connection sends at least once, however low the rate
                body, n = self._take()
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
                if per_connection is not None:  # the next request is due when this one's spans are paid for
                    due += n / per_connection
                    pause = min(due, deadline) - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
            connection.close()

        threads = [threading.Thread(target=sender, daemon=True) for _ in range(connections)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def quantile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


# -- a process tree's CPU and memory, from /proc ------------------------------------------------------

def _stat(where: str) -> tuple[str, list[str]] | None:
    """`/proc/<where>/stat` (a process, or one of its threads: `PID/task/TID`): its name and the fields after it."""
    try:
        with open(f"/proc/{where}/stat") as f:
            head, _, fields = f.read().rpartition(")")
    except OSError:
        return None
    return head.partition("(")[2], fields.split()


def _cpu(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def tree(pid: int) -> list[int]:
    """`pid` and its children (serve's workers)."""
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and (stat := _stat(p)) and int(stat[1][1]) == pid]
    return [pid, *children]


def cpu_seconds(pid: int, *, children: bool = True) -> float:
    """utime + stime of `pid` (and its children), every thread."""
    return sum(_cpu(stat[1]) for one in (tree(pid) if children else [pid]) if (stat := _stat(str(one))))


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """utime + stime of the threads of `pid` and its children that serve names for the OS (`serve/os_threads.py`),
    by name; what ended threads spent is only in `cpu_seconds`."""
    out = dict.fromkeys(NAMED_THREADS, 0.0)
    for one in tree(pid):
        try:
            tasks = os.listdir(f"/proc/{one}/task")
        except OSError:
            continue
        for task in tasks:
            stat = _stat(f"{one}/task/{task}")
            if stat is not None and stat[0] in out:
                out[stat[0]] += _cpu(stat[1])
    return out


def rss_mib(pid: int, key: str = "VmHWM") -> float:
    """Resident memory of `pid` and its children: peak (VmHWM) or now (VmRSS)."""
    total = 0.0
    for one in tree(pid):
        try:
            with open(f"/proc/{one}/status") as status:
                total += sum(int(line.split()[1]) / 1024 for line in status if line.startswith(key + ":"))
        except OSError:
            continue
    return total


# -- the two hops ---------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Hop:
    """A hop under test: its process, where it takes OTLP/HTTP, and how it reports its own accounting at the end."""

    name: str
    process: subprocess.Popen[str]
    address: tuple[str, int]
    sink: Sink
    log: Any
    telemetry_url: str = ""


# serve's default acknowledges a request once its spans are forwarded (`serve/ack.py`); beside it, the old path (on
# receipt) and the write-ahead log (`serve/durable.py`, fsync before each answer), on the same requests
# (the load repeats the same requests, so the log's span-id window, which would drop them as resends, is off)
DURABILITY = (("serve --ack received", ("--ack", "received")),
              ("serve --wal-dir", ("--wal-dir", "{workdir}/wal", "--wal-dedup-spans", "0")))


def start_serve(sink: Sink, workers: int, log: Any, extra: tuple[str, ...] = (), name: str | None = None,
                env: dict[str, str] | None = None) -> Hop:
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--no-grpc", "--http-port", "0", "--metrics-port", "0",
         "--forward-to", f"{sink.base}/v1/traces", "--forward-delay", "0.2", "--workers", str(workers),
         "--otlp-metrics-interval", str(METRICS_INTERVAL_S), *extra],
        stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": "", **(env or {})})
    line = process.stdout.readline() if process.stdout else ""
    try:
        where = dict(part.split(" on ", 1) for part in line.strip().split(": ", 1)[1].split(", ") if " on " in part)
        host, port = where["OTLP/HTTP"].split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    except (IndexError, KeyError, ValueError):
        process.kill()
        process.wait()
        raise RuntimeError(f"serve did not say where it listens: {line.strip() or _tail(log)}") from None
    return Hop(name or ("serve" if workers == 1 else f"serve --workers {workers}"), process, (host, int(port)), sink, log,
               telemetry_url=where.get("metrics", ""))


def collector_config(sink: Sink, http_port: int, telemetry_port: int) -> dict[str, Any]:
    """OTLP/HTTP in -> traces out over OTLP/HTTP and into `span_metrics` -> its metrics out over OTLP/HTTP."""
    return {
        "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{http_port}"}}}},
        "connectors": {"span_metrics": {"metrics_flush_interval": f"{METRICS_INTERVAL_S:g}s"}},
        "exporters": {"otlp_http": {"endpoint": sink.base, "compression": "none"}},
        "service": {
            "telemetry": {"logs": {"level": "warn"}, "metrics": {"level": "normal", "readers": [
                {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": telemetry_port}}}}]}},
            "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["otlp_http", "span_metrics"]},
                          "metrics": {"receivers": ["span_metrics"], "exporters": ["otlp_http"]}}},
    }


def start_collector(binary: str, sink: Sink, workdir: str, log: Any) -> Hop:
    http_port, telemetry_port = free_port(), free_port()
    config = Path(workdir) / "otelcol-bench.yaml"
    config.write_text(yaml.safe_dump(collector_config(sink, http_port, telemetry_port), sort_keys=False))
    checked = subprocess.run([binary, "validate", f"--config={config}"], capture_output=True, text=True, timeout=120)
    if checked.returncode != 0:
        raise RuntimeError(f"the Collector refused its config: {(checked.stderr or checked.stdout).strip()[-300:]}")
    process = subprocess.Popen([binary, f"--config={config}"], stdout=log, stderr=subprocess.STDOUT, text=True)
    hop = Hop("Collector", process, ("127.0.0.1", http_port), sink, log,
              telemetry_url=f"http://127.0.0.1:{telemetry_port}/metrics")
    deadline = time.monotonic() + START_S
    while not (_telemetry(hop) and _listening(hop.address)):  # its telemetry starts before its receiver
        if process.poll() is not None or time.monotonic() > deadline:
            stop(hop)
            raise RuntimeError(f"the Collector did not start: {_tail(log)}")
        time.sleep(0.1)
    return hop


def _listening(address: tuple[str, int]) -> bool:
    try:
        socket.create_connection(address, timeout=1).close()
    except OSError:
        return False
    return True


def _tail(log: Any) -> str:
    log.flush()
    log.seek(0)
    lines = log.read().strip().splitlines()
    return lines[-1] if lines else "no output"


def _telemetry(hop: Hop) -> dict[str, float]:
    """The Collector's own counters: spans accepted by its receiver, sent and failed by its traces exporter."""
    try:
        with urllib.request.urlopen(hop.telemetry_url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    out = {"accepted": 0.0, "sent": 0.0, "failed": 0.0}
    names = {"otelcol_receiver_accepted_spans": "accepted", "otelcol_exporter_sent_spans": "sent",
             "otelcol_exporter_send_failed_spans": "failed"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = names.get(sample.name.removesuffix("_total"))
            if key and sample.labels.get("exporter", "otlp_http") == "otlp_http":
                out[key] += sample.value
    return out


def stop(hop: Hop) -> dict[str, Any]:
    """A graceful stop; the hop's own account of what it took and passed on (None where it gives none)."""
    account: dict[str, Any] = {"accepted": None, "forwarded": None, "failed": None}
    if hop.process.poll() is None and hop.name == "Collector":
        # the exporter counts a request as sent once the sink's answer is back, a moment after the sink counted it
        deadline = time.monotonic() + DRAIN_S
        while (now := _telemetry(hop)) and now["sent"] + now["failed"] < now["accepted"] and time.monotonic() < deadline:
            time.sleep(0.05)
        if now:
            account.update(accepted=int(now["accepted"]), forwarded=int(now["sent"]), failed=int(now["failed"]))
    if hop.process.poll() is None:
        hop.process.send_signal(signal.SIGTERM)
    try:
        hop.process.wait(timeout=DRAIN_S * 2)
    except subprocess.TimeoutExpired:
        hop.process.kill()
        hop.process.wait()
    if hop.name != "Collector":
        hop.log.flush()
        hop.log.seek(0)
        stopped = STOPPED.search(hop.log.read())
        if stopped:
            accepted, _, _, forwarded, failed, abandoned = map(int, stopped.groups())
            account.update(accepted=accepted, forwarded=forwarded, failed=failed + abandoned)
    account["exit_code"] = hop.process.returncode
    return account


def _drain(hop: Hop, acked: int) -> None:
    """Until the sink has every acknowledged span (or DRAIN_S passed)."""
    deadline = time.monotonic() + DRAIN_S
    while hop.sink.spans < acked and time.monotonic() < deadline:
        time.sleep(0.02)


def measure(hop: Hop, requests: list[tuple[bytes, int]], latency_requests: list[tuple[bytes, int]] | None,
            connections: int, seconds: float, latency_rate: float | None = None,
            before_stop: Callable[[Hop], Any] | None = None) -> dict[str, Any]:
    """Capacity (closed loop, then the drain); with `latency_requests`, latency (open loop at `latency_rate`, else at
    half the capacity just measured); then (`before_stop(hop)`, e.g. a last look at its /metrics) the graceful stop and
    its account."""
    load = Load(hop.address, requests)
    cpu0, sink0, t0 = cpu_seconds(hop.process.pid), hop.sink.spans, time.monotonic()
    threads0 = thread_cpu_seconds(hop.process.pid)
    load.run(connections, seconds)
    _drain(hop, sink0 + load.acked_spans)
    cpu, elapsed, forwarded = cpu_seconds(hop.process.pid) - cpu0, time.monotonic() - t0, hop.sink.spans - sink0
    threads = {name: spent - threads0[name] for name, spent in thread_cpu_seconds(hop.process.pid).items()}
    row: dict[str, Any] = {
        "hop": hop.name, "seconds": elapsed, "cpu_s": cpu, "spans": forwarded,
        "spans_per_s": forwarded / elapsed, "spans_per_cpu_s": forwarded / max(cpu, 1e-9),
        "requests": load.acked_requests + load.refused_requests, "refused_requests": load.refused_requests,
        "latency": None}
    if hop.name.startswith("serve") and forwarded:  # CPU µs a span by thread, in the hop (the Collector names none)
        row["threads_us_per_span"] = {name: spent / forwarded * 1e6 for name, spent in threads.items()}
        row["threads_us_per_span"]["rest"] = max(cpu - sum(threads.values()), 0.0) / forwarded * 1e6
    acked = load.acked_spans
    if latency_requests is not None:
        latency_rate = latency_rate or row["spans_per_s"] / 2
        half = Load(hop.address, latency_requests)
        half.run(connections, seconds, rate_spans=latency_rate)
        acked += half.acked_spans
        lat = half.latencies
        row["latency"] = {"rate_spans_per_s": latency_rate, "spans_per_request": max(n for _, n in latency_requests),
                          "requests": len(lat), "refused_requests": half.refused_requests,
                          **{k: None if v is None else v * 1000 for k, v in
                             (("p50_ms", quantile(lat, 0.5)), ("p99_ms", quantile(lat, 0.99)), ("max_ms", max(lat, default=None)))}}
        _drain(hop, sink0 + acked)
    row["peak_rss_mib"] = rss_mib(hop.process.pid)
    if before_stop is not None:
        before_stop(hop)
    account = stop(hop)
    row["metric_requests"] = hop.sink.metric_requests
    row["accounting"] = {"acknowledged": acked, "accepted": account["accepted"], "forwarded": account["forwarded"],
                         "sink": hop.sink.spans - sink0, "failed": account["failed"], "exit_code": account["exit_code"]}
    row["accounting"]["equal"] = (acked == account["accepted"] == account["forwarded"] == row["accounting"]["sink"]
                                  and account["failed"] == 0)
    return row


STEPS = ("read", "evaluate", "write")


def steps(requests: list[tuple[bytes, int]], rounds: int = 3) -> dict[str, float]:
    """CPU µs per span of serve's own steps on `requests`, in this process, as one serve process runs them: reading a
    request into spans (messages kept), evaluating them (replay order and the core: metrics, enrichment) and
    writing the forwarded request; the first round warms up. Each costs more in the hop, on data that waited in
    queues with other threads and processes running, which the hop's figures by thread (`threads_us_per_span`) show."""
    from prometheus_client import CollectorRegistry

    from ...offline.score import agent_start_reader
    from ...otel.wiring import build_pipeline
    from ...otlp.messages import request_of
    from ...serve.intake import evaluated
    from ...serve.payload import PROTOBUF, read_request

    pipeline, _ = build_pipeline(registry=CollectorRegistry(), sees_starts=False)
    agent_of, clock = agent_start_reader(pipeline), time.process_time
    spent, spans = dict.fromkeys(STEPS, 0.0), 0
    for round_ in range(rounds + 1):
        for data, _ in requests:
            t0 = clock()
            batch, _ = read_request(data, PROTOBUF, keep=True).spans()
            t1 = clock()
            out = evaluated(pipeline, batch, agent_of)
            t2 = clock()
            request_of(out)
            t3 = clock()
            if round_:
                spans += len(batch)
                for step, took in zip(STEPS, (t1 - t0, t2 - t1, t3 - t2)):
                    spent[step] += took
    return {step: took / spans * 1e6 for step, took in spent.items()}


def serve_section(seconds: float, connections: int, spans_per_request: int, runs: int, latency_spans_per_request: int,
                  latency_runs: int, workers: tuple[int, ...] = (2,), collector: str | None = None,
                  durability: bool = True) -> dict[str, Any]:
    """serve, the Collector (when built), serve in its other acknowledgement modes (`durability`) and serve with more
    workers, one after the other on the same requests."""
    binary, missing = (collector, "") if collector else find_collector()
    requests = requests_of(spans_per_request, runs)
    latency_requests = requests_of(latency_spans_per_request, latency_runs)
    result: dict[str, Any] = {"spans_per_request": spans_per_request, "connections": connections, "seconds": seconds,
                              "rows": [], "collector": binary, "collector_missing": missing or None, "ratio": None}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as workdir:
        def one(start: Any, latency: bool, rate: float | None = None) -> dict[str, Any]:
            sink = Sink()
            with tempfile.TemporaryFile("w+") as log:
                try:
                    return measure(start(sink, log), requests, latency_requests if latency else None, connections,
                                   seconds, rate)
                finally:
                    sink.close()

        serve = one(lambda sink, log: start_serve(sink, 1, log), latency=True)
        result["rows"].append(serve)
        result["steps_us_per_span"] = steps(requests[:STEP_REQUESTS])
        if binary:
            try:
                row = one(lambda sink, log: start_collector(binary, sink, workdir, log), latency=True,
                          rate=serve["latency"]["rate_spans_per_s"])
            except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
                result["collector_missing"] = str(exc)
            else:
                result["rows"].append(row)
                result["ratio"] = serve["spans_per_cpu_s"] / row["spans_per_cpu_s"]
        for name, extra in DURABILITY if durability else ():  # the other acknowledgement modes, at serve's latency rate
            extra = tuple(a.replace("{workdir}", workdir) for a in extra)
            result["rows"].append(one(lambda sink, log, e=extra, m=name: start_serve(sink, 1, log, e, m), latency=True,
                                      rate=serve["latency"]["rate_spans_per_s"]))
        for n in workers:
            result["rows"].append(one(lambda sink, log, n=n: start_serve(sink, n, log), latency=False))
    return result



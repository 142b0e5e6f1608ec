"""Load figures of `otel-agent-eval serve` on localhost: sustained spans/s per core, ingest latency, and overload.

    python tests/benchmarks/bench_serve.py [--seconds 10] [--connections 4] [--spans-per-request 512] [--workers N]
    python tests/benchmarks/bench_serve.py --capacity-only --workers 2   # phase 1 alone, e.g. to compare --workers

Not a test (pytest collects only test_*.py): the figures depend on the machine, so nothing
here is compared with a number of the machine's; it checks only the accounting. Phases 1 and 2,
beside the OpenTelemetry Collector doing the same hop and with `--workers 2`, are the serve section
of `python -m otel_agent_eval.bench --section serve` (otel_agent_eval/tools/bench/serve.py, whose
sink, load and /proc readings this script uses); phase 3 is here only. It starts
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
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from otel_agent_eval.tools.bench.serve import STOPPED, Load, Sink, cpu_seconds, quantile, requests_of, rss_mib

FORWARD_QUEUE_SPANS = 8_192  # serve's default
# A queued span: decoded 1.7 KiB (tracemalloc, demo spans), its enriched copy about as much, and the allocator's
# overhead on top (resident memory, not Python objects): 6 KiB is the bound this script holds serve to.
SPAN_KIB = 6
RUNS, LATENCY_RUNS = 2_000, 500


def metric(url: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = rf"^{name}{{{selector}}} (\S+)$" if labels else rf"^{name} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


class _Done(Exception):
    """Only the capacity phase was asked for."""


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
    requests = requests_of(args.spans_per_request, RUNS)
    sink = Sink()
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_agent_eval.tools.cli", "serve", "--no-grpc", "--http-port", "0", "--metrics-port", "0",
         "--forward-to", f"{sink.base}/v1/traces", "--forward-delay", "0.2", "--queue-spans", str(args.queue_spans),
         "--workers", str(args.workers)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    line = process.stdout.readline()
    where = dict(part.split(" on ", 1) for part in line.strip().split(": ", 1)[1].split(", ") if " on " in part)
    url = where["OTLP/HTTP"]
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    metrics_url = where["metrics"]
    load = Load((host, int(port)), requests)
    baseline_mib = rss_mib(process.pid, "VmRSS")
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
        half = Load(load.address, requests_of(args.latency_spans_per_request, LATENCY_RUNS))
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
                samples.append((time.monotonic(), rss_mib(process.pid, "VmRSS")))
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

"""Cost per observe of the hot-path accumulators vs prometheus-client, in one run.

    python tests/benchmarks/bench_accumulators.py

Not a test (pytest collects only test_*.py): timings depend on the machine, so nothing
here asserts. Prints the median over repeats of the mean µs per call.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram

from otel_agent_eval.metrics.histogram import DURATION_BUCKETS_S, BucketCounts
from otel_agent_eval.metrics.window import SlidingQuantiles

N = 20_000
REPEATS = 15


def per_call_us(observe: Callable[[float], object], values: list[float]) -> tuple[float, float]:
    """(median, min) over repeats of the mean µs per call."""
    runs = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for v in values:
            observe(v)
        runs.append((time.perf_counter() - t0) / len(values) * 1e6)
    return statistics.median(runs), min(runs)


def scrape_us(values: list[float]) -> tuple[float, float]:
    """SlidingQuantiles.snapshot on a full window (10 sub-windows, 100k lognormal values):
    the first scrape folds nine closed sub-windows, later ones merge only the current."""
    fake_now = [0.0]
    w = SlidingQuantiles(clock=lambda: fake_now[0])
    for i in range(100_000):
        fake_now[0] = i * 290.0 / 100_000
        w.observe(values[i % len(values)] * (1 + i / 1e5))
    t0 = time.perf_counter()
    w.snapshot()
    first = (time.perf_counter() - t0) * 1e6
    t0 = time.perf_counter()
    for _ in range(50):
        w.snapshot()
    return first, (time.perf_counter() - t0) / 50 * 1e6


def main() -> None:
    rng = random.Random(1)
    values = [rng.lognormvariate(math.log(0.2), 1.0) for _ in range(N)]
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"

    h = BucketCounts(DURATION_BUCKETS_S)
    h_ex = BucketCounts(DURATION_BUCKETS_S)
    w = SlidingQuantiles()
    prom = Histogram(
        "bench_seconds", "bench", ["tool"], registry=CollectorRegistry(), buckets=DURATION_BUCKETS_S
    )
    prom_default = Histogram("bench_default_seconds", "bench", ["tool"], registry=CollectorRegistry())
    child, child_default = prom.labels("search"), prom_default.labels("search")
    loop_only = per_call_us(lambda v: None, values)[0]

    cases: list[tuple[str, Callable[[float], object]]] = [
        ("BucketCounts.observe (154 buckets)", h.observe),
        ("BucketCounts.observe + exemplar (ts given)", lambda v: h_ex.observe(v, trace_id, 1.0)),
        ("SlidingQuantiles.observe (incl. time.monotonic)", w.observe),
        ("prometheus_client child.observe (154 buckets)", child.observe),
        ("prometheus_client child.observe (default 15 buckets)", child_default.observe),
        ("prometheus_client Histogram.labels(..).observe", lambda v: prom.labels("search").observe(v)),
    ]
    print(f"µs per call, loop overhead ({loop_only:.3f} µs) subtracted; median and min of {REPEATS} runs")
    for name, observe in cases:
        median, best = per_call_us(observe, values)
        print(f"  {name:55s} {median - loop_only:6.3f}  {best - loop_only:6.3f}")
    first, steady = scrape_us(values)
    print(f"SlidingQuantiles.snapshot, full 300 s window: first {first:.0f} µs, then {steady:.0f} µs")


if __name__ == "__main__":
    main()

"""BucketCounts and the fixed bucket layouts: ``histogram_quantile`` accuracy, invariants."""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import Histogram

from otel_agent_eval.metrics.histogram import (
    COST_BUCKETS_USD,
    DURATION_BUCKETS_S,
    BucketCounts,
    exponential_buckets,
)

N = 100_000


def bucket_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float:
    """Port of Prometheus promql/quantile.go ``bucketQuantile`` (classic ``histogram_quantile``).

    Finds the first bucket whose cumulative count reaches rank ``q * count`` and
    interpolates linearly inside it; the lowest bucket starts at 0 (unless its upper bound
    is <= 0, then that bound is returned); a rank in the +Inf bucket returns the
    second-highest bound. (Bucket coalescing and monotonicity repair are no-ops here.)
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return math.nan
    observations = cumulative[-1]
    if observations == 0:
        return math.nan
    rank = q * observations
    # sort.Search(len(buckets)-1, ...): the first i in [0, n-1) with cumulative >= rank, else n-1.
    b = next((i for i in range(len(bounds) - 1) if cumulative[i] >= rank), len(bounds) - 1)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], cumulative[b]
    if b > 0:
        start = bounds[b - 1]
        count -= cumulative[b - 1]
        rank -= cumulative[b - 1]
    return start + (end - start) * (rank / count)


def exact_quantile(q: float, ordered: Sequence[float]) -> float:
    """Nearest rank: the sample of 1-based rank ``max(1, ceil(q * n))`` in ascending order."""
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(median), sigma)


def lognormal_200ms(rng: random.Random) -> float:
    return _lognormal(rng, 0.2, 1.0)


def bimodal_50ms_2s(rng: random.Random) -> float:
    return _lognormal(rng, 0.05, 0.5) if rng.random() < 0.9 else _lognormal(rng, 2.0, 0.5)


def tail_past_30s(rng: random.Random) -> float:
    """98 % ordinary tool calls, 2 % slow ones around 40 s (timeouts, retries): p99 ~ 40 s."""
    return _lognormal(rng, 0.2, 1.0) if rng.random() < 0.98 else _lognormal(rng, 40.0, 0.3)


DISTRIBUTIONS: dict[str, Callable[[random.Random], float]] = {
    "lognormal_200ms": lognormal_200ms,
    "bimodal_50ms_2s": bimodal_50ms_2s,
    "tail_past_30s": tail_past_30s,
}
QS = (0.5, 0.95, 0.99)


def samples(name: str, seed: int = 20240601) -> list[float]:
    rng = random.Random(seed)
    draw = DISTRIBUTIONS[name]
    return [draw(rng) for _ in range(N)]


def relative_errors(bounds: Sequence[float], values: Sequence[float]) -> dict[float, float]:
    h = BucketCounts(bounds)
    for v in values:
        h.observe(v)
    ordered = sorted(values)
    cumulative = h.cumulative()
    return {
        q: bucket_quantile(q, h.bounds, cumulative) / exact_quantile(q, ordered) - 1 for q in QS
    }


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_histogram_quantile_within_5_percent(name: str) -> None:
    values = samples(name)
    ours = relative_errors(DURATION_BUCKETS_S, values)
    default = relative_errors(Histogram.DEFAULT_BUCKETS, values)
    print(
        f"\n{name}: ours " + " ".join(f"p{round(q * 100)}={e:+.2%}" for q, e in ours.items())
        + " | default " + " ".join(f"p{round(q * 100)}={e:+.2%}" for q, e in default.items())
    )
    for q, err in ours.items():
        assert abs(err) <= 0.05, (q, err)
    assert abs(ours[0.99]) <= 0.004  # docs/metrics.md states this measurement: p99 within 0.4% on these samples
    # Why not prometheus-client's default buckets: the same data, many times the error.
    assert abs(default[0.99]) >= 0.10
    assert abs(default[0.99]) >= 10 * abs(ours[0.99])


def test_cost_buckets_accuracy() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(math.log(0.02), 1.5) for _ in range(N)]  # USD per run
    for q, err in relative_errors(COST_BUCKETS_USD, values).items():
        assert abs(err) <= 0.05, (q, err)


def test_duration_bucket_layout() -> None:
    b = DURATION_BUCKETS_S
    assert 140 <= len(b) <= 160
    assert b[-1] == math.inf and b[-2] == 512.0 and b[0] == pytest.approx(2**-10, rel=1e-3)
    assert all(1.08 < hi / lo < 1.10 for lo, hi in zip(b, b[1:-1]))
    assert b == exponential_buckets(3, 2**-10, 2**9), "must be a pure function of its arguments"
    assert all(len(repr(x)) <= 10 for x in b[:-1]), "short, platform-independent `le` labels"
    assert 90 <= len(COST_BUCKETS_USD) <= 100
    assert COST_BUCKETS_USD[0] <= 1e-5 and COST_BUCKETS_USD[-2] >= 100


def test_exponential_buckets_covers_ends_and_rejects_bad_args() -> None:
    assert exponential_buckets(0, 1, 8) == (1.0, 2.0, 4.0, 8.0, math.inf)
    assert exponential_buckets(1, 1.5, 3) == (1.414, 2.0, 2.828, 4.0, math.inf)
    for args in [(3, 0, 1), (3, 2, 1), (3, 1, math.inf), (3.0, 1, 2), (11, 1, 2)]:
        with pytest.raises(ValueError):
            exponential_buckets(*args)
    with pytest.raises(ValueError, match="digits"):
        exponential_buckets(10, 1, 2, digits=3)


def test_observe_uses_le_buckets() -> None:
    h = BucketCounts((1.0, 2.0))
    assert h.bounds == (1.0, 2.0, math.inf)
    for v in (-5.0, 0.0, 1.0, 1.0000001, 2.0, 3.0, math.inf, math.nan):
        h.observe(v)
    assert h.counts == [3, 2, 2]
    assert h.cumulative() == [3, 5, 7]
    assert h.count == 7  # NaN dropped
    assert h.sum == math.inf


def test_bad_bounds_rejected() -> None:
    for bounds in [(2.0, 1.0), (1.0, 1.0), (1.0, math.nan)]:
        with pytest.raises(ValueError):
            BucketCounts(bounds)


def test_exemplar_latest_per_bucket_and_merge() -> None:
    a, b = BucketCounts((1.0,)), BucketCounts((1.0,))
    assert a.exemplars is None
    a.observe(0.5, trace_id="aa" * 16, timestamp=10.0)
    a.observe(0.7, trace_id="bb" * 16, timestamp=11.0)
    a.observe(0.2)
    assert a.exemplars == [("bb" * 16, 0.7, 11.0), None]
    b.observe(0.9, trace_id="cc" * 16, timestamp=9.0)
    b.observe(5.0, trace_id="dd" * 16, timestamp=12.0)
    a.merge(b)
    assert a.exemplars == [("bb" * 16, 0.7, 11.0), ("dd" * 16, 5.0, 12.0)]
    assert (a.counts, a.count) == ([4, 1], 5) and a.sum == pytest.approx(7.3)
    c = BucketCounts((1.0,))
    c.observe(0.1, trace_id="ee" * 16)  # timestamp defaults to the wall clock
    assert c.exemplars is not None and c.exemplars[0] is not None and c.exemplars[0][2] > 1e9
    with pytest.raises(ValueError):
        a.merge(BucketCounts((2.0,)))


values_st = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False), max_size=200
)


@given(values_st)
def test_invariants(values: list[float]) -> None:
    h = BucketCounts(DURATION_BUCKETS_S)
    expected_sum = 0.0
    for v in values:
        h.observe(v)
        expected_sum += v
    cum = h.cumulative()
    assert all(a <= b for a, b in zip(cum, cum[1:]))
    assert cum[-1] == h.count == len(values)
    assert h.sum == expected_sum
    for v in values:  # each value is counted in its `le` bucket: bounds[i-1] < v <= bounds[i]
        i = next(i for i, bound in enumerate(h.bounds) if v <= bound)
        assert h.counts[i] >= 1 and (i == 0 or h.bounds[i - 1] < v)


@given(values_st, values_st)
def test_merge_equals_observing_everything(left: list[float], right: list[float]) -> None:
    a, b, both = BucketCounts(), BucketCounts(), BucketCounts()
    for v in left:
        a.observe(v)
        both.observe(v)
    for v in right:
        b.observe(v)
        both.observe(v)
    a.merge(b)
    assert a.counts == both.counts and a.count == both.count
    assert a.sum == pytest.approx(both.sum, rel=1e-9, abs=1e-6)

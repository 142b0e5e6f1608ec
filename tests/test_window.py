"""SlidingQuantiles: accuracy against the nearest-rank definition, expiry, invariants."""
from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otel_agent_eval.metrics.window import DEFAULT_QUANTILES, SlidingQuantiles, WindowSnapshot
from test_histogram import DISTRIBUTIONS, exact_quantile, samples


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def window(clock: FakeClock, **kw: object) -> SlidingQuantiles:
    return SlidingQuantiles(300.0, clock=clock, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_quantiles_within_1_percent(name: str) -> None:
    values = samples(name)
    clock = FakeClock()
    w = window(clock)
    for i, v in enumerate(values):
        clock.now = 1000.0 + i * 250.0 / len(values)  # spread over 250 s: 9 sub-windows
        w.observe(v)
    ordered = sorted(values)
    snap = w.snapshot()
    errors = {q: est / exact_quantile(q, ordered) - 1 for q, est in zip(DEFAULT_QUANTILES, snap.quantiles)}
    print(f"\n{name}: " + " ".join(f"p{round(q * 100)}={e:+.3%}" for q, e in errors.items()))
    for q, err in errors.items():
        assert abs(err) <= 0.01, (q, err)
        assert abs(err) <= w.relative_accuracy + 1e-12  # the sketch's guarantee, not luck
    assert snap.count == snap.total_count == len(values)
    assert snap.sum == pytest.approx(math.fsum(values), rel=1e-12)


def test_sub_window_expiry() -> None:
    clock = FakeClock(0.0)
    w = window(clock)  # ten 30 s slots
    w.observe(1.0)  # slot 0: [0, 30)
    clock.now = 29.9
    w.observe(2.0)  # slot 0
    clock.now = 30.0
    w.observe(3.0)  # slot 1
    clock.now = 299.9  # slot 9: slots 0..9 live (299.9 s of data)
    assert w.count == 3
    assert w.quantiles((0.0, 1.0)) == [1.0, 3.0]
    clock.now = 300.0  # slot 10: slot 0 leaves, exactly 270 s of data remain
    assert w.count == 1 and w.sum == 3.0
    assert w.quantiles((0.0, 0.5, 1.0)) == [3.0, 3.0, 3.0]
    w.observe(10.0)
    assert w.quantiles((0.0, 1.0)) == [3.0, 10.0]
    clock.now = 330.0  # slot 11: the 3.0 from slot 1 leaves
    assert w.quantiles((0.0, 1.0)) == [10.0, 10.0]
    snap = w.snapshot()
    assert (snap.count, snap.sum, snap.total_count, snap.total_sum) == (1, 10.0, 4, 16.0)


def test_empty_window_shows_nan_and_lifetime_totals_stay() -> None:
    clock = FakeClock(0.0)
    w = window(clock)
    snap = w.snapshot()
    assert all(math.isnan(q) for q in snap.quantiles) and len(snap.quantiles) == 3
    assert (snap.count, snap.sum, snap.total_count, snap.total_sum) == (0, 0.0, 0, 0.0)
    w.observe(0.5)
    w.observe(1.5)
    clock.now = 10_000.0
    snap = w.snapshot((0.99,))
    assert isinstance(snap, WindowSnapshot) and math.isnan(snap.quantiles[0])
    assert (snap.count, snap.sum, snap.total_count, snap.total_sum) == (0, 0.0, 2, 2.0)
    assert w._subs == type(w._subs)()  # expired sub-windows are dropped, memory returns


def test_nan_and_inf_are_dropped_zero_and_negative_counted() -> None:
    w = window(FakeClock())
    for v in (math.nan, math.inf, -math.inf, 0.0, -2.0, 4.0):
        w.observe(v)
    assert w.count == 3 and w.sum == 2.0
    est = w.quantiles((0.0, 0.5, 1.0))
    assert est[0] == -2.0 and est[1] == 0.0 and est[2] == 4.0


def test_memory_is_bounded_by_the_value_range() -> None:
    """Keys per sub-window <= ceil(ln(max/min) / ln(gamma)) + 1, whatever the sample count."""
    w = window(FakeClock())
    rng = random.Random(3)
    for _ in range(50_000):
        w.observe(rng.uniform(0.001, 3600.0))
    (sub,) = w._subs
    gamma = (1 + w.relative_accuracy) / (1 - w.relative_accuracy)
    assert len(sub.pos) <= math.ceil(math.log(3600.0 / 0.001) / math.log(gamma)) + 1 <= 1520


def test_bad_arguments() -> None:
    for kw in ({"window_s": 0}, {"window_s": math.inf}, {"sub_windows": 0}, {"relative_accuracy": 1.0}):
        with pytest.raises(ValueError):
            SlidingQuantiles(**kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SlidingQuantiles().quantiles((1.5,))


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(st.lists(finite, min_size=1, max_size=300), st.lists(st.floats(0, 1), min_size=1, max_size=5))
def test_quantile_matches_nearest_rank_and_stays_in_range(values: list[float], qs: list[float]) -> None:
    w = window(FakeClock())
    for v in values:
        w.observe(v)
    ordered = sorted(values)
    for q, est in zip(qs, w.quantiles(qs)):
        exact = exact_quantile(q, ordered)
        assert ordered[0] <= est <= ordered[-1]
        assert abs(est - exact) <= (w.relative_accuracy + 1e-12) * abs(exact)


@given(
    st.lists(st.tuples(st.floats(0, 40.0), st.floats(-1e3, 1e3), st.booleans()), min_size=1, max_size=100),
    st.floats(0, 120.0),
)
def test_window_holds_exactly_the_live_sub_windows(
    steps: list[tuple[float, float, bool]], wait: float
) -> None:
    """Time advances by arbitrary steps, scrapes come at arbitrary points (exercising the
    incremental aggregate); every read sees exactly the samples of the live slots."""
    clock = FakeClock(0.0)
    w = SlidingQuantiles(100.0, sub_windows=4, clock=clock)  # 25 s slots
    seen: list[tuple[float, float]] = []

    def check() -> None:
        slot_now = int(clock.now // 25.0)
        live = sorted(v for t, v in seen if int(t // 25.0) > slot_now - 4)
        snap = w.snapshot((0.0, 0.3, 0.5, 0.9, 1.0))
        assert snap.count == len(live)
        assert snap.total_count == len(seen)
        assert snap.sum == pytest.approx(math.fsum(live), rel=1e-9, abs=1e-9)
        if not live:
            assert all(math.isnan(x) for x in snap.quantiles)
            # Nothing is kept once everything expired.
            assert not w._agg_pos and not w._agg_neg and not w._subs
            return
        assert snap.quantiles[0] == live[0] and snap.quantiles[-1] == live[-1]
        for q, est in zip((0.3, 0.5, 0.9), snap.quantiles[1:-1]):
            exact = exact_quantile(q, live)
            assert abs(est - exact) <= (w.relative_accuracy + 1e-12) * abs(exact)

    for dt, v, scrape in steps:
        clock.now += dt
        w.observe(v)
        seen.append((clock.now, v))
        if scrape:
            check()
    clock.now += wait
    check()

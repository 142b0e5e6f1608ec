"""The online judge's sample and budget: the same runs chosen everywhere, and a ceiling that holds (injected clocks)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from otel_agent_eval.judge.budget import HOUR_S, MINUTE_S, JudgeBudget
from otel_agent_eval.judge.sampling import chosen


class Clock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _ids(n: int, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(128) for _ in range(n)]


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.25, 0.5, 0.9])
@pytest.mark.parametrize("ids", ["random", "sequential"])
def test_the_rate_holds_within_two_points_over_ten_thousand_runs(rate, ids):
    trace_ids = _ids(10_000) if ids == "random" else list(range(1, 10_001))  # some SDKs and tests count ids up
    share = sum(chosen(t, rate) for t in trace_ids) / len(trace_ids)
    assert abs(share - rate) <= 0.02, share


def test_none_and_all_and_nonsense_rates():
    ids = _ids(1_000)
    assert not any(chosen(t, 0.0) for t in ids) and not any(chosen(t, float("nan")) for t in ids)
    assert all(chosen(t, 1.0) for t in ids)
    assert not any(chosen(t, -0.5) for t in ids)


def test_a_higher_rate_keeps_every_run_a_lower_one_chose():
    """So raising the rate adds runs to the judged set, never swaps them: yesterday's judged runs stay judged."""
    ids = _ids(5_000)
    low = {t for t in ids if chosen(t, 0.05)}
    high = {t for t in ids if chosen(t, 0.2)}
    assert low and low < high


CHILD = """
import json, sys
from otel_agent_eval.judge.sampling import chosen
ids = json.loads(sys.stdin.read())
print(json.dumps([chosen(t, 0.3) for t in ids]))
"""


def test_the_same_trace_is_chosen_in_every_process_and_re_run():
    """Other interpreters, with other hash seeds (Python's `hash()` would differ), choose exactly the same runs."""
    ids = _ids(2_000, seed=11)
    here = [chosen(t, 0.3) for t in ids]
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(ids), capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        assert json.loads(out.stdout) == here
    assert 500 < sum(here) < 700


def test_no_minute_holds_more_than_the_cap_under_ten_thousand_runs():
    clock = Clock(0.0)
    budget = JudgeBudget(per_minute=60, usd_per_hour=None, clock=clock)
    rng = random.Random(3)
    admitted: list[float] = []
    for _ in range(10_000):  # ~5.6 runs a second for 30 minutes, in bursts
        clock.now += rng.expovariate(5.6)
        if budget.admit():
            admitted.append(clock.now)
    assert len(admitted) < 10_000
    per_minute: dict[int, int] = {}
    for t in admitted:
        per_minute[int(t // MINUTE_S)] = per_minute.get(int(t // MINUTE_S), 0) + 1
    assert max(per_minute.values()) == 60  # full use of the cap, never more, in any calendar minute
    j = 0
    for i, t in enumerate(admitted):  # ... and in any 60 seconds, however aligned
        while admitted[j] <= t - MINUTE_S:
            j += 1
        assert i - j + 1 <= 60


def test_a_usd_cap_stops_judging_when_spent_and_resumes_in_the_next_window():
    clock = Clock(0.0)
    budget = JudgeBudget(per_minute=None, usd_per_hour=1.0, clock=clock)
    judged = 0
    while budget.admit():
        budget.charge(0.15)  # each judgement's tokens
        judged += 1
        clock.now += 10
    assert judged == 7 and budget.spent_usd() == pytest.approx(1.05)  # the 7th crossed the cap: no 8th
    clock.now += 1_000
    assert not budget.admit()  # still within the hour of that spend
    clock.now = HOUR_S - 0.5  # the hour still holds every charge (t = 0 ... 60)
    assert not budget.admit()
    clock.now = HOUR_S + 0.5  # the first charge (t = 0) left the hour: 0.90 spent in it, under the cap
    assert budget.spent_usd() == pytest.approx(0.90)
    assert budget.admit()
    clock.now = 3 * HOUR_S
    assert budget.spent_usd() == 0.0 and budget.admit()


def test_unpriced_and_nonsense_costs_charge_nothing():
    budget = JudgeBudget(per_minute=None, usd_per_hour=1.0, clock=Clock())
    for usd in (0.0, -1.0, float("nan"), float("inf")):
        budget.charge(usd)
    assert budget.spent_usd() == 0.0 and budget.admit()


@pytest.mark.parametrize("kwargs, name", [({"per_minute": 0}, "per_minute"), ({"per_minute": 1.5}, "per_minute"),
                                          ({"usd_per_hour": 0}, "usd_per_hour"), ({"usd_per_hour": "1"}, "usd_per_hour")])
def test_bad_caps_are_one_clear_error(kwargs, name):
    with pytest.raises(ValueError, match=name):
        JudgeBudget(**kwargs)


def test_full_says_what_admit_would_say_and_takes_nothing():
    clock = Clock(0.0)
    budget = JudgeBudget(per_minute=2, usd_per_hour=None, clock=clock)
    assert not budget.full() and not budget.full()  # asking twice takes no place
    assert budget.admit() and budget.admit()
    assert budget.full() and not budget.admit()
    clock.now = MINUTE_S + 1
    assert not budget.full() and budget.admit()

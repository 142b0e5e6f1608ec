"""metrics/carried.py: the monotonic series of a killed process, added under a new process's own."""
from __future__ import annotations

import pytest
from prometheus_client.core import GaugeMetricFamily

from otel_agent_eval.metrics import names as n
from otel_agent_eval.metrics.carried import ROUNDING_MARGIN, Carried, take
from otel_agent_eval.metrics.families import family

CALL = ["web_search", "support_agent", "lookup", "ok", "pass", "web_search"]


def killed_families() -> list:
    calls, cost = family(n.TOOL_CALLS), family(n.TOOL_COST)
    calls.add_metric(CALL, 3)
    cost.add_metric(CALL[:2], 0.3)
    runs = family(n.RUN_TOOL_CALLS)
    runs.add_counts(["support_agent", "lookup"], n.RUN_TOOL_CALLS.buckets, [0, 2] + [0] * 12, 4.0)
    return [calls, cost, runs, GaugeMetricFamily("agent_eval_processor_open_runs", "Open runs.", value=7)]


def test_counters_and_histograms_go_on_from_the_killed_process_and_gauges_do_not() -> None:
    carried = Carried.load(take(killed_families()))
    calls, cost, runs = family(n.TOOL_CALLS), family(n.TOOL_COST), family(n.RUN_TOOL_CALLS)
    calls.add_metric(CALL, 2)
    calls.add_metric(["calculator", "math_agent", "math", "ok", "pass", "calculator"], 1)
    runs.add_counts(["support_agent", "lookup"], n.RUN_TOOL_CALLS.buckets, [1] + [0] * 13, 1.0)
    gauge = GaugeMetricFamily("agent_eval_processor_open_runs", "Open runs.", value=2)
    out = {f.name: f for f in carried.apply([calls, cost, runs, gauge])}
    assert {s.labels[n.TOOL]: s.value for s in out["agent_eval_tool_calls"].samples} == {"web_search": 5, "calculator": 1}
    [spent] = out["agent_eval_tool_cost_usd"].samples  # a series only the killed process had: carried as it was
    assert spent.value == pytest.approx(0.3) and spent.value > 0.3  # a sum of floats: carried up by the margin
    assert spent.value <= 0.3 * (1 + 2 * ROUNDING_MARGIN)
    [(_, _, counts, total, _)] = out["agent_eval_run_tool_calls"].points
    assert list(counts[:3]) == [1, 2, 0] and total == 5.0  # bucket by bucket; whole sums as they were
    assert [s.value for s in out["agent_eval_processor_open_runs"].samples] == [2]  # now's value, never carried
    assert carried.samples == 2 + len(n.RUN_TOOL_CALLS.buckets) + 2


@pytest.mark.parametrize("blob", [b"", b"not zlib", take([])[:-3]])
def test_a_state_that_is_not_one_is_refused_in_one_line(blob: bytes) -> None:
    with pytest.raises(ValueError, match="not a metric state"):
        Carried.load(blob)

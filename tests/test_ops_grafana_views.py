"""Our tool calls in Grafana Agent Observability's Tools view, on a real Prometheus.

That view reads `gen_ai_client_operation_duration_seconds{gen_ai_operation_name="execute_tool"}` by
`gen_ai_tool_name` (errors: `error_type!=""`); we expose `gen_ai_execute_tool_duration_seconds`. The opt-in
rule file collector-config/rules/agent-eval-genai-views.yml records a copy under the view's name, on the
bucket boundaries the view's SDK records. Debian's `prometheus` scrapes the demo workload every second with
that rule file loaded, and the view's queries, exactly as Grafana's code builds them, must return our calls.
"""
from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from ops_helpers import (
    GENAI_VIEW_RULES,
    LiveWorkload,
    PrometheusServer,
    binary,
    is_finite,
    load_yaml,
    prometheus_test_config,
    rules_of,
    wait_for,
)

from otel_agent_eval.metrics.histogram import DURATION_BUCKETS_S
from otel_agent_eval.tools.demo.workload import ERROR_TYPES

# The queries of the Tools view (apps/plugin/src/components/dashboard/DashboardToolsGrid.tsx), built by the
# functions of apps/plugin/src/dashboard/queries.ts and toolRuntime.ts of grafana/sigil at commit
# 273d63787c230925d7a7294e4a5d08eca2b50c8d (2026-03-22), run with node as the view calls them: no filter,
# breakdown "none" (the stat panels then group by tool), a 60 s time range (computeRangeDuration "60s",
# computeStep 60, computeRateInterval "240s"). errorsByCode is errorsByCodeStatQuery on the view's
# execute_tool filter (the errors-by-error_type breakdown). Copied verbatim; do not edit, re-render.
TOOLS_VIEW = {
    "totalExecutions": 'sum(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[60s]))',
    "totalErrors": 'sum(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[60s]))',
    "totalErrorRate": '(sum(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[60s])) / sum(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[60s]))) * 100',
    "toolExecutions": 'sum by (gen_ai_tool_name) (increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[60s]))',
    "toolErrors": 'sum by (gen_ai_tool_name) (increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[60s]))',
    "toolErrorRates": '(sum by (gen_ai_tool_name) (increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[60s])) / sum by (gen_ai_tool_name) (increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[60s]))) * 100',
    "toolLatencyP95": 'histogram_quantile(0.95, sum by (le, gen_ai_tool_name) (increase(gen_ai_client_operation_duration_seconds_bucket{gen_ai_operation_name="execute_tool"}[60s])))',
    "usageOverTime": 'sum(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[60s]))',
    "errorRateOverTime": '(sum(rate(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[240s])) / sum(rate(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[240s]))) * 100',
    "latencyP95OverTime": 'histogram_quantile(0.95, sum by (le)(rate(gen_ai_client_operation_duration_seconds_bucket{gen_ai_operation_name="execute_tool"}[240s])))',
    "breakdownExecutions": 'sum by (gen_ai_tool_name)(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool"}[60s]))',
    "breakdownErrors": 'sum by (gen_ai_tool_name)(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[60s]))',
    "breakdownLatencyP95": 'histogram_quantile(0.95, sum by (le, gen_ai_tool_name)(increase(gen_ai_client_operation_duration_seconds_bucket{gen_ai_operation_name="execute_tool"}[60s])))',
    "errorsByCode": 'sum by (error_type)(increase(gen_ai_client_operation_duration_seconds_count{gen_ai_operation_name="execute_tool",error_type!=""}[60s]))',
}
# Verbatim expected strings of apps/plugin/src/dashboard/queries.test.ts at the same commit: the overview's
# totals over all operations, which now count our tool calls too.
OVERVIEW = {
    "totalOpsQuery": "sum(increase(gen_ai_client_operation_duration_seconds_count[3600s]))",
    "totalErrorsQuery": 'sum(increase(gen_ai_client_operation_duration_seconds_count{error_type!=""}[3600s]))',
}
# The bucket boundaries the agento11y SDK (PyPI agento11y 0.23.0, agento11y/client.py
# _DURATION_BUCKETS_SECONDS) gives gen_ai.client.operation.duration: the GenAI conventions' advice.
AGENTO11Y_DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)

WINDOW_S = 60  # the range of the rendered queries
HISTORY_S = 15  # seconds of recorded history before the queries are judged
SOURCE = "gen_ai_execute_tool_duration_seconds"
COPY = "gen_ai_client_operation_duration_seconds"

Samples = list[dict[str, Any]]


# -- the rule file, statically -------------------------------------------------------------------


def bucket_rules() -> list[dict[str, Any]]:
    return [r for r in rules_of(GENAI_VIEW_RULES) if r["record"] == f"{COPY}_bucket"]


def test_rule_file_is_opt_in_and_named_as_the_view_expects():
    for config in GENAI_VIEW_RULES.parent.parent.glob("prometheus*.yml"):
        assert GENAI_VIEW_RULES.name not in " ".join(load_yaml(config).get("rule_files", [])), \
            f"{config.name} loads the opt-in copy by default"
    assert {r["record"] for r in rules_of(GENAI_VIEW_RULES)} == {f"{COPY}_bucket", f"{COPY}_count", f"{COPY}_sum"}
    assert all(r["labels"]["gen_ai_operation_name"] == "execute_tool" for r in rules_of(GENAI_VIEW_RULES))


def test_promtool_checks_the_rule_file():
    result = subprocess.run([binary("promtool"), "check", "rules", str(GENAI_VIEW_RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_copy_has_the_sdk_boundaries_each_read_from_our_bucket_just_above_it():
    from prometheus_client.utils import floatToGoString

    boundaries = []
    for rule in bucket_rules():
        source_le = re.fullmatch(rf'{SOURCE}_bucket\{{le="([^"]+)"\}}', rule["expr"]).group(1)
        boundary = float(rule["labels"]["le"])
        ours = min(b for b in DURATION_BUCKETS_S if b >= boundary)
        assert source_le == floatToGoString(ours), rule
        assert ours == boundary or ours / boundary - 1 < 0.014, f"{source_le} is {ours / boundary - 1:.1%} above {boundary}"
        boundaries.append(boundary)
    assert tuple(boundaries) == (*AGENTO11Y_DURATION_BUCKETS_S, math.inf)


# -- on a real Prometheus ---------------------------------------------------------------------------


class Views:
    def __init__(self, prometheus: PrometheusServer, workload: LiveWorkload) -> None:
        self.prometheus = prometheus
        self.workload = workload

    def query(self, expr: str, at: float | None = None) -> Samples:
        assert self.workload.error is None, f"the workload thread failed: {self.workload.error!r}"
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self.prometheus.api("query", **params)
        return [{"metric": s["metric"], "value": float(s["value"][1])} for s in data["result"]]

    def now(self) -> float:
        return float(self.prometheus.api("query", query="time()")["result"][0])


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Views]:
    binary("prometheus")
    workdir = tmp_path_factory.mktemp("prometheus-genai-views")
    with LiveWorkload(runs_per_s=40, suboptimal_share=0.05, seed=5) as workload, \
            PrometheusServer(workdir, prometheus_test_config([GENAI_VIEW_RULES], workload.target)) as prometheus:
        views = Views(prometheus, workload)
        wait_for(lambda: views.query(f"count_over_time({COPY}_count[{WINDOW_S}s]) >= {HISTORY_S}")
                 and views.query(f'{COPY}_count{{error_type!=""}}'),
                 timeout_s=60, what=f"{HISTORY_S} s of the recorded copy, errors included")
        yield views


def by_tool(samples: Samples) -> dict[str, float]:
    return {s["metric"].get("gen_ai_tool_name", ""): s["value"] for s in samples}


def one(samples: Samples) -> float:
    assert len(samples) == 1 and not samples[0]["metric"], samples
    return samples[0]["value"]


def test_the_tools_view_shows_our_tool_calls(views):
    at = views.now()
    view = {name: views.query(expr, at) for name, expr in TOOLS_VIEW.items()}
    ours = by_tool(views.query(f"sum by (gen_ai_tool_name) (increase({SOURCE}_count[{WINDOW_S}s]))", at))
    our_errors = by_tool(views.query(f'sum by (gen_ai_tool_name) (increase({SOURCE}_count{{error_type!=""}}[{WINDOW_S}s]))', at))
    our_p95 = by_tool(views.query(f"histogram_quantile(0.95, sum by (le, gen_ai_tool_name) (increase({SOURCE}_bucket[{WINDOW_S}s])))", at))
    assert len(ours) >= 4 and our_errors, (ours, our_errors)

    # Counts: the copy's series are sampled at rule evaluation, the source's at scrape, up to 1 s apart.
    for name in ("totalExecutions", "usageOverTime"):
        assert one(view[name]) == pytest.approx(sum(ours.values()), rel=0.1), name
    for name in ("toolExecutions", "breakdownExecutions"):
        assert by_tool(view[name]).keys() == ours.keys(), name
        for tool, calls in by_tool(view[name]).items():
            assert calls == pytest.approx(ours[tool], rel=0.15, abs=3), (name, tool)
    assert one(view["totalErrors"]) == pytest.approx(sum(our_errors.values()), rel=0.15, abs=3)
    for name in ("toolErrors", "breakdownErrors"):  # a tool with a few errors may sit on the window's edge in one of them
        got = by_tool(view[name])
        assert not {t for t in got.keys() ^ our_errors.keys() if max(got.get(t, 0), our_errors.get(t, 0)) > 3}, (name, got, our_errors)
    share = 100 * sum(our_errors.values()) / sum(ours.values())
    assert one(view["totalErrorRate"]) == pytest.approx(share, rel=0.25)
    assert 0 < one(view["errorRateOverTime"]) < 20  # the demo fails 3 % of calls
    rates = {t: v for t, v in by_tool(view["toolErrorRates"]).items() if is_finite(v)}
    # a tool that never failed has no errors series (one with a few may sit on the window's edge, as above)
    assert not {t for t in rates.keys() ^ our_errors.keys() if our_errors.get(t, 0) > 3}, (rates, our_errors)
    assert all(0 <= v <= 100 for v in rates.values()), rates
    assert {s["metric"]["error_type"] for s in view["errorsByCode"]} <= set(ERROR_TYPES) and view["errorsByCode"]

    # Latency: the copy's buckets are a factor of 2 apart, so its p95 stays within that of our fine p95.
    for name in ("toolLatencyP95", "breakdownLatencyP95"):
        p95 = by_tool(view[name])
        assert p95.keys() == ours.keys(), name
        for tool, seconds in p95.items():
            assert 0.5 <= seconds / our_p95[tool] <= 2, (name, tool, seconds, our_p95[tool])
    assert 0 < one(view["latencyP95OverTime"]) < 60


def test_the_overview_totals_count_our_tool_calls(views):
    at = views.now()
    calls = one(views.query(f"sum(increase({SOURCE}_count[3600s]))", at))
    assert one(views.query(OVERVIEW["totalOpsQuery"], at)) == pytest.approx(calls, rel=0.1)
    assert one(views.query(OVERVIEW["totalErrorsQuery"], at)) > 0


def test_the_copy_equals_the_source_once_the_counts_stand_still(views):
    """Last in the module: it pauses the workload; every recorded value then equals its source exactly."""
    views.workload.pause()
    pairs = [(f"{COPY}_count", f"{SOURCE}_count"), (f"{COPY}_sum", f"{SOURCE}_sum")]
    pairs += [(f'{COPY}_bucket{{le="{r["labels"]["le"]}"}}', r["expr"]) for r in bucket_rules()]
    assert len(pairs) == 17  # the series per source label set that collector-config/README.md states
    key = ("gen_ai_tool_name", "gen_ai_tool_type", "error_type", "instance", "job")

    def settled() -> bool:
        for copy, source in pairs:
            recorded = {tuple(s["metric"].get(k, "") for k in key): s["value"] for s in views.query(copy)}
            scraped = {tuple(s["metric"].get(k, "") for k in key): s["value"] for s in views.query(source)}
            assert recorded == scraped and recorded, f"{copy} != {source}"
        return True

    wait_for(settled, timeout_s=15, what="the recorded copy to equal its source")

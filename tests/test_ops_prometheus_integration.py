"""The shipped rules and dashboard against a real Prometheus scraping a live workload.

Debian's `prometheus` runs on a free localhost port with a temporary TSDB and scrapes the
product's demo workload (`otel_agent_eval.tools.demo.run_workload` in a thread, served by
`start_metrics_server`) every second. It evaluates *test copies* of the shipped rules in
which every window, offset and `for:` is shortened (ops_helpers.SHORT_WINDOWS: 5m/10m ->
10s, 30m/1h/1d -> 20s, `for:` -> 1s) and a copy of prometheus.yml whose intervals are 1 s
and whose only job is the apps' job pointing at the workload.

Phase 1 (5 % suboptimal picks): every rule loads and evaluates, every recording rule and
every dashboard query returns series with plausible values, the efficiency alerts stay
quiet. Phase 2 (90 % suboptimal picks): the efficiency alert goes pending or firing.
All waits are bounded polls; the module takes about a minute.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ops_helpers import (
    APP_JOB,
    RULE_FILES,
    UNIT_RANGES,
    LiveWorkload,
    PrometheusServer,
    alert_names,
    binary,
    dashboard,
    dashboard_panels,
    grafana_expr,
    is_finite,
    prometheus_test_config,
    recording_rule_names,
    shorten_durations,
    wait_for,
)

CALM_SHARE = 0.05  # phase 1: 5 % of runs pick a worse tool
BAD_SHARE = 0.9  # phase 2
DATA_TIMEOUT_S = 45.0  # the day-over-day rule needs 20 s of history before its offset window has data
ALERT_TIMEOUT_S = 40.0
INSTANT_RETRY_S = 5.0  # a few scrape intervals (1 s each)

Samples = list[dict[str, Any]]


class Stack:
    def __init__(self, prometheus: PrometheusServer, workload: LiveWorkload) -> None:
        self.prometheus = prometheus
        self.workload = workload

    def query(self, expr: str) -> Samples:
        assert self.workload.error is None, f"the workload thread failed: {self.workload.error!r}"
        return self.prometheus.query(expr)

    def series(self, expr: str, what: str) -> Samples:
        """The series of `expr`, polled for a few seconds: an instant query of a gauge (the catalog's
        thresholds) is empty for a moment after a scrape that failed or timed out (its series are then
        stale), which a busy 2-core CI machine can cause. The failure says how the scrapes went."""
        try:
            return wait_for(lambda: self.query(expr), timeout_s=INSTANT_RETRY_S, what=what)
        except AssertionError as exc:
            scrapes = {name: values(self.query(f'{name}{{job="{APP_JOB}"}}'))
                       for name in ("up", "scrape_duration_seconds", "scrape_samples_scraped")}
            raise AssertionError(f"{exc}; the workload's scrapes: {scrapes}") from None


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binary("prometheus")  # fail early with the install hint
    workdir = tmp_path_factory.mktemp("prometheus")
    copies = []
    for rule_file in RULE_FILES:
        copy = workdir / rule_file.name
        copy.write_text(shorten_durations(rule_file.read_text()))
        copies.append(copy)
    with LiveWorkload(runs_per_s=100, suboptimal_share=CALM_SHARE, seed=11) as workload, \
            PrometheusServer(workdir, prometheus_test_config(copies, workload.target)) as prometheus:
        stack = Stack(prometheus, workload)
        wait_for(lambda: any(s["value"] == 1 for s in stack.query(f'up{{job="{APP_JOB}"}}')),
                 timeout_s=20, what="the first successful scrape of the workload")
        # every recording rule has data once the longest window (offset 20s + 20s) is covered
        for name in recording_rule_names():
            wait_for(lambda name=name: stack.query(name), timeout_s=DATA_TIMEOUT_S,
                     what=f"recording rule {name} to return series")
        yield stack


def values(samples: Samples) -> list[float]:
    return [s["value"] for s in samples]


def by(samples: Samples, *labels: str) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"].get(label, "") for label in labels): s["value"] for s in samples}


# -- every rule loads and evaluates ---------------------------------------------------------


def test_every_rule_is_loaded_and_evaluates_without_error(stack):
    never = "0001-01-01T00:00:00Z"  # lastEvaluation of a rule not evaluated yet
    rules = wait_for(lambda: (r := stack.prometheus.rules()) and all(x["lastEvaluation"] != never for x in r) and r,
                     timeout_s=10, what="every rule to be evaluated once")
    names = {r["name"] for r in rules}
    assert names == set(recording_rule_names()) | set(alert_names())
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not broken, f"rules failing in Prometheus: {broken}"


# -- recording rules ---------------------------------------------------------------------------


def in_range(lo: float, hi: float) -> Callable[[Samples, Stack], None]:
    def check(samples: Samples, stack: Stack) -> None:
        finite = [v for v in values(samples) if is_finite(v)]
        assert finite, "no finite value"
        assert all(lo <= v <= hi for v in finite), f"values outside [{lo}, {hi}]: {values(samples)}"
    return check


def equals(expected: float, **labels: str) -> Callable[[Samples, Stack], None]:
    def check(samples: Samples, stack: Stack) -> None:
        assert [(s["metric"], s["value"]) for s in samples] == [({"__name__": samples[0]["metric"]["__name__"], **labels}, expected)]
    return check


def all_of(*checks: Callable[[Samples, Stack], None]) -> Callable[[Samples, Stack], None]:
    def check(samples: Samples, stack: Stack) -> None:
        for c in checks:
            c(samples, stack)
    return check


def latency_quantile(samples: Samples, stack: Stack) -> None:
    """Each tool's quantile sits around its catalog latency (the demo draws lognormal durations around it)."""
    expected = by(stack.query("max by (gen_ai_tool_name) (agent_eval_tool_expected_latency_seconds)"), "gen_ai_tool_name")
    assert samples
    for s in samples:
        tool = s["metric"]["gen_ai_tool_name"]
        assert is_finite(s["value"]), f"{tool}: {s['value']}"
        assert 0.2 * expected[(tool,)] <= s["value"] <= 12 * expected[(tool,)], f"{tool}: {s['value']} s vs catalog {expected[(tool,)]} s"


def quantiles_ordered(samples: Samples, stack: Stack) -> None:
    p50, p95, p99 = (by(stack.query(f"tool:gen_ai_execute_tool_duration_seconds:{q}_rate5m"), "gen_ai_tool_name")
                     for q in ("p50", "p95", "p99"))
    for tool in p99:
        if tool in p50 and tool in p95:
            assert p50[tool] <= p95[tool] <= p99[tool], f"{tool}: p50 {p50[tool]} p95 {p95[tool]} p99 {p99[tool]}"


def optimal_tools_score_one(samples: Samples, stack: Stack) -> None:
    optimal = {(s["metric"]["gen_ai_tool_name"], s["metric"]["gen_ai_agent_name"])
               for s in stack.query('agent_eval_tool_calls_total{outcome="optimal"}')}
    means = by(samples, "gen_ai_tool_name", "gen_ai_agent_name")
    scored = [pair for pair in optimal if pair in means and is_finite(means[pair])]
    assert scored, "no optimal tool in the window"
    for pair in scored:
        assert means[pair] == pytest.approx(1.0), f"{pair}: {means[pair]}"


def calm_efficiency(samples: Samples, stack: Stack) -> None:
    """With 5 % worse picks, every agent stays above the production fail threshold (0.85)."""
    finite = {s["metric"]["gen_ai_agent_name"]: s["value"] for s in samples if is_finite(s["value"])}
    assert len(finite) >= 3, samples
    assert all(v > 0.85 for v in finite.values()), finite


def several_agents(samples: Samples, stack: Stack) -> None:
    assert len({s["metric"]["gen_ai_agent_name"] for s in samples}) >= 3, samples


def some_positive(samples: Samples, stack: Stack) -> None:
    assert any(v > 0 for v in values(samples)), values(samples)


def outcomes_known(samples: Samples, stack: Stack) -> None:
    outcomes = {s["metric"]["outcome"] for s in samples}
    assert outcomes <= {"optimal", "acceptable", "suboptimal", "unknown_tool", "error", "completed", "failed"}, outcomes


#: One check per recording rule; a rule without an entry fails the test.
RULE_CHECKS: dict[str, Callable[[Samples, Stack], None]] = {
    "agent_eval:efficiency_threshold:fail": equals(0.85, environment="production"),
    "agent_eval:efficiency_threshold:warn": equals(0.95, environment="production"),
    "agent_eval:excess_cost_budget_usd:per_hour": equals(10.0),
    "agent_eval:suboptimal_ratio:max": equals(0.2),
    "agent_eval:run_completion_ratio:min": equals(0.95),
    "agent_eval:efficiency_vs_yesterday:min_factor": equals(0.8),
    "tool:gen_ai_execute_tool_duration_seconds:p50_rate5m": latency_quantile,
    "tool:gen_ai_execute_tool_duration_seconds:p95_rate5m": latency_quantile,
    "tool:gen_ai_execute_tool_duration_seconds:p99_rate5m": all_of(latency_quantile, quantiles_ordered),
    "tool_agent_task:agent_eval_tool_calls:rate5m": all_of(in_range(0, 1000), some_positive, outcomes_known),
    "tool_agent:agent_eval_tool_efficiency_score:mean_rate5m": all_of(in_range(0, 1), optimal_tools_score_one),
    "agent:agent_eval_tool_efficiency_score:mean_rate5m": all_of(in_range(0, 1), calm_efficiency),
    "agent:agent_eval_tool_efficiency_score:mean_rate1h": all_of(in_range(0, 1), calm_efficiency),
    # its window covers the first seconds of data, too few calls for the calm check
    "agent:agent_eval_tool_efficiency_score:mean_rate1h_offset1d": all_of(in_range(0, 1), several_agents),
    "agent_task:agent_eval_tool_calls:suboptimal_ratio_rate5m": in_range(0, 0.5),
    "tool_agent:agent_eval_tool_excess_cost_usd:per_hour_rate5m": all_of(in_range(0, 1e5), some_positive),
    "agent_eval:agent_eval_tool_excess_cost_usd:per_hour_rate1h": all_of(in_range(0, 1e5), some_positive),
    "agent:agent_eval_tool_cost_usd:per_hour_rate5m": all_of(in_range(0, 1e5), some_positive),
    "agent_task:agent_eval_runs:rate5m": all_of(in_range(0, 1000), some_positive, outcomes_known),
    "agent_task:agent_eval_runs:completion_ratio_rate5m": in_range(0.8, 1),
    "agent_task:agent_eval_run_cost_usd:mean_rate5m": all_of(in_range(0, 5), some_positive),
    "agent_task:agent_eval_run_health_score:mean_rate5m": in_range(1, 100),
    "agent_eval:context_cost_jump:min_factor": equals(2.0),
    "agent_eval:context_cost_jump:min_calls": equals(20.0),
    "tool_agent:agent_eval_tool_context_cost_per_call_usd:rate1h": all_of(in_range(0, 1), some_positive),
    # like the offset1d rule above: its window covers the first seconds of data
    "tool_agent:agent_eval_tool_context_cost_per_call_usd:rate1d_offset1h": in_range(0, 1),
    "agent_eval:judge_score:min": equals(0.6),
    "agent_eval:judge_judgements:min": equals(10.0),
    "agent_task:agent_eval_judge_score:mean_rate1h": all_of(in_range(0.5, 1), several_agents),
    "agent_task:agent_eval_judge_score:count_1h": all_of(in_range(0, 1e6), some_positive),
    "instance:agent_eval_judgements:failed_ratio_rate30m": in_range(0, 0),
}


def test_every_recording_rule_has_a_check():
    assert set(recording_rule_names()) == set(RULE_CHECKS)


@pytest.mark.parametrize("name", recording_rule_names())
def test_recording_rule_returns_plausible_series(stack, name):
    samples = stack.series(name, f"{name} to return series")
    RULE_CHECKS[name](samples, stack)


def test_calm_workload_raises_no_efficiency_alert(stack):
    active = {a["labels"]["alertname"] for a in stack.prometheus.alerts()}
    assert not active & {"AgentEvalEfficiencyBelowThreshold", "AgentEvalEfficiencyDropVsYesterday",
                         "AgentEvalSuboptimalCallRatioHigh", "AgentEvalTargetDown", "AgentEvalMetricsAbsent",
                         "AgentEvalProcessorErrors", "AgentEvalProcessorDroppingData"}, active


# -- the dashboard -----------------------------------------------------------------------------


def dashboard_targets() -> list[tuple[str, dict[str, Any], str]]:
    return [(panel["title"], target, panel["fieldConfig"]["defaults"]["unit"])
            for panel in dashboard_panels() for target in panel["targets"]]


@pytest.mark.parametrize("title, target, unit", dashboard_targets(),
                         ids=[f"{title} {target['refId']}" for title, target, _ in dashboard_targets()])
def test_dashboard_query_returns_plausible_series(stack, title, target, unit):
    expr = grafana_expr(target["expr"])
    samples = stack.series(expr, f"panel {title!r} query {target['refId']} to return series: {expr}")
    finite = [v for v in values(samples) if is_finite(v)]
    assert finite, f"panel {title!r}: only NaN/Inf: {values(samples)}"
    lo, hi = UNIT_RANGES[unit]
    assert all(lo <= v <= hi for v in finite), f"panel {title!r} ({unit}): {finite}"


def test_dashboard_variables_find_values(stack):
    variables = {v["name"]: v for v in dashboard()["templating"]["list"] if v["type"] == "query"}
    for name, variable in variables.items():
        metric, label = variable["query"].removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        found = {s["metric"].get(label) for s in stack.query(f"count by ({label}) ({grafana_expr(metric)})")}
        assert found - {None}, f"variable {name} finds no {label}"
    agents = {s["metric"]["gen_ai_agent_name"] for s in stack.query("count by (gen_ai_agent_name) (agent_eval_tool_calls_total)")}
    assert len(agents) >= 3, agents


# -- the alert when the workload turns bad ------------------------------------------------------


def test_efficiency_alert_fires_when_agents_pick_worse_tools(stack):
    """Near the end of the module: it switches the workload to 90 % worse picks for good."""
    stack.workload.suboptimal_share = BAD_SHARE

    def efficiency_alert() -> list[dict[str, Any]]:
        assert stack.workload.error is None, stack.workload.error
        return [a for a in stack.prometheus.alerts()
                if a["labels"]["alertname"] == "AgentEvalEfficiencyBelowThreshold" and a["state"] in ("pending", "firing")]

    alerts = wait_for(efficiency_alert, timeout_s=ALERT_TIMEOUT_S, interval_s=0.5,
                      what="AgentEvalEfficiencyBelowThreshold to become pending or firing")
    agents = {a["labels"]["gen_ai_agent_name"] for a in alerts}
    assert agents, alerts
    alert = alerts[0]
    assert alert["labels"]["environment"] == "production" and alert["labels"]["severity"] == "warning"
    value = float(alert["value"])
    assert 0 <= value < 0.85, alert
    assert alert["labels"]["gen_ai_agent_name"] in alert["annotations"]["summary"]
    assert "fail threshold 0.85" in alert["annotations"]["summary"]
    assert math.isclose(float(alert["annotations"]["summary"].split("efficiency ")[1].split(" ")[0]), value, abs_tol=0.006)


def test_availability_alerts_fire_when_the_metrics_endpoint_goes_away(stack):
    """Last in the module: it stops the workload's /metrics endpoint."""
    stack.workload.stop()

    def active() -> set[str] | None:
        names = {a["labels"]["alertname"] for a in stack.prometheus.alerts() if a["state"] in ("pending", "firing")}
        return names if {"AgentEvalTargetDown", "AgentEvalMetricsAbsent"} <= names else None

    wait_for(active, timeout_s=ALERT_TIMEOUT_S, interval_s=0.5,
             what="AgentEvalTargetDown and AgentEvalMetricsAbsent to become pending or firing")
    down = next(a for a in stack.prometheus.alerts() if a["labels"]["alertname"] == "AgentEvalTargetDown")
    assert down["labels"]["instance"] == stack.workload.target and down["labels"]["job"] == APP_JOB

"""The dashboard as code: collector-config/grafana/dashboard.py writes agent-eval.json with
grafana-foundation-sdk's typed builders. These tests hold the generated file to the hand-written
one it replaced (every panel and query of it, REFERENCE below) and the committed file to the
generator's output.

REFERENCE was extracted from the hand-written collector-config/grafana/dashboards/agent-eval.json
(commit 8f865f6) before the generator replaced it: per row, every panel's type, title, unit, size
and position, thresholds, and every query (refId, expr, legendFormat, instant, format/exemplar).
A panel added later is free to come anywhere; these must stay, in this order.
"""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest
from ops_helpers import CONFIG_DIR, DASHBOARD, GRAFANA_DATASOURCES, dashboard, dashboard_panels, load_yaml

GENERATOR = CONFIG_DIR / "grafana" / "dashboard.py"

REFERENCE: list[tuple[str, list[dict[str, Any]]]] = [('Overview (selected time range)',
  [{'type': 'stat',
    'title': 'Mean tool efficiency',
    'unit': 'percentunit',
    'grid': (0, 1, 4, 4),
    'targets': [('A',
                 'sum(rate(agent_eval_tool_efficiency_score_sum{dimension="efficiency", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range])) / '
                 'sum(rate(agent_eval_tool_efficiency_score_count{dimension="efficiency", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range]))',
                 '__auto',
                 True)],
    'thresholds': [('red', None), ('orange', 0.85), ('green', 0.95)]},
   {'type': 'stat',
    'title': 'Money wasted',
    'unit': 'currencyUSD',
    'grid': (4, 1, 4, 4),
    'targets': [('A',
                 'sum(increase(agent_eval_tool_excess_cost_usd_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__range]))',
                 '__auto',
                 True)],
    'thresholds': [('green', None), ('orange', 1), ('red', 10)]},
   {'type': 'stat',
    'title': 'Suboptimal calls',
    'unit': 'percentunit',
    'grid': (8, 1, 4, 4),
    'targets': [('A',
                 '(sum(increase(agent_eval_tool_calls_total{outcome="suboptimal", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range])) or vector(0)) / '
                 'sum(increase(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__range]))',
                 '__auto',
                 True)],
    'thresholds': [('green', None), ('orange', 0.1), ('red', 0.2)]},
   {'type': 'stat',
    'title': 'Tool calls',
    'unit': 'ops',
    'grid': (12, 1, 4, 4),
    'targets': [('A',
                 'sum(rate(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__range]))',
                 '__auto',
                 True)],
    'thresholds': [('green', None)]},
   {'type': 'stat',
    'title': 'Run completion',
    'unit': 'percentunit',
    'grid': (16, 1, 4, 4),
    'targets': [('A',
                 '(sum(increase(agent_eval_runs_total{outcome="completed", job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__range])) or vector(0)) / '
                 'sum(increase(agent_eval_runs_total{job=~"$job", gen_ai_agent_name=~"$agent"}[$__range]))',
                 '__auto',
                 True)],
    'thresholds': [('red', None), ('orange', 0.95), ('green', 0.99)]},
   {'type': 'stat',
    'title': 'Cost per run',
    'unit': 'currencyUSD',
    'grid': (20, 1, 4, 4),
    'targets': [('A',
                 'sum(rate(agent_eval_run_cost_usd_sum{job=~"$job", gen_ai_agent_name=~"$agent"}[$__range])) / '
                 'sum(rate(agent_eval_run_cost_usd_count{job=~"$job", gen_ai_agent_name=~"$agent"}[$__range]))',
                 '__auto',
                 True)],
    'thresholds': [('green', None)]}]),
 ('Tool choice',
  [{'type': 'timeseries',
    'title': 'Efficiency by tool and agent',
    'unit': 'percentunit',
    'grid': (0, 6, 12, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name, gen_ai_tool_name) '
                 '(rate(agent_eval_tool_efficiency_score_sum{dimension="efficiency", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval])) / sum by '
                 '(gen_ai_agent_name, gen_ai_tool_name) '
                 '(rate(agent_eval_tool_efficiency_score_count{dimension="efficiency", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}} / {{gen_ai_tool_name}}',
                 False),
                ('B', 'agent_eval:efficiency_threshold:warn', 'warn threshold ({{environment}})', False),
                ('C', 'agent_eval:efficiency_threshold:fail', 'fail threshold ({{environment}})', False)]},
   {'type': 'timeseries',
    'title': 'Efficiency by agent',
    'unit': 'percentunit',
    'grid': (12, 6, 12, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name) (rate(agent_eval_tool_efficiency_score_sum{dimension="efficiency", '
                 'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval])) / sum by '
                 '(gen_ai_agent_name) (rate(agent_eval_tool_efficiency_score_count{dimension="efficiency", '
                 'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}}',
                 False),
                ('B', 'agent_eval:efficiency_threshold:fail', 'fail threshold ({{environment}})', False)]},
   {'type': 'timeseries',
    'title': 'Money wasted per hour by tool -> optimal tool',
    'unit': 'currencyUSD',
    'grid': (0, 14, 12, 8),
    'targets': [('A',
                 '3600 * sum by (gen_ai_agent_name, gen_ai_tool_name, optimal_tool) '
                 '(rate(agent_eval_tool_excess_cost_usd_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}}: {{gen_ai_tool_name}} -> {{optimal_tool}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'Outcome mix',
    'unit': 'percentunit',
    'grid': (12, 14, 12, 8),
    'targets': [('A',
                 'sum by (outcome) (rate(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval])) / ignoring (outcome) group_left () '
                 'sum(rate(agent_eval_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{outcome}}',
                 False)]},
   {'type': 'table',
    'title': 'Top suboptimal tool -> optimal tool pairs',
    'unit': 'short',
    'grid': (0, 22, 12, 8),
    'targets': [('A',
                 'topk(10, sum by (gen_ai_agent_name, gen_ai_tool_name, optimal_tool) '
                 '(increase(agent_eval_tool_calls_total{outcome="suboptimal", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__range])))',
                 '__auto',
                 True,
                 {'format': 'table'}),
                ('B',
                 'topk(10, sum by (gen_ai_agent_name, gen_ai_tool_name, optimal_tool) '
                 '(increase(agent_eval_tool_excess_cost_usd_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__range])))',
                 '__auto',
                 True,
                 {'format': 'table'})]},
   {'type': 'timeseries',
    'title': 'Suboptimal-call ratio by agent and task',
    'unit': 'percentunit',
    'grid': (12, 22, 12, 8),
    'targets': [('A',
                 '(sum by (gen_ai_agent_name, task) (rate(agent_eval_tool_calls_total{outcome="suboptimal", '
                 'job=~"$job", gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval])) or 0 * '
                 'sum by (gen_ai_agent_name, task) (rate(agent_eval_tool_calls_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))) / sum by '
                 '(gen_ai_agent_name, task) (rate(agent_eval_tool_calls_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}} / {{task}}',
                 False),
                ('B', 'agent_eval:suboptimal_ratio:max', 'limit', False)]}]),
 ('Latency',
  [{'type': 'timeseries',
    'title': 'Tool latency p50 / p95 / p99 (fleet)',
    'unit': 's',
    'grid': (0, 31, 12, 8),
    'targets': [('A',
                 'histogram_quantile(0.5, sum by (le, gen_ai_tool_name) '
                 '(rate(gen_ai_execute_tool_duration_seconds_bucket{job=~"$job", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval])))',
                 '{{gen_ai_tool_name}} p50',
                 False),
                ('B',
                 'histogram_quantile(0.95, sum by (le, gen_ai_tool_name) '
                 '(rate(gen_ai_execute_tool_duration_seconds_bucket{job=~"$job", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval])))',
                 '{{gen_ai_tool_name}} p95',
                 False),
                ('C',
                 'histogram_quantile(0.99, sum by (le, gen_ai_tool_name) '
                 '(rate(gen_ai_execute_tool_duration_seconds_bucket{job=~"$job", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval])))',
                 '{{gen_ai_tool_name}} p99',
                 False,
                 {'exemplar': True}),
                ('D',
                 'max by (gen_ai_tool_name) (agent_eval_tool_latency_slo_seconds{job=~"$job", '
                 'gen_ai_tool_name=~"$tool"})',
                 '{{gen_ai_tool_name}} SLO',
                 False)]},
   {'type': 'timeseries',
    'title': 'Per-instance p99 (5-minute sliding window)',
    'unit': 's',
    'grid': (12, 31, 12, 8),
    'targets': [('A',
                 'max by (instance, gen_ai_tool_name) (agent_eval_tool_latency_seconds{quantile="0.99", job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"})',
                 '{{instance}} {{gen_ai_tool_name}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'SLO violations per second',
    'unit': 'ops',
    'grid': (0, 39, 12, 8),
    'targets': [('A',
                 'sum by (gen_ai_tool_name) (rate(agent_eval_tool_slo_violations_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{gen_ai_tool_name}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'Time lost to slower tools',
    'unit': 's',
    'grid': (12, 39, 12, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name) (rate(agent_eval_tool_excess_latency_seconds_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent", gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}}',
                 False)]}]),
 ('Agent runs',
  [{'type': 'timeseries',
    'title': 'Runs per second by outcome',
    'unit': 'ops',
    'grid': (0, 48, 12, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name, task, outcome) (rate(agent_eval_runs_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}} / {{task}}: {{outcome}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'Run completion rate',
    'unit': 'percentunit',
    'grid': (12, 48, 12, 8),
    'targets': [('A',
                 '(sum by (gen_ai_agent_name, task) (rate(agent_eval_runs_total{outcome="completed", job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])) or 0 * sum by (gen_ai_agent_name, task) '
                 '(rate(agent_eval_runs_total{job=~"$job", gen_ai_agent_name=~"$agent"}[$__rate_interval]))) / sum '
                 'by (gen_ai_agent_name, task) (rate(agent_eval_runs_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}} / {{task}}',
                 False),
                ('B', 'agent_eval:run_completion_ratio:min', 'objective', False)]},
   {'type': 'timeseries',
    'title': 'Cost per run (mean and p95)',
    'unit': 'currencyUSD',
    'grid': (0, 56, 12, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name, task) (rate(agent_eval_run_cost_usd_sum{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                 '(rate(agent_eval_run_cost_usd_count{job=~"$job", gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}} / {{task}} mean',
                 False),
                ('B',
                 'histogram_quantile(0.95, sum by (le, gen_ai_agent_name, task) '
                 '(rate(agent_eval_run_cost_usd_bucket{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])))',
                 '{{gen_ai_agent_name}} / {{task}} p95',
                 False)]},
   {'type': 'timeseries',
    'title': 'Run duration p50 / p95',
    'unit': 's',
    'grid': (12, 56, 12, 8),
    'targets': [('A',
                 'histogram_quantile(0.5, sum by (le, gen_ai_agent_name, task) '
                 '(rate(agent_eval_run_duration_seconds_bucket{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])))',
                 '{{gen_ai_agent_name}} / {{task}} p50',
                 False),
                ('B',
                 'histogram_quantile(0.95, sum by (le, gen_ai_agent_name, task) '
                 '(rate(agent_eval_run_duration_seconds_bucket{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])))',
                 '{{gen_ai_agent_name}} / {{task}} p95',
                 False)]},
   {'type': 'timeseries',
    'title': 'Tool calls per run',
    'unit': 'short',
    'grid': (0, 64, 8, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name, task) (rate(agent_eval_run_tool_calls_sum{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                 '(rate(agent_eval_run_tool_calls_count{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 '{{gen_ai_agent_name}} / {{task}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'Redundant and spurious calls, runs over max_calls',
    'unit': 'ops',
    'grid': (8, 64, 8, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name, gen_ai_tool_name) '
                 '(rate(agent_eval_redundant_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 'redundant {{gen_ai_agent_name}} / {{gen_ai_tool_name}}',
                 False),
                ('B',
                 'sum by (gen_ai_agent_name, gen_ai_tool_name) '
                 '(rate(agent_eval_spurious_tool_calls_total{job=~"$job", gen_ai_agent_name=~"$agent", '
                 'gen_ai_tool_name=~"$tool"}[$__rate_interval]))',
                 'spurious {{gen_ai_agent_name}} / {{gen_ai_tool_name}}',
                 False),
                ('C',
                 'sum by (gen_ai_agent_name, task) (rate(agent_eval_runs_over_budget_total{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 'runs over max_calls {{gen_ai_agent_name}} / {{task}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'Run health and tool correctness',
    'unit': 'none',
    'grid': (16, 64, 8, 8),
    'targets': [('A',
                 'sum by (gen_ai_agent_name, task) (rate(agent_eval_run_health_score_sum{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                 '(rate(agent_eval_run_health_score_count{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 'health {{gen_ai_agent_name}} / {{task}}',
                 False),
                ('B',
                 '100 * sum by (gen_ai_agent_name, task) (rate(agent_eval_tool_correctness_score_sum{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval])) / sum by (gen_ai_agent_name, task) '
                 '(rate(agent_eval_tool_correctness_score_count{job=~"$job", '
                 'gen_ai_agent_name=~"$agent"}[$__rate_interval]))',
                 'correctness {{gen_ai_agent_name}} / {{task}}',
                 False)]}]),
 ('Processor health',
  [{'type': 'timeseries',
    'title': 'Spans per second',
    'unit': 'ops',
    'grid': (0, 73, 8, 8),
    'targets': [('A',
                 'sum by (instance) (rate(agent_eval_processor_spans_seen_total{job=~"$job"}[$__rate_interval]))',
                 'seen {{instance}}',
                 False),
                ('B',
                 'sum by (instance) (rate(agent_eval_processor_spans_scored_total{job=~"$job"}[$__rate_interval]))',
                 'scored {{instance}}',
                 False),
                ('C',
                 'sum by (instance) (rate(agent_eval_processor_spans_ignored_total{job=~"$job"}[$__rate_interval]))',
                 'ignored {{instance}}',
                 False)]},
   {'type': 'timeseries',
    'title': 'Processor errors and drops',
    'unit': 'ops',
    'grid': (8, 73, 8, 8),
    'targets': [('A',
                 'sum by (instance) '
                 '(rate(agent_eval_processor_internal_errors_total{job=~"$job"}[$__rate_interval]))',
                 'internal_errors {{instance}}',
                 False),
                ('B',
                 'sum by (instance) (rate(agent_eval_processor_forward_errors_total{job=~"$job"}[$__rate_interval]))',
                 'forward_errors {{instance}}',
                 False),
                ('C',
                 'sum by (instance) '
                 '(rate(agent_eval_processor_enrichments_dropped_total{job=~"$job"}[$__rate_interval]))',
                 'enrichments_dropped {{instance}}',
                 False),
                ('D',
                 'sum by (instance) '
                 '(rate(agent_eval_processor_malformed_tool_spans_total{job=~"$job"}[$__rate_interval]))',
                 'malformed_tool_spans {{instance}}',
                 False),
                ('E',
                 'sum by (instance) (rate(agent_eval_processor_labels_folded_total{job=~"$job"}[$__rate_interval]))',
                 'labels_folded {{instance}}',
                 False),
                ('F',
                 'sum by (instance) '
                 '(rate(agent_eval_processor_runs_calls_dropped_total{job=~"$job"}[$__rate_interval]))',
                 'runs_calls_dropped {{instance}}',
                 False),
                ('G',
                 'sum by (instance) '
                 '(rate(agent_eval_processor_unpriced_llm_calls_total{job=~"$job"}[$__rate_interval]))',
                 'unpriced_llm_calls {{instance}}',
                 False),
                ('H',
                 'sum by (instance, reason) '
                 '(rate(agent_eval_processor_runs_closed_early_total{job=~"$job"}[$__rate_interval]))',
                 'runs closed early ({{reason}}) {{instance}}',
                 False)]},
   {'type': 'stat',
    'title': 'Targets up',
    'unit': 'percentunit',
    'grid': (16, 73, 8, 8),
    'targets': [('A', 'sum(up{job=~"$job"}) / count(up{job=~"$job"})', '__auto', True)],
    'thresholds': [('red', None), ('green', 1)]}])]


def summary(board: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """A dashboard's rows with their panels in REFERENCE's form (panels of collapsed rows included)."""
    rows: list[tuple[str, list[dict[str, Any]]]] = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            rows.append((panel["title"], []))
            for nested in panel.get("panels", []):
                rows[-1][1].append(panel_summary(nested))
        else:
            rows[-1][1].append(panel_summary(panel))
    return rows


def panel_summary(panel: dict[str, Any]) -> dict[str, Any]:
    grid = panel["gridPos"]
    defaults = panel["fieldConfig"]["defaults"]
    steps = [(s["color"], s["value"]) for s in defaults.get("thresholds", {}).get("steps", [])]
    targets = []
    for t in panel["targets"]:
        extra = {k: t[k] for k in ("format", "exemplar") if k in t}
        targets.append((t["refId"], t["expr"], t.get("legendFormat"), bool(t.get("instant")), *([extra] if extra else [])))
    return dict(type=panel["type"], title=panel["title"], unit=defaults["unit"], grid=(grid["x"], grid["y"], grid["w"], grid["h"]),
                targets=targets, **({"thresholds": steps} if steps else {}))


def within_row(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Panels with their height placed from their row's top: a row added above moves a row, not its layout."""
    top = min(p["grid"][1] for p in panels)
    return [{**p, "grid": (p["grid"][0], p["grid"][1] - top, *p["grid"][2:])} for p in panels]


def test_every_panel_and_query_of_the_hand_written_dashboard_survives():
    rows = dict(summary(dashboard()))
    assert [title for title, _ in REFERENCE] == [title for title in rows if title in dict(REFERENCE)], "rows lost or reordered"
    for row, panels in REFERENCE:
        found = {p["title"]: p for p in within_row(rows[row])}
        assert [p["title"] for p in panels] == [t for t in found if t in {p["title"] for p in panels}], f"row {row!r}: panels lost or reordered"
        for panel in within_row(panels):
            assert found[panel["title"]] == panel, f"row {row!r}, panel {panel['title']!r} changed"


# -- the generator ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    """collector-config/grafana/dashboard.py, loaded from its path (collector-config is no package)."""
    spec = importlib.util.spec_from_file_location("agent_eval_dashboard", GENERATOR)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_dashboard_is_what_the_generator_writes(generator):
    assert generator.OUTPUT == DASHBOARD
    assert DASHBOARD.read_text() == generator.render(), \
        "collector-config/grafana/dashboards/agent-eval.json differs from what dashboard.py generates: run make dashboard"


def test_check_mode_fails_on_a_hand_edited_file(generator, tmp_path, monkeypatch, capsys):
    edited = tmp_path / "agent-eval.json"
    edited.write_text(generator.render().replace('"Tool calls"', '"Tool calls (edited)"'))
    monkeypatch.setattr(generator, "OUTPUT", edited)
    assert generator.main(["--check"]) == 1
    assert "make dashboard" in capsys.readouterr().err
    assert generator.main([]) == 0 and generator.main(["--check"]) == 0
    assert edited.read_text() == generator.render()


def test_every_section_is_a_row_of_its_panels(generator):
    rows = [title for title, _ in summary(dashboard())]
    assert rows == [title for title, _ in generator.SECTIONS]
    for (title, section), (_, panels) in zip(generator.SECTIONS, summary(dashboard())):
        assert [p.build().title for p in section()] == [p["title"] for p in panels], title


def test_grafana_provisioning_keeps_loading_it():
    """Same uid, the Prometheus data source through the "Data source" variable, on every panel and query."""
    board = dashboard()
    assert board["uid"] == "otel-agent-eval" and board["title"] == "otel-agent-eval: agent tool efficiency"
    variable = next(v for v in board["templating"]["list"] if v["name"] == "datasource")
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    assert "prometheus" in {s["type"] for s in load_yaml(GRAFANA_DATASOURCES)["datasources"]}
    for panel in dashboard_panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (panel["title"], target["refId"])
    assert sorted(p["id"] for p in board["panels"]) == list(range(1, len(board["panels"]) + 1))

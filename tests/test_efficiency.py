"""The article's formulas and the choice of the best tool under a profile."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, strategies as st

from otel_agent_eval import load_catalog
from otel_agent_eval.core.efficiency import best_tool, complexity_mismatch, complexity_score, ratio_score, weighted_score


@pytest.mark.parametrize("actual,optimal,expected", [
    (0.0, 0.0, 1.0),          # both free
    (None, 0.01, 0.0),        # unknown tool
    (math.inf, 0.0, 0.0),     # unknown tool, free optimal
    (0.0, 0.01, 0.0),         # free tool where the optimal costs: wrong tool
    (0.003, 0.0, 0.0),        # costly tool where the optimal is free
    (0.01, 0.002, 0.2),       # 5x the optimal cost
    (0.001, 0.002, 1.0),      # cheaper than the optimal: clipped to 1
    (400, 30, 0.075),
])
def test_ratio_score_special_cases(actual, optimal, expected):
    assert ratio_score(actual, optimal) == pytest.approx(expected)


@given(st.floats(0, 1e6), st.floats(0, 1e6))
def test_ratio_score_stays_in_unit_interval(actual, optimal):
    assert 0.0 <= ratio_score(actual, optimal) <= 1.0


def test_weighted_score_and_complexity_fit():
    assert weighted_score(0.0, 0.075, 0.2, 0.8) == pytest.approx(0.06)
    assert [complexity_score("advanced", t) for t in ("advanced", "moderate", "simple", None)] == [1.0, 0.5, 0.0, 0.0]
    assert complexity_mismatch("advanced", "simple") == "Complexity mismatch: advanced task using simple tool"
    assert complexity_mismatch("simple", "simple") is None


def test_best_tool_follows_the_profile():
    catalog = load_catalog()
    search = catalog.tools_with("search")
    assert best_tool(search, catalog.profile("balanced")).name == "local_index"
    arithmetic = catalog.tools_with("arithmetic")
    assert best_tool(arithmetic, catalog.profile("cost_critical")).name == "basic_calculator"
    assert best_tool([], catalog.profile()) is None


def test_best_tool_trades_cost_against_latency():
    from otel_agent_eval.config.catalog import Profile, Tool

    cheap_slow = Tool("cheap_slow", 0.001, 1000, ("x",), "simple")
    dear_fast = Tool("dear_fast", 0.010, 100, ("x",), "simple")
    assert best_tool([cheap_slow, dear_fast], Profile("c", 0.8, 0.2)).name == "cheap_slow"
    assert best_tool([cheap_slow, dear_fast], Profile("l", 0.2, 0.8)).name == "dear_fast"


CATALOG_WITH_TIERS = """
tools:
  quick_lookup: {cost_usd: 0.0, latency_ms: 5, capabilities: [search], complexity: simple}
  deep_research: {cost_usd: 0.02, latency_ms: 900, capabilities: [search], complexity: advanced}
  analyst: {cost_usd: 0.05, latency_ms: 1500, capabilities: [search], complexity: advanced}
tasks:
  research:
    match: {gen_ai.agent.name: researcher}
    capability: search
    complexity: advanced
"""


def test_without_optimal_tool_the_optimal_pick_fits_the_routes_complexity():
    """The cheapest capable tool (a simple one) is no optimal pick for an advanced task: it would score
    `optimal` with verdict fail, and the fitting tool `suboptimal`."""
    from otel_agent_eval.config.catalog import parse_catalog
    from otel_agent_eval.core.scoring import Scorer

    scorer = Scorer(parse_catalog(CATALOG_WITH_TIERS))
    route = scorer.route("researcher")
    assert scorer.optimal_for(route).name == "deep_research"  # the best by profile among the advanced tools
    fitting, cheap = scorer.static_score("deep_research", route), scorer.static_score("quick_lookup", route)
    assert (fitting.outcome, fitting.verdict, fitting.efficiency) == ("optimal", "pass", 1.0)
    assert cheap.outcome == "suboptimal" and cheap.efficiency < fitting.efficiency


def test_the_offline_metric_agrees_on_the_fitting_pick():
    from otel_agent_eval.config.catalog import parse_catalog
    from otel_agent_eval.offline.deepeval_metrics import ToolEfficiencyMetric

    metric = ToolEfficiencyMetric.from_catalog(parse_catalog(CATALOG_WITH_TIERS), task="research")
    assert metric.optimal_tool == "deep_research"

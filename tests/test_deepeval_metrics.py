"""The efficiency metrics beyond the article's examples: reasons, fallbacks, catalogs, evaluate()."""
from __future__ import annotations

import pytest
from deepeval.test_case import LLMTestCase, ToolCall

from otel_agent_eval import ContextualComplexityMetric, ToolEfficiencyMetric, load_catalog

FAQ = dict(tool_costs={"local_index": 0.0, "web_search": 0.003}, tool_latencies={"local_index": 30, "web_search": 400},
           optimal_tool="local_index", threshold=0.8, cost_weight=0.2, latency_weight=0.8)


def case(*tools, metadata=None):
    return LLMTestCase(input="q", actual_output="a", tools_called=[ToolCall(name=t) for t in tools] or None,
                       additional_metadata=metadata)


def test_slow_tool_score_and_reason_name_tool_and_both_components():
    metric = ToolEfficiencyMetric(**FAQ)
    assert metric.measure(case("web_search")) == pytest.approx(0.06)
    assert not metric.is_successful()
    assert metric.reason == ("Suboptimal tool 'web_search' selected. Cost efficiency: 0.00, "
                             "Latency efficiency: 0.08. Optimal tool: 'local_index'.")
    assert metric.score_breakdown == {"cost": 0.0, "latency": pytest.approx(0.075)}


def test_tools_fall_back_to_additional_metadata_and_first_tool_counts():
    metric = ToolEfficiencyMetric(**FAQ)
    assert metric.measure(case(metadata={"tools_used": ["local_index", "web_search"]})) == 1.0
    assert metric.reason.startswith("Optimal tool 'local_index' selected.")
    assert metric.measure(case()) == 0.0 and metric.reason == "No tools were used"


def test_unknown_tool_scores_zero():
    metric = ToolEfficiencyMetric(**FAQ)
    assert metric.measure(case("mystery")) == 0.0 and not metric.is_successful()


def test_acceptable_tool_passes_below_threshold():
    metric = ToolEfficiencyMetric(**{**FAQ, "acceptable_tools": ["web_search"]})
    assert metric.measure(case("web_search")) < 0.8
    assert metric.is_successful()
    assert metric.reason.startswith("Acceptable tool 'web_search'")


def test_complexity_metric_catches_over_and_under_engineering():
    kwargs = dict(tool_costs={"simple_filter": 0.0, "ml_pipeline": 0.10},
                  tool_latencies={"simple_filter": 100, "ml_pipeline": 8000}, threshold=0.8)
    under = ContextualComplexityMetric(task_complexity="advanced", optimal_tool="ml_pipeline", **kwargs)
    under.measure(case("simple_filter"))
    assert not under.is_successful() and "Complexity mismatch: advanced task using simple tool" in under.reason
    over = ContextualComplexityMetric(task_complexity="simple", optimal_tool="simple_filter", **kwargs)
    assert over.measure(case("ml_pipeline")) == 0.0
    assert "Complexity mismatch: simple task using advanced tool" in over.reason
    tiers = ContextualComplexityMetric(task_complexity="simple", optimal_tool="simple_filter",
                                       tool_complexity={"simple_filter": "moderate"}, **kwargs)
    assert tiers.measure(case("simple_filter")) == 0.5


def test_metrics_from_catalog_use_route_profile_and_environment():
    catalog = load_catalog()
    metric = ToolEfficiencyMetric.from_catalog(catalog, task="faq", environment="staging")
    assert (metric.optimal_tool, metric.cost_weight, metric.latency_weight, metric.threshold) == ("local_index", 0.2, 0.8, 0.75)
    # The live scorer's number for this task: 0.06 on cost and latency, halved for a moderate tool on a simple task.
    assert metric.measure(case("web_search")) == pytest.approx(0.03)
    assert metric.score_breakdown == {"cost": 0.0, "latency": pytest.approx(0.075), "complexity": 0.5}
    # A tool without the task's capability scores 0, as live: cheaper is no merit in a tool that cannot do it.
    arithmetic = ToolEfficiencyMetric.from_catalog(catalog, task="arithmetic")
    assert arithmetic.measure(case("local_index")) == 0.0 and not arithmetic.is_successful()
    assert arithmetic.reason.startswith("Capability mismatch: 'local_index'")
    complexity = ContextualComplexityMetric.from_catalog(catalog, task="forecasting")
    assert complexity.task_complexity == "advanced"
    complexity.measure(case("simple_filter"))
    assert not complexity.is_successful()
    assert ToolEfficiencyMetric.from_catalog(task="arithmetic").measure(case("calculator")) == 1.0
    with pytest.raises(ValueError, match="no task 'nope'"):
        ToolEfficiencyMetric.from_catalog(catalog, task="nope")


def test_metrics_run_through_deepeval_evaluate(tmp_path, monkeypatch):
    from deepeval import evaluate

    monkeypatch.chdir(tmp_path)
    cases = [case("local_index"), case("web_search")]
    result = evaluate(test_cases=cases, metrics=[ToolEfficiencyMetric(**FAQ)])
    outcomes = sorted((r.metrics_data[0].score, r.metrics_data[0].success) for r in result.test_results)
    assert outcomes == [(pytest.approx(0.06), False), (1.0, True)]
    assert not (tmp_path / ".deepeval").exists()


def test_from_catalog_takes_a_catalog_path_as_every_entry_point_does(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text("tools:\n  kb: {cost_usd: 0.0, latency_ms: 10, capabilities: [faq_lookup], complexity: simple}\n"
                    "  web: {cost_usd: 0.01, latency_ms: 500, capabilities: [faq_lookup], complexity: simple}\n"
                    "tasks:\n  faq: {match: {gen_ai.agent.name: support}, capability: faq_lookup}\n")
    for given in (path, str(path)):
        metric = ToolEfficiencyMetric.from_catalog(given, task="faq")
        assert metric.optimal_tool == "kb" and metric.measure(case("kb")) == 1.0 and metric.is_successful()
        assert metric.measure(case("web")) < 0.1 and not metric.is_successful()


def test_from_catalog_of_an_unrouted_run_scores_as_live_and_complexity_says_what_to_do():
    """`run.task` is '' for a run no route matched: the metric gives the live scorer's unrouted score."""
    from otel_agent_eval.core.scoring import Scorer

    catalog = load_catalog()
    metric = ToolEfficiencyMetric.from_catalog(catalog, task="")
    for tool in ("local_index", "web_search", "ml_pipeline", "mystery"):
        live = Scorer(catalog).static_score(tool, None)
        assert metric.measure(case(tool)) == live.efficiency and metric.reason == live.reason
        assert metric.is_successful() == (live.verdict != "fail")
    with pytest.raises(ValueError, match="has no complexity for ContextualComplexityMetric; give task_complexity="):
        ContextualComplexityMetric.from_catalog(catalog, task="")
    with pytest.raises(ValueError, match=r"no task 'nope'.*task='' for unrouted"):
        ToolEfficiencyMetric.from_catalog(catalog, task="nope")


def test_a_tool_the_route_names_counts_as_capable_as_scoring_md_says():
    """docs/scoring.md: a tool without the route's capability scores 0 unless the route names it."""
    from otel_agent_eval.config.catalog import parse_catalog

    tools = ("tools:\n  kb: {cost_usd: 0.001, latency_ms: 20, capabilities: [faq_lookup], complexity: simple}\n"
             "  calc: {cost_usd: 0.001, latency_ms: 20, capabilities: [arithmetic], complexity: simple}\n"
             "tasks:\n  faq: {match: {gen_ai.agent.name: s}, capability: faq_lookup, optimal_tool: kb")
    for named, expected in (("}", 0.0), (", expected_tools: [kb, calc]}", 1.0), (", acceptable_tools: [calc]}", 1.0)):
        metric = ToolEfficiencyMetric.from_catalog(parse_catalog(tools + named + "\n"), task="faq")
        assert metric.measure(case("calc")) == expected, named
        assert metric.reason.startswith("Capability mismatch") == (expected == 0.0)

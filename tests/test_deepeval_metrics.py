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

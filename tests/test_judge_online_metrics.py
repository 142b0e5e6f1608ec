"""The judge's metric families: bounded like every other (agents capped, label sets charged to the sample budget),
present only while a judge runs, every outcome present from the start."""
from __future__ import annotations

from prometheus_client import CollectorRegistry

from otel_agent_eval.judge.result import JudgeResult
from otel_agent_eval.metrics import budget as b
from otel_agent_eval.metrics.collector import EvalMetrics
from otel_agent_eval.metrics.names import JUDGE_OUTCOMES


def _result(score: float) -> JudgeResult:
    return JudgeResult(score=score, reason="r", part="judge", success=score >= 0.5, threshold=0.5, judge_model="m",
                       metric="ToolCorrectnessMetric", metric_version="deepeval 4", prompt_version="sha256:abc",
                       sample_rate=0.1)


def test_outcomes_are_present_at_zero_and_the_families_only_with_a_judge():
    registry = CollectorRegistry()
    metrics = EvalMetrics(registry=registry)
    assert registry.get_sample_value("agent_eval_judgements_total", {"outcome": "judged"}) is None
    metrics.start_judging()
    assert {o: registry.get_sample_value("agent_eval_judgements_total", {"outcome": o}) for o in JUDGE_OUTCOMES} == \
        dict.fromkeys(JUDGE_OUTCOMES, 0.0)
    assert registry.get_sample_value("agent_eval_judge_cost_usd_total") == 0.0


def test_agents_past_the_cap_fold_into_other_and_count():
    registry = CollectorRegistry()
    metrics = EvalMetrics(registry=registry, max_agents=2)
    judge = metrics.start_judging()
    for agent in ("a", "b", "c", "d"):
        judge.judged(agent, "task", _result(0.5))
    labels = {"task": "task", "judge_model": "m", "prompt_version": "sha256:abc"}
    counts = {agent: registry.get_sample_value("agent_eval_judge_score_count", {**labels, "gen_ai_agent_name": agent})
              for agent in ("a", "b", "c", "_other_")}
    assert counts == {"a": 1, "b": 1, "c": None, "_other_": 2}  # as run series fold: the agent, not the task
    assert registry.get_sample_value("agent_eval_processor_labels_folded_total") == 2
    assert registry.get_sample_value("agent_eval_judgements_total", {"outcome": "judged"}) == 4


def test_a_full_sample_budget_folds_new_label_sets():
    registry = CollectorRegistry()
    metrics = EvalMetrics(registry=registry, max_samples=30)  # a tenth kept for _other_: 27 samples, two score series
    judge = metrics.start_judging()
    for task in ("t1", "t2", "t3", "t4"):
        judge.judged("agent", task, _result(1.0))
    tasks = {s.labels["task"] for m in registry.collect() if m.name == "agent_eval_judge_score" for s in m.samples}
    assert b.JUDGE == 13 and tasks == {"t1", "t2", "_other_"}

"""The online judge through the real span processor: never in the app's way, every outcome counted, results as events.

Real OpenTelemetry SDK spans and LoggerProvider, a real local HTTP judge endpoint (tests/judge_endpoint.py) that
answers, hangs, answers garbage, 429s or 500s. No assertion on wall-clock time: "not blocked" is shown by structure
(the app's calls return while the endpoint still holds a judgement), and timeouts only decide outcomes.
"""
from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from judge_endpoint import Endpoint, HttpJudge
from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.judge.budget import JudgeBudget
from otel_agent_eval.judge.online import OUTCOMES
from otel_agent_eval.judge.sampling import chosen

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}


def _tool(name: str) -> dict[str, str]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.arguments": '{"q": "x"}'}


@pytest.fixture
def endpoint():
    served = Endpoint()
    yield served
    served.close()


def _app(judge, *, background: bool = False, **options):
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    spans = InMemorySpanExporter()
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=SimpleSpanProcessor(spans), background=background,
                                       logger_provider=logger_provider, judge=judge, **options)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, processor, registry, logs


def _runs(tracer, n: int) -> list[tuple[int, int]]:
    """`n` agent runs of two tool calls; their (trace id, root span id)."""
    roots = []
    for _ in range(n):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT) as root:
            for name in ("local_index", "web_search"):
                with tracer.start_as_current_span(f"execute_tool {name}", attributes=_tool(name)):
                    pass
        roots.append((root.context.trace_id, root.context.span_id))
    return roots


def _outcomes(registry: CollectorRegistry) -> dict[str, float]:
    return {o: registry.get_sample_value("agent_eval_judgements_total", {"outcome": o}) for o in OUTCOMES}


def test_judgements_are_evaluation_events_parented_to_the_run_with_provenance_and_metrics(endpoint):
    provider, processor, registry, logs = _app(HttpJudge(endpoint.url), judge_sample_rate=1.0)
    roots = _runs(provider.get_tracer("app"), 5)
    online = processor.pipeline.judge_run
    assert online.flush(30)
    records = [r.log_record for r in logs.get_finished_logs()
               if r.log_record.event_name == "gen_ai.evaluation.result"
               and r.log_record.attributes["gen_ai.evaluation.name"] == "agent_eval.judge.tool_selection"]
    assert sorted((r.trace_id, r.span_id) for r in records) == sorted(roots)  # one per run, on the run's span
    attrs = records[0].attributes
    assert attrs["gen_ai.evaluation.score.value"] == 0.75 and attrs["gen_ai.evaluation.score.label"] == "pass"
    assert attrs["gen_ai.evaluation.explanation"].startswith("tools fit the task")
    assert (attrs["agent_eval.judge.model"], attrs["agent_eval.judge.metric"], attrs["agent_eval.judge.prompt_version"],
            attrs["agent_eval.judge.sample_rate"]) == ("scripted-judge", "ToolCorrectnessMetric", "p1", 1.0)
    assert attrs["gen_ai.agent.name"] == "support_agent"
    # what the judge was sent: the run's calls in order and the tools it had, built on the worker (A's request_of)
    assert [r["tools_called"] for r in endpoint.requests] == [["local_index", "web_search"]] * 5
    assert {"local_index", "web_search"} <= set(endpoint.requests[0]["available_tools"])
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 5.0}
    labels = {"gen_ai_agent_name": "support_agent", "task": "", "judge_model": "scripted-judge", "prompt_version": "p1"}
    task = next(iter({s.labels["task"] for m in registry.collect() if m.name == "agent_eval_judge_score" for s in m.samples}))
    labels["task"] = task
    assert registry.get_sample_value("agent_eval_judge_score_count", labels) == 5
    assert registry.get_sample_value("agent_eval_judge_score_sum", labels) == pytest.approx(3.75)
    assert registry.get_sample_value("agent_eval_judge_tokens_total", {"gen_ai_token_type": "input"}) == 600
    assert registry.get_sample_value("agent_eval_judge_tokens_total", {"gen_ai_token_type": "output"}) == 150
    assert registry.get_sample_value("agent_eval_judge_cost_usd_total") == pytest.approx(5 * 150 * 1e-5)
    assert registry.get_sample_value("agent_eval_judge_duration_seconds_count") == 5
    processor.shutdown()


def test_only_the_sampled_runs_are_judged_and_the_rest_counted(endpoint):
    provider, processor, registry, _ = _app(HttpJudge(endpoint.url, sample_rate=0.3), judge_sample_rate=0.3)
    roots = _runs(provider.get_tracer("app"), 60)
    assert processor.pipeline.judge_run.flush(30)
    wanted = {f"{t:032x}" for t, _ in roots if chosen(t, 0.3)}
    assert {r["trace_id"] for r in endpoint.requests} == wanted
    outcomes = _outcomes(registry)
    assert outcomes["judged"] == len(wanted) and outcomes["sampled_out"] == 60 - len(wanted)
    processor.shutdown()


@pytest.mark.parametrize("background", [False, True])
def test_a_hanging_judge_never_holds_up_span_end_nor_shutdown(endpoint, background):
    """With the pipeline on the ending thread (background=False), `span.end()` runs the evaluation and offers the run:
    it returns while the endpoint still holds judgements; shutdown returns while it still holds them too."""
    endpoint.mode = "hang"
    provider, processor, registry, _ = _app(HttpJudge(endpoint.url), background=background, judge_sample_rate=1.0,
                                            judge_timeout_s=0.2, judge_queue_limit=4)
    online = processor.pipeline.judge_run
    _runs(provider.get_tracer("app"), 20)  # every span.end() of them returned
    processor.force_flush()
    assert not endpoint.release.is_set()
    online.stop(timeout_s=0.5)  # as processor.shutdown() does, with a short timeout
    processor.shutdown()
    assert endpoint.hanging >= 1 and not endpoint.release.is_set()  # shutdown done, the judge still hung
    assert online._thread is not None and not online._thread.is_alive()
    outcomes = _outcomes(registry)
    assert sum(outcomes.values()) == 20  # every run accounted for
    assert outcomes["timed_out"] >= 1 and outcomes["dropped"] >= 1 and outcomes["judged"] == 0
    assert outcomes == {**dict.fromkeys(OUTCOMES, 0.0), **{k: v for k, v in online.counts.items() if v}}


@pytest.mark.parametrize("mode", ["garbage", "429", "500"])
def test_a_failing_judge_is_counted_and_never_raises_into_the_app(endpoint, mode, caplog):
    endpoint.mode = mode
    provider, processor, registry, logs = _app(HttpJudge(endpoint.url), judge_sample_rate=1.0)
    with caplog.at_level(logging.WARNING, logger="otel_agent_eval.judge"):
        _runs(provider.get_tracer("app"), 8)
        assert processor.pipeline.judge_run.flush(30)
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "failed": 8.0}
    failures = [r for r in caplog.records if "judgement failed" in r.getMessage()]
    assert len(failures) == 1  # logged once, counted every time
    assert not [r for r in logs.get_finished_logs() if r.log_record.attributes.get("gen_ai.evaluation.name")
                == "agent_eval.judge.tool_selection"]
    processor.shutdown()


def test_a_full_queue_drops_and_counts(endpoint):
    endpoint.mode = "hang"
    provider, processor, registry, _ = _app(HttpJudge(endpoint.url), judge_sample_rate=1.0, judge_queue_limit=2,
                                            judge_timeout_s=30.0)
    tracer = provider.get_tracer("app")
    _runs(tracer, 1)
    assert endpoint.wait_hanging(1)  # the worker is in that judgement
    _runs(tracer, 9)  # two queued, seven dropped
    online = processor.pipeline.judge_run
    assert online.counts["dropped"] == 7 and online.queued == 2
    endpoint.mode = "ok"
    endpoint.release.set()
    assert online.flush(30)
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 3.0, "dropped": 7.0}
    processor.shutdown()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_counts_over_budget_runs_and_resumes(endpoint):
    provider, processor, registry, _ = _app(HttpJudge(endpoint.url), judge_sample_rate=1.0)
    online = processor.pipeline.judge_run
    clock = Clock()
    online.budget = JudgeBudget(per_minute=3, usd_per_hour=None, clock=clock)
    tracer = provider.get_tracer("app")
    _runs(tracer, 5)
    assert online.flush(30)
    clock.now = 61.0
    _runs(tracer, 2)
    assert online.flush(30)
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 5.0, "over_budget": 2.0}
    processor.shutdown()


def test_judging_is_off_by_default():
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
    assert processor.pipeline.judge_run is None
    assert not [m for m in processor.metrics.registry.collect() if m.name.startswith("agent_eval_judge")]
    processor.shutdown()

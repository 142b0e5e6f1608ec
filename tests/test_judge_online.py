"""The online judge through the real span processor: never in the app's way, every outcome counted, results as events.

Real OpenTelemetry SDK spans and LoggerProvider, deepeval's real metric and OpenAI client (`DeepEvalJudge`) against
the scripted local OpenAI-compatible server (tests/judge_server.py) that answers, hangs, answers garbage, 429s or
500s. No assertion on wall-clock time: "not blocked" is shown by structure (the app's calls return while the server
still holds a judgement), and timeouts only decide outcomes.
"""
from __future__ import annotations

import logging
import re
import threading

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from judge_server import GARBAGE, JudgeServer, Reply
from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.catalog import ModelPrice
from otel_agent_eval.judge.deepeval_judge import DeepEvalJudge
from otel_agent_eval.judge.models import judge_model
from otel_agent_eval.judge.budget import JudgeBudget
from otel_agent_eval.judge.online import OUTCOMES
from otel_agent_eval.judge.sampling import chosen

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}


def _tool(name: str) -> dict[str, str]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.arguments": '{"q": "x"}'}


PRICE = ModelPrice(input_per_1k=0.01, output_per_1k=0.03)  # the judge model's, as a catalog would give it


@pytest.fixture
def server():
    with JudgeServer() as running:
        yield running


def _judge(server: JudgeServer, **options) -> DeepEvalJudge:
    return DeepEvalJudge(judge_model("judge-model", base_url=server.base_url, models={"judge-model": PRICE}), **options)


def _questions(server: JudgeServer) -> list[int]:
    """The run numbers in the tool-selection prompts the server got (each run's input names its number)."""
    return [int(n) for prompt in server.prompts() for n in re.findall(r"Question #(\d+)\b", prompt)[:1]]


def _wait(condition, timeout_s: float = 30.0) -> bool:
    """Wait for `condition()` (another thread makes it true): polled, bounded, never asserted on time."""
    done = threading.Event()
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return True
        done.wait(0.02)
    return condition()


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
    for i in range(n):
        with tracer.start_as_current_span("invoke_agent support_agent",
                                          attributes={**AGENT, "input.value": f"Question #{i}: where is my order?"}) as root:
            for name in ("local_index", "web_search"):
                with tracer.start_as_current_span(f"execute_tool {name}", attributes=_tool(name)):
                    pass
        roots.append((root.context.trace_id, root.context.span_id))
    return roots


def _outcomes(registry: CollectorRegistry) -> dict[str, float]:
    return {o: registry.get_sample_value("agent_eval_judgements_total", {"outcome": o}) for o in OUTCOMES}


def test_judgements_are_evaluation_events_parented_to_the_run_with_provenance_and_metrics(server):
    server.selection = (0.75, "local_index answers order questions; web_search was not needed.")
    provider, processor, registry, logs = _app(_judge(server), judge_sample_rate=1.0)
    roots = _runs(provider.get_tracer("app"), 5)
    online = processor.pipeline.judge_run
    assert online.flush(60)
    records = [r.log_record for r in logs.get_finished_logs()
               if r.log_record.event_name == "gen_ai.evaluation.result"
               and r.log_record.attributes["gen_ai.evaluation.name"] == "agent_eval.judge.tool_selection"]
    assert sorted((r.trace_id, r.span_id) for r in records) == sorted(roots)  # one per run, on the run's span
    attrs = records[0].attributes
    assert attrs["gen_ai.evaluation.score.value"] == 0.75 and attrs["gen_ai.evaluation.score.label"] == "pass"
    assert "web_search was not needed" in attrs["gen_ai.evaluation.explanation"]
    assert (attrs["agent_eval.judge.model"], attrs["agent_eval.judge.metric"], attrs["agent_eval.judge.sample_rate"],
            attrs["agent_eval.judge.part"]) == ("judge-model", "ToolCorrectnessMetric", 1.0, "judge")
    assert attrs["agent_eval.judge.prompt_version"].startswith("sha256:")
    assert attrs["agent_eval.judge.metric_version"].startswith("deepeval ")
    assert attrs["gen_ai.agent.name"] == "support_agent" and attrs["agent_eval.judge.cost_usd"] > 0
    # what the judge was asked: each run's input and calls, with the tools it had (built on the worker)
    assert sorted(_questions(server)) == list(range(5))
    prompt = server.prompts()[0]
    assert "local_index" in prompt and "web_search" in prompt
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 5.0}
    task = next(s.labels["task"] for m in registry.collect() if m.name == "agent_eval_judge_score" for s in m.samples)
    labels = {"gen_ai_agent_name": "support_agent", "task": task, "judge_model": "judge-model",
              "prompt_version": attrs["agent_eval.judge.prompt_version"]}
    assert registry.get_sample_value("agent_eval_judge_score_count", labels) == 5
    assert registry.get_sample_value("agent_eval_judge_score_sum", labels) == pytest.approx(3.75)
    tokens_in = registry.get_sample_value("agent_eval_judge_tokens_total", {"gen_ai_token_type": "input"})
    tokens_out = registry.get_sample_value("agent_eval_judge_tokens_total", {"gen_ai_token_type": "output"})
    assert tokens_in > 0 and tokens_out > 0
    assert registry.get_sample_value("agent_eval_judge_cost_usd_total") == pytest.approx(
        tokens_in / 1000 * PRICE.input_per_1k + tokens_out / 1000 * PRICE.output_per_1k)  # priced as every LLM call
    assert registry.get_sample_value("agent_eval_judge_duration_seconds_count") == 5
    processor.shutdown()


def test_only_the_sampled_runs_are_judged_and_the_rest_counted(server):
    provider, processor, registry, _ = _app(_judge(server, arguments=False), judge_sample_rate=0.3)
    roots = _runs(provider.get_tracer("app"), 60)
    assert processor.pipeline.judge_run.flush(60)
    wanted = [i for i, (t, _) in enumerate(roots) if chosen(t, 0.3)]
    assert sorted(_questions(server)) == wanted
    outcomes = _outcomes(registry)
    assert outcomes["judged"] == len(wanted) and outcomes["sampled_out"] == 60 - len(wanted)
    processor.shutdown()


@pytest.mark.parametrize("background", [False, True])
def test_a_hanging_judge_never_holds_up_span_end_nor_shutdown(server, background):
    """With the pipeline on the ending thread (background=False), `span.end()` runs the evaluation and offers the run:
    it returns while the server still holds judgements; shutdown returns while it still holds them too."""
    server.queue(*[Reply(hang=True) for _ in range(40)])
    provider, processor, registry, _ = _app(_judge(server), background=background, judge_sample_rate=1.0,
                                            judge_timeout_s=0.2, judge_queue_limit=4)
    online = processor.pipeline.judge_run
    _runs(provider.get_tracer("app"), 20)  # every span.end() of them returned
    processor.force_flush()
    assert _wait(lambda: len(server.requests) >= 1)
    online.shutdown_timeout_s = 0.5  # processor.shutdown() stops the judge within this
    processor.shutdown()
    assert not server._released.is_set()  # shutdown done, the judge's requests still held
    assert online._thread is not None and not online._thread.is_alive()
    outcomes = _outcomes(registry)
    assert sum(outcomes.values()) == 20  # every run accounted for
    assert outcomes["timed_out"] >= 1 and outcomes["dropped"] >= 1 and outcomes["judged"] == 0
    assert outcomes == {**dict.fromkeys(OUTCOMES, 0.0), **{k: v for k, v in online.counts.items() if v}}


@pytest.mark.parametrize("reply", [Reply(GARBAGE), Reply(status=429), Reply(status=500)], ids=["garbage", "429", "500"])
def test_a_failing_judge_is_counted_and_never_raises_into_the_app(server, reply, caplog):
    server.queue(*[reply for _ in range(20)])  # deepeval's client retries a 429 or a 500 once before it gives up
    provider, processor, registry, logs = _app(_judge(server, arguments=False), judge_sample_rate=1.0, judge_timeout_s=60)
    with caplog.at_level(logging.WARNING, logger="otel_agent_eval.judge"):
        _runs(provider.get_tracer("app"), 3)
        assert processor.pipeline.judge_run.flush(120)
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "failed": 3.0}
    failures = [r for r in caplog.records if "judgement failed" in r.getMessage()]
    assert len(failures) == 1  # logged once, counted every time
    assert not [r for r in logs.get_finished_logs() if r.log_record.attributes.get("gen_ai.evaluation.name")
                == "agent_eval.judge.tool_selection"]
    processor.shutdown()


def test_a_full_queue_drops_and_counts(server):
    server.queue(Reply(hang=True))
    provider, processor, registry, _ = _app(_judge(server, arguments=False), judge_sample_rate=1.0, judge_queue_limit=2,
                                            judge_timeout_s=60.0)
    tracer = provider.get_tracer("app")
    _runs(tracer, 1)
    assert _wait(lambda: len(server.requests) >= 1)  # the worker is in that judgement, held by the server
    _runs(tracer, 9)  # two queued, seven dropped
    online = processor.pipeline.judge_run
    assert online.counts["dropped"] == 7 and online.queued == 2
    server.release()  # the held request answers 503, deepeval's client retries it and is answered; then the two queued
    assert online.flush(60)
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 3.0, "dropped": 7.0}
    processor.shutdown()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_counts_over_budget_runs_and_resumes(server):
    provider, processor, registry, _ = _app(_judge(server, arguments=False), judge_sample_rate=1.0)
    online = processor.pipeline.judge_run
    clock = Clock()
    online.budget = JudgeBudget(per_minute=3, usd_per_hour=None, clock=clock)
    tracer = provider.get_tracer("app")
    _runs(tracer, 5)
    assert online.flush(60)
    clock.now = 61.0
    _runs(tracer, 2)
    assert online.flush(60)
    assert _outcomes(registry) == {**dict.fromkeys(OUTCOMES, 0.0), "judged": 5.0, "over_budget": 2.0}
    processor.shutdown()


def test_judging_is_off_by_default():
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
    assert processor.pipeline.judge_run is None
    assert not [m for m in processor.metrics.registry.collect() if m.name.startswith("agent_eval_judge")]
    processor.shutdown()


def test_what_leaves_for_the_judge_is_redacted(server):
    """A judge exports content: the run's redaction applies to the request, built on the worker."""
    provider, processor, registry, logs = _app(_judge(server), judge_sample_rate=1.0, redact_keys="secret")
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent support_agent",
                                      attributes={**AGENT, "input.value": '{"question": "order?", "secret": "hunter2"}'}):
        with tracer.start_as_current_span("execute_tool web_search", attributes={
                **_tool("web_search"), "gen_ai.tool.call.arguments": '{"q": "order", "secret": "hunter2"}'}):
            pass
    assert processor.pipeline.judge_run.flush(60)
    sent = " ".join(r.prompt for r in server.requests)
    assert server.prompts() and "hunter2" not in sent and "[REDACTED]" in sent
    processor.shutdown()


def test_without_redaction_settings_the_judge_masks_the_common_secret_keys(server):
    """As `score --judge` does: a judge never sends content unredacted."""
    provider, processor, registry, logs = _app(_judge(server), judge_sample_rate=1.0)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={**AGENT, "input.value": "order? api_key=sk-123"}):
        with tracer.start_as_current_span("execute_tool web_search", attributes={
                **_tool("web_search"), "gen_ai.tool.call.arguments": '{"q": "order", "password": "hunter2"}'}):
            pass
    assert processor.pipeline.judge_run.flush(60)
    sent = " ".join(r.prompt for r in server.requests)
    assert server.prompts() and "hunter2" not in sent and "sk-123" not in sent and "order" in sent
    processor.shutdown()

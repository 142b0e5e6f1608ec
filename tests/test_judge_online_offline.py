"""The same runs judged online (the processor's judge) and offline (deepeval's metric on the captured runs' test
cases, as a pytest or `deepeval test run` suite judges them) give the same results, against one scripted judge."""
from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from judge_server import JudgeServer
from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.judge.deepeval_judge import DeepEvalJudge
from otel_agent_eval.judge.models import judge_model
from otel_agent_eval.judge.sampling import chosen
from otel_agent_eval.offline.judged_metric import JudgedToolCorrectnessMetric
from otel_agent_eval.offline.testing import capture_runs, run_to_test_case

RATE = 0.5
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}  # routed: expects local_index
CALLS = (("local_index",), ("web_search",), ("local_index", "web_search"), ("web_search", "local_index", "web_search"))


@pytest.fixture
def server():
    with JudgeServer() as running:
        running.selection = (0.6, "local_index alone answers an order question; web_search was not the best choice.")
        yield running


def test_the_same_runs_judged_offline_and_online_give_the_same_results(server):
    judged = {}
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), background=False, judge_sample_rate=RATE,
                                       judge=DeepEvalJudge(judge_model("judge-model", base_url=server.base_url),
                                                           sample_rate=RATE))
    online = processor.pipeline.judge_run
    online.on_result = lambda request, result: judged.__setitem__(request.trace_id, result)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("app")
    with capture_runs(processor) as runs:
        for i in range(24):
            with tracer.start_as_current_span("invoke_agent support_agent",
                                              attributes={**AGENT, "input.value": f"Question #{i}: where is order {i}?"}):
                for tool in CALLS[i % len(CALLS)]:
                    with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                            "gen_ai.tool.call.arguments": f'{{"order": {i}}}'}):
                        pass
    assert online.flush(120)
    sampled = [run for run in runs if chosen(run.trace_id, RATE)]
    assert len(runs) == 24 and set(judged) == {run.trace_id for run in sampled}

    metric = JudgedToolCorrectnessMetric(judge_model("judge-model", base_url=server.base_url), arguments=True)
    parts = set()
    for run in sampled:
        metric.measure(run_to_test_case(run, processor.catalog), _show_indicator=False)
        offline, live = metric.judge_result, judged[run.trace_id]
        for field in ("score", "reason", "part", "success", "threshold", "judge_model", "metric", "metric_version",
                      "prompt_version", "deterministic_score", "selection_score", "selection_reason", "argument_score",
                      "argument_reason", "input_tokens", "output_tokens", "cost_usd"):
            assert getattr(live, field) == getattr(offline, field), (field, run.trace_id)
        assert live.sample_rate == RATE
        parts.add(live.part)
    assert parts == {"deterministic", "judge"}  # both parts gave the minimum on some run
    processor.shutdown()


def test_score_judge_on_the_recorded_file_and_the_zero_code_exporter_live_judge_the_same_runs_the_same(tmp_path, server):
    """The same spans, once through the zero-code exporter with the judge on, once written as the Collector's file
    exporter writes them and scored with `score --judge`: the same runs judged, from the same prompts, with the same
    results."""
    import json

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_agent_eval.config.settings import Settings
    from otel_agent_eval.otel.exporter import AgentEvalSpanExporter
    from test_judge_score import FAQ_DEFINITIONS
    from test_score import collector_lines, main_in_process, write

    recorded = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    tracer = provider.get_tracer("app")
    for i in range(24):  # agent "support": the packaged catalog's faq task, expecting local_index
        with tracer.start_as_current_span("invoke_agent support", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support",
                "gen_ai.tool.definitions": FAQ_DEFINITIONS, "input.value": f"Question #{i}: refund? password=hunter2"}):
            for tool in CALLS[i % len(CALLS)]:
                with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                        "gen_ai.tool.call.arguments": json.dumps({"q": f"refund {i}", "api_key": "sk-secret"})}):
                    pass
    provider.shutdown()
    spans = list(recorded.get_finished_spans())

    live = {}
    exporter = AgentEvalSpanExporter(InMemorySpanExporter(), settings=Settings(metrics_enabled=False),
                                     registry=CollectorRegistry(), otlp_metrics=False, judge_sample_rate=RATE,
                                     judge=DeepEvalJudge(judge_model("judge-model", base_url=server.base_url), sample_rate=RATE))
    exporter.pipeline.judge_run.on_result = lambda request, result: live.__setitem__(format(request.trace_id, "032x"), result)
    for i in range(0, len(spans), 7):  # batches as a BatchSpanProcessor hands them over
        exporter.export(spans[i:i + 7])
    assert exporter.pipeline.judge_run.flush(120)
    exporter.shutdown()
    online_prompts = sorted(server.prompts())
    server.requests.clear()

    write(tmp_path / "t.json", collector_lines(spans))
    code, out, err = main_in_process([str(tmp_path / "t.json"), "--json", "--judge", "judge-model", "--judge-base-url",
                                      server.base_url, "--judge-rate", str(RATE)], tmp_path)
    assert code in (0, 1), err  # 1: the efficiency gate, on the runs that called web_search
    offline = {r["trace_id"]: r for r in json.loads(out)["judge"]["results"]}
    assert 0 < len(live) < 24 and set(offline) == set(live)
    assert sorted(server.prompts()) == online_prompts  # the same questions, tools and redactions sent
    assert "hunter2" not in " ".join(online_prompts) and "sk-secret" not in " ".join(online_prompts)
    for trace_id, result in live.items():
        for field in ("score", "reason", "part", "success", "threshold", "judge_model", "metric", "metric_version",
                      "prompt_version", "sample_rate", "deterministic_score", "selection_score", "selection_reason",
                      "argument_score", "argument_reason", "input_tokens", "output_tokens", "cost_usd"):
            assert getattr(result, field) == offline[trace_id][field], (field, trace_id)

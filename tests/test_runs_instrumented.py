"""Agent runs from the real instrumentation libraries, and the deepeval interop on them."""
from __future__ import annotations

import asyncio
import warnings

import pytest
from deepeval import assert_test
from deepeval.metrics import ToolCorrectnessMetric
from prometheus_client import CollectorRegistry

import instrumented
from otel_agent_eval import AgentEvalSpanProcessor, DeterministicToolCorrectnessMetric, ToolEfficiencyMetric
from otel_agent_eval.offline.testing import capture_runs, run_to_test_case
from otel_agent_eval.config.catalog import load_catalog

# gpt-4.1-mini: $0.0004 / $0.0016 per 1k tokens in the packaged catalog
LLM_CALL_USD = instrumented.INPUT_TOKENS / 1000 * 0.0004 + instrumented.OUTPUT_TOKENS / 1000 * 0.0016


@pytest.fixture(scope="module", params=sorted(instrumented.SOURCES))
def captured(request):
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
    with capture_runs(processor) as runs:
        instrumented.SOURCES[request.param](processors=[processor])
    return request.param, runs


def test_one_run_per_agent_with_its_calls_and_tokens(captured):
    source, runs = captured
    (run,) = runs
    assert (run.agent, run.task, run.kind, run.status) == ("support_agent", "faq", "agent", "ok"), source
    assert [r.name for r in run.tool_calls] == ["local_index", "local_index", "web_search"]
    assert len(run.llm_calls) == 4
    assert {(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls} == {
        (instrumented.MODEL, instrumented.INPUT_TOKENS, instrumented.OUTPUT_TOKENS)}


def test_run_metrics_find_the_redundant_and_the_spurious_call(captured):
    _, (run,) = captured
    e = run.evaluation
    assert e.completed
    assert e.redundant_calls == ("local_index",) and e.spurious_calls == ("web_search",)
    assert e.over_budget and e.tool_correctness == 1.0
    assert e.llm_cost_usd == pytest.approx(4 * LLM_CALL_USD) and e.unpriced_models == ()
    assert e.tool_cost_usd == pytest.approx(0.003)


@pytest.fixture
def deepeval_loop():
    """deepeval's assert_test runs the metrics on the thread's event loop and, when there is none, creates
    one that it never closes (a ResourceWarning once the next asyncio.run replaces it): give it one, close it."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def test_runs_become_deepeval_test_cases(captured, deepeval_loop):
    _, (run,) = captured
    case = run_to_test_case(run)
    assert case.input == instrumented.QUESTION
    assert case.actual_output == instrumented.ANSWER
    assert [t.name for t in case.tools_called] == ["local_index", "local_index", "web_search"]
    assert [t.name for t in case.expected_tools] == ["local_index"]
    assert_test(case, [DeterministicToolCorrectnessMetric(), ToolEfficiencyMetric.from_catalog(task=run.task)])
    deepeval_own = ToolCorrectnessMetric(async_mode=False)
    deepeval_own.measure(case)
    assert deepeval_own.score == 1.0


def test_runs_become_test_cases_without_deprecated_deepeval_fields(captured, monkeypatch):
    """deepeval deprecates `additional_metadata` for `metadata` (reading it warns; passing it is still
    accepted silently, through a pydantic alias: the stand-in below warns for that too)."""
    import deepeval.test_case

    class Strict(deepeval.test_case.LLMTestCase):
        def __init__(self, **fields):
            if "additional_metadata" in fields:
                warnings.warn("'additional_metadata' is deprecated. Use 'metadata' instead.", DeprecationWarning, stacklevel=2)
            super().__init__(**fields)

    monkeypatch.setattr(deepeval.test_case, "LLMTestCase", Strict)
    _, (run,) = captured
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        case = run_to_test_case(run)
        metadata = dict(case.metadata)
    available = metadata.pop("available_tools")  # the judge's: what the agent could choose from (tests/test_judge_request.py)
    assert {"local_index", "web_search"} <= {tool["name"] for tool in available}
    assert metadata == {"tools_used": ["local_index", "local_index", "web_search"], "agent": "support_agent", "task": "faq",
                        "trace_id": format(run.trace_id, "032x"), "outcome": run.evaluation.outcome}


def test_failed_runs_from_real_tool_errors():
    for source, produce in instrumented.SOURCES.items():
        processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
        with capture_runs(processor) as runs:
            produce(instrumented.FLAKY_RUN, processors=[processor])
        (run,) = runs
        assert not run.evaluation.completed, source
        assert run.tool_calls[0].error is not None


def test_capture_runs_without_a_processor_adds_one_to_the_provider():
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    with capture_runs(tracer_provider=provider) as first:
        with tracer.start_as_current_span("invoke_agent math_agent", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "math_agent"}):
            tracer.start_span("execute_tool basic_calculator", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "basic_calculator"}).end()
    with capture_runs(tracer_provider=provider) as second:
        pass
    assert [r.agent for r in first] == ["math_agent"] and second == []
    assert len(provider._active_span_processor._span_processors) == 1  # shared, added once


def test_plain_text_input_of_a_one_argument_tool_is_valid_against_its_schema():
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry())
    with capture_runs(processor) as runs:
        instrumented.langchain_openinference_spans(processors=[processor])
    (run,) = runs
    assert run.tool_calls[0].arguments == {"input": "return policy"}  # as OpenInference records it
    assert run.evaluation.argument_validity == 1.0 and run.evaluation.invalid_calls == ()


def _research_run(provider):
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent research_bot", attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "research_bot"}):
        tracer.start_span("execute_tool deep_research", attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "deep_research"}).end()


RESEARCH_CATALOG = """\
tools:
  deep_research: {cost_usd: 0.01, latency_ms: 900, capabilities: [research], complexity: advanced}
tasks:
  research: {match: {gen_ai.agent.name: research_bot}, capability: research, complexity: advanced}
"""


@pytest.mark.parametrize("order", ["packaged_first", "research_first"])
def test_each_capture_scores_with_the_catalog_it_names(tmp_path, order):
    """A second capture_runs(catalog=...) on one provider was scored with the first capture's catalog, silently."""
    from opentelemetry.sdk.trace import TracerProvider

    research = tmp_path / "research.yaml"
    research.write_text(RESEARCH_CATALOG)
    provider = TracerProvider()
    outcomes = {}
    for catalog in ([None, research] if order == "packaged_first" else [research, None, research]):
        with capture_runs(tracer_provider=provider, catalog=catalog) as runs:
            _research_run(provider)
        (run,) = runs
        outcomes.setdefault(catalog, set()).add((run.task, run.scores[0].outcome))
    assert outcomes[research] == {("research", "optimal")} and outcomes[None] == {("", "unknown_tool")}
    assert len(provider._active_span_processor._span_processors) == 1


def test_a_capture_asking_for_another_catalog_while_one_is_open_says_so(tmp_path, monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider

    research = tmp_path / "research.yaml"
    research.write_text(RESEARCH_CATALOG)
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", str(research))  # as every setting, the catalog comes from the environment too
    provider = TracerProvider()
    with capture_runs(tracer_provider=provider) as runs:
        with pytest.raises(ValueError, match="another capture_runs.. on this TracerProvider is open"):
            with capture_runs(tracer_provider=provider, catalog=load_catalog()):
                pass
        _research_run(provider)
    assert [(r.task, r.scores[0].outcome) for r in runs] == [("research", "optimal")]

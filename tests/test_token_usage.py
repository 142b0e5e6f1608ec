"""Token counts under every name in the table (core/token_usage.py), each on a real SDK span that carries it alone, and
each model call counted and priced once, from whichever nested span carries readable counts: the shapes frameworks
nest model calls in, with every instrumentation's set of names, recorded as the Collector writes them and scored by
`score` (offline/score.py). The prices are the packaged catalog's (it prices gpt-4.1-mini): no network."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.core import token_usage as tu
from otel_agent_eval.core.recognize import llm_call_of
from otel_agent_eval.core.runs import AgentRun
from otel_agent_eval.offline.score import score_traces
from test_score import collector_lines, write

MODEL = "gpt-4.1-mini"
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL}


def live_runs(build: Callable[[Tracer], None]) -> list[AgentRun]:
    runs: list[AgentRun] = []
    provider = TracerProvider()
    provider.add_span_processor(AgentEvalSpanProcessor(registry=None, on_run=runs.append))
    build(provider.get_tracer("tokens"))
    provider.shutdown()
    return runs


def calls_of(runs: list[AgentRun]) -> list[tuple[int, int, int, int, int]]:
    return [(c.input_tokens, c.cached_input_tokens, c.cache_creation_input_tokens, c.output_tokens, c.reasoning_tokens)
            for run in runs for c in run.llm_calls]


# -- every name, on a span that carries it alone ------------------------------------------------------------------

def _alone(entry: tu.TokenName, count: int = 120) -> tuple[int, int, int, int, int]:
    """What a model call reads when `entry` is its only token count: (input, cached, created, output, reasoning)."""
    if entry.kind in (tu.INPUT, tu.UNCACHED_INPUT):
        return count, 0, 0, 0, 0
    if entry.kind == tu.CACHE_READ:  # a cached part larger than the input (none): the prompt is at least that
        return count, count, 0, 0, 0
    if entry.kind == tu.CACHE_CREATION:
        return count, 0, count, 0, 0
    if entry.kind == tu.OUTPUT:
        return 0, 0, 0, count, 0
    if entry.kind == tu.REASONING:  # reasoning is output
        return 0, 0, 0, count, count
    return 0, 0, 0, 0, 0  # a total alone splits into nothing: no readable count


@pytest.mark.parametrize("entry", tu.TOKEN_NAMES, ids=[entry.name for entry in tu.TOKEN_NAMES])
def test_every_name_is_read_on_a_span_that_carries_it_alone(entry: tu.TokenName) -> None:
    def build(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
            with tracer.start_as_current_span(f"chat {MODEL}", attributes={**CHAT, entry.name: 120}):
                pass

    [run] = live_runs(build)
    assert calls_of([run]) == [_alone(entry)]
    assert [c.model for c in run.llm_calls] == [MODEL]
    assert tu.token_usage({entry.name: 120}) == _alone(entry)


def test_the_table_is_one_name_one_meaning() -> None:
    names = [entry.name for entry in tu.TOKEN_NAMES]
    assert len(names) == len(set(names)) and set(tu.BY_NAME) == set(names)
    assert {entry.kind for entry in tu.TOKEN_NAMES} == set(tu.KINDS)
    assert all(entry.writers for entry in tu.TOKEN_NAMES)
    assert [entry.name for entry in tu.TOKEN_NAMES if not entry.included] == ["gen_ai.usage.experimental.reasoning_tokens"]


def test_the_docs_list_every_name_of_the_table_and_no_other() -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "frameworks.md").read_text(encoding="utf-8")
    section = text.split("## Token counts we read", 1)[1]
    listed = re.findall(r"^\| `([^`]+)` \|", section, re.M)
    assert listed == [entry.name for entry in tu.TOKEN_NAMES]


# -- what each name includes --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("attrs", "expected"), [
    # the GenAI conventions, OpenAI's prompt_tokens: cached tokens are part of the input
    ({"gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 800, "gen_ai.usage.output_tokens": 50},
     (1000, 800, 0, 50, 0)),
    ({"gen_ai.usage.input_tokens": 1000, "gen_ai.usage.cache_read.input_tokens": 800, "gen_ai.usage.output_tokens": 50,
      "gen_ai.usage.total_tokens": 1050}, (1000, 800, 0, 50, 0)),
    # Anthropic's disjoint counts written as they come: an input smaller than its cached parts
    ({"gen_ai.usage.input_tokens": 3, "gen_ai.usage.cache_read.input_tokens": 1500,
      "gen_ai.usage.cache_creation.input_tokens": 200, "gen_ai.usage.output_tokens": 50}, (1703, 1500, 200, 50, 0)),
    # strands-agents on Bedrock: the input without the cache, the total with it
    ({"gen_ai.usage.input_tokens": 500, "gen_ai.usage.cache_read_input_tokens": 300,
      "gen_ai.usage.cache_write_input_tokens": 100, "gen_ai.usage.output_tokens": 50, "gen_ai.usage.total_tokens": 950},
     (900, 300, 100, 50, 0)),
    # google-adk before 2.3: output_tokens are Gemini's candidates, the thoughts apart
    ({"gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 50,
      "gen_ai.usage.experimental.reasoning_tokens": 10}, (100, 0, 0, 60, 10)),
    ({"gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 60, "gen_ai.usage.reasoning.output_tokens": 10},
     (100, 0, 0, 60, 10)),
    # a total that adds the reasoning on top of the output
    ({"llm.token_count.prompt": 100, "llm.token_count.completion": 50, "llm.token_count.completion_details.reasoning": 10,
      "llm.token_count.total": 160}, (100, 0, 0, 60, 10)),
    # the Vercel AI SDK 6: the input with its cache, and its parts
    ({"ai.usage.inputTokens": 9191, "ai.usage.outputTokens": 93, "ai.usage.totalTokens": 9284,
      "ai.usage.inputTokenDetails.noCacheTokens": 1, "ai.usage.inputTokenDetails.cacheReadTokens": 4429,
      "ai.usage.cachedInputTokens": 4429, "ai.usage.inputTokenDetails.cacheWriteTokens": 4761},
     (9191, 4429, 4761, 93, 0)),
    ({"ai.usage.inputTokenDetails.noCacheTokens": 1, "ai.usage.inputTokenDetails.cacheReadTokens": 4429,
      "ai.usage.inputTokenDetails.cacheWriteTokens": 4761, "ai.usage.outputTokens": 93}, (9191, 4429, 4761, 93, 0)),
    # the first name of a kind in the table wins; odd values count as nothing
    ({"gen_ai.usage.input_tokens": 10, "gen_ai.usage.prompt_tokens": 20, "gen_ai.usage.output_tokens": "7"},
     (10, 0, 0, 7, 0)),
    ({"gen_ai.usage.input_tokens": True, "gen_ai.usage.output_tokens": -5, "gen_ai.usage.cache_read.input_tokens": "x"},
     (0, 0, 0, 0, 0)),
], ids=["genai", "genai-total", "anthropic-disjoint", "strands-bedrock", "adk-legacy-reasoning", "genai-reasoning",
        "reasoning-by-total", "vercel-6", "vercel-6-parts", "first-wins", "odd-values"])
def test_each_shape_reads_as_the_whole_prompt_and_the_whole_output(attrs: dict[str, Any], expected: tuple) -> None:
    assert tu.token_usage(attrs) == expected
    call = llm_call_of({**CHAT, **attrs})
    assert call is not None
    assert (call.input_tokens, call.cached_input_tokens, call.cache_creation_input_tokens, call.output_tokens,
            call.reasoning_tokens) == expected


# -- nested spans of one model call, with every instrumentation's names --------------------------------------------

# Each instrumentation's model-call span: what marks it as one, and its token names, with what they read as
# (input, cached, created, output, reasoning).
NAME_SETS: dict[str, tuple[dict[str, Any], dict[str, int], tuple[int, int, int, int, int]]] = {
    "openllmetry-0.47": ({"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL,
                          "gen_ai.response.model": MODEL},
                         {"gen_ai.usage.prompt_tokens": 1200, "gen_ai.usage.completion_tokens": 300,
                          "gen_ai.usage.cache_read_input_tokens": 800, "gen_ai.usage.reasoning_tokens": 50,
                          "llm.usage.total_tokens": 1500}, (1200, 800, 0, 300, 50)),
    "openllmetry-0.47-anthropic": ({"llm.request.type": "chat", "gen_ai.system": "Anthropic", "gen_ai.request.model": MODEL},
                                   {"gen_ai.usage.prompt_tokens": 1200, "gen_ai.usage.completion_tokens": 300,
                                    "gen_ai.usage.cache_read_input_tokens": 800,
                                    "gen_ai.usage.cache_creation_input_tokens": 100, "llm.usage.total_tokens": 1500},
                                   (1200, 800, 100, 300, 0)),
    "openllmetry-0.51": ({"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL},
                         {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300,
                          "gen_ai.usage.cache_read_input_tokens": 800, "llm.usage.reasoning_tokens": 50,
                          "llm.usage.total_tokens": 1500}, (1200, 800, 0, 300, 50)),
    "openllmetry-0.55": ({"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL},
                         {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300,
                          "gen_ai.usage.cache_read.input_tokens": 800, "gen_ai.usage.cache_creation.input_tokens": 100,
                          "gen_ai.usage.reasoning_tokens": 50, "gen_ai.usage.total_tokens": 1500,
                          "llm.usage.total_tokens": 1500}, (1200, 800, 100, 300, 50)),
    "genai": (CHAT, {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300,
                     "gen_ai.usage.cache_read.input_tokens": 800, "gen_ai.usage.cache_creation.input_tokens": 100,
                     "gen_ai.usage.reasoning.output_tokens": 50}, (1200, 800, 100, 300, 50)),
    "genai-deprecated": (CHAT, {"gen_ai.usage.prompt_tokens": 1200, "gen_ai.usage.completion_tokens": 300},
                         (1200, 0, 0, 300, 0)),
    "openinference": ({"openinference.span.kind": "LLM", "llm.model_name": MODEL},
                      {"llm.token_count.prompt": 1200, "llm.token_count.completion": 300,
                       "llm.token_count.prompt_details.cache_read": 800, "llm.token_count.prompt_details.cache_write": 100,
                       "llm.token_count.completion_details.reasoning": 50, "llm.token_count.total": 1500},
                      (1200, 800, 100, 300, 50)),
    "vercel-4": ({"ai.operationId": "ai.generateText.doGenerate", "ai.model.id": MODEL},
                 {"ai.usage.promptTokens": 1200, "ai.usage.completionTokens": 300}, (1200, 0, 0, 300, 0)),
    "vercel-5": ({"ai.operationId": "ai.streamText.doStream", "ai.model.id": MODEL},
                 {"ai.usage.inputTokens": 1200, "ai.usage.outputTokens": 300, "ai.usage.cachedInputTokens": 800,
                  "ai.usage.reasoningTokens": 50, "ai.usage.totalTokens": 1500}, (1200, 800, 0, 300, 50)),
    "vercel-6": ({"ai.operationId": "ai.generateText.doGenerate", "ai.model.id": MODEL},
                 {"ai.usage.inputTokens": 1200, "ai.usage.outputTokens": 300, "ai.usage.totalTokens": 1500,
                  "ai.usage.inputTokenDetails.noCacheTokens": 300, "ai.usage.inputTokenDetails.cacheReadTokens": 800,
                  "ai.usage.inputTokenDetails.cacheWriteTokens": 100,
                  "ai.usage.outputTokenDetails.reasoningTokens": 50}, (1200, 800, 100, 300, 50)),
    "pydantic-ai": (CHAT, {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300,
                           "gen_ai.usage.cache_read.input_tokens": 800, "gen_ai.usage.details.cache_read_tokens": 800,
                           "gen_ai.usage.cache_creation.input_tokens": 100, "gen_ai.usage.details.cache_write_tokens": 100,
                           "gen_ai.usage.details.reasoning_tokens": 50}, (1200, 800, 100, 300, 50)),
    "pydantic-ai-thinking": (CHAT, {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300,
                                    "gen_ai.usage.details.thinking_tokens": 50}, (1200, 0, 0, 300, 50)),
    "strands-bedrock": (CHAT, {"gen_ai.usage.input_tokens": 300, "gen_ai.usage.prompt_tokens": 300,
                               "gen_ai.usage.output_tokens": 300, "gen_ai.usage.completion_tokens": 300,
                               "gen_ai.usage.total_tokens": 1500, "gen_ai.usage.cache_read_input_tokens": 800,
                               "gen_ai.usage.cache_write_input_tokens": 100}, (1200, 800, 100, 300, 0)),
    "google-adk-legacy": ({"gen_ai.operation.name": "generate_content", "gen_ai.request.model": MODEL},
                          {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 250,
                           "gen_ai.usage.experimental.reasoning_tokens": 50}, (1200, 0, 0, 300, 50)),
    "google-adk-2.3": ({"gen_ai.operation.name": "generate_content", "gen_ai.request.model": MODEL},
                       {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300,
                        "gen_ai.usage.reasoning.output_tokens": 50, "gen_ai.usage.cache_read.input_tokens": 800},
                       (1200, 800, 0, 300, 50)),
}
ADK_CALL_LLM = {"gen_ai.system": "gcp.vertex.agent", "gen_ai.request.model": MODEL,
                "gcp.vertex.agent.llm_request": "{}", "gcp.vertex.agent.llm_response": "{}",
                "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300}  # trace_call_llm's legacy span


def _adk_call_llm(tracer: Tracer, inner: dict[str, Any]) -> None:  # google-adk legacy call_llm > a client's span
    with tracer.start_as_current_span("call_llm", attributes=ADK_CALL_LLM):
        with tracer.start_as_current_span("openai.chat", attributes=inner):
            pass


def _adk_generate_content(tracer: Tracer, inner: dict[str, Any]) -> None:  # call_llm > generate_content > a client's span
    with tracer.start_as_current_span("call_llm", attributes=ADK_CALL_LLM):
        with tracer.start_as_current_span(f"generate_content {MODEL}", attributes={
                "gen_ai.operation.name": "generate_content", "gen_ai.request.model": MODEL,
                "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300}):
            with tracer.start_as_current_span("POST /v1/chat/completions", attributes={"http.request.method": "POST"}):
                with tracer.start_as_current_span("openai.chat", attributes=inner):
                    pass


def _any_agent_call_llm(tracer: Tracer, inner: dict[str, Any]) -> None:  # any-agent's call_llm operation
    with tracer.start_as_current_span(f"call_llm {MODEL}", attributes={
            "gen_ai.operation.name": "call_llm", "gen_ai.request.model": MODEL,
            "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 300}):
        with tracer.start_as_current_span("chat", attributes=inner):
            pass


def _alone_in_its_run(tracer: Tracer, inner: dict[str, Any]) -> None:
    with tracer.start_as_current_span("chat", attributes=inner):
        pass


SHAPES = {"adk-call_llm": _adk_call_llm, "adk-generate_content": _adk_generate_content,
          "any-agent-call_llm": _any_agent_call_llm, "alone": _alone_in_its_run}


def recorded(tmp_path: Any, name: str, build: Callable[[Tracer], None]) -> list[ReadableSpan]:
    """The spans `build` makes under an agent span, twice (two traces), as the Collector's file exporter writes them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tokens")
    for _ in range(2):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
            build(tracer)
    provider.shutdown()
    return write(tmp_path / f"{name}.json", collector_lines(list(exporter.get_finished_spans())))


def scored(path: Any) -> tuple[Any, list[AgentRun]]:
    runs: list[AgentRun] = []
    return score_traces(path, on_run=runs.append), runs


@pytest.mark.parametrize("names", NAME_SETS, ids=list(NAME_SETS))
@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_one_model_call_on_nested_spans_is_counted_and_priced_once_by_score(tmp_path, shape: str, names: str) -> None:
    marker, counts, expected = NAME_SETS[names]
    report, runs = scored(recorded(tmp_path, "nested", lambda tracer: SHAPES[shape](tracer, {**marker, **counts})))
    _, plain_runs = scored(recorded(tmp_path, "plain", lambda tracer: _alone_in_its_run(tracer, {
        **CHAT, "gen_ai.usage.input_tokens": expected[0], "gen_ai.usage.cache_read.input_tokens": expected[1],
        "gen_ai.usage.output_tokens": expected[3]})))
    assert [calls_of([run]) for run in runs] == [[expected], [expected]]  # one call per trace, the inner span's counts
    assert all([c.model for c in run.llm_calls] == [MODEL] for run in runs)
    plain = plain_runs[0].evaluation
    assert plain.llm_cost_usd > 0 and plain.llm_priced_by == ("catalog",)
    for run in runs:
        assert run.evaluation.llm_cost_usd == pytest.approx(plain.llm_cost_usd)  # priced once, as one plain span would be
        assert run.evaluation.llm_priced_by == ("catalog",) and run.evaluation.unpriced_models == ()
    [group] = report.groups
    assert group.llm_cost_per_run_usd == pytest.approx(plain.llm_cost_usd) and group.llm_priced_by == ("catalog",)


def test_the_adk_call_llm_over_an_openllmetry_047_openai_chat_is_one_priced_call(tmp_path) -> None:
    """The shape of issue 40: google-adk's call_llm (input/output tokens) over OpenLLMetry 0.47's openai.chat, which
    carries only the older names. Before, neither span read as a model call: the run's LLM cost was $0, priced by nothing."""
    inner = {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL,
             "gen_ai.response.model": MODEL, "gen_ai.usage.prompt_tokens": 1200, "gen_ai.usage.completion_tokens": 300,
             "gen_ai.usage.cache_read_input_tokens": 800, "gen_ai.usage.reasoning_tokens": 50,
             "llm.usage.total_tokens": 1500}
    report, runs = scored(recorded(tmp_path, "issue40", lambda tracer: _adk_call_llm(tracer, inner)))
    for run in runs:
        [call] = run.llm_calls
        assert (call.model, call.provider, call.input_tokens, call.cached_input_tokens, call.output_tokens) == (
            MODEL, "openai", 1200, 800, 300)
        assert run.evaluation.llm_cost_usd > 0 and run.evaluation.llm_priced_by == ("catalog",)
    [group] = report.groups
    assert group.llm_cost_per_run_usd > 0 and group.llm_priced_by == ("catalog",)


@pytest.mark.parametrize("shape", ["adk-call_llm", "adk-generate_content", "any-agent-call_llm"])
def test_a_client_span_without_readable_counts_takes_them_from_the_span_above(tmp_path, shape: str) -> None:
    """A streamed call whose client span has no usage (or a total alone): the framework's span above it carries the
    counts; the call is counted once, with those counts and the client span's model and provider."""
    for inner in ({"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL},
                  {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": MODEL,
                   "llm.usage.total_tokens": 1500}):
        _, runs = scored(recorded(tmp_path, "tokenless", lambda tracer: SHAPES[shape](tracer, inner)))
        assert [calls_of([run]) for run in runs] == [[(1200, 0, 0, 300, 0)], [(1200, 0, 0, 300, 0)]]
        assert {(c.model, c.provider) for run in runs for c in run.llm_calls} == {(MODEL, "openai")}
        assert all(run.evaluation.llm_priced_by == ("catalog",) and run.evaluation.llm_cost_usd > 0 for run in runs)
        live = live_runs(lambda tracer: SHAPES[shape](tracer, inner))  # the live processor counts the same
        assert calls_of(live) == [(1200, 0, 0, 300, 0)]


def test_two_tokenless_calls_and_a_counted_one_stay_three_calls() -> None:
    def build(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
            for _ in range(2):
                with tracer.start_as_current_span("openai.chat", attributes={"llm.request.type": "chat",
                                                                             "gen_ai.request.model": MODEL}):
                    pass
            with tracer.start_as_current_span("chat", attributes={**CHAT, "gen_ai.usage.input_tokens": 10}):
                pass

    [run] = live_runs(build)
    assert calls_of([run]) == [(0, 0, 0, 0, 0), (0, 0, 0, 0, 0), (10, 0, 0, 0, 0)]


@pytest.mark.parametrize("request_type", ["embedding", "rerank"])
def test_openllmetry_embedding_and_rerank_spans_are_no_model_calls(request_type: str) -> None:
    assert llm_call_of({"llm.request.type": request_type, "gen_ai.usage.prompt_tokens": 5}) is None

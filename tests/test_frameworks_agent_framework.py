"""Microsoft agent-framework (`agent-framework-core`), GenAI convention, in its default settings, read right.

An `Agent` named support_agent over the framework's real `OpenAIChatCompletionClient`, whose AsyncOpenAI
client is served canned chat completions by an in-process transport (agent-framework has no test model).
Instrumentation is on by default; sensitive data is off, so tool spans carry no
`gen_ai.tool.call.arguments`: the calls' arguments are unknown, never `{}`. Its attribute keys and
`gen_ai.operation.name` values are `OtelAttr`, a `str` enum, and the `invoke_agent` span repeats the
summed token usage of its `chat` spans, which must not count as another model call.

agent-framework writes its spans with `agent_framework.observability.get_tracer()`, which reads the
global tracer provider; the tests send them to their own provider instead by replacing that function
for the run (the global provider is never touched).
"""
from __future__ import annotations

import asyncio

import pytest
from agent_framework import Agent, tool
from agent_framework import observability
from agent_framework.openai import OpenAIChatCompletionClient

import genai_frameworks as gf
from genai_frameworks import AGENT_NAME, INPUT_TOKENS, LOCAL_INDEX_RESULT, MODEL, OUTPUT_TOKENS, QUESTION, WEB_SEARCH_RESULT
from otel_agent_eval import tool_call_from_span
from otel_agent_eval.core.recognize import attribute_dict, llm_call_of


@tool
def local_index(query: str) -> str:
    """Search the local knowledge base."""
    return LOCAL_INDEX_RESULT


@tool
def web_search(query: str) -> str:
    """Search the web."""
    return WEB_SEARCH_RESULT


def agent_framework_run(sensitive_data: bool = False) -> gf.Capture:
    """One run of the support agent; `sensitive_data` as `enable_instrumentation(enable_sensitive_data=...)` sets it."""
    captured = gf.Capture()
    client, transcript = gf.chat_completions_client()
    agent = Agent(client=OpenAIChatCompletionClient(model=MODEL, async_client=client), name=AGENT_NAME,
                  instructions="Answer customer questions.", tools=[local_index, web_search])
    settings = observability.OBSERVABILITY_SETTINGS
    default_tracer, default_sensitive = observability.get_tracer, settings.enable_sensitive_data
    observability.get_tracer = lambda name="agent_framework", *args, **kwargs: captured.provider.get_tracer(name, *args, **kwargs)
    settings.enable_sensitive_data = sensitive_data
    try:
        with captured:
            reply = asyncio.run(agent.run(QUESTION))
    finally:
        observability.get_tracer, settings.enable_sensitive_data = default_tracer, default_sensitive
    assert reply.text == gf.ANSWER and len(transcript.requests) == gf.MODEL_CALLS
    return captured


@pytest.fixture(scope="module")
def captured() -> gf.Capture:
    assert observability.OBSERVABILITY_SETTINGS.enable_instrumentation  # the default
    assert not observability.OBSERVABILITY_SETTINGS.enable_sensitive_data  # the default
    return agent_framework_run()


def test_each_tool_span_is_read_once_its_arguments_unknown(captured):
    records = [r for r in map(tool_call_from_span, captured.spans) if r is not None]
    assert [r.name for r in records] == gf.TOOL_NAMES
    assert [r.call_id for r in records] == [s.call_id for s in gf.RUN]
    for record in records:
        assert record.convention == "gen_ai" and record.problems == [] and record.error is None
        assert record.arguments is None and not record.arguments_captured  # not captured by default: not {}
        assert record.tool_call.input_parameters is None


def test_the_operation_names_are_enums_and_read_as_their_text(captured):
    operations = [attribute_dict(s)["gen_ai.operation.name"] for s in captured.spans]
    assert all(isinstance(op, str) and type(op) is not str for op in operations)  # OtelAttr members
    assert sorted(map(str.__str__, operations)) == sorted(["chat"] * gf.MODEL_CALLS + ["execute_tool"] * 3 + ["invoke_agent"])


def test_every_call_is_scored_once_under_the_agent_label(captured):
    assert [(r.name, r.arguments, r.agent) for r, _ in captured.scored] == [(t, None, AGENT_NAME) for t in gf.TOOL_NAMES]
    assert all(type(r.agent) is str for r, _ in captured.scored)
    gf.assert_calls_counted_once(captured, AGENT_NAME)


def test_one_run_with_its_calls_in_order_and_one_llm_call_per_model_call(captured):
    (run,) = captured.runs
    assert (run.agent, run.kind, run.status, run.task) == (AGENT_NAME, "agent", "ok", "faq")
    assert [r.name for r in run.tool_calls] == gf.TOOL_NAMES
    # The invoke_agent span also carries gen_ai.usage.* (the sum, 150 + 30): it is no model call.
    assert len(run.llm_calls) == gf.MODEL_CALLS
    assert {(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls} == {(MODEL, INPUT_TOKENS, OUTPUT_TOKENS)}
    (root,) = [s for s in captured.spans if s.parent is None]
    assert root.attributes["gen_ai.usage.input_tokens"] == gf.MODEL_CALLS * INPUT_TOKENS
    assert llm_call_of(attribute_dict(root)) is None


def test_unknown_arguments_are_neither_valid_nor_invalid_nor_repeats(captured):
    (run,) = captured.runs
    e = run.evaluation
    assert e.completed and e.argument_validity is None and e.invalid_calls == ()
    assert e.arguments_not_captured == tuple(gf.TOOL_NAMES)
    assert e.redundant_calls == () and e.unpriced_models == ()
    assert e.spurious_calls == ("web_search",)  # routed by its agent name to the faq task


def test_no_self_errors_and_the_forwarded_spans_say_what_was_not_captured(captured):
    assert gf.self_errors(captured.registry) == {}
    tools = [s for s in captured.forwarded if "agent_eval.outcome" in (s.attributes or {})]
    assert [s.attributes["agent_eval.agent"] for s in tools] == [AGENT_NAME] * len(gf.RUN)
    assert [s.attributes["agent_eval.arguments_captured"] for s in tools] == [False] * len(gf.RUN)
    (root,) = [s for s in captured.forwarded if s.parent is None]
    assert root.attributes["agent_eval.run.arguments_not_captured"] == len(gf.RUN)


def test_with_sensitive_data_on_the_arguments_are_read_and_checked():
    captured = agent_framework_run(sensitive_data=True)
    assert [(r.name, r.arguments, r.arguments_captured) for r, _ in captured.scored] == [
        (tool, arguments, True) for tool, arguments in gf.CALLS]
    (run,) = captured.runs
    assert run.evaluation.argument_validity == 1.0 and run.evaluation.arguments_not_captured == ()
    assert gf.self_errors(captured.registry) == {}

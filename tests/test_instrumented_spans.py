"""Pin the raw span conventions of the real instrumentation libraries our recogniser relies on.

A library upgrade that renames an attribute, moves a value or reparents a span fails here first.
Each class covers one source (see ``instrumented.py``) and asks the same questions: which spans
are tool calls and what they carry, which span is the agent and when it knows its name, what the
LLM spans report, and how a failing tool shows up.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from agents import Agent, Runner, set_trace_processors
from agents.testing import ScriptedModel, assistant_message
from langchain_core.runnables import RunnableLambda
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

from instrumented import (
    AGENT_NAME,
    ANSWER,
    ARGUMENTS,
    FLAKY_ERROR,
    FLAKY_RUN,
    INPUT_TOKENS,
    LOCAL_INDEX_RESULT,
    MODEL,
    OUTPUT_TOKENS,
    QUESTION,
    SOURCES,
    SUPPORT_RUN,
    WEB_SEARCH_RESULT,
    ToolFailure,
    langchain_openinference_spans,
    openai_agents_openinference_spans,
    openai_agents_openllmetry_spans,
    pydantic_ai_spans,
)

RESULTS = {"local_index": LOCAL_INDEX_RESULT, "web_search": WEB_SEARCH_RESULT}
EXPECTED_TOOLS = [s.tool for s in SUPPORT_RUN]  # local_index, local_index, web_search
EXPECTED_CALL_IDS = [s.call_id for s in SUPPORT_RUN]
EXCEPTION_TYPE = f"{ToolFailure.__module__}.{ToolFailure.__qualname__}"
# What openai-agents tells the model, and records, when a tool raises (default failure_error_function).
OPENAI_AGENTS_TOOL_ERROR = "An error occurred while running the tool. Please try again."
OPENAI_AGENTS_REDACTED = "Tool execution failed. Error details are redacted."


class StartRecorder(SpanProcessor):
    """Records each span's name and attributes as they are when the span starts."""

    def __init__(self) -> None:
        self.at_start: dict[int, tuple[str, dict[str, Any]]] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.at_start[span.context.span_id] = (span.name, dict(span.attributes or {}))


@dataclass
class Run:
    spans: list[ReadableSpan]
    flaky: list[ReadableSpan]
    at_start: dict[int, tuple[str, dict[str, Any]]]

    def attributes_at_start(self, span: ReadableSpan) -> dict[str, Any]:
        return self.at_start[span.context.span_id][1]


def _run(source: Callable[..., list[ReadableSpan]]) -> Run:
    recorder = StartRecorder()
    spans = source(processors=[recorder])
    return Run(spans=spans, flaky=source(FLAKY_RUN), at_start=recorder.at_start)


@pytest.fixture(scope="module")
def pydantic_ai() -> Run:
    return _run(pydantic_ai_spans)


@pytest.fixture(scope="module")
def oi_agents() -> Run:
    return _run(openai_agents_openinference_spans)


@pytest.fixture(scope="module")
def openllmetry() -> Run:
    return _run(openai_agents_openllmetry_spans)


@pytest.fixture(scope="module")
def langchain() -> Run:
    return _run(langchain_openinference_spans)


def where(spans: Iterable[ReadableSpan], key: str, value: Any) -> list[ReadableSpan]:
    """Spans whose attribute ``key`` equals ``value``, in start order."""
    matching = [s for s in spans if (s.attributes or {}).get(key) == value]
    return sorted(matching, key=lambda s: s.start_time or 0)


def one(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    by_id = {s.context.span_id: s for s in spans}
    chain = []
    while span.parent is not None and span.parent.span_id in by_id:
        span = by_id[span.parent.span_id]
        chain.append(span)
    return chain


def assert_descend_from(tools: list[ReadableSpan], agent: ReadableSpan, spans: list[ReadableSpan]) -> None:
    assert tools
    for tool in tools:
        assert agent in ancestors(tool, spans), tool.name
        assert tool.context.trace_id == agent.context.trace_id


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


class TestPydanticAI:
    """pydantic-ai: GenAI semantic conventions, keyed on ``gen_ai.operation.name``."""

    def test_tool_spans(self, pydantic_ai: Run) -> None:
        tools = where(pydantic_ai.spans, "gen_ai.operation.name", "execute_tool")
        assert [t.name for t in tools] == [f"execute_tool {name}" for name in EXPECTED_TOOLS]
        assert [t.attributes["gen_ai.tool.name"] for t in tools] == EXPECTED_TOOLS
        assert [t.attributes["gen_ai.tool.call.id"] for t in tools] == EXPECTED_CALL_IDS
        for tool in tools:
            assert tool.kind is SpanKind.INTERNAL
            # A JSON string, compact: pydantic-ai serialises the arguments itself.
            assert tool.attributes["gen_ai.tool.call.arguments"] == '{"query":"return policy"}'
            assert tool.attributes["gen_ai.tool.call.result"] == RESULTS[tool.attributes["gen_ai.tool.name"]]
            assert tool.attributes["gen_ai.agent.name"] == AGENT_NAME  # on tool spans too
            assert tool.status.status_code is StatusCode.UNSET

    def test_agent_span(self, pydantic_ai: Run) -> None:
        agent = one(where(pydantic_ai.spans, "gen_ai.operation.name", "invoke_agent"))
        assert agent.name == f"invoke_agent {AGENT_NAME}"
        assert agent.parent is None
        assert agent.attributes["gen_ai.agent.name"] == AGENT_NAME
        assert agent.attributes["agent_name"] == AGENT_NAME
        assert agent.attributes["final_result"] == ANSWER
        assert agent.attributes["gen_ai.aggregated_usage.input_tokens"] == 4 * INPUT_TOKENS
        assert agent.attributes["gen_ai.aggregated_usage.output_tokens"] == 4 * OUTPUT_TOKENS

    def test_tool_spans_are_children_of_the_agent_span(self, pydantic_ai: Run) -> None:
        agent = one(where(pydantic_ai.spans, "gen_ai.operation.name", "invoke_agent"))
        tools = where(pydantic_ai.spans, "gen_ai.operation.name", "execute_tool")
        assert_descend_from(tools, agent, pydantic_ai.spans)
        for tool in tools:
            assert ancestors(tool, pydantic_ai.spans) == [agent]

    def test_llm_spans(self, pydantic_ai: Run) -> None:
        chats = where(pydantic_ai.spans, "gen_ai.operation.name", "chat")
        assert len(chats) == len(SUPPORT_RUN) + 1
        for chat in chats:
            assert chat.name == f"chat {MODEL}"
            assert chat.kind is SpanKind.CLIENT
            assert chat.attributes["gen_ai.request.model"] == MODEL
            assert chat.attributes["gen_ai.response.model"] == MODEL
            assert chat.attributes["gen_ai.usage.input_tokens"] == INPUT_TOKENS
            assert chat.attributes["gen_ai.usage.output_tokens"] == OUTPUT_TOKENS
            assert chat.attributes["gen_ai.agent.name"] == AGENT_NAME
        calls = json.loads(chats[0].attributes["gen_ai.output.messages"])[0]["parts"][0]
        assert calls == {"type": "tool_call", "id": "call_1", "name": "local_index", "arguments": ARGUMENTS}

    def test_agent_name_is_known_at_start(self, pydantic_ai: Run) -> None:
        agent = one(where(pydantic_ai.spans, "gen_ai.operation.name", "invoke_agent"))
        assert pydantic_ai.attributes_at_start(agent)["gen_ai.agent.name"] == AGENT_NAME
        tool = where(pydantic_ai.spans, "gen_ai.operation.name", "execute_tool")[0]
        at_start = pydantic_ai.attributes_at_start(tool)
        assert at_start["gen_ai.tool.name"] == "local_index"
        assert at_start["gen_ai.tool.call.id"] == "call_1"
        assert at_start["gen_ai.tool.call.arguments"] == '{"query":"return policy"}'
        assert at_start["gen_ai.agent.name"] == AGENT_NAME
        assert "gen_ai.tool.call.result" not in at_start

    def test_failing_tool_ends_the_run(self, pydantic_ai: Run) -> None:
        tool = one(where(pydantic_ai.flaky, "gen_ai.operation.name", "execute_tool"))
        assert tool.attributes["gen_ai.tool.name"] == "flaky_tool"
        assert tool.status.status_code is StatusCode.ERROR
        assert "gen_ai.tool.call.result" not in tool.attributes
        assert "error.type" not in tool.attributes
        event = one([e for e in tool.events if e.name == "exception"])
        assert event.attributes["exception.type"] == EXCEPTION_TYPE
        assert event.attributes["exception.message"] == FLAKY_ERROR
        agent = one(where(pydantic_ai.flaky, "gen_ai.operation.name", "invoke_agent"))
        assert agent.status.status_code is StatusCode.ERROR
        assert agent.status.description == f"ToolFailure: {FLAKY_ERROR}"


class TestOpenAIAgentsOpenInference:
    """openai-agents + OpenInference: ``openinference.span.kind`` TOOL / AGENT / LLM."""

    def test_tool_spans(self, oi_agents: Run) -> None:
        tools = where(oi_agents.spans, "openinference.span.kind", "TOOL")
        assert [t.name for t in tools] == EXPECTED_TOOLS
        assert [t.attributes["tool.name"] for t in tools] == EXPECTED_TOOLS
        for tool in tools:
            assert json.loads(tool.attributes["input.value"]) == ARGUMENTS  # as the model sent it
            assert tool.attributes["input.mime_type"] == "application/json"
            assert tool.attributes["output.value"] == RESULTS[tool.name]
            schema = json.loads(tool.attributes["tool.parameters"])  # the JSON schema, not the arguments
            assert schema["properties"]["query"]["type"] == "string"
            assert tool.status.status_code is StatusCode.OK
            assert not [key for key in tool.attributes if "call" in key and "id" in key]  # no call id

    def test_call_ids_are_only_on_llm_spans(self, oi_agents: Run) -> None:
        prefix = "llm.output_messages.0.message.tool_calls.0.tool_call"
        llms = where(oi_agents.spans, "openinference.span.kind", "LLM")
        assert [s.attributes.get(f"{prefix}.id") for s in llms] == [*EXPECTED_CALL_IDS, None]
        assert [s.attributes.get(f"{prefix}.function.name") for s in llms] == [*EXPECTED_TOOLS, None]

    def test_agent_span(self, oi_agents: Run) -> None:
        agents = where(oi_agents.spans, "openinference.span.kind", "AGENT")
        # The trace root ("Agent workflow") is an AGENT span too, without agent.name.
        assert [(s.name, s.attributes.get("agent.name")) for s in agents] == [
            ("Agent workflow", None),
            (AGENT_NAME, AGENT_NAME),
        ]
        agent = agents[1]
        assert agent.attributes["graph.node.id"] == AGENT_NAME
        assert_descend_from(where(oi_agents.spans, "openinference.span.kind", "TOOL"), agent, oi_agents.spans)

    def test_parent_chain(self, oi_agents: Run) -> None:
        for tool in where(oi_agents.spans, "openinference.span.kind", "TOOL"):
            chain = ancestors(tool, oi_agents.spans)
            assert [(s.name, s.attributes["openinference.span.kind"]) for s in chain] == [
                ("turn", "CHAIN"),
                (AGENT_NAME, "AGENT"),
                ("Agent workflow", "CHAIN"),
                ("Agent workflow", "AGENT"),
            ]

    def test_llm_spans(self, oi_agents: Run) -> None:
        llms = where(oi_agents.spans, "openinference.span.kind", "LLM")
        assert len(llms) == len(SUPPORT_RUN) + 1
        for llm in llms:
            assert llm.name == "response"
            assert llm.attributes["llm.model_name"] == MODEL
            assert llm.attributes["llm.system"] == "openai"
            assert llm.attributes["llm.token_count.prompt"] == INPUT_TOKENS
            assert llm.attributes["llm.token_count.completion"] == OUTPUT_TOKENS
            assert llm.attributes["llm.token_count.total"] == INPUT_TOKENS + OUTPUT_TOKENS

    def test_agent_name_only_in_span_name_at_start(self, oi_agents: Run) -> None:
        agent = where(oi_agents.spans, "agent.name", AGENT_NAME)[0]
        name, at_start = oi_agents.at_start[agent.context.span_id]
        assert name == AGENT_NAME
        assert at_start == {"openinference.span.kind": "AGENT"}
        tool = where(oi_agents.spans, "openinference.span.kind", "TOOL")[0]
        assert oi_agents.at_start[tool.context.span_id] == (
            "local_index",
            {"openinference.span.kind": "TOOL"},
        )

    def test_failing_tool_is_reported_to_the_model(self, oi_agents: Run) -> None:
        tool = one(where(oi_agents.flaky, "openinference.span.kind", "TOOL"))
        assert tool.name == "flaky_tool"
        assert tool.status.status_code is StatusCode.ERROR
        assert tool.status.description.startswith("Error running tool (non-fatal): ")
        assert OPENAI_AGENTS_REDACTED in tool.status.description  # the exception's message is not recorded
        assert tool.attributes["output.value"] == OPENAI_AGENTS_TOOL_ERROR
        assert tool.events == ()  # no exception event
        agent = one(where(oi_agents.flaky, "agent.name", AGENT_NAME))
        assert agent.status.status_code is StatusCode.OK  # the run went on to answer


class TestOpenAIAgentsOpenLLMetry:
    """openai-agents + OpenLLMetry: ``traceloop.span.kind`` tool / agent plus ``gen_ai.*``."""

    def test_tool_spans(self, openllmetry: Run) -> None:
        tools = where(openllmetry.spans, "traceloop.span.kind", "tool")
        assert [t.name for t in tools] == [f"{name}.tool" for name in EXPECTED_TOOLS]
        assert [t.attributes["gen_ai.tool.name"] for t in tools] == EXPECTED_TOOLS
        for tool in tools:
            assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
            assert tool.attributes["gen_ai.tool.type"] == "function"
            assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == ARGUMENTS
            assert tool.attributes["gen_ai.tool.call.result"] == RESULTS[tool.attributes["gen_ai.tool.name"]]
            assert "gen_ai.tool.call.id" not in tool.attributes
            assert "gen_ai.agent.name" not in tool.attributes
            assert tool.status.status_code is StatusCode.OK

    def test_call_ids_are_only_on_llm_spans(self, openllmetry: Run) -> None:
        llms = where(openllmetry.spans, "gen_ai.operation.name", "chat")
        parts = [json.loads(s.attributes["gen_ai.output.messages"])[0]["parts"][0] for s in llms]
        assert [p.get("id") for p in parts] == [*EXPECTED_CALL_IDS, None]
        assert [p.get("arguments") for p in parts[:-1]] == [ARGUMENTS] * len(SUPPORT_RUN)

    def test_agent_span(self, openllmetry: Run) -> None:
        agent = one(where(openllmetry.spans, "traceloop.span.kind", "agent"))
        assert agent.name == f"{AGENT_NAME}.agent"
        assert agent.attributes["gen_ai.agent.name"] == AGENT_NAME
        assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
        root = one(where(openllmetry.spans, "traceloop.span.kind", "workflow"))
        assert (root.name, root.parent) == ("Agent Workflow", None)
        for tool in where(openllmetry.spans, "traceloop.span.kind", "tool"):
            assert ancestors(tool, openllmetry.spans) == [agent, root]

    def test_llm_spans(self, openllmetry: Run) -> None:
        llms = where(openllmetry.spans, "gen_ai.operation.name", "chat")
        assert len(llms) == len(SUPPORT_RUN) + 1
        for llm in llms:
            assert llm.name == "openai.response"
            assert llm.kind is SpanKind.CLIENT
            assert llm.attributes["gen_ai.response.model"] == MODEL
            assert "gen_ai.request.model" not in llm.attributes  # only the response model
            assert llm.attributes["gen_ai.usage.input_tokens"] == INPUT_TOKENS
            assert llm.attributes["gen_ai.usage.output_tokens"] == OUTPUT_TOKENS
            assert llm.attributes["gen_ai.usage.total_tokens"] == INPUT_TOKENS + OUTPUT_TOKENS

    def test_agent_name_is_known_at_start(self, openllmetry: Run) -> None:
        agent = one(where(openllmetry.spans, "traceloop.span.kind", "agent"))
        assert openllmetry.attributes_at_start(agent)["gen_ai.agent.name"] == AGENT_NAME
        tool = where(openllmetry.spans, "traceloop.span.kind", "tool")[0]
        at_start = openllmetry.attributes_at_start(tool)
        assert at_start["gen_ai.tool.name"] == "local_index"
        assert "gen_ai.tool.call.arguments" not in at_start  # set when the tool ends

    def test_failing_tool_is_reported_to_the_model(self, openllmetry: Run) -> None:
        tool = one(where(openllmetry.flaky, "traceloop.span.kind", "tool"))
        assert tool.attributes["gen_ai.tool.name"] == "flaky_tool"
        assert tool.status.status_code is StatusCode.ERROR
        # The SDK's SpanError, as str(dict).
        assert tool.status.description.startswith("{'message': 'Error running tool (non-fatal)'")
        assert OPENAI_AGENTS_REDACTED in tool.status.description
        assert tool.attributes["gen_ai.tool.call.result"] == OPENAI_AGENTS_TOOL_ERROR
        assert tool.events == ()
        assert "error.type" not in tool.attributes


class TestLangChainOpenInference:
    """LangChain + OpenInference: every attribute is set when the span ends."""

    def test_tool_spans(self, langchain: Run) -> None:
        tools = where(langchain.spans, "openinference.span.kind", "TOOL")
        assert [t.name for t in tools] == EXPECTED_TOOLS
        assert [t.attributes["tool.name"] for t in tools] == EXPECTED_TOOLS
        for tool in tools:
            # A one-argument tool's input is the bare value: neither JSON nor the argument's name.
            assert tool.attributes["input.value"] == ARGUMENTS["query"]
            assert "input.mime_type" not in tool.attributes
            assert tool.attributes["tool.description"]
            assert tool.status.status_code is StatusCode.OK

    def test_result_and_call_id_are_in_the_tool_message(self, langchain: Run) -> None:
        tools = where(langchain.spans, "openinference.span.kind", "TOOL")
        messages = [json.loads(t.attributes["output.value"]) for t in tools]
        assert {t.attributes["output.mime_type"] for t in tools} == {"application/json"}
        assert [m["type"] for m in messages] == ["tool"] * len(SUPPORT_RUN)
        assert [m["data"]["content"] for m in messages] == [RESULTS[name] for name in EXPECTED_TOOLS]
        assert [m["data"]["tool_call_id"] for m in messages] == EXPECTED_CALL_IDS
        assert [m["data"]["status"] for m in messages] == ["success"] * len(SUPPORT_RUN)

    def test_agent_span(self, langchain: Run) -> None:
        agent = one(where(langchain.spans, "openinference.span.kind", "AGENT"))
        assert agent.name == AGENT_NAME  # the only place the name appears
        assert "agent.name" not in agent.attributes
        assert agent.attributes["input.value"] == QUESTION
        assert agent.attributes["output.value"] == ANSWER
        for tool in where(langchain.spans, "openinference.span.kind", "TOOL"):
            assert ancestors(tool, langchain.spans) == [agent]

    def test_llm_spans(self, langchain: Run) -> None:
        llms = where(langchain.spans, "openinference.span.kind", "LLM")
        assert len(llms) == len(SUPPORT_RUN) + 1
        prefix = "llm.output_messages.0.message.tool_calls.0.tool_call"
        assert [s.attributes.get(f"{prefix}.id") for s in llms] == [*EXPECTED_CALL_IDS, None]
        assert json.loads(llms[0].attributes[f"{prefix}.function.arguments"]) == ARGUMENTS
        for llm in llms:
            assert llm.name == "ToolCallingFakeChatModel"  # the model class name
            assert llm.attributes["llm.model_name"] == MODEL
            assert llm.attributes["llm.token_count.prompt"] == INPUT_TOKENS
            assert llm.attributes["llm.token_count.completion"] == OUTPUT_TOKENS
            assert llm.attributes["llm.token_count.total"] == INPUT_TOKENS + OUTPUT_TOKENS

    def test_nothing_is_known_at_start_but_the_span_name(self, langchain: Run) -> None:
        assert {(name, len(at_start)) for name, at_start in langchain.at_start.values()} == {
            (AGENT_NAME, 0),
            ("ToolCallingFakeChatModel", 0),
            ("local_index", 0),
            ("web_search", 0),
        }

    def test_failing_tool_ends_the_run(self, langchain: Run) -> None:
        tool = one(where(langchain.flaky, "openinference.span.kind", "TOOL"))
        assert tool.name == "flaky_tool"
        assert tool.status.status_code is StatusCode.ERROR
        assert tool.status.description.startswith(f"ToolFailure('{FLAKY_ERROR}')Traceback")
        assert "output.value" not in tool.attributes
        event = one([e for e in tool.events if e.name == "exception"])
        assert event.attributes["exception.type"] == EXCEPTION_TYPE
        assert event.attributes["exception.message"] == FLAKY_ERROR
        agent = one(where(langchain.flaky, "openinference.span.kind", "AGENT"))
        assert agent.status.status_code is StatusCode.ERROR


# --- Across sources ------------------------------------------------------------------------


@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())
def test_each_run_is_one_trace_of_fresh_spans(source: Callable[..., list[ReadableSpan]]) -> None:
    first, second = source(), source()
    assert len(first) == len(second) > 0
    assert len({s.context.trace_id for s in first}) == 1
    assert {s.context.trace_id for s in first}.isdisjoint(s.context.trace_id for s in second)


def _run_uninstrumented() -> None:
    """An openai-agents run and a LangChain run with no instrumentor of ours in place.

    Whatever openai-agents trace processors are left registered see the run: the test empties
    the list first, so the SDK's own exporter to OpenAI is never among them.
    """
    agent = Agent(name="bystander", model=ScriptedModel([[assistant_message("hi")]]))
    asyncio.run(Runner.run(agent, "hello"))
    RunnableLambda(lambda text: text.upper(), name="bystander_agent").invoke("hello")


@pytest.mark.parametrize("source", SOURCES.values(), ids=SOURCES.keys())
def test_instrumentation_is_removed_after_each_run(source: Callable[..., list[ReadableSpan]]) -> None:
    """Instrumentors are global monkey-patches: later runs must not reach this run's provider."""
    set_trace_processors([])  # the SDK's default processor uploads to OpenAI
    global_provider = trace.get_tracer_provider()
    recorder = StartRecorder()
    source(processors=[recorder])
    seen = len(recorder.at_start)
    _run_uninstrumented()
    for other in SOURCES.values():
        other()
    _run_uninstrumented()
    assert len(recorder.at_start) == seen
    assert trace.get_tracer_provider() is global_provider

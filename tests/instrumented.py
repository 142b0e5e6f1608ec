"""Real spans from real instrumentation libraries, produced offline by each library's own test doubles.

Every source runs the same agent, so tests can compare conventions::

    spans = pydantic_ai_spans()                  # the support run below
    spans = pydantic_ai_spans(FLAKY_RUN)         # a tool that raises
    spans = pydantic_ai_spans(processors=[mine]) # also feed the spans to `mine`, live

The support run: agent ``support_agent`` is asked QUESTION, calls ``local_index`` with ARGUMENTS,
``local_index`` again with the same arguments (redundant), ``web_search`` (spurious), then answers
ANSWER. Every model reply reports INPUT_TOKENS and OUTPUT_TOKENS.

Each function builds a private ``TracerProvider`` and returns its finished spans in end order; the
global provider is never touched. Instrumentors are global monkey-patches, so each is removed in a
``finally``, and the functions can run repeatedly and in any order in one process. Each run calls
``asyncio.run``: call them from synchronous code, not from inside a running event loop.

The openai-agents runs use the SDK's real ``OpenAIResponsesModel`` over an ``httpx.MockTransport``
serving canned Responses built with ``agents.testing``: ``ScriptedModel`` alone gives LLM spans no
model name and no token usage. Nothing leaves the process.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, NamedTuple

import httpx
from agents import Agent as OpenAIAgent
from agents import OpenAIResponsesModel, Runner, function_tool, set_trace_processors
from agents.testing import assistant_message, function_call
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolCall
from langchain_core.messages.ai import UsageMetadata
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool as langchain_tool
from openai import AsyncOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor
from openinference.instrumentation.openai_agents import (
    OpenAIAgentsInstrumentor as OpenInferenceAgentsInstrumentor,
)
from opentelemetry.instrumentation.openai_agents import (
    OpenAIAgentsInstrumentor as OpenLLMetryAgentsInstrumentor,
)
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

AGENT_NAME = "support_agent"
QUESTION = "What is your return policy?"
ANSWER = "Returns are accepted within 30 days."
ARGUMENTS = {"query": "return policy"}
MODEL = "gpt-4.1-mini"
INPUT_TOKENS = 50
OUTPUT_TOKENS = 10
LOCAL_INDEX_RESULT = "Policy doc: returns are accepted within 30 days."
WEB_SEARCH_RESULT = "Web result: most shops accept returns within 30 days."
FLAKY_ERROR = "index unavailable"


class Step(NamedTuple):
    """One tool call the scripted model makes."""

    tool: str
    arguments: dict[str, Any]
    call_id: str


SUPPORT_RUN = (
    Step("local_index", ARGUMENTS, "call_1"),
    Step("local_index", ARGUMENTS, "call_2"),  # redundant: same tool, same arguments
    Step("web_search", ARGUMENTS, "call_3"),  # spurious: the local index already answered
)
FLAKY_RUN = (Step("flaky_tool", ARGUMENTS, "call_1"),)


class ToolFailure(RuntimeError):
    """What ``flaky_tool`` raises."""


def local_index(query: str) -> str:
    """Search the local knowledge base."""
    return LOCAL_INDEX_RESULT


def web_search(query: str) -> str:
    """Search the web."""
    return WEB_SEARCH_RESULT


def flaky_tool(query: str) -> str:
    """Search a backend that is down."""
    raise ToolFailure(FLAKY_ERROR)


TOOLS: tuple[Callable[[str], str], ...] = (local_index, web_search, flaky_tool)

Processors = Sequence[SpanProcessor]


def _provider(processors: Processors) -> tuple[TracerProvider, InMemorySpanExporter]:
    provider = TracerProvider(shutdown_on_exit=False)
    for processor in processors:
        provider.add_span_processor(processor)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _finished(provider: TracerProvider, exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    provider.force_flush()
    return list(exporter.get_finished_spans())


# --- pydantic-ai: GenAI semconv, instrumented per agent -------------------------------------


def pydantic_ai_spans(
    steps: Sequence[Step] = SUPPORT_RUN, *, processors: Processors = ()
) -> list[ReadableSpan]:
    """Spans of a pydantic-ai ``Agent`` driven by ``FunctionModel``."""
    provider, exporter = _provider(processors)
    usage = RequestUsage(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS)
    replies = iter(
        [ModelResponse(parts=[ToolCallPart(s.tool, s.arguments, tool_call_id=s.call_id)], usage=usage)
         for s in steps]
        + [ModelResponse(parts=[TextPart(ANSWER)], usage=usage)]
    )
    agent = PydanticAgent(
        FunctionModel(lambda messages, info: next(replies), model_name=MODEL),
        name=AGENT_NAME,
        tools=TOOLS,
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))],
    )
    with suppress(ToolFailure):  # pydantic-ai ends the run when a tool raises
        asyncio.run(agent.run(QUESTION))  # not run_sync: it leaves a global event loop behind
    return _finished(provider, exporter)


# --- openai-agents SDK: OpenInference and OpenLLMetry --------------------------------------


def _responses_client(steps: Sequence[Step]) -> AsyncOpenAI:
    """An OpenAI client that answers each Responses API call with the next scripted reply."""
    outputs = [[function_call(s.tool, s.arguments, call_id=s.call_id)] for s in steps]
    outputs.append([assistant_message(ANSWER)])
    replies = iter(
        {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 0,
            "model": MODEL,
            "status": "completed",
            "output": [item.model_dump(exclude_none=True) for item in output],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": INPUT_TOKENS,
                "output_tokens": OUTPUT_TOKENS,
                "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }
        for n, output in enumerate(outputs, start=1)
    )
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=next(replies)))
    return AsyncOpenAI(
        api_key="sk-placeholder-never-used",
        base_url="http://offline.invalid/v1",
        http_client=httpx.AsyncClient(transport=transport),
    )


def _openai_agents_spans(
    instrumentor: Any, steps: Sequence[Step], processors: Processors
) -> list[ReadableSpan]:
    provider, exporter = _provider(processors)
    agent = OpenAIAgent(
        name=AGENT_NAME,
        instructions="Answer customer questions.",
        model=OpenAIResponsesModel(MODEL, openai_client=_responses_client(steps)),
        tools=[function_tool(f) for f in TOOLS],
    )
    set_trace_processors([])  # else the SDK uploads its own traces to OpenAI
    instrumentor.instrument(tracer_provider=provider)
    try:
        # Not Runner.run_sync: it reuses a global event loop. A tool that raises does not end
        # the run: the model gets an error message instead.
        asyncio.run(Runner.run(agent, QUESTION))
    finally:
        instrumentor.uninstrument()
        set_trace_processors([])  # OpenLLMetry's uninstrument() leaves its processor registered
    return _finished(provider, exporter)


def openai_agents_openinference_spans(
    steps: Sequence[Step] = SUPPORT_RUN, *, processors: Processors = ()
) -> list[ReadableSpan]:
    """Spans of an openai-agents run, instrumented by openinference-instrumentation-openai-agents."""
    return _openai_agents_spans(OpenInferenceAgentsInstrumentor(), steps, processors)


def openai_agents_openllmetry_spans(
    steps: Sequence[Step] = SUPPORT_RUN, *, processors: Processors = ()
) -> list[ReadableSpan]:
    """Spans of an openai-agents run, instrumented by opentelemetry-instrumentation-openai-agents."""
    return _openai_agents_spans(OpenLLMetryAgentsInstrumentor(), steps, processors)


# --- LangChain (langchain-core only): OpenInference ----------------------------------------


class ToolCallingFakeChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` that accepts ``bind_tools``: its scripted replies already name the tools."""

    model_name: str = MODEL

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFakeChatModel:
        return self


def langchain_openinference_spans(
    steps: Sequence[Step] = SUPPORT_RUN, *, processors: Processors = ()
) -> list[ReadableSpan]:
    """Spans of a hand-written LangChain tool loop named ``support_agent``, instrumented by OpenInference.

    langchain-core has no agent of its own (that is in the ``langchain`` package), so the loop is a
    ``RunnableLambda``: ask the model, run the tools it calls, repeat until it answers.
    """
    provider, exporter = _provider(processors)
    usage = UsageMetadata(
        input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS, total_tokens=INPUT_TOKENS + OUTPUT_TOKENS
    )
    calls = [ToolCall(name=s.tool, args=s.arguments, id=s.call_id) for s in steps]
    replies = [AIMessage("", tool_calls=[call], usage_metadata=usage) for call in calls]
    replies.append(AIMessage(ANSWER, usage_metadata=usage))
    tools = {t.name: t for t in map(langchain_tool, TOOLS)}
    llm = ToolCallingFakeChatModel(messages=iter(replies)).bind_tools(list(tools.values()))

    def run_agent(question: str) -> str:
        messages: list[BaseMessage] = [HumanMessage(question)]
        while (reply := llm.invoke(messages)).tool_calls:
            messages.append(reply)
            messages.extend(tools[call["name"]].invoke(call) for call in reply.tool_calls)
        return str(reply.content)

    # OpenInference marks a LangChain run as AGENT when its name contains "agent".
    support_agent = RunnableLambda(run_agent, name=AGENT_NAME)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with suppress(ToolFailure):  # LangChain tools raise unless handle_tool_error is set
            support_agent.invoke(QUESTION)
    finally:
        instrumentor.uninstrument()
    return _finished(provider, exporter)


SOURCES: dict[str, Callable[..., list[ReadableSpan]]] = {
    "pydantic_ai": pydantic_ai_spans,
    "openai_agents_openinference": openai_agents_openinference_spans,
    "openai_agents_openllmetry": openai_agents_openllmetry_spans,
    "langchain_openinference": langchain_openinference_spans,
}


def dump(spans: Sequence[ReadableSpan]) -> str:
    """A readable listing of spans (name, parent, status, attributes, events), for debugging."""
    names = {s.context.span_id: s.name for s in spans}
    lines = []
    for s in spans:
        parent = names.get(s.parent.span_id, "?") if s.parent else None
        status = f"{s.status.status_code.name} {s.status.description or ''}"
        lines.append(f"{s.name!r} parent={parent!r} status={status}"[:200])
        for key, value in (s.attributes or {}).items():
            lines.append(f"    {key} = {json.dumps(value) if isinstance(value, str) else value}"[:200])
        lines += [f"    event {e.name} {dict(e.attributes or {})}"[:200] for e in s.events]
    return "\n".join(lines)

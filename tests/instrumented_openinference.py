"""Real spans from smolagents and llama-index agents, instrumented by OpenInference, produced offline.

The companions of ``instrumented.py`` for two more frameworks, each in its default settings::

    spans = smolagents_spans()                    # the two-tool run below
    spans = llama_index_spans(processors=[mine])  # also feed the spans to `mine`, live

The run: an agent named ``support_agent`` is asked QUESTION and calls ``local_index`` with
FIRST_ARGUMENTS, ``local_index`` again with other arguments (SECOND_ARGUMENTS: no repeat) and
``web_search`` with FIRST_ARGUMENTS, then answers ANSWER.

- smolagents: a ``ToolCallingAgent`` over the library's real ``OpenAIModel``, whose OpenAI client
  talks to an ``httpx.MockTransport`` serving canned chat completions (OpenInference instruments
  only the model classes smolagents exports, so a hand-made ``Model`` subclass would give no LLM
  spans). smolagents ends a run by calling its own ``final_answer`` tool.
- llama-index: a ``FunctionAgent`` over llama-index's own ``MockFunctionCallingLLM``, scripted with
  ``response_generator``; the subclass below only names the model and reports token usage the
  way OpenAI responses do.

Each function builds a private ``TracerProvider`` and returns its finished spans in end order; the
instrumentor is removed in a ``finally``. Nothing leaves the process.
"""
from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import httpx
import openai
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.base.llms.types import ChatResponse, LLMMetadata, MessageRole, ToolCallBlock
from llama_index.core.llms.callbacks import llm_chat_callback
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from smolagents import OpenAIModel, ToolCallingAgent
from smolagents import tool
from smolagents.monitoring import LogLevel

from instrumented import (AGENT_NAME, ANSWER, INPUT_TOKENS, LOCAL_INDEX_RESULT, MODEL, OUTPUT_TOKENS, QUESTION,
                          WEB_SEARCH_RESULT, Processors, Step, _finished, _provider)

FIRST_ARGUMENTS = {"query": "return policy"}
SECOND_ARGUMENTS = {"query": "refund window"}
RUN = (
    Step("local_index", FIRST_ARGUMENTS, "call_1"),
    Step("local_index", SECOND_ARGUMENTS, "call_2"),  # the same tool, other arguments: no repeat
    Step("web_search", FIRST_ARGUMENTS, "call_3"),
)
USAGE = {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS, "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}


# --- smolagents: ToolCallingAgent, OpenAIModel over an in-process transport ---------------


@tool
def local_index(query: str) -> str:
    """Search the local knowledge base.

    Args:
        query: What to look for.
    """
    return LOCAL_INDEX_RESULT


@tool
def web_search(query: str) -> str:
    """Search the web.

    Args:
        query: What to look for.
    """
    return WEB_SEARCH_RESULT


def _chat_completions_client(steps: Sequence[Step]) -> openai.OpenAI:
    """An OpenAI client answering each chat completion with the next scripted tool call, then
    smolagents' own `final_answer` call."""
    calls = [(s.tool, s.arguments, s.call_id) for s in steps] + [("final_answer", {"answer": ANSWER}, "call_final")]
    replies = iter(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}],
            }}],
            "usage": USAGE,
        }
        for n, (name, arguments, call_id) in enumerate(calls, start=1)
    )
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=next(replies)))
    return openai.OpenAI(api_key="sk-placeholder-never-used", base_url="http://offline.invalid/v1",
                         http_client=httpx.Client(transport=transport))


def smolagents_spans(steps: Sequence[Step] = RUN, *, processors: Processors = ()) -> list[ReadableSpan]:
    """Spans of a smolagents ``ToolCallingAgent`` run, instrumented by openinference-instrumentation-smolagents."""
    provider, exporter = _provider(processors)
    agent = ToolCallingAgent(
        tools=[local_index, web_search],
        model=OpenAIModel(MODEL, client=_chat_completions_client(steps)),
        name=AGENT_NAME,
        verbosity_level=LogLevel.OFF,
    )
    instrumentor = SmolagentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        assert agent.run(QUESTION) == ANSWER
    finally:
        instrumentor.uninstrument()
    return _finished(provider, exporter)


# --- llama-index: FunctionAgent, MockFunctionCallingLLM -----------------------------------


class ScriptedLLM(MockFunctionCallingLLM):
    """llama-index's mock function-calling LLM, naming its model and reporting OpenAI-style usage."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=MODEL, is_function_calling_model=True)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[LlamaMessage], **kwargs: Any) -> AsyncGenerator[ChatResponse, None]:
        reply = self.response_generator(messages, **kwargs)

        async def stream() -> AsyncGenerator[ChatResponse, None]:
            yield ChatResponse(message=reply, delta=reply.content or "", raw={"usage": USAGE})

        return stream()


def _local_index(query: str) -> str:
    """Search the local knowledge base."""
    return LOCAL_INDEX_RESULT


def _web_search(query: str) -> str:
    """Search the web."""
    return WEB_SEARCH_RESULT


def llama_index_spans(steps: Sequence[Step] = RUN, *, processors: Processors = ()) -> list[ReadableSpan]:
    """Spans of a llama-index ``FunctionAgent`` run, instrumented by openinference-instrumentation-llama-index."""
    provider, exporter = _provider(processors)
    replies = iter(
        [LlamaMessage(role=MessageRole.ASSISTANT, blocks=[ToolCallBlock(tool_call_id=s.call_id, tool_name=s.tool, tool_kwargs=s.arguments)])
         for s in steps]
        + [LlamaMessage(role=MessageRole.ASSISTANT, content=ANSWER)]
    )
    agent = FunctionAgent(
        name=AGENT_NAME,
        tools=[FunctionTool.from_defaults(_local_index, name="local_index"), FunctionTool.from_defaults(_web_search, name="web_search")],
        llm=ScriptedLLM(response_generator=lambda messages, **kwargs: next(replies)),
    )
    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        result = asyncio.run(_run(agent))
    finally:
        instrumentor.uninstrument()
    assert str(result) == ANSWER, result
    return _finished(provider, exporter)


async def _run(agent: FunctionAgent) -> Any:
    return await agent.run(QUESTION)


SOURCES = {"smolagents": smolagents_spans, "llama_index": llama_index_spans}

"""Record the support run of a framework that cannot be installed beside the test dependencies.

    python -m venv /tmp/venv-strands && /tmp/venv-strands/bin/pip install strands-agents==1.62.0 openai
    cd tests && /tmp/venv-strands/bin/python record_frameworks.py strands > recorded_strands.py

    python -m venv /tmp/venv-sk && /tmp/venv-sk/bin/pip install semantic-kernel==1.45.0
    cd tests && /tmp/venv-sk/bin/python record_frameworks.py semantic_kernel > recorded_semantic_kernel.py

Why not beside them: strands-agents needs `mcp<2.2` (openai-agents brings 2.3) and
`opentelemetry-instrumentation-threading`, which has no release for the SDK these tests run on;
every semantic-kernel release needs `pydantic<2.14` (pydantic-ai needs 2.14) and `mcp<2.0`;
autogen-core needs `protobuf~=5.29` (the OTLP exporters here need 7).

    python -m venv /tmp/venv-autogen && /tmp/venv-autogen/bin/pip install autogen-agentchat==0.7.5 \
        autogen-ext==0.7.5 opentelemetry-sdk
    cd tests && /tmp/venv-autogen/bin/python record_frameworks.py autogen > recorded_autogen.py

    python -m venv /tmp/venv-crewai && /tmp/venv-crewai/bin/pip install crewai==1.15.30 \
        openinference-instrumentation-crewai==1.1.21 opentelemetry-sdk
    cd tests && /tmp/venv-crewai/bin/python record_frameworks.py crewai > recorded_crewai.py

crewai: every 1.x release pins `aiosqlite~=0.21` (0.22 is locked here) and the 0.x ones `openai<1`; pip
took 5 minutes to find no crewai beside the test dependencies. Its run (`crewai_run`) has its own script
(CREW_RUN) and turns off CrewAI's telemetry and tracing to its servers (offline).

Each framework runs in its DEFAULT telemetry settings (no environment variables set), offline: its
real OpenAI-compatible model class, whose OpenAI client is served canned chat completions by an
``httpx.MockTransport``. The agent is named support_agent, is asked QUESTION, calls ``local_index``
with FIRST_ARGUMENTS, ``local_index`` with SECOND_ARGUMENTS and ``web_search`` with FIRST_ARGUMENTS,
then answers ANSWER; every model reply reports INPUT_TOKENS and OUTPUT_TOKENS (the values of
instrumented.py and instrumented_openinference.py). Only the OpenTelemetry SDK and the framework are
needed here. The spans go to a global SDK provider (these frameworks trace through the global one).
"""
from __future__ import annotations

import json
import pprint
import sys
from typing import Any

AGENT_NAME = "support_agent"
QUESTION = "What is your return policy?"
ANSWER = "Returns are accepted within 30 days."
MODEL = "gpt-4.1-mini"
INPUT_TOKENS, OUTPUT_TOKENS = 50, 10
LOCAL_INDEX_RESULT = "Policy doc: returns are accepted within 30 days."
WEB_SEARCH_RESULT = "Web result: most shops accept returns within 30 days."
FIRST_ARGUMENTS = {"query": "return policy"}
SECOND_ARGUMENTS = {"query": "refund window"}
RUN = (("local_index", FIRST_ARGUMENTS, "call_1"), ("local_index", SECOND_ARGUMENTS, "call_2"),
       ("web_search", FIRST_ARGUMENTS, "call_3"))


def chat_completion(n: int, step: tuple[str, dict[str, Any], str] | None) -> dict[str, Any]:
    if step is None:
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
    else:
        name, arguments, call_id = step
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop" if step is None else "tool_calls", "message": message}],
            "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
                      "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}}


def chat_completion_chunks(n: int, step: tuple[str, dict[str, Any], str] | None) -> bytes:
    """The same reply as a Server-Sent Events stream of chat.completion.chunk objects, usage last."""
    whole = chat_completion(n, step)
    message = whole["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
    if "tool_calls" in message:
        delta["tool_calls"] = [{"index": 0, **call} for call in message["tool_calls"]]
    base = {"id": whole["id"], "object": "chat.completion.chunk", "created": 0, "model": MODEL}
    chunks = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
              {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": whole["choices"][0]["finish_reason"]}]},
              {**base, "choices": [], "usage": whole["usage"]}]
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks).encode() + b"data: [DONE]\n\n"


def openai_transport():
    """An httpx.MockTransport answering each chat completion with the next scripted reply (streamed when asked)."""
    import httpx

    replies = iter([*RUN, None])

    def answer(request: httpx.Request) -> httpx.Response:
        n, step = len(REQUESTS) + 1, next(replies)
        body = json.loads(request.content)
        REQUESTS.append(body)
        if body.get("stream"):
            return httpx.Response(200, content=chat_completion_chunks(n, step), headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=chat_completion(n, step))

    return httpx.MockTransport(answer)


REQUESTS: list[dict[str, Any]] = []  # the chat completion requests the transport answered


def tool_results_sent() -> list[str]:
    """The tool results the framework sent back to the model in its last request."""
    return [str(m.get("content")) for m in REQUESTS[-1]["messages"] if m.get("role") == "tool"]


def strands_run() -> None:
    import httpx
    import openai
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

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

    client = openai.AsyncOpenAI(api_key="sk-placeholder-never-used", base_url="http://offline.invalid/v1",
                                http_client=httpx.AsyncClient(transport=openai_transport()))
    agent = Agent(model=OpenAIModel(client=client, model_id=MODEL), name=AGENT_NAME, tools=[local_index, web_search],
                  callback_handler=None)
    result = agent(QUESTION)
    assert str(result).strip() == ANSWER, result
    assert len(tool_results_sent()) == len(RUN) and LOCAL_INDEX_RESULT in tool_results_sent()[0], REQUESTS[-1]


def semantic_kernel_run() -> None:
    """A `ChatCompletionAgent` with the plugin `support`: the model sees, and calls, `support-local_index`."""
    import asyncio

    import httpx
    import openai
    from semantic_kernel import Kernel
    from semantic_kernel.agents import ChatCompletionAgent
    from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
    from semantic_kernel.functions import kernel_function

    class SupportPlugin:
        @kernel_function(description="Search the local knowledge base.")
        def local_index(self, query: str) -> str:
            return LOCAL_INDEX_RESULT

        @kernel_function(description="Search the web.")
        def web_search(self, query: str) -> str:
            return WEB_SEARCH_RESULT

    global RUN
    RUN = tuple((f"support-{name}", arguments, call_id) for name, arguments, call_id in RUN)
    client = openai.AsyncOpenAI(api_key="sk-placeholder-never-used", base_url="http://offline.invalid/v1",
                                http_client=httpx.AsyncClient(transport=openai_transport()))
    kernel = Kernel()
    kernel.add_plugin(SupportPlugin(), plugin_name="support")
    agent = ChatCompletionAgent(kernel=kernel, service=OpenAIChatCompletion(ai_model_id=MODEL, async_client=client),
                                name=AGENT_NAME, instructions="Answer customer questions.")

    async def run() -> str:
        response = await agent.get_response(messages=QUESTION)
        return str(response.content)

    result = asyncio.run(run())
    assert result == ANSWER, result
    assert tool_results_sent() == [LOCAL_INDEX_RESULT, LOCAL_INDEX_RESULT, WEB_SEARCH_RESULT], REQUESTS[-1]


def autogen_run() -> None:
    """An `AssistantAgent` over autogen's own `ReplayChatCompletionClient` (its test model), looping on tool calls."""
    import asyncio

    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    async def local_index(query: str) -> str:
        """Search the local knowledge base."""
        return LOCAL_INDEX_RESULT

    async def web_search(query: str) -> str:
        """Search the web."""
        return WEB_SEARCH_RESULT

    usage = RequestUsage(prompt_tokens=INPUT_TOKENS, completion_tokens=OUTPUT_TOKENS)
    replies = [CreateResult(finish_reason="function_calls", usage=usage, cached=False,
                            content=[FunctionCall(id=call_id, name=name, arguments=json.dumps(arguments))])
               for name, arguments, call_id in RUN]
    replies.append(CreateResult(finish_reason="stop", content=ANSWER, usage=usage, cached=False))
    model = ReplayChatCompletionClient(replies, model_info=ModelInfo(
        vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False))
    agent = AssistantAgent(AGENT_NAME, model_client=model, tools=[local_index, web_search], max_tool_iterations=10,
                           description="Answers customer questions.")
    result = asyncio.run(agent.run(task=QUESTION))
    assert result.messages[-1].content == ANSWER, result.messages[-1]
    results = [r.content for m in result.messages if type(m).__name__ == "ToolCallExecutionEvent" for r in m.content]
    assert results == [LOCAL_INDEX_RESULT, LOCAL_INDEX_RESULT, WEB_SEARCH_RESULT], results


def google_adk_run() -> None:
    """An `LlmAgent` run by ADK's `InMemoryRunner`; the model is a `BaseLlm` (ADK's model interface) replying
    from the script, with Gemini-style usage metadata."""
    import asyncio
    from collections.abc import AsyncGenerator

    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    replies = iter([*RUN, None])
    usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=INPUT_TOKENS, candidates_token_count=OUTPUT_TOKENS,
                                                       total_token_count=INPUT_TOKENS + OUTPUT_TOKENS)

    class ScriptedLlm(BaseLlm):
        async def generate_content_async(self, llm_request, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            REQUESTS.append({"contents": [c.model_dump(mode="json", exclude_none=True) for c in llm_request.contents]})
            step = next(replies)
            if step is None:
                part = types.Part(text=ANSWER)
            else:
                name, arguments, call_id = step
                part = types.Part(function_call=types.FunctionCall(id=call_id, name=name, args=arguments))
            yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage, model_version=MODEL)

    def local_index(query: str) -> str:
        """Search the local knowledge base."""
        return LOCAL_INDEX_RESULT

    def web_search(query: str) -> str:
        """Search the web."""
        return WEB_SEARCH_RESULT

    agent = LlmAgent(name=AGENT_NAME, model=ScriptedLlm(model=MODEL), instruction="Answer customer questions.",
                     tools=[local_index, web_search])
    runner = InMemoryRunner(agent=agent, app_name="support")

    async def run() -> str:
        session = await runner.session_service.create_session(app_name="support", user_id="user")
        texts = []
        async for event in runner.run_async(user_id="user", session_id=session.id, new_message=types.Content(
                role="user", parts=[types.Part(text=QUESTION)])):
            texts += [p.text for p in (event.content.parts if event.content else []) if p.text]
        return "".join(texts)

    result = asyncio.run(run())
    assert result == ANSWER, result
    assert len(REQUESTS) == len(RUN) + 1


# CrewAI: a crew of two agents; the first calls local_index, then web_search (it raises), then delegates
# to the second, which calls local_index; both answer ANSWER.
CREW_ROLES = ("Researcher", "Writer")
CREW_RUN = (  # (agent role, tool, arguments) in call order; web_search raises WEB_SEARCH_ERROR
    ("Researcher", "local_index", FIRST_ARGUMENTS), ("Researcher", "web_search", SECOND_ARGUMENTS),
    ("Researcher", "Delegate work to coworker",
     {"task": "Check the shipping policy", "context": "A customer asks about returns", "coworker": "Writer"}),
    ("Writer", "local_index", {"query": "shipping"}),
)
WEB_SEARCH_ERROR = "search backend unreachable"


def crewai_run() -> None:
    """A sequential `Crew` over crewai's own `BaseLLM` extension point: each agent's scripted model answers
    crewai's native tool calling (the path its `@tool` tools take, traced as `<tool>.run` TOOL spans) with
    OpenAI-style tool calls, then a final answer. No LiteLLM, no HTTP. Telemetry and tracing to CrewAI's
    servers are off (offline), OpenInference's CrewAIInstrumentor is on in its default settings."""
    from crewai import Agent, Crew, Process, Task
    from crewai.llms.base_llm import BaseLLM
    from crewai.tools import tool
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry import trace

    class ScriptedLLM(BaseLLM):
        replies: list[Any] = []

        def call(self, messages, tools=None, callbacks=None, available_functions=None, from_task=None, from_agent=None,
                 response_model=None) -> Any:
            return self.replies.pop(0)

        def supports_function_calling(self) -> bool:
            return True

        def get_context_window_size(self) -> int:
            return 8_192

    @tool("local_index")
    def local_index(query: str) -> str:
        """Search the local knowledge base."""
        return LOCAL_INDEX_RESULT

    @tool("web_search")
    def web_search(query: str) -> str:
        """Search the web."""
        raise ConnectionError(WEB_SEARCH_ERROR)

    def script(role: str) -> list[Any]:
        calls = [[{"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]
                 for n, (who, name, arguments) in enumerate(CREW_RUN, 1) if who == role]
        return [*calls, ANSWER]

    CrewAIInstrumentor().instrument(tracer_provider=trace.get_tracer_provider())
    researcher_llm, writer_llm = ScriptedLLM(model=MODEL, replies=script("Researcher")), ScriptedLLM(model=MODEL, replies=script("Writer"))
    researcher = Agent(role="Researcher", goal="Answer policy questions", backstory="Support desk", llm=researcher_llm,
                       tools=[local_index, web_search], allow_delegation=True, max_iter=6)
    writer = Agent(role="Writer", goal="Check policies", backstory="Support desk", llm=writer_llm, tools=[local_index],
                   allow_delegation=False, max_iter=4)
    crew = Crew(agents=[researcher, writer], tasks=[Task(description=QUESTION, expected_output="The policy", agent=researcher)],
                process=Process.sequential)
    result = crew.kickoff()
    assert str(result).strip() == ANSWER, result
    assert researcher_llm.replies == [] and writer_llm.replies == [], (researcher_llm.replies, writer_llm.replies)


RUNS = {"strands": strands_run, "semantic_kernel": semantic_kernel_run, "autogen": autogen_run,
        "google_adk": google_adk_run, "crewai": crewai_run}
PACKAGES = {"strands": "strands-agents", "semantic_kernel": "semantic-kernel", "autogen": "autogen-agentchat",
            "google_adk": "google-adk", "crewai": "crewai"}
# Recorded variants: the default (no environment variable set) and, where a framework writes its model and
# agent spans only when asked, that setting too (still without sensitive content).
VARIANTS: dict[str, dict[str, dict[str, str]]] = {
    "strands": {"SPANS": {}},
    "semantic_kernel": {"SPANS": {}, "SPANS_WITH_DIAGNOSTICS": {"SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS": "true"}},
    "autogen": {"SPANS": {}},
    "crewai": {"SPANS": {"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false"}},  # offline
    "google_adk": {"SPANS": {}, "SPANS_LEGACY": {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"},
                   "SPANS_LEGACY_NO_CONTENT": {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1",
                                               "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false"}},
}


def record_one(framework: str) -> list[dict[str, Any]]:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from recorded_spans import record

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    RUNS[framework]()
    provider.force_flush()
    return record(exporter.get_finished_spans())


def main(framework: str) -> None:
    """Print the module recorded_<framework>.py: one run per variant, each in a fresh process."""
    import os
    import subprocess
    from importlib.metadata import version

    package = PACKAGES[framework]
    print(f'"""Spans of {package} {version(package)} support runs, recorded by `python record_frameworks.py {framework}`\n'
          f'(see record_frameworks.py); replayed by recorded_spans.replay. Generated: do not edit."""\n')
    print(f"VERSION = {version(package)!r}")
    for variable, env in VARIANTS[framework].items():
        clean = {k: v for k, v in os.environ.items() if k not in ("OTEL_SEMCONV_STABILITY_OPT_IN",)}
        out = subprocess.run([sys.executable, __file__, "--one", framework], env={**clean, **env}, check=True,
                             capture_output=True, text=True).stdout
        print(f"# {', '.join(f'{k}={v}' for k, v in env.items()) or 'default settings'}")
        print(f"{variable} = {pprint.pformat(json.loads(out), width=120, sort_dicts=False)}")


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        print(json.dumps(record_one(sys.argv[2])))
    else:
        main(sys.argv[1])

"""Shapes real frameworks write, made with the OpenTelemetry SDK and read by the live processor: how a tool
says it failed (one rule), model usage repeated on nested spans (counted once), path-like and
server-qualified tool names, CrewAI's agent and tool spans under OpenInference, and the agent span of
the Vercel AI SDK 7 `OpenTelemetry` integration (`invoke_agent {modelId}`)."""
from __future__ import annotations

from collections.abc import Callable

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode, Tracer

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.catalog import load_catalog
from otel_agent_eval.core.runs import AgentRun


def traced(build: Callable[[Tracer], None]) -> list[AgentRun]:
    runs: list[AgentRun] = []
    processor = AgentEvalSpanProcessor(registry=None, on_run=runs.append)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    build(provider.get_tracer("test"))
    provider.shutdown()
    return runs


def tool_span(tracer: Tracer, name: str = "web_search", **attributes):
    return tracer.start_as_current_span(f"execute_tool {name}", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **attributes})


def agent_span(tracer: Tracer):
    return tracer.start_as_current_span("invoke_agent support_agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})


# -- tool failures: one rule ------------------------------------------------------------------------------

def _strands_error_result(tracer: Tracer) -> None:  # strands: the tool raised, its result is an error, status OK
    with tool_span(tracer, **{"gen_ai.tool.status": "error"}) as span:
        span.set_status(Status(StatusCode.OK))


def _exception_left_unset(tracer: Tracer) -> None:
    with tool_span(tracer) as span:
        span.record_exception(TimeoutError("slow backend"))


def _failed_child(tracer: Tracer) -> None:  # the tool's own client call failed; the tool span says nothing
    with tool_span(tracer):
        with tracer.start_as_current_span("GET /search", record_exception=False) as child:
            child.set_status(Status(StatusCode.ERROR, "503"))
            child.set_attribute("error.type", "503")


def _exception_handled(tracer: Tracer) -> None:  # a retry that worked: the instrumentation set OK
    with tool_span(tracer) as span:
        span.record_exception(TimeoutError("first try"))
        span.set_status(Status(StatusCode.OK))


def _failed_child_of_ok_tool(tracer: Tracer) -> None:
    with tool_span(tracer) as span:
        with tracer.start_as_current_span("GET /search") as child:
            child.set_status(Status(StatusCode.ERROR, "503"))
        span.set_status(Status(StatusCode.OK))


@pytest.mark.parametrize(("shape", "error"), [
    (_strands_error_result, "_OTHER"), (_exception_left_unset, "TimeoutError"), (_failed_child, "503"),
    (_exception_handled, None), (_failed_child_of_ok_tool, None)])
def test_a_tool_fails_by_one_rule(shape: Callable[[Tracer], None], error: str | None) -> None:
    def build(tracer: Tracer) -> None:
        with agent_span(tracer):
            shape(tracer)

    [run] = traced(build)
    assert [(call.name, call.error) for call in run.tool_calls] == [("web_search", error)]
    assert run.scores[0].outcome == ("error" if error else run.scores[0].outcome)


# -- tokens counted once ------------------------------------------------------------------------------------

def _usage(input_tokens: int = 50, output_tokens: int = 10) -> dict[str, int]:
    return {"gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens}


def _adk_through_an_instrumented_client(tracer: Tracer) -> None:  # call_llm > generate_content > openai.chat
    with tracer.start_as_current_span("call_llm", attributes={"gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
        with tracer.start_as_current_span("generate_content gpt-4.1-mini", attributes={
                "gen_ai.operation.name": "generate_content", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
            with tracer.start_as_current_span("openai.chat", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
                pass


def _any_agent_call_llm_around_chat(tracer: Tracer) -> None:  # any-agent's `call_llm` operation over a client's chat
    with tracer.start_as_current_span("call_llm gpt-4.1-mini", attributes={
            "gen_ai.operation.name": "call_llm", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
        with tracer.start_as_current_span("chat gpt-4.1-mini", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
            pass


def _vercel_generate_text(tracer: Tracer) -> None:  # ai.generateText (summed usage) > ai.generateText.doGenerate
    with tracer.start_as_current_span("ai.generateText", attributes={
            "ai.operationId": "ai.generateText", "ai.usage.promptTokens": 50, "ai.usage.completionTokens": 10}):
        with tracer.start_as_current_span("ai.generateText.doGenerate", attributes={
                "ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "gpt-4.1-mini",
                "ai.usage.promptTokens": 50, "ai.usage.completionTokens": 10, **_usage()}):
            pass


def _vercel_7_gen_ai(tracer: Tracer) -> None:  # invoke_agent {model} (summed usage) > step 1 > chat {model}
    with tracer.start_as_current_span("invoke_agent gpt-4.1-mini", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
        with tracer.start_as_current_span("step 1", attributes={"gen_ai.operation.name": "agent_step"}):
            with tracer.start_as_current_span("chat gpt-4.1-mini", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
                pass


def _strands_agent_around_chat(tracer: Tracer) -> None:  # invoke_agent (summed usage) > chat
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent", **_usage()}):
        with tracer.start_as_current_span("chat", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4.1-mini", **_usage()}):
            pass


@pytest.mark.parametrize("shape", [_adk_through_an_instrumented_client, _any_agent_call_llm_around_chat,
                                   _vercel_generate_text, _vercel_7_gen_ai, _strands_agent_around_chat])
def test_usage_repeated_on_nested_spans_of_one_model_call_is_counted_once(shape: Callable[[Tracer], None]) -> None:
    def build(tracer: Tracer) -> None:
        shape(tracer)
        shape(tracer)  # a second call in another trace counts on its own

    runs = traced(build)
    assert [[(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls] for run in runs] == [
        [("gpt-4.1-mini", 50, 10)], [("gpt-4.1-mini", 50, 10)]]


def test_two_model_calls_under_one_run_span_are_two_calls() -> None:
    def build(tracer: Tracer) -> None:
        with tracer.start_as_current_span("ai.generateText", attributes={"ai.operationId": "ai.generateText"}):
            for _ in range(2):
                with tracer.start_as_current_span("ai.generateText.doGenerate", attributes={
                        "ai.operationId": "ai.generateText.doGenerate", "ai.model.id": "gpt-4.1-mini", **_usage()}):
                    pass

    [run] = traced(build)
    assert sum(c.input_tokens for c in run.llm_calls) == 100 and len(run.llm_calls) == 2


# -- names and agents ------------------------------------------------------------------------------------------

def test_crewai_spans_give_the_role_the_arguments_and_never_a_method_or_a_path() -> None:
    calling = "tool_name='{0}' arguments={{'expression': '12345 + 6789'}}"
    mcp_name = "/home/u/.venv/bin/python3_/home/u/mcp/calculator.py_calculate"

    def build(tracer: Tracer) -> None:
        for role, tool in (("Weather Forecaster", "calculator"), ("Calculator", mcp_name)):
            with tracer.start_as_current_span(f"{role}._execute_core", attributes={
                    "openinference.span.kind": "AGENT", "graph.node.id": role}):
                value = '{"tool_string": "Action: x", "tool": "CrewStructuredTool()", "calling": "%s"}' % calling.format(tool)
                with tracer.start_as_current_span(f"{tool}._use", attributes={
                        "openinference.span.kind": "TOOL", "tool.name": tool, "input.value": value}):
                    pass
                with tracer.start_as_current_span("Delegate work to coworker._use", attributes={
                        "openinference.span.kind": "TOOL", "tool.name": "Delegate work to coworker",
                        "input.value": '{"calling": "tool_name=\'Delegate work to coworker\' arguments={}"}'}):
                    pass

    runs = traced(build)
    assert [(run.agent, [(c.name, c.agent, c.arguments) for c in run.tool_calls]) for run in runs] == [
        ("Weather Forecaster", [("calculator", "Weather Forecaster", {"expression": "12345 + 6789"})]),
        ("Calculator", [("calculate", "Calculator", {"expression": "12345 + 6789"})]),  # delegation: a framework tool
    ]


def test_server_qualified_names_are_their_catalog_tool() -> None:
    catalog = load_catalog()
    tool = catalog.tool("local_index")
    assert tool is not None
    for name in ("mcp__docs__local_index", "docs.local_index", "support-local_index"):
        assert catalog.tool(name) is tool
    assert catalog.tool("mcp__docs__no_such_tool") is None


def test_a_model_id_in_the_agent_span_name_is_no_agent() -> None:
    def build(tracer: Tracer) -> None:
        with tracer.start_as_current_span("invoke_agent gpt-4.1-mini", attributes={
                "gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "gpt-4.1-mini"}):
            with tool_span(tracer):
                pass

    [run] = traced(build)
    assert run.agent is None and [c.agent for c in run.tool_calls] == [None]

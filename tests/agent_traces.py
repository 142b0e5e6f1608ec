"""Agent traces in the shapes real frameworks write, made with the real OpenTelemetry SDK, for `catalog draft` and `score`.

Each trace is started and ended by an SDK ``TracerProvider`` (into an ``InMemorySpanExporter``) as GenAI
spans: `invoke_agent` with `gen_ai.agent.name`, `execute_tool` with `gen_ai.tool.name` and arguments, `chat`
with `gen_ai.request.model` and token counts, at set times, and written as the Collector's file exporter
writes OTLP/JSON lines (`test_score.collector_lines`). The shapes are those of the runs recorded from
CrewAI, any-agent and the Vercel AI SDK (see `crew`, `any_agent` and `no_agent`), with the numbers the
tests need made exact: latencies whose p99 is a fraction of a millisecond, tokens per model call.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Span, Status, StatusCode, set_span_in_context

from test_score import collector_lines, write

T0 = 1_770_000_000_000_000_000
MS = 1_000_000
HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"  # the Vercel AI SDK runs' model (Bedrock): genai-prices knows it
MISTRAL = "mistral/mistral-small-latest"  # any-agent's: genai-prices knows it too
UNKNOWN_MODEL = "nonexistent-model-id-12345"  # the Vercel error scenario's: no price anywhere, and its calls used no tokens


@dataclass(frozen=True)
class Tool:
    """One tool call: its name, its duration in milliseconds (exact to the nanosecond) and its arguments."""

    name: str
    ms: float = 20.0
    arguments: dict[str, Any] | None = None


@dataclass(frozen=True)
class Chat:
    """One model call; `error` makes it fail before the model answered (no tokens, as the Vercel error scenario)."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    error: str | None = None


Step = Tool | Chat


class Recorder:
    """A private TracerProvider whose spans are kept in memory; `write` puts them in a file as OTLP/JSON lines."""

    def __init__(self, service: str) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer(service)
        self.now = T0
        self.calls = 0

    def _span(self, name: str, parent: Span | None, attributes: dict[str, Any]) -> Span:
        context = set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(name, context=context, start_time=self.now, attributes=attributes)

    def steps(self, parent: Span | None, steps: Sequence[Step]) -> None:
        """The steps one after another under `parent` (None: each its own trace's root)."""
        for step in steps:
            self.now += MS
            if isinstance(step, Tool):
                self.calls += 1
                span = self._span(f"execute_tool {step.name}", parent, {
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step.name,
                    "gen_ai.tool.call.id": f"call_{self.calls}",
                    "gen_ai.tool.call.arguments": json.dumps(step.arguments or {"input": f"request {self.calls}"})})
                self.now += round(step.ms * MS)
            else:
                attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": step.model}
                if step.error is None:
                    attributes |= {"gen_ai.response.model": step.model, "gen_ai.usage.input_tokens": step.input_tokens,
                                   "gen_ai.usage.output_tokens": step.output_tokens}
                span = self._span(f"chat {step.model}", parent, attributes)
                if step.error is not None:
                    span.set_status(Status(StatusCode.ERROR, step.error))
                    span.set_attribute("error.type", "NotFoundError")
                self.now += 300 * MS
            span.end(end_time=self.now)

    def agent(self, name: str | None, steps: Sequence[Step], parent: Span | None = None) -> None:
        """One run: an `invoke_agent` span of agent `name` (under `parent`, or a trace of its own) around the steps;
        with no name, a trace whose root names no agent (`ai.generateText`, as the Vercel AI SDK writes)."""
        self.now += MS
        if name is None:
            root = self._span("ai.generateText", parent, {"operation.name": "ai.generateText"})
        else:
            root = self._span(f"invoke_agent {name}", parent, {"gen_ai.operation.name": "invoke_agent",
                                                               "gen_ai.agent.name": name})
        self.steps(root, steps)
        self.now += MS
        root.end(end_time=self.now)
        self.now += 1000 * MS

    def session(self, name: str) -> Span:
        """A trace's root that is no agent (CrewAI's `crewai.session`), for several runs under one root; end it."""
        self.now += MS
        return self._span(name, None, {"session.id": f"session-{self.now}"})

    def end(self, span: Span) -> None:
        self.now += MS
        span.end(end_time=self.now)
        self.now += 1000 * MS

    def spans(self) -> list[ReadableSpan]:
        self.provider.shutdown()
        return list(self.exporter.get_finished_spans())

    def write(self, path: Path) -> Path:
        return write(path, collector_lines(self.spans()))


# -- the recorded runs' shapes -------------------------------------------------------------------------------------

def crew_manager_runs(recorder: Recorder, runs: int = 4) -> None:
    """CrewAI's swarm: one `crewai.session` trace holding several runs of the same agent, each using two tools
    (three web searches and a calculation: the work of one request)."""
    session = recorder.session("crewai.session")
    for run in range(runs):
        recorder.agent("Crew Manager", [Tool("search_web", 400 + run), Tool("search_web", 410), Tool("search_web", 420),
                                        Tool("calculator", 3)], parent=session)
    recorder.end(session)


def crew(path: Path) -> Path:
    """The CrewAI sample app's agents (its tools, its roles as agent names; no model tokens, as CrewAI recorded none):

    * "Crew Manager": 4 runs in one trace, each `search_web` x3 and `calculator` (12 and 4 calls);
    * "Weather Forecaster", "File Analyzer": two different tools in one trace;
    * "Knowledge Assistant": `search_knowledge`, one call per trace, in 2 traces;
    * "AI Artist": `generate_image`, one call per trace, in 3 traces;
    * "MCP Assistant": the MCP tool `calculate`, one call per trace; its slowest call 816.468 ms (p99 816.468).
    """
    recorder = Recorder("crewai-sample")
    crew_manager_runs(recorder)
    recorder.agent("Weather Forecaster", [Tool("temperature_forecast", 4.5), Tool("precipitation_forecast", 4.25)])
    recorder.agent("File Analyzer", [Tool("read_file_contents", 2), Tool("analyze_image_metadata", 7)])
    for question in ("return policy", "warranty"):
        recorder.agent("Knowledge Assistant", [Tool("search_knowledge", 35, {"query": question})])
    for prompt in ("a cat", "a dog", "a bird"):
        recorder.agent("AI Artist", [Tool("generate_image", 2500, {"prompt": prompt})])
    for ms in (612.25, 816.468, 700.5):
        recorder.agent("MCP Assistant", [Tool("calculate", ms, {"expression": "2 + 2"})])
    return recorder.write(path)


def any_agent(path: Path, tools: Sequence[str] = ("get_current_time", "write_file", "final_answer"),
              agent: str = "any_agent") -> Path:
    """any-agent's run: `invoke_agent [any_agent]`, a model call before each tool call and one to answer; by default
    the time now, the year written to a file, and the answer through the `final_answer` pseudo-tool (smolagents)."""
    recorder = Recorder("any-agent")
    steps: list[Step] = []
    for tool in tools:
        steps += [Chat(MISTRAL, 900, 40), Tool(tool, 5, {"timezone": "America/New_York"} if tool == "get_current_time"
                                                   else {"file_path": "year.txt", "content": "2025"} if tool == "write_file"
                                                   else {"answer": "done"})]
    steps.append(Chat(MISTRAL, 1000, 60))
    recorder.agent(agent, steps)
    return recorder.write(path)


NO_AGENT_TOOLS = (["calculator"] * 5 + ["image_reader"] * 4 + ["generate_image"] * 3 + ["search_knowledge"] * 3
                  + ["temperature_forecast"] * 3 + ["precipitation_forecast"] * 3)
TEMPERATURE_MS = (5.125, 5.963, 4.875)  # temperature_forecast with no agent: p99 5.963 ms


def no_agent(path: Path) -> Path:
    """The Vercel AI SDK app's runs (`generateText` tool loops naming no agent): 21 tool calls in 15 traces
    (calculator 5, image_reader 4, generate_image 3, search_knowledge 3, temperature_forecast 3,
    precipitation_forecast 3), two model calls of HAIKU per trace (30, with tokens), and the error scenario:
    2 traces whose one call of UNKNOWN_MODEL failed before the model answered (no tokens)."""
    recorder = Recorder("vercel-ai-sample")
    temperatures = iter(TEMPERATURE_MS)
    calls = [Tool(name, next(temperatures) if name == "temperature_forecast" else 3.5 if name == "calculator"
                  else 12.75 if name == "image_reader" else 40) for name in NO_AGENT_TOOLS]
    groups = [calls[2 * i:2 * i + 2] for i in range(6)] + [[c] for c in calls[12:]]
    assert len(groups) == 15 and sum(map(len, groups)) == 21
    for group in groups:
        recorder.agent(None, [Chat(HAIKU, 1200, 80), *group, Chat(HAIKU, 1500, 150)])
    for _ in range(2):
        recorder.agent(None, [Chat(UNKNOWN_MODEL, error="The provided model identifier is invalid.")])
    return recorder.write(path)

"""Shared parts of the GenAI-convention framework tests (tests/test_frameworks_<name>.py).

Each of those tests runs one agent framework, in its default telemetry settings, on the support run
of instrumented_openinference.py (its values are in record_frameworks.py) (``local_index`` with FIRST_ARGUMENTS, ``local_index`` with
SECOND_ARGUMENTS, ``web_search`` with FIRST_ARGUMENTS, then the answer), through a real SDK
``TracerProvider`` and an ``AgentEvalSpanProcessor``::

    with Capture() as captured:
        framework_run(captured.provider)     # the framework writes its spans to captured.provider
    captured.runs, captured.scored, captured.registry, captured.forwarded, captured.spans

Frameworks with no test model of their own talk to their real OpenAI client, whose HTTP transport
is an ``httpx.MockTransport`` serving canned chat completions (``chat_completions_client``).
Nothing leaves the process.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

import httpx
import openai
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.core.runs import AgentRun
from record_frameworks import AGENT_NAME, ANSWER, INPUT_TOKENS, MODEL, OUTPUT_TOKENS, QUESTION  # noqa: F401
from record_frameworks import LOCAL_INDEX_RESULT, RUN as _RUN, WEB_SEARCH_RESULT  # noqa: F401


class Step(NamedTuple):
    """One tool call the scripted model makes (as in instrumented.py, which these tests do not import: it
    loads five frameworks)."""

    tool: str
    arguments: dict[str, Any]
    call_id: str


RUN = tuple(Step(*step) for step in _RUN)  # the run of instrumented_openinference.RUN

USAGE = {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS, "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}
TOOL_NAMES = [s.tool for s in RUN]
CALLS = [(s.tool, s.arguments) for s in RUN]
MODEL_CALLS = len(RUN) + 1  # one per tool call, and the answer


def chat_completion(n: int, step: Step | None, model: str = MODEL) -> dict[str, Any]:
    """A Chat Completions response: a call of `step`'s tool, or the answer when `step` is None."""
    if step is None:
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": step.call_id, "type": "function",
            "function": {"name": step.tool, "arguments": json.dumps(step.arguments)}}]}
    return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop" if step is None else "tool_calls", "message": message}],
            "usage": USAGE}


class Transcript:
    """The requests a mock transport answered, and the canned replies it answered them with."""

    def __init__(self, replies: Sequence[dict[str, Any]]) -> None:
        self._replies = iter(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content or b"{}"))
        return httpx.Response(200, json=next(self._replies))


def chat_completions_client(steps: Sequence[Step] = RUN, *, tool_names: Sequence[str] | None = None,
                            model: str = MODEL) -> tuple[openai.AsyncOpenAI, Transcript]:
    """A real AsyncOpenAI client answering each chat completion with the next scripted tool call, then ANSWER.

    `tool_names` renames the tools as the framework advertises them to the model (semantic-kernel's
    `plugin-function`)."""
    names = list(tool_names) if tool_names is not None else [s.tool for s in steps]
    replies = [chat_completion(n, s._replace(tool=name), model) for n, (s, name) in enumerate(zip(steps, names), 1)]
    transcript = Transcript([*replies, chat_completion(len(replies) + 1, None, model)])
    client = openai.AsyncOpenAI(api_key="sk-placeholder-never-used", base_url="http://offline.invalid/v1",
                                http_client=httpx.AsyncClient(transport=httpx.MockTransport(transcript)))
    return client, transcript


class Capture:
    """A private SDK TracerProvider with an AgentEvalSpanProcessor (default catalog) that forwards enriched
    copies of the spans to an in-memory exporter; the framework's own spans are exported too."""

    def __init__(self, **processor_options: Any) -> None:
        self.registry = CollectorRegistry()
        self.runs: list[AgentRun] = []
        self.scored: list[tuple[Any, Any]] = []
        self._forwarded, self._raw = InMemorySpanExporter(), InMemorySpanExporter()
        self.processor = AgentEvalSpanProcessor(
            registry=self.registry, forward_to=SimpleSpanProcessor(self._forwarded), on_run=self.runs.append,
            on_call=lambda record, score: self.scored.append((record, score)), **processor_options)
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(self.processor)
        self.provider.add_span_processor(SimpleSpanProcessor(self._raw))

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.provider.force_flush()
        self.processor.drain()

    @property
    def spans(self) -> list[ReadableSpan]:
        """The framework's spans as it wrote them, in end order."""
        return list(self._raw.get_finished_spans())

    @property
    def forwarded(self) -> list[ReadableSpan]:
        """The spans as the processor forwarded them (tool spans and run roots enriched)."""
        return list(self._forwarded.get_finished_spans())

    def samples(self, name: str) -> list[Any]:
        return [s for metric in self.registry.collect() for s in metric.samples if s.name == name]


SELF_ERROR_COUNTERS = ("internal_errors", "malformed_tool_spans", "enrichments_dropped", "forward_errors")


def self_errors(registry: CollectorRegistry) -> dict[str, float | None]:
    """The processor's own error counters that are not zero."""
    values = {c: registry.get_sample_value(f"agent_eval_processor_{c}_total") for c in SELF_ERROR_COUNTERS}
    return {c: v for c, v in values.items() if v != 0}


def assert_calls_counted_once(captured: Any, agent_label: str) -> None:
    """Every call of the run counted once in agent_eval_tool_calls_total, under catalog tool names and
    `agent_label`, none of them an unknown tool."""
    samples = captured.samples("agent_eval_tool_calls_total")
    assert sum(s.value for s in samples) == len(RUN)
    assert {s.labels["gen_ai_tool_name"] for s in samples} == {"local_index", "web_search"}
    assert {s.labels["gen_ai_agent_name"] for s in samples} == {agent_label}
    assert all(score.outcome != "unknown_tool" for _, score in captured.scored)

"""Agent runs whose tool results grow the model's context, made with the real OpenTelemetry SDK: for the true-cost tests
(core/context_cost.py) of `compare`, the live processor, `serve` and `score`.

Each run is an `invoke_agent` span around: a model call (`chat`, 1,000 input and 50 output tokens), then each tool
call (`execute_tool` with its result in `gen_ai.tool.call.result`), then a model call whose input grew by the tokens
the results are given, and a last model call that holds them all again. Times are set, so every path orders the
same spans the same way.
"""
from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from test_score import collector_lines, write

T0 = 1_770_000_000_000_000_000
MS = 1_000_000
MODEL = "claude-haiku-4-5"  # priced by the packaged catalog: $0.001 per 1k input tokens


def record_runs(runs: Sequence[Sequence[tuple[str, int]]], agent: str = "support_agent",
                provider: TracerProvider | None = None) -> list[ReadableSpan]:
    """One agent run per item: its tool calls as (tool name, tokens its result adds), all results fed to one call.
    With `provider`, the spans go through it (and its processors) and nothing is returned."""
    exporter = InMemorySpanExporter()
    own = provider is None
    if own:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("true-cost")
    now = T0
    for calls in runs:
        root = tracer.start_span(f"invoke_agent {agent}", start_time=now, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
        context = set_span_in_context(root)

        def chat(start: int, tokens_in: int, tokens_out: int) -> None:
            span = tracer.start_span(f"chat {MODEL}", context=context, start_time=start, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL, "gen_ai.usage.input_tokens": tokens_in,
                "gen_ai.usage.output_tokens": tokens_out})
            span.end(end_time=start + 100 * MS)

        chat(now + MS, 1000, 50)
        t = now + 200 * MS
        for i, (name, tokens) in enumerate(calls):
            span = tracer.start_span(f"execute_tool {name}", context=context, start_time=t, attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": f"c{i}",
                "gen_ai.tool.call.arguments": json.dumps({"q": i}), "gen_ai.tool.call.result": "r" * (4 * tokens)})
            span.end(end_time=t + 10 * MS)
            t += 20 * MS
        grown = 1050 + sum(tokens for _, tokens in calls)
        chat(t + MS, grown, 30)
        chat(t + 200 * MS, grown + 30 + 7, 40)  # 7 tokens of a user's follow-up: unattributed
        root.end(end_time=t + 400 * MS)
        now += 1000 * MS
    if own:
        provider.shutdown()
        return list(exporter.get_finished_spans())
    return []


def noisy_runs(n: int, tokens: dict[str, int], seed: int) -> list[list[tuple[str, int]]]:
    """`n` runs each calling every tool once, its result's tokens within 10 % of `tokens[tool]`."""
    rng = random.Random(seed)
    return [[(name, max(1, round(size * rng.uniform(0.9, 1.1)))) for name, size in tokens.items()] for _ in range(n)]


def write_runs(path: Path, runs: Sequence[Sequence[tuple[str, int]]]) -> Path:
    return write(path, collector_lines(record_runs(runs)))

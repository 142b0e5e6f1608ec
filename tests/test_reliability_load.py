"""Concurrency: 8 threads and an asyncio loop end 200,000 tool spans at once; every count comes out exact.

The provider carries what a production app carries: the app's own `BatchSpanProcessor`
(with a counting null exporter) and `AgentEvalSpanProcessor` forwarding to another
`BatchSpanProcessor`. Traces mix agent runs (catalog agents, so calls are routed), plain
roots whose tool spans wait for their agent (deferred, released when the root ends), and
lone root-level tool spans; one call in ten fails (`error.type`, or an ERROR status only).

Afterwards the exposition must equal what was sent, series by series: tool calls, the
duration histogram, the efficiency-score histogram and the latency summary counts, the
spans seen/scored/ignored, the runs, and the spans each exporter received. Joins are
bounded: a deadlock fails the test with a message instead of hanging it (a liveness check,
not a performance assertion).

Two runs: the default (spans handed to the processor's thread) with 200,000 tool spans, ~35-50 s
on the 2-core machine, in a fresh interpreter that starts with the session and runs beside the
other tests (tests/early.py); and `background=False` (processing on the 9 ending threads, where
the processor's own locks are contended) with 20,000, ~5 s. Throughput is printed (`pytest -s`).
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from functools import partial
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from otel_agent_eval.core.scoring import Scorer

import early
from reliability_helpers import (CATALOG_AGENTS, CATALOG_TOOLS, LIVENESS_TIMEOUT_S, App, CountingExporter, agent_attrs,
                                 expected_call_series, expected_duration_counts, in_thread, join_or_fail, tool_attrs)

THREADS = 8
TOOL_SPANS_PER_THREAD = 22_000
ASYNC_TASKS = 8
TOOL_SPANS_PER_TASK = 3_000
TOTAL_TOOL_SPANS = THREADS * TOOL_SPANS_PER_THREAD + ASYNC_TASKS * TOOL_SPANS_PER_TASK  # 200,000
QUEUE = 1 << 19  # the BatchSpanProcessors never drop here: what they receive must add up exactly


class Tally:
    """What one producer sent."""

    def __init__(self) -> None:
        self.calls: Counter = Counter()  # (tool, agent label, error type or None) -> n
        self.spans = self.tools = self.traces = self.deferred = 0


def _tool(tracer: Any, rng: random.Random, tally: Tally, agent_label: str, context: Any = None, own_agent: str | None = None) -> None:
    tool = rng.choice(CATALOG_TOOLS)
    extra: dict[str, Any] = {"gen_ai.tool.call.arguments": '{"query": "q", "expression": "1+1"}'}
    if own_agent is not None:
        extra["gen_ai.agent.name"] = own_agent
    error = None
    if rng.random() < 0.1:
        error = rng.choice(["ToolTimeout", "_OTHER"])
        if error == "ToolTimeout":
            extra["error.type"] = error
    span = tracer.start_span(f"execute_tool {tool}", context=context, attributes=tool_attrs(tool, **extra))
    if error == "_OTHER":  # an ERROR status without error.type: the semconv fallback label
        span.set_status(Status(StatusCode.ERROR, "tool failed"))
    span.end()
    tally.calls[(tool, agent_label, error)] += 1
    tally.spans += 1
    tally.tools += 1


def _shape(rng: random.Random) -> tuple[str, int]:
    p = rng.random()
    if p < 0.6:
        return "agent", rng.randint(1, 6)
    if p < 0.8:
        return "plain", rng.randint(1, 4)
    return "lone", 1


def _thread_worker(tracer: Any, seed: int, quota: int, start: threading.Barrier) -> Tally:
    rng, tally = random.Random(seed), Tally()
    start.wait()
    while tally.tools < quota:
        shape, n = _shape(rng)
        n = min(n, quota - tally.tools)
        tally.traces += 1
        if shape == "lone":
            own = rng.choice(CATALOG_AGENTS) if rng.random() < 0.5 else None
            _tool(tracer, rng, tally, own or "", own_agent=own)
            continue
        agent = rng.choice(CATALOG_AGENTS) if shape == "agent" else None
        root = tracer.start_span(f"invoke_agent {agent}" if agent else "request", attributes=agent_attrs(agent) if agent else None)
        context = set_span_in_context(root)
        for _ in range(n):
            _tool(tracer, rng, tally, agent or "", context)
        tally.deferred += 0 if agent else n
        root.end()
        tally.spans += 1
    return tally


async def _task(tracer: Any, seed: int, quota: int) -> Tally:
    """An asyncio task: current-span context per task (contextvars), yielding to the others between calls."""
    rng, tally = random.Random(seed), Tally()
    while tally.tools < quota:
        shape, n = _shape(rng)
        n = min(n, quota - tally.tools)
        tally.traces += 1
        if shape == "lone":
            _tool(tracer, rng, tally, "")
            await asyncio.sleep(0)
            continue
        agent = rng.choice(CATALOG_AGENTS) if shape == "agent" else None
        with tracer.start_as_current_span(f"invoke_agent {agent}" if agent else "request",
                                          attributes=agent_attrs(agent) if agent else None):
            for _ in range(n):
                _tool(tracer, rng, tally, agent or "")
                await asyncio.sleep(0)
        tally.deferred += 0 if agent else n
        tally.spans += 1
    return tally


def _asyncio_worker(tracer: Any, start: threading.Barrier, quota: int) -> list[Tally]:
    async def main() -> list[Tally]:
        return list(await asyncio.gather(*(_task(tracer, 1000 + i, quota) for i in range(ASYNC_TASKS))))

    start.wait()
    return asyncio.run(main())


HAND_OFF_200K = partial(early.fresh_process, "test_reliability_load", "load(background=True, share=1)")


@pytest.mark.early(HAND_OFF_200K)
def test_eight_threads_and_an_event_loop_count_exactly_with_the_hand_off():
    """The default (spans handed to the processor's thread) with 200,000 tool spans, in a fresh interpreter that
    starts with the session (tests/early.py): counts that must come out exact do not depend on what runs beside."""
    early.result(HAND_OFF_200K)


def test_eight_threads_and_an_event_loop_count_exactly_on_the_ending_threads():
    """Processing on the ending threads themselves (`background=False`, where the processor's locks are contended),
    with a tenth of the spans."""
    load(background=False, share=10)


def load(background: bool, share: int) -> dict[str, Any]:
    """8 threads and an asyncio loop end 200,000 / `share` tool spans; asserts every count; nothing to return."""
    app_exporter, forward_exporter = CountingExporter(), CountingExporter()
    app = App(app_processors=[BatchSpanProcessor(app_exporter, max_queue_size=QUEUE)],
              forward_to=BatchSpanProcessor(forward_exporter, max_queue_size=QUEUE), background=background,
              queue_limit=QUEUE)  # like the SDK's queues here: large enough that nothing is passed on unscored
    start = threading.Barrier(THREADS + 2, timeout=LIVENESS_TIMEOUT_S)  # a producer that never arrives breaks it
    workers = [in_thread(lambda seed=seed: _thread_worker(app.tracer, seed, TOOL_SPANS_PER_THREAD // share, start), f"producer-{seed}")
               for seed in range(THREADS)]
    workers.append(in_thread(lambda: _asyncio_worker(app.tracer, start, TOOL_SPANS_PER_TASK // share), "asyncio-loop"))
    start.wait()
    began = time.perf_counter()
    join_or_fail([t for t, _ in workers], LIVENESS_TIMEOUT_S, "8 threads + an asyncio loop ending spans")
    elapsed = time.perf_counter() - began
    for _, out in workers:
        assert "error" not in out, f"span.end() raised in a producer: {out.get('error')!r}"
    tallies: list[Tally] = [out["result"] for _, out in workers[:THREADS]] + workers[THREADS][1]["result"]
    sent: Counter = sum((t.calls for t in tallies), Counter())
    spans = sum(t.spans for t in tallies)
    tools = sum(t.tools for t in tallies)
    assert tools == TOTAL_TOOL_SPANS // share

    app.drain("after the load")  # a scrape shows what the processor's thread has done: wait for all of it
    calls = app.series("agent_eval_tool_calls_total")
    scraped = time.perf_counter() - began
    shutdown, _ = in_thread(app.provider.shutdown, "provider.shutdown")
    join_or_fail([shutdown], LIVENESS_TIMEOUT_S, "provider.shutdown() after the load")
    print(f"\n[background={background}] {THREADS} threads + asyncio loop ({ASYNC_TASKS} tasks): {tools} tool spans, {spans} spans in {elapsed:.1f} s "
          f"= {tools / elapsed:,.0f} tool spans/s ({spans / elapsed:,.0f} spans/s) on the app's threads; "
          f"scored and scraped after {scraped:.1f} s; exporters got {app_exporter.spans} (app) / {forward_exporter.spans} (forwarded)")

    assert calls == expected_call_series(Scorer(app.processor.catalog), sent)
    assert app.series("gen_ai_execute_tool_duration_seconds_count") == expected_duration_counts(sent)
    per_series: Counter = Counter()
    for (tool, agent, _), n in sent.items():
        per_series[(tool, agent)] += n
    efficiency = Counter()
    for key, value in app.series("agent_eval_tool_efficiency_score_count").items():
        d = dict(key)
        if d["dimension"] == "efficiency":
            efficiency[(d["gen_ai_tool_name"], d["gen_ai_agent_name"])] += value
    assert efficiency == per_series
    summary = {(dict(k)["gen_ai_tool_name"], dict(k)["gen_ai_agent_name"]): v
               for k, v in app.series("agent_eval_tool_latency_seconds_count").items()}
    assert summary == dict(per_series)

    m = app.self_metrics()
    assert m["spans_seen"] == spans
    assert m["spans_scored"] == tools
    assert m["spans_ignored"] == spans - tools
    assert m["deferred_calls_released"] == sum(t.deferred for t in tallies)
    assert m["internal_errors"] == 0 and m["forward_errors"] == 0 and m["enrichments_dropped"] == 0
    assert sum(app.series("agent_eval_runs_total").values()) == sum(t.traces for t in tallies)  # one run per trace
    assert sum(app.series("agent_eval_processor_runs_closed_early_total").values()) == 0

    assert app_exporter.spans == spans, "the app's own BatchSpanProcessor did not export every span"
    assert forward_exporter.spans == spans, "the forwarded BatchSpanProcessor did not export every span"
    assert forward_exporter.enriched == tools
    return {}

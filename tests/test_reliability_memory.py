"""Bounded memory: 1,000,000 tool spans across 100,000 traces, 60% of whose roots never end.

Two bounds add up in the default configuration, and are measured apart: what the run tracking
keeps (the 1M-span test, processing on the ending thread, `background=False`, so that the
hand-off queue does not blur it), and what the hand-off queue holds (`queue_limit` spans
waiting for the processor's thread; `test_the_hand_off_queue_stays_bounded`, default settings).

Traces come in three shapes, in turn: an agent run whose root ends (40%), an agent span that
never ends with its tool spans ended under it (30%), and a plain root that never ends, whose
tool spans are held back waiting for an agent (30%). With `max_open_traces=1000` the open
runs must never exceed 1000, every never-ended trace must be closed early and counted
(`capacity`, then `ttl` after a pause longer than the TTL), every tool span must be scored
once, and resident memory must stay under a stated bound. Measured figures are printed
(`pytest -s`).

Both run in a fresh interpreter (`early.fresh_process`): RSS measured after other tests would hide
growth in heap they freed. The 1M-span test runs in ~70-90 s on the 2-core machine (1.04M spans through a real
TracerProvider; in the default hand-off mode the same load takes ~120 s, which is why it is measured apart on
200k). Neighbours do not change a child's RSS, so both start with the session and run beside the other tests
(tests/early.py).
"""
from __future__ import annotations

import gc
import time
import tracemalloc
from functools import partial
from typing import Any

import pytest
from opentelemetry.trace import set_span_in_context
from prometheus_client import generate_latest

import early
from reliability_helpers import App, agent_attrs, labels, peak_rss_mb, rss_mb, tool_attrs

TRACES = 100_000
TOOLS_PER_TRACE = 10
CAP = 1_000
TTL_S = 3.0
# Stated bound for the README: resident memory grows by less than this over the whole run.
# Measured on the 2-core machine: see the printed figures (and the report).
RSS_BOUND_MB = 100.0
TOOLS = ("local_index", "web_search", "basic_calculator", "simple_filter", "code_interpreter")
AGENTS = ("support_agent", "math_agent", "analytics_agent", "forecast_agent")
TOOL_ATTRS = [tool_attrs(t, **{"gen_ai.tool.call.arguments": '{"query": "q"}'}) for t in TOOLS]
AGENT_ATTRS = [agent_attrs(a) for a in AGENTS]


def _trace(tracer, i: int) -> bool:
    """One trace of shape i % 10; True if its root never ends."""
    shape = i % 10
    root = tracer.start_span("request") if shape >= 7 else tracer.start_span("invoke_agent", attributes=AGENT_ATTRS[i % 4])
    context = set_span_in_context(root)
    for j in range(TOOLS_PER_TRACE):
        tracer.start_span("execute_tool", context=context, attributes=TOOL_ATTRS[(i + j) % 5]).end()
    if shape < 4:
        root.end()
        return False
    return True  # the root is dropped unended: nothing but the processor could keep it


MILLION_SPANS = partial(early.fresh_process, "test_reliability_memory", "million_spans_workload()")
HAND_OFF = partial(early.fresh_process, "test_reliability_memory", "hand_off_workload()")


@pytest.mark.early(MILLION_SPANS)
def test_a_million_tool_spans_with_never_ending_roots_stay_bounded():
    figures = early.result(MILLION_SPANS)
    assert figures["max_open"] <= CAP
    assert figures["growth_mb"] < RSS_BOUND_MB


def million_spans_workload() -> dict[str, Any]:
    """The 1M-span run; asserts the counts, returns the figures."""
    now = [0.0]  # the processor's clock, moved by hand: no test waits for a TTL in real time
    app = App(max_open_traces=CAP, run_ttl_s=TTL_S, background=False, clock=lambda: now[0])
    tracer = app.tracer
    gc.collect()
    baseline = rss_mb()
    never_ended = max_open = 0
    began = time.perf_counter()
    warm = 0.0
    for i in range(TRACES):
        never_ended += _trace(tracer, i)
        if i % 100 == 0:
            max_open = max(max_open, len(app.processor.runs))
            if i == 5_000:  # the cap is reached long before: steady state from here
                gc.collect()
                warm = rss_mb()
    app.processor.force_flush()
    max_open = max(max_open, len(app.processor.runs))
    elapsed = time.perf_counter() - began
    gc.collect()
    after = rss_mb()
    early = app.series("agent_eval_processor_runs_closed_early_total")
    capacity, ttl_before = early[labels(reason="capacity")], early[labels(reason="ttl")]
    open_before_pause = len(app.processor.runs)

    # TTL: after a pause longer than run_ttl_s, the next new trace expires every open one.
    now[0] += TTL_S + 0.5
    _trace(tracer, 0)  # a complete agent run
    app.processor.force_flush()
    ttl = app.series("agent_eval_processor_runs_closed_early_total")[labels(reason="ttl")]
    ended = (TRACES + 1) * TOOLS_PER_TRACE + (TRACES - never_ended) + 1  # tool spans and the roots that ended
    print(f"\n{TRACES:,} traces, {TRACES * TOOLS_PER_TRACE:,} tool spans ({never_ended:,} roots never ended), cap {CAP}: "
          f"{elapsed:.1f} s = {TRACES * TOOLS_PER_TRACE / elapsed:,.0f} tool spans/s; RSS {baseline:.1f} MB before, "
          f"{warm:.1f} MB at trace 5,000, {after:.1f} MB after (+{after - baseline:.1f} MB, "
          f"{(after - baseline) * 2**20 / (TRACES * TOOLS_PER_TRACE):.1f} bytes per tool span; "
          f"+{after - warm:.1f} MB from trace 5,000 on), peak {peak_rss_mb():.1f} MB; max open runs {max_open}; "
          f"closed early: capacity {capacity:,.0f}, ttl {ttl_before:,.0f} then {ttl:,.0f} after the pause; "
          f"per-trace entries still held by the processor: {len(getattr(app.processor, '_active', ()))}")

    assert max_open <= CAP
    assert after - baseline < RSS_BOUND_MB, f"RSS grew by {after - baseline:.1f} MB (bound {RSS_BOUND_MB} MB)"
    assert capacity > 0
    # Every never-ended trace yields one run, closed early by capacity or TTL, or still open.
    assert capacity + ttl_before + open_before_pause == never_ended
    assert ttl - ttl_before == open_before_pause > 0
    assert len(app.processor.runs) == 0  # the last trace ended

    app.provider.shutdown()
    m = app.self_metrics()
    assert m["internal_errors"] == 0
    assert m["spans_seen"] == ended
    assert m["spans_scored"] == (TRACES + 1) * TOOLS_PER_TRACE  # held-back calls too: scored when their run closed
    assert m["deferred_calls_released"] == (TRACES * 3 // 10) * TOOLS_PER_TRACE
    assert sum(app.series("agent_eval_runs_total").values()) == TRACES + 1  # one run per trace, however it closed
    return {"max_open": max_open, "growth_mb": after - baseline, "seconds": elapsed}


HANDOFF_TRACES = 10_000
EXACT = 1 << 20  # a queue no test loop fills: what these tests count is exact, not back-pressure
HANDOFF_RSS_BOUND_MB = 64.0  # queue_limit (2,048) spans of ~3 KB, plus the run tracking above


@pytest.mark.early(HAND_OFF)
def test_the_hand_off_queue_stays_bounded():
    """Default settings: spans wait in the hand-off queue (at most `queue_limit`) for the processor's thread."""
    figures = early.result(HAND_OFF)
    assert figures["max_open"] <= CAP
    assert figures["growth_mb"] < HANDOFF_RSS_BOUND_MB


def hand_off_workload() -> dict[str, Any]:
    app = App(max_open_traces=CAP, run_ttl_s=600.0)
    queue = getattr(app.processor, "_queue", ())  # internal: printed only
    tracer = app.tracer
    gc.collect()
    baseline = rss_mb()
    max_open = max_queued = 0
    worst_end = 0.0
    began = time.perf_counter()
    for i in range(HANDOFF_TRACES):
        shape = i % 10
        root = tracer.start_span("request") if shape >= 7 else tracer.start_span("invoke_agent", attributes=AGENT_ATTRS[i % 4])
        context = set_span_in_context(root)
        for j in range(TOOLS_PER_TRACE):
            span = tracer.start_span("execute_tool", context=context, attributes=TOOL_ATTRS[(i + j) % 5])
            t = time.perf_counter()
            span.end()
            worst_end = max(worst_end, time.perf_counter() - t)
        if shape < 4:
            root.end()
        if i % 100 == 0:
            max_open = max(max_open, len(app.processor.runs))
            max_queued = max(max_queued, len(queue))
    elapsed = time.perf_counter() - began
    gc.collect()
    after = rss_mb()
    app.processor.force_flush()
    max_open = max(max_open, len(app.processor.runs))
    print(f"\nhand-off (default settings): {HANDOFF_TRACES * TOOLS_PER_TRACE:,} tool spans in {elapsed:.1f} s = "
          f"{HANDOFF_TRACES * TOOLS_PER_TRACE / elapsed:,.0f} tool spans/s; RSS {baseline:.1f} -> {after:.1f} MB "
          f"(+{after - baseline:.1f} MB), peak {peak_rss_mb():.1f} MB; most spans queued {max_queued:,}; "
          f"slowest single span.end() {worst_end * 1000:.0f} ms; max open runs {max_open}")
    assert max_open <= CAP
    assert after - baseline < HANDOFF_RSS_BOUND_MB, f"RSS grew by {after - baseline:.1f} MB (bound {HANDOFF_RSS_BOUND_MB} MB)"
    app.provider.shutdown()
    scored, unscored = app.self_metric("spans_scored"), app.self_metric("tool_calls_unscored")
    print(f"scored {scored:,.0f}, passed on unscored because the queue was full {unscored:,.0f}")
    assert scored + unscored == HANDOFF_TRACES * TOOLS_PER_TRACE  # every tool span scored, or counted as not
    assert app.self_metric("internal_errors") == 0
    return {"max_open": max_open, "growth_mb": after - baseline, "seconds": elapsed}


def test_error_type_label_values_are_bounded():
    """error.type values become the error_type label of gen_ai_execute_tool_duration_seconds: capped, the rest folded."""
    app = App()
    for i in range(500):
        app.tracer.start_span("execute_tool", attributes=tool_attrs("web_search", **{"error.type": f"HTTP 503 request {i}"})).end()
    error_types = {dict(k)["error_type"] for k in app.series("gen_ai_execute_tool_duration_seconds_count")}
    size = len(generate_latest(app.registry))
    print(f"\n500 distinct error.type values: {len(error_types)} error_type label values, exposition {size / 2**20:.1f} MB")
    app.provider.shutdown()
    assert len(error_types) <= 101  # e.g. a cap like max_unknown_tools / max_agents, the rest folded



# -- bounds found broken once, each with its reproduction ----------------------------------------------------


def _retained_mb(work) -> float:
    """Python memory still allocated after `work()` (tracemalloc: exact, unlike RSS, which reuses freed heap)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        work()
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / 2**20
    finally:
        tracemalloc.stop()


def test_held_back_calls_of_evicted_traces_are_released_without_other_traffic():
    app = App(max_open_traces=CAP, queue_limit=EXACT)  # no span passed on unscored: counts stay exact
    traces = 3_000

    def work() -> None:
        for _ in range(traces):
            root = app.tracer.start_span("request")  # never ends
            context = set_span_in_context(root)
            for j in range(TOOLS_PER_TRACE):
                app.tracer.start_span("execute_tool", context=context, attributes=TOOL_ATTRS[j % 5]).end()
        app.drain("the queued spans")  # all of them, however long the queue

    growth = _retained_mb(work)
    scored = app.self_metric("spans_scored")
    print(f"\nplain roots never ended, {traces * TOOLS_PER_TRACE:,} held-back tool spans: {growth:.1f} MB retained, {scored:,.0f} scored")
    app.provider.shutdown()
    assert scored >= (traces - CAP) * TOOLS_PER_TRACE  # all but those of the open traces
    assert growth < 60.0  # the held-back spans of 1,000 open traces


def test_never_ended_agent_spans_without_calls_stay_bounded():
    app = App(max_open_traces=CAP, queue_limit=EXACT)  # no span passed on unscored: counts stay exact
    traces = 30_000

    def work() -> None:
        for i in range(traces):
            app.tracer.start_span("invoke_agent", attributes=AGENT_ATTRS[i % 4])  # never ends
        app.drain("the queued spans")  # all of them, however long the queue

    growth = _retained_mb(work)
    print(f"\n{traces:,} agent spans never ended: {growth:.1f} MB retained")
    app.provider.shutdown()
    assert growth < 5.0  # the 1,000 open runs


def test_runs_closed_by_shutdown_are_counted():
    app = App()
    agent = app.tracer.start_span("invoke_agent", attributes=agent_attrs("support_agent"))  # never ends
    app.tracer.start_span("execute_tool", context=set_span_in_context(agent), attributes=tool_attrs("local_index")).end()
    app.provider.shutdown()
    assert sum(app.series("agent_eval_runs_total").values()) == 1  # the run was closed and evaluated...
    assert app.sample("agent_eval_processor_runs_closed_early_total", reason="shutdown") == 1  # ...and counted


@pytest.mark.parametrize("key", ["gen_ai.agent.name", "gen_ai.tool.name"])
def test_megabyte_names_do_not_accumulate(key):
    app = App()
    names = 200

    def work() -> None:
        for i in range(names):
            attrs = tool_attrs("web_search")
            attrs[key] = f"{i}-" + "x" * 2**20
            app.tracer.start_span("execute_tool", attributes=attrs).end()
            del attrs
        app.processor.force_flush()

    growth = _retained_mb(work)
    print(f"\n{names} distinct 1 MB values of {key}: {growth:.1f} MB retained")
    app.provider.shutdown()
    assert growth < 50.0


@pytest.mark.parametrize("key", ["gen_ai.agent.name", "gen_ai.tool.name"])
def test_a_long_name_does_not_blow_up_the_scrape(key):
    app = App()
    attrs = tool_attrs("web_search")
    attrs[key] = "x" * 2**18
    app.tracer.start_span("execute_tool", attributes=attrs).end()
    size = len(generate_latest(app.registry))
    print(f"\none 256 KB value of {key}: exposition {size / 2**20:.1f} MB")
    app.provider.shutdown()
    assert size < 5 * 2**20

"""The processor's per-trace marks (otel/active_traces.py) stay right with spans ending on many app threads at once.

Real threads, no timing: each thread ends whole traces and the processor's thread drops them meanwhile; what must
hold whatever the interleaving is checked after they all joined.
"""
from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import set_span_in_context
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.otel.active_traces import SWEEP_AT, ActiveTraces

THREADS = 8


@pytest.fixture(autouse=True)
def _switch_often() -> Any:
    """Threads switch every few bytecodes instead of every 5 ms: interleavings a run would rarely meet."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def _together(work: Any, n: int = THREADS) -> None:
    start = threading.Barrier(n)
    failures: list[BaseException] = []

    def run(k: int) -> None:
        start.wait()
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def test_marks_of_one_trace_made_on_many_threads_are_all_kept() -> None:
    """Threads marking the same new traces at once share one set per trace: no mark is lost to a set replaced."""
    active = ActiveTraces(limit=10**9)
    traces = range(2_000)
    _together(lambda k: [active.mark(t, 1_000 * t + k) for t in traces])
    for t in traces:
        assert active.traces[t] == {1_000 * t + k for k in range(THREADS)}
    assert active.held == {1_000 * t + k for t in traces for k in range(THREADS)}


def test_a_sweep_meanwhile_never_drops_a_mark_of_a_kept_trace() -> None:
    """Marks are made while another thread drops traces and sweeps: every mark of a trace still kept is in `held`."""
    active = ActiveTraces(limit=10**9)
    stop = threading.Event()

    def dropping() -> None:
        t = 0
        while not stop.is_set():
            active.done(t % 500)  # the traces of thread 0 come and go
            active.sweep()
            t += 1

    dropper = threading.Thread(target=dropping)
    dropper.start()
    try:
        _together(lambda k: [active.mark(t if k else t % 500, (t << 8) | k) for t in range(5_000)])
    finally:
        stop.set()
        dropper.join()
    for marks in list(active.traces.values()):
        assert marks <= active.held


def test_forgetting_traces_past_the_limit_keeps_the_tracked_ones_and_sweeps_held() -> None:
    active = ActiveTraces(limit=100)
    for t in range(SWEEP_AT * 2):
        active.mark(t, t + 1)
        active.bound(tracked={0, 1})
    assert len(active) <= 101 and {0, 1} <= set(active.traces)
    assert len(active.held) <= 2 * SWEEP_AT and {1, 2} <= active.held


def test_the_processor_under_concurrent_span_ends_on_many_threads() -> None:
    """Whole agent runs with noise leaves, ended on 8 threads while the processor's thread drops finished traces:
    every tool call is scored, every run closed, every span counted, nothing fails, nothing is left behind."""
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer(__name__)
    runs, tools, leaves = 60, 3, 3
    scored: list[int] = []
    processor.on_call = lambda record, score: scored.append(record.span_id)

    def work(k: int) -> None:
        for _ in range(runs):
            root = tracer.start_span(f"invoke_agent agent{k}", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                            "gen_ai.agent.name": f"agent{k}"})
            for _ in range(tools):
                tool = tracer.start_span("execute_tool local_index", context=set_span_in_context(root), attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"})
                for _ in range(leaves):
                    tracer.start_span("GET", context=set_span_in_context(tool), attributes={"http.request.method": "GET"}).end()
                tool.end()
            root.end()

    _together(work)
    assert processor.force_flush()
    spans = THREADS * runs * (1 + tools * (1 + leaves))
    sample = registry.get_sample_value
    assert sample("agent_eval_processor_spans_seen_total") == spans
    assert sample("agent_eval_processor_spans_ignored_total") == spans - THREADS * runs * tools  # all but the tools
    assert sample("agent_eval_processor_internal_errors_total") == 0
    assert len(scored) == len(set(scored)) == THREADS * runs * tools
    assert len(processor.runs) == 0 and len(processor._active) == 0
    processor.shutdown()


def test_the_processor_with_threads_ending_spans_of_the_same_traces_and_their_roots() -> None:
    """Every thread ends tool spans (with noise leaves) under the same roots, and each root is ended by one of them
    while others may still end spans under it (late spans): no failure, every span counted, every call scored once."""
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer(__name__)
    roots = [tracer.start_span("invoke_agent shared", attributes={"gen_ai.operation.name": "invoke_agent",
                                                                   "gen_ai.agent.name": "shared"}) for _ in range(200)]
    scored: list[int] = []
    processor.on_call = lambda record, score: scored.append(record.span_id)

    def work(k: int) -> None:
        for r, root in enumerate(roots):
            tool = tracer.start_span("execute_tool local_index", context=set_span_in_context(root), attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"})
            tracer.start_span("SELECT", context=set_span_in_context(tool), attributes={"db.system": "postgresql"}).end()
            tool.end()
            if r % THREADS == k:
                root.end()
            tracer.start_span("GET", context=set_span_in_context(root), attributes={"http.request.method": "GET"}).end()

    _together(work)
    assert processor.force_flush()
    sample = registry.get_sample_value
    assert sample("agent_eval_processor_spans_seen_total") == len(roots) * (1 + 3 * THREADS)
    assert sample("agent_eval_processor_internal_errors_total") == 0
    processor.shutdown()  # tool spans that came after their run was evaluated, held back, are scored by now
    assert len(scored) == len(set(scored)) == len(roots) * THREADS

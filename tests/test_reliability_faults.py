"""Faults downstream: the exporter behind the forwarded `BatchSpanProcessor` hangs, raises, or its
OTLP endpoint is down; the forwarded processor itself raises.

In every case the app's `span.end()` keeps returning (spans are ended in a bounded loop on a
thread that must finish), scoring goes on (the scored counter grows), and `provider.shutdown()`
completes within a bounded time, even with an exporter that never returns. Waits are liveness
bounds, not performance assertions. What the SDK's own metrics (`otel.sdk.processor.span.processed`,
`otel.sdk.exporter.span.exported`, enabled by OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED) say about
lost spans is printed next to what our self-metrics say (`pytest -s`).

`BatchSpanProcessor.shutdown()` waits 30 s for an export in flight before giving up (the default of
`BatchProcessor.shutdown`, not reachable through `SpanProcessor.shutdown()`); the hanging-exporter
test shuts down a `BatchSpanProcessor` that waits `SHUTDOWN_GRACE_MS` instead (same SDK code path),
so it takes a couple of seconds, not 30.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context
from prometheus_client import generate_latest

from reliability_helpers import (CATALOG_AGENTS, CATALOG_TOOLS, LIVENESS_TIMEOUT_S, App, HangingExporter, RaisingExporter,
                                 agent_attrs, closed_port, in_thread, join_or_fail, tool_attrs)

SHUTDOWN_BOUND_S = 60.0  # BatchSpanProcessor gives an export in flight 30 s, then returns
SHUTDOWN_GRACE_MS = 500  # what ShortGraceBatchSpanProcessor gives it instead
QUEUE, BATCH = 64, 16  # a small forwarded queue, so that it overflows while the exporter is stuck
FIRST_TOOLS = 16  # tool calls ended before the exporter hangs: 20 spans, >= BATCH and < QUEUE
HANDOFF_LIMIT = 8_192  # our hand-off queue, above the hanging-exporter test's 3,620 spans: none is refused


class SdkMetrics:
    """The SDK's self-metrics of its span processors and exporters, read from an in-memory reader."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])

    def counts(self, name: str) -> Counter:
        """Sum of a counter's points by their error.type (None: no error)."""
        out: Counter = Counter()
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            out[(point.attributes or {}).get("error.type")] += point.value
        return out


def _produce(app: App, n: int) -> tuple[int, int]:
    """End n tool spans (a fifth under agent spans), the way an app does; returns (spans, tool spans) ended."""
    spans = tools = 0
    for i in range(n):
        if i % 5 == 0:
            agent = app.tracer.start_span("invoke_agent", attributes=agent_attrs(CATALOG_AGENTS[i % len(CATALOG_AGENTS)]))
            app.tracer.start_span("execute_tool", context=set_span_in_context(agent),
                                  attributes=tool_attrs(CATALOG_TOOLS[i % len(CATALOG_TOOLS)])).end()
            agent.end()
            spans += 2
        else:
            app.tracer.start_span("execute_tool", attributes=tool_attrs(CATALOG_TOOLS[i % len(CATALOG_TOOLS)])).end()
            spans += 1
        tools += 1
    return spans, tools


def _produce_bounded(app: App, n: int, what: str) -> tuple[int, int]:
    thread, out = in_thread(lambda: _produce(app, n), "app-thread")
    join_or_fail([thread], LIVENESS_TIMEOUT_S, f"the app's span.end() loop ({what})")
    assert "error" not in out, f"span.end() raised: {out.get('error')!r}"
    return out["result"]


def _assert_every_call_accounted(app: App, tools: int, what: str) -> None:
    """Every tool call ended is scored, or was passed on unscored because the hand-off queue was full, and counted."""
    app.drain(what)
    assert app.self_metric("spans_scored") + app.self_metric("tool_calls_unscored") == tools


def _shutdown_bounded(app: App, what: str) -> None:
    thread, out = in_thread(app.provider.shutdown, "provider.shutdown")
    join_or_fail([thread], SHUTDOWN_BOUND_S, f"provider.shutdown() ({what})")
    assert "error" not in out, f"provider.shutdown() raised: {out.get('error')!r}"


class ShortGraceBatchSpanProcessor(BatchSpanProcessor):
    """A `BatchSpanProcessor` whose `shutdown()` gives an export in flight SHUTDOWN_GRACE_MS, not 30 s.

    The same SDK code (`BatchProcessor.shutdown`: join the worker within the timeout, give up,
    shut the exporter down), with the timeout that `SpanProcessor.shutdown()` cannot pass.
    `shutdown_returned` says it ran to the end (our processor catches and counts what it raises).
    """

    shutdown_returned = False

    def shutdown(self) -> None:
        self._batch_processor.shutdown(timeout_millis=SHUTDOWN_GRACE_MS)
        self.shutdown_returned = True


def test_a_hanging_exporter_never_stalls_the_app_nor_the_metrics(monkeypatch):
    """Spans ended while the exporter hangs are all accounted for by the SDK: in the one batch stuck
    in export, dropped (queue_full), or queued, exactly.

    Exactly, because nobody pops the SDK's queue while they arrive. `BatchProcessor.emit` counts a
    drop when it finds the queue full, then `appendleft`s (which evicts the oldest); if the worker
    pops a batch between the two, the span counted as dropped is kept, and queue_full is one over.
    So the first spans (fewer than QUEUE: no drop to miscount) make the worker pop its batch and
    hang in export() with the export lock held; only once it is in there do the rest arrive.
    """
    sdk = SdkMetrics(monkeypatch)
    exporter = HangingExporter()
    forward = ShortGraceBatchSpanProcessor(exporter, max_queue_size=QUEUE, max_export_batch_size=BATCH,
                                           schedule_delay_millis=20, meter_provider=sdk.provider)
    # Every span goes through our hand-off thread (the only one to call the SDK's emit) and is scored.
    app = App(forward_to=forward, queue_limit=HANDOFF_LIMIT)
    try:
        spans, tools = _produce_bounded(app, FIRST_TOOLS, "before the exporter hangs")
        assert BATCH <= spans < QUEUE
        app.drain("the first spans")
        assert exporter.entered.wait(10), "the exporter was never called"
        assert app.self_metric("spans_scored") == tools  # a scrape: metrics flow while the export is stuck

        for n in (2_000, 1_000):
            more_spans, more_tools = _produce_bounded(app, n, "exporter hanging")
            spans, tools = spans + more_spans, tools + more_tools
            # Every span scored and handed to the BatchSpanProcessor, the exporter hanging all along. Drained
            # here, not by the scrape: a scrape waits COLLECT_WAIT_S for the hand-off thread, then serves
            # the counts as they are (by design), and on a loaded machine that thread can take longer.
            app.drain("exporter hanging")
            assert app.self_metric("spans_scored") == tools

        processed = sdk.counts("otel.sdk.processor.span.processed")
        queued = sdk.counts("otel.sdk.processor.span.queue.size")[None]
        ours = app.self_metrics()
        print(f"\nhanging exporter: {spans} spans ended and forwarded; the SDK says {processed[None]:.0f} handed to the "
              f"exporter, {processed['queue_full']:.0f} dropped (queue_full), {queued:.0f} queued; ours say "
              f"forward_errors {ours['forward_errors']:.0f}, enrichments_dropped {ours['enrichments_dropped']:.0f}")
        # One batch, counted as it was handed to the exporter, which is stuck with it.
        assert exporter.calls == 1 and processed[None] == exporter.spans
        assert 1 <= processed[None] <= BATCH
        # Every forwarded span is in that batch, dropped, or still queued (the queue full).
        assert queued == QUEUE
        assert processed[None] + processed["queue_full"] + queued == spans
        # Our self-metrics see none of it: the loss is visible only in the SDK's metrics (see the report).
        assert ours["forward_errors"] == 0 and ours["enrichments_dropped"] == 0

        _shutdown_bounded(app, "exporter hanging")  # returns although the export never does
        assert forward.shutdown_returned and exporter.calls == 1
        assert app.self_metric("forward_errors") == 0
    finally:
        exporter.release()


def test_a_raising_exporter_never_stalls_the_app(monkeypatch):
    sdk = SdkMetrics(monkeypatch)
    exporter = RaisingExporter()
    app = App(forward_to=BatchSpanProcessor(exporter, max_queue_size=QUEUE, max_export_batch_size=BATCH,
                                            schedule_delay_millis=20, meter_provider=sdk.provider))
    spans, tools = _produce_bounded(app, 3_000, "exporter raising")
    _assert_every_call_accounted(app, tools, "exporter raising")
    _shutdown_bounded(app, "exporter raising")
    processed = sdk.counts("otel.sdk.processor.span.processed")
    ours = app.self_metrics()
    print(f"\nraising exporter: {spans} spans forwarded, export() raised {exporter.calls} times; the SDK says "
          f"{processed[None]:.0f} processed (raised batches count as processed), {processed['queue_full']:.0f} dropped; "
          f"ours say forward_errors {ours['forward_errors']:.0f}")
    assert exporter.calls > 0
    # Handed over or dropped; the SDK's queue_full count can run a few over while its worker pops (check-then-act).
    assert processed[None] <= spans <= processed[None] + processed["queue_full"]
    assert ours["internal_errors"] == 0


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_unreachable_otlp_endpoint_never_stalls_the_app(monkeypatch, protocol):
    sdk = SdkMetrics(monkeypatch)
    port = closed_port()
    if protocol == "http":
        exporter = HttpExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=1, meter_provider=sdk.provider)
    else:
        exporter = GrpcExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=1, meter_provider=sdk.provider)
    app = App(forward_to=BatchSpanProcessor(exporter, max_queue_size=256, max_export_batch_size=64,
                                            schedule_delay_millis=20, meter_provider=sdk.provider))
    spans, tools = _produce_bounded(app, 2_000, f"OTLP/{protocol} endpoint down")
    _assert_every_call_accounted(app, tools, f"OTLP/{protocol} endpoint down")
    _shutdown_bounded(app, f"OTLP/{protocol} endpoint down")
    processed = sdk.counts("otel.sdk.processor.span.processed")
    exported = sdk.counts("otel.sdk.exporter.span.exported")
    ours = app.self_metrics()
    print(f"\nOTLP/{protocol} to a closed port: {spans} spans forwarded; the SDK processor says {processed[None]:.0f} "
          f"handed over, {processed['queue_full']:.0f} dropped; the exporter says {dict(exported)}; ours say "
          f"forward_errors {ours['forward_errors']:.0f}")
    assert processed[None] <= spans <= processed[None] + processed["queue_full"]
    assert sum(n for error, n in exported.items() if error is not None) == processed[None]  # every export failed, and says so
    assert ours["internal_errors"] == 0


class RaisingProcessor(SpanProcessor):
    def __init__(self) -> None:
        self.calls = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.calls += 1
        raise RuntimeError("forwarded processor broke (test)")


def test_a_raising_forwarded_processor_is_counted_and_logged_once(caplog):
    app_exported = InMemorySpanExporter()
    forward = RaisingProcessor()
    app = App(app_processors=[SimpleSpanProcessor(app_exported)], forward_to=forward)
    with caplog.at_level(logging.ERROR, logger="otel_agent_eval"):
        spans, tools = _produce_bounded(app, 500, "forwarded processor raising")
        _assert_every_call_accounted(app, tools, "forwarded processor raising")
        assert forward.calls == spans  # every span was forwarded (the drain above), and each raise counted
        assert app.self_metric("forward_errors") == spans
        assert app.self_metric("internal_errors") == 0
        _shutdown_bounded(app, "forwarded processor raising")
    assert len(app_exported.get_finished_spans()) == spans  # the app's own pipeline is untouched
    logged = [r for r in caplog.records if "forwarded processor broke" in r.getMessage()]
    assert len(logged) == 1, [r.getMessage() for r in logged]


# -- bounded waits (each once a bug report with its reproduction) --------------------------------------


def test_force_flush_returns_within_its_timeout_with_a_hanging_exporter():
    exporter = HangingExporter()
    app = App(forward_to=BatchSpanProcessor(exporter, max_export_batch_size=BATCH, schedule_delay_millis=20))
    try:
        _produce_bounded(app, 200, "before force_flush")
        assert exporter.entered.wait(10)
        thread, _ = in_thread(lambda: app.provider.force_flush(timeout_millis=1_000), "force_flush")
        thread.join(5.0)
        assert not thread.is_alive(), "force_flush(timeout_millis=1000) still waiting after 5 s"
    finally:
        exporter.release()
        app.provider.shutdown()


class BlockingProcessor(SpanProcessor):
    """A forwarded processor whose on_end blocks (e.g. SimpleSpanProcessor in front of a stuck collector)."""

    def __init__(self, exporter: HangingExporter) -> None:
        self.exporter = exporter

    def on_end(self, span: ReadableSpan) -> None:
        self.exporter.export([span])


def test_a_scrape_never_waits_on_a_blocked_forwarded_processor():
    exporter = HangingExporter()
    app = App(forward_to=BlockingProcessor(exporter))
    threads = []
    try:
        thread, _ = in_thread(lambda: _produce(app, 10), "app-thread")
        threads.append(thread)
        assert exporter.entered.wait(10)
        scrape, _ = in_thread(lambda: generate_latest(app.registry), "scrape")
        threads.append(scrape)
        scrape.join(5.0)
        assert not scrape.is_alive(), "the scrape is still waiting after 5 s"
    finally:
        exporter.release()
        for thread in threads:
            thread.join(10.0)
        app.provider.shutdown()


# -- what a hung exporter does to span.end(), by the processor it sits behind (issue 30, item 4) ----------


def test_a_hung_exporter_behind_a_forwarded_batch_processor_never_stalls_span_end_even_with_the_hand_off_full():
    """The processor's thread stuck (a user callback that hangs) fills the hand-off queue; every span refused
    then goes to the forwarded BatchSpanProcessor on the app's thread, whose on_end only queues (and drops
    when full): with its exporter hung too, span.end() still returns, every time."""
    exporter = HangingExporter()
    stuck = threading.Event()
    release = threading.Event()

    def hang(record, score) -> None:
        stuck.set()
        release.wait()

    forward = BatchSpanProcessor(exporter, max_queue_size=QUEUE, max_export_batch_size=BATCH, schedule_delay_millis=20)
    app = App(forward_to=forward, queue_limit=64, on_call=hang)
    try:
        _produce_bounded(app, 1, "before the processor's thread is stuck")
        assert stuck.wait(10)
        _, tools = _produce_bounded(app, 5_000, "hand-off full, exporter hung")  # returns: the liveness check
        assert app.self_metric("tool_calls_unscored") >= tools - 64  # refused, counted, passed on to the batch processor
        assert exporter.entered.wait(10)  # which hands them to the hung exporter, on its own thread
    finally:
        release.set()
        exporter.release()
    _shutdown_bounded(app, "batch processor, exporter released")


def _wait_until(condition, what: str) -> None:
    """Liveness-bounded wait for a condition another thread makes true (not a timing assertion)."""
    deadline = time.monotonic() + LIVENESS_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {LIVENESS_TIMEOUT_S:g} s")
        time.sleep(0.001)


def test_a_hung_exporter_behind_a_forwarded_simple_processor_stalls_span_end_as_it_would_alone():
    """SimpleSpanProcessor exports inside on_end, on the thread that calls it. Spans that need no scoring are
    passed to it on the app's thread at once, and so, once the hand-off queue is full, are the refused ones:
    with its exporter hung, span.end() waits in that export, as it would with SimpleSpanProcessor alone.
    What the hand-off holds off: the first `queue_limit` tool spans after the processor's thread got stuck."""
    exporter = HangingExporter()
    app = App(forward_to=SimpleSpanProcessor(exporter), queue_limit=8)
    ended = []

    def end_tool_spans() -> None:
        for _ in range(20):
            app.tracer.start_span("execute_tool", attributes=tool_attrs("web_search")).end()
            ended.append(threading.current_thread().name)

    try:
        app.tracer.start_span("execute_tool", attributes=tool_attrs("web_search")).end()
        assert exporter.entered.wait(10)  # the processor's thread is stuck in the export of the first span
        app_thread, _ = in_thread(end_tool_spans, "app-thread")
        _wait_until(lambda: exporter.calls == 2, "the second export")
        # 8 queued (the queue limit) returned at once; the 9th was refused and is stuck in the export on the app's thread
        assert app_thread.is_alive() and len(ended) == 8
        plain, _ = in_thread(lambda: app.tracer.start_span("GET /").end(), "plain-span")
        _wait_until(lambda: exporter.calls == 3, "the third export")
        assert plain.is_alive()  # a span with nothing to score goes straight to it, and waits there
    finally:
        exporter.release()
    join_or_fail([app_thread, plain], LIVENESS_TIMEOUT_S, "span.end() once the exporter is released")
    assert len(ended) == 20
    _shutdown_bounded(app, "simple processor, exporter released")

"""The hand-off: bounded, never blocking the app's thread, safe against signals, nothing lost uncounted."""
from __future__ import annotations

import signal
import threading
import time

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.otel.handoff import SpanQueue

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search",
        "gen_ai.tool.call.arguments": '{"query": "q"}'}


class Blocking(SpanProcessor):
    """A downstream processor stuck in on_end until released (a hung exporter behind SimpleSpanProcessor)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.received = 0

    def on_end(self, span) -> None:
        self.entered.set()
        self.release.wait()
        self.received += 1


def counters(processor: AgentEvalSpanProcessor) -> dict[str, float]:
    registry = processor.metrics.registry
    return {name: registry.get_sample_value(f"agent_eval_processor_{name}_total") or 0.0
            for name in ("spans_seen", "spans_scored", "spans_unscored", "tool_calls_unscored", "spans_ignored")}


def in_thread(work, timeout_s: float = 60.0) -> None:
    """Run `work` and fail (instead of hanging the suite) if it does not return: a liveness check, not a timing one."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), "the app's thread hung"
    assert not errors, errors


def test_a_full_queue_refuses_at_once_and_the_span_is_counted_not_lost():
    downstream = Blocking()
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=downstream, queue_limit=64)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("execute_tool", attributes=TOOL).end()
    assert downstream.entered.wait(10)  # the worker is now stuck forwarding the first span
    ended = 5_000

    def app() -> None:  # with the worker stuck, every span.end() must still return
        for _ in range(ended):
            tracer.start_span("execute_tool", attributes=TOOL).end()

    # Refused spans pass straight on to the (stuck) downstream on the app's thread, as they would without us;
    # let it through for those, but keep the worker's first span stuck until the app is done.
    first = downstream.release
    downstream.release = threading.Event()
    downstream.release.set()
    in_thread(app)
    refused = counters(processor)["spans_unscored"]
    assert refused >= ended - 64  # at most queue_limit waited; the rest were refused and counted
    first.set()
    assert processor.force_flush(10_000)
    c = counters(processor)
    assert c["spans_seen"] == ended + 1
    assert c["spans_scored"] + c["tool_calls_unscored"] == ended + 1  # every tool span scored or counted as unscored
    assert c["tool_calls_unscored"] == c["spans_unscored"]  # here every span is a tool span
    assert downstream.received == ended + 1  # and every span reached the exporter either way
    provider.shutdown()


def test_a_signal_handler_raising_inside_span_end_never_leaves_a_lock_held():
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), queue_limit=256)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")

    class Alarm(Exception):
        pass

    armed = [False]

    def raise_alarm(signum, frame):  # raises once per arming, and only inside span.end() or a flush
        if armed[0]:
            armed[0] = False
            raise Alarm

    previous = signal.signal(signal.SIGALRM, raise_alarm)
    interrupted = 0
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.0005, 0.0003)
        for i in range(20_000):
            span = tracer.start_span("execute_tool", attributes=TOOL)
            try:
                armed[0] = True
                span.end()
                if i % 1000 == 0:
                    processor.force_flush(100)
                armed[0] = False
            except Alarm:
                interrupted += 1
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert interrupted > 0
    in_thread(lambda: processor.force_flush())  # nothing left locked: a flush, a scrape and more spans go through
    in_thread(lambda: [tracer.start_span("execute_tool", attributes=TOOL).end() for _ in range(1_000)])
    assert processor.force_flush(10_000)
    assert counters(processor)["spans_scored"] > 0
    provider.shutdown()


def test_a_drain_asked_from_inside_the_consumer_does_not_wait_on_itself():
    seen: list[int] = []
    queue: SpanQueue

    def consume(item: int) -> None:
        seen.append(item)
        queue.drain()  # a user callback that flushes

    queue = SpanQueue(consume, limit=16)
    for i in range(10):
        assert queue.put(i)
    in_thread(lambda: queue.drain())
    assert seen == list(range(10))
    queue.stop()


def test_a_drain_under_a_steady_flood_ends_after_what_was_queued_when_it_asked():
    """The queue never empties while producers outpace the worker: a drain (a scrape, force_flush)
    still returns once the items queued before it are done, not when the flood stops."""
    consumed: list[int] = []
    queue = SpanQueue(lambda item: (consumed.append(item), time.sleep(0.0005)), limit=64)
    flooding = threading.Event()
    flooding.set()

    def flood() -> None:
        i = 0
        while flooding.is_set():
            if queue.put(i):
                i += 1

    producer = threading.Thread(target=flood, daemon=True)
    producer.start()
    try:
        while len(queue) < 32:  # the flood has filled the queue
            time.sleep(0.001)
        queued_before = len(consumed) + len(queue)
        answered: list[bool] = []
        in_thread(lambda: answered.append(queue.drain(timeout_s=30.0)))
        assert answered == [True]
        assert len(consumed) >= queued_before
    finally:
        flooding.clear()
        producer.join()
        queue.stop()


class Hanging(SpanExporter):
    """An exporter stuck in its first export (a Collector that stopped answering)."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def export(self, spans):
        self.entered.set()
        self.release.wait()
        return SpanExportResult.SUCCESS


def test_spans_the_forwarded_batch_processor_drops_are_counted():
    exporter = Hanging()
    batch = BatchSpanProcessor(exporter, max_queue_size=64, max_export_batch_size=16, schedule_delay_millis=10)
    processor = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=batch, queue_limit=4_096)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("test")
    tracer.start_span("execute_tool", attributes=TOOL).end()
    processor.force_flush(100)
    assert exporter.entered.wait(10)  # its worker holds one batch and hangs: nothing leaves its queue now
    for _ in range(1_000):
        tracer.start_span("execute_tool", attributes=TOOL).end()
    assert processor._queue.drain(10)  # everything handed to the batch processor
    dropped = processor.metrics.registry.get_sample_value("agent_eval_processor_spans_dropped_downstream_total")
    assert dropped == 1_000 - 64  # its queue filled with 64; each later span pushed the oldest out
    exporter.release.set()
    provider.shutdown()

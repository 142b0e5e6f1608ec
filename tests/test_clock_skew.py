"""A child recorded to end just after its root: the OTel JS SDK writes start times to the millisecond (the Vercel
AI SDK's spans, a real SideSeat export), so an `ai.generateText.doGenerate` can "end" up to 1 ms after the
`ai.generateText` run that holds it. It is still in that run, in `score` and in `serve` (which both put a batch
back in time order); a child that ends well after its root is late: in no run, and no run of its own.

The spans are real OTel SDK spans of the Vercel AI SDK's shape, with the recorded times, sent as the JS SDK's
BatchSpanProcessor sends them (in the order they ended in the app: children first).
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context
from prometheus_client import CollectorRegistry
from test_score import collector_lines, write
from test_serve import _local_only, service  # noqa: F401 - the autouse fixture: the exporter reaches 127.0.0.1 directly

from otel_agent_eval.offline.score import CLOCK_SKEW_NS, in_replay_order, score_traces

T0 = 1_770_918_466_000_000_000  # a millisecond, as the JS SDK writes a span's start
MS, US = 10**6, 10**3
MODEL = "gpt-4.1-mini"
INPUT, OUTPUT = 1_000, 200  # per model call


class Recorder:
    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.tracer = provider.get_tracer("ai")

    def span(self, name: str, start_ms: int, attrs: dict, parent=None):
        context = set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(name, context=context, start_time=T0 + start_ms * MS,
                                      attributes={"ai.operationId": name, **attrs})

    def model_call(self, run, start_ms: int, end_ns: int, *, failed: bool = False) -> None:
        attrs = {"ai.model.id": MODEL, "ai.model.provider": "openai.responses"}
        if not failed:
            attrs |= {"ai.usage.inputTokens": INPUT, "ai.usage.outputTokens": OUTPUT, "ai.response.model": MODEL}
        span = self.span("ai.generateText.doGenerate", start_ms, attrs, run)
        if failed:
            span.set_status(Status(StatusCode.ERROR, "model not found"))
        span.end(end_time=end_ns)

    def tool_call(self, run, start_ms: int, end_ns: int) -> None:
        self.span("ai.toolCall", start_ms, {"ai.toolCall.name": "local_index", "ai.toolCall.id": "call_1",
                                            "ai.toolCall.args": '{"query": "return policy"}'}, run).end(end_time=end_ns)

    def spans(self) -> list[ReadableSpan]:
        return list(self.memory.get_finished_spans())  # in the order they ended: as the JS SDK exports them


def skewed_runs() -> list[ReadableSpan]:
    """Two runs as recorded: a model call ends 0.5 ms after its `ai.generateText`; a failed one, 4 us after."""
    rec = Recorder()
    run = rec.span("ai.generateText", 0, {"ai.telemetry.functionId": "support_agent"})
    rec.model_call(run, 1, T0 + 40 * MS)
    rec.tool_call(run, 41, T0 + 60 * MS)
    rec.model_call(run, 61, T0 + 100 * MS + 500 * US)  # recorded 0.5 ms after its root
    run.end(end_time=T0 + 100 * MS)
    failed = rec.span("ai.generateText", 200, {"ai.telemetry.functionId": "support_agent"})
    rec.model_call(failed, 201, T0 + 300 * MS + 4 * US, failed=True)  # its only child, recorded 4 us after it
    failed.end(end_time=T0 + 300 * MS)
    return rec.spans()


def late_children() -> list[ReadableSpan]:
    """A run whose root really ended first: a tool call and a model call end 40 and 50 ms after it."""
    rec = Recorder()
    run = rec.span("ai.generateText", 1_000, {"ai.telemetry.functionId": "support_agent"})
    run.end(end_time=T0 + 1_100 * MS)
    rec.tool_call(run, 1_010, T0 + 1_140 * MS)
    rec.model_call(run, 1_020, T0 + 1_150 * MS)
    return rec.spans()


def test_a_parent_is_replayed_after_a_child_recorded_to_end_within_the_skew_and_before_a_later_one() -> None:
    spans = skewed_runs() + late_children()
    order = [(s.name, (s.end_time - T0) / MS) for s, _ in in_replay_order(spans, lambda span: None, window=len(spans))]
    assert order == [
        ("ai.generateText.doGenerate", 40), ("ai.toolCall", 60),
        ("ai.generateText.doGenerate", 100.5), ("ai.generateText", 100),  # the run ends after its call
        ("ai.generateText.doGenerate", 300.004), ("ai.generateText", 300),  # the failed call, then its run
        ("ai.generateText", 1_100), ("ai.toolCall", 1_140), ("ai.generateText.doGenerate", 1_150),  # late: after it
    ]
    assert [s.name for s, _ in in_replay_order(spans[::-1], lambda span: None, window=len(spans))] == [n for n, _ in order]
    assert CLOCK_SKEW_NS == MS


def check_skewed(runs: list, calls: list) -> None:
    ok, failed = runs
    assert (ok.agent, ok.closed_by, [c.name for c in ok.tool_calls]) == ("support_agent", "end", ["local_index"])
    assert [(c.model, c.input_tokens, c.output_tokens) for c in ok.llm_calls] == [(MODEL, INPUT, OUTPUT)] * 2
    assert (failed.closed_by, [(c.model, c.input_tokens) for c in failed.llm_calls]) == ("end", [(MODEL, 0)])
    assert [(r.name, r.agent) for r in calls] == [("local_index", "support_agent")]


def test_score_keeps_a_model_call_recorded_just_after_its_root_in_that_run(tmp_path) -> None:
    runs, calls = [], []
    report = score_traces(write(tmp_path / "vercel.json", collector_lines(skewed_runs(), size=100)),
                          on_run=runs.append, on_call=lambda record, score: calls.append(record))
    check_skewed(runs, calls)
    assert sum(g.runs_closed_early for g in report.groups) == 0  # the recorded set said "2 runs were closed without their root span"


def test_score_leaves_children_that_end_well_after_their_root_in_no_run(tmp_path) -> None:
    runs, calls, registry = [], [], CollectorRegistry()
    report = score_traces(write(tmp_path / "late.json", collector_lines(late_children())), registry=registry,
                          on_run=runs.append, on_call=lambda record, score: calls.append(record))
    (run,) = runs  # the root's run, closed when it ended; no run of the late calls at the end of the input
    assert (run.closed_by, run.tool_calls, run.llm_calls) == ("end", [], [])
    assert sum(g.runs_closed_early for g in report.groups) == 0
    assert [(r.name, r.agent) for r in calls] == [("local_index", "support_agent")]  # scored at once, with its agent
    assert registry.get_sample_value("agent_eval_processor_late_tool_spans_total") == 1
    assert registry.get_sample_value("agent_eval_processor_late_llm_spans_total") == 1


@pytest.fixture
def serving() -> Iterator:
    svc = service()
    try:
        yield svc
    finally:
        svc.stop()


def run_costs(registry: CollectorRegistry) -> tuple[float, float]:
    """(runs, their summed cost) from serve's run cost histogram."""
    samples = [s for family in registry.collect() for s in family.samples if s.name.startswith("agent_eval_run_cost_usd")]
    return (sum(s.value for s in samples if s.name.endswith("_count")), sum(s.value for s in samples if s.name.endswith("_sum")))


def test_serve_keeps_a_model_call_recorded_just_after_its_root_in_that_run(serving) -> None:
    exporter = OTLPSpanExporter(endpoint=serving.http.endpoint)
    assert exporter.export(skewed_runs()) is SpanExportResult.SUCCESS  # one request, children first
    assert serving.drain()
    registry = serving.registry
    priced = 2 * (INPUT * 0.0004 + OUTPUT * 0.0016) / 1000  # the default catalog's gpt-4.1-mini
    count, cost = run_costs(registry)
    assert count == 2 and cost == pytest.approx(priced)  # both model calls in the first run, nothing left open
    assert registry.get_sample_value("agent_eval_processor_open_runs") == 0

    assert exporter.export(late_children()) is SpanExportResult.SUCCESS
    assert serving.drain()
    assert run_costs(registry) == (3, pytest.approx(priced))  # the late model call is in no run
    assert registry.get_sample_value("agent_eval_processor_late_llm_spans_total") == 1
    assert registry.get_sample_value("agent_eval_processor_late_tool_spans_total") == 1
    assert registry.get_sample_value("agent_eval_processor_open_runs") == 0  # nothing waits for the TTL
    exporter.shutdown()

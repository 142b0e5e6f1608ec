"""`score`'s reading at speed, held to what it replaced: the garbage collector's young generation collected less
often while a replay runs (and put back after, whatever happens), and OTLP/JSON spans, built without the SDK's
Python constructors, equal to the SDK spans they were written from, field by field.
"""
from __future__ import annotations

import gc
import json

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags
from test_score import collector_json, collector_lines, write

from otel_agent_eval.otlp.json_spans import EMPTY_RESOURCE, SpanProblem, otlp_span, spans_of_record
from otel_agent_eval.offline.score import YOUNG_COLLECTION_EVERY, score_traces
from otel_agent_eval.tools.demo import run_workload


@pytest.fixture(scope="module")
def demo_spans() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    run_workload(SimpleSpanProcessor(memory), runs=40, seed=7, suboptimal_share=0.3)
    return list(memory.get_finished_spans())


@pytest.fixture
def thresholds():
    before = gc.get_threshold()
    yield before
    gc.set_threshold(*before)


def test_a_replay_collects_young_garbage_less_often_and_puts_the_threshold_back(demo_spans, tmp_path, thresholds):
    path = write(tmp_path / "traces.json", collector_lines(demo_spans, 64))
    during: set[int] = set()
    report = score_traces(path, on_span=lambda span: during.add(gc.get_threshold()[0]))
    assert report.inputs.spans == len(demo_spans) and report.calls > 0
    assert during == {YOUNG_COLLECTION_EVERY}
    assert gc.get_threshold() == thresholds


def test_the_threshold_is_put_back_when_the_replay_stops_on_an_exception(demo_spans, tmp_path, thresholds):
    path = write(tmp_path / "traces.json", collector_lines(demo_spans))

    def stop(span: ReadableSpan) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score_traces(path, on_span=stop)
    assert gc.get_threshold() == thresholds


def test_collection_turned_off_or_already_rarer_is_left_as_it_is(demo_spans, tmp_path, thresholds):
    path = write(tmp_path / "traces.json", collector_lines(demo_spans))
    for setting in ((0, 10, 10), (YOUNG_COLLECTION_EVERY * 2, 10, 10)):
        gc.set_threshold(*setting)
        during: set[tuple[int, ...]] = set()
        score_traces(path, on_span=lambda span: during.add(gc.get_threshold()))
        assert during == {setting} and gc.get_threshold() == setting


def test_spans_read_from_otlp_json_equal_the_sdk_spans_they_were_written_from(demo_spans):
    read, problems = spans_of_record(json.loads(json.dumps(collector_json(demo_spans))))
    assert not problems and len(read) == len(demo_spans)
    assert any(span.parent for span in read) and any(span.events for span in read)
    for mine, sdk in zip(read, demo_spans):
        assert type(mine) is ReadableSpan
        for field in ("name", "kind", "start_time", "end_time", "attributes"):
            assert getattr(mine, field) == getattr(sdk, field), field
        # ids, is_remote, trace state, is_valid; the SDK's OTLP encoder writes no trace flags in a span's `flags`
        assert tuple(mine.context)[:3] + tuple(mine.context)[4:] == tuple(sdk.context)[:3] + tuple(sdk.context)[4:]
        assert (mine.parent is None) is (sdk.parent is None)  # OTLP keeps no flags of the parent: the defaults, as before
        assert mine.parent is None or tuple(mine.parent) == tuple(SpanContext(sdk.parent.trace_id, sdk.parent.span_id,
                                                                              sdk.parent.is_remote))
        assert (mine.status.status_code, mine.status.description) == (sdk.status.status_code, sdk.status.description)
        assert [(e.name, e.timestamp, dict(e.attributes)) for e in mine.events] == [
            (e.name, e.timestamp, dict(e.attributes)) for e in sdk.events]
        assert mine.resource.attributes == sdk.resource.attributes and mine.instrumentation_scope.name == sdk.instrumentation_scope.name
        assert type(mine.attributes["gen_ai.operation.name"]) is str
    chat = next(span for span in read if span.name.startswith("chat"))
    assert type(chat.attributes["gen_ai.usage.input_tokens"]) is int
    assert type(chat.attributes["gen_ai.response.finish_reasons"]) is tuple


@pytest.mark.parametrize("trace_id", ["0" * 31 + "1", "f" * 32])
def test_a_context_read_from_otlp_json_is_the_one_span_context_builds(trace_id):
    item = {"traceId": trace_id, "spanId": "00000000000000a1", "parentSpanId": "00000000000000b2", "flags": 0x301,
            "traceState": "vendor=value", "name": "x", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    span = otlp_span(item, EMPTY_RESOURCE, None)
    number = int(trace_id, 16)
    assert tuple(span.context) == tuple(SpanContext(number, 0xA1, False, TraceFlags(1), span.context.trace_state))
    assert span.context.trace_state.get("vendor") == "value"
    assert tuple(span.parent) == tuple(SpanContext(number, 0xB2, True))
    assert span.context.is_valid is (number > 0)


@pytest.mark.parametrize("trace_id", ["-" + "0" * 30 + "1", "0x" + "0" * 29 + "1", "+" + "0" * 30 + "1", "0_" + "0" * 29 + "1"])
def test_an_otlp_json_id_that_int_reads_but_is_not_hex_digits_is_refused(trace_id):
    """A sign, a prefix or underscores: `int(x, 16)` takes them, the OTLP encoder then fails on a negative id."""
    item = {"traceId": trace_id, "spanId": "00000000000000a1", "name": "x", "startTimeUnixNano": "1", "endTimeUnixNano": "2"}
    with pytest.raises(SpanProblem, match="traceId"):
        otlp_span(item, EMPTY_RESOURCE, None)

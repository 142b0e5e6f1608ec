"""The native request writer (native/src/write.rs) against the Python writer it stands in for.

`messages.request_of` writes the request `serve` forwards from the spans' messages, natively when the native part is
built: it must give the very bytes `messages._written_request` gives (and the same spans left to the SDK's encoder,
in order), or hand the request back (None). The spans are read from generated requests, run through the real
pipeline (the enricher's copies), and copied here with added attributes of every value type, events, copies of
copies and copies that changed a field the writer compares.
"""
from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.attributes import BoundedAttributes
from prometheus_client import CollectorRegistry
from test_native_reader import requests

from otel_agent_eval.core.enrich import EnrichedSpan
from otel_agent_eval.offline.score import agent_start_reader
from otel_agent_eval.otel.wiring import build_pipeline
from otel_agent_eval.otlp import messages, native
from otel_agent_eval.otlp.messages import MessageSpan
from otel_agent_eval.otlp.proto_spans import spans_of_message
from otel_agent_eval.serve.intake import evaluated
from otel_agent_eval.tools.demo import run_workload

try:
    from otel_agent_eval.otlp import _native
except ImportError:  # test_native_reader says how to build it
    _native = None


def test_the_native_writer_is_built_and_in_use() -> None:
    assert _native is not None, "the native part is not built: see test_native_reader"
    assert native.reader("request_of") is not None and messages._native_request_of is _native.request_of


# -- the comparison ------------------------------------------------------------------------------------------------

def same(spans: list[Any]) -> None:
    """Asserts that both writers write `spans` alike, and the public path too (a Python error: handed back)."""
    written = _native.request_of(spans)
    try:
        data, others = messages._written_request(spans)
    except Exception as e:  # noqa: BLE001 - an event name it cannot encode, say: the public path raises it too
        assert written is None
        with pytest.raises(type(e)):
            messages.request_of(spans)
        return
    assert written is not None, "handed back"
    assert written[0] == data
    assert [id(s) for s in written[1]] == [id(s) for s in others]
    assert ExportTraceServiceRequest.FromString(written[0]) == ExportTraceServiceRequest.FromString(data)
    try:
        expected = data + (encode_spans(others).SerializeToString() if others else b"")
    except Exception as e:  # noqa: BLE001 - a value the SDK's encoder refuses: the public path raises it too
        with pytest.raises(type(e)):
            messages.request_of(spans)
    else:
        assert messages.request_of(spans) == expected
        ExportTraceServiceRequest.FromString(expected)


# -- spans: read, evaluated by the pipeline, copied here -----------------------------------------------------------

def evaluated_batches() -> list[list[Any]]:
    """The demo's agent runs through the real pipeline as `serve` runs it: messages and the enricher's copies."""
    memory = InMemorySpanExporter()
    run_workload(SimpleSpanProcessor(memory), runs=40, suboptimal_share=0.3, seed=3)
    finished = memory.get_finished_spans()
    pipeline, _ = build_pipeline(registry=CollectorRegistry(), sees_starts=False)
    agent_of, out = agent_start_reader(pipeline), []
    for i in range(0, len(finished), 60):
        batch, problems = spans_of_message(encode_spans(finished[i:i + 60]).SerializeToString(), keep=True)
        assert not problems
        out.append(evaluated(pipeline, batch, agent_of))
    out.append(pipeline.close_all())
    return out


EVALUATED = evaluated_batches()  # here, not in a strategy: the demo draws its runs with `random`


class Kind(enum.IntEnum):
    TOOL = 3


class Text(str):
    pass


class Note(Event):  # not the SDK's Event itself: `_event_bytes` writes it
    pass


texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=10)
surrogates = st.sampled_from(["\ud800", "a\udfff", "\udc80b"])
keys = st.sampled_from(["agent_eval.score", "", "k", "ключ", "a.b"]) | texts
scalars = st.one_of(  # what the native writer writes itself
    texts, st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, float("nan"), float("-inf")]),
    st.booleans(), st.integers(-2**63, 2**63 - 1), st.sampled_from([-1, 127, 128, 2**63 - 1, -(2**63)]))
odd = st.one_of(  # what it leaves to `_kv_bytes`: the SDK's encoder writes it, or the SDK encodes the span
    surrogates, st.sampled_from([2**63, -(2**63) - 1, 2**70, None, b"\x00\xff", [None], [[1]], ["a", b"b"], [2**64],
                                 {"k": 1}, (), Kind.TOOL, Text("t"), [Text("t")], 1 + 2j]))
values = st.one_of(scalars, scalars, scalars, st.lists(scalars, max_size=3), st.lists(scalars, max_size=3).map(tuple),
                   odd)
attributes = st.lists(st.tuples(keys, values), max_size=5).map(dict)


@st.composite
def events(draw: Any) -> Any:
    name = draw(st.sampled_from(["gen_ai.evaluation.result", "", None]) | texts)
    if draw(st.integers(0, 20)) == 0:
        name = draw(surrogates)  # `_event_bytes` raises: handed back
    attrs = draw(attributes)
    kind = draw(st.sampled_from([dict, MappingProxyType, lambda a: None, lambda a: BoundedAttributes(attributes=a)]))
    event = draw(st.sampled_from([Event, Event, Note]))(name, kind(attrs), draw(st.integers(1, 2**64 - 1)))
    event._timestamp = draw(st.sampled_from([event._timestamp, 0, None, 7]))
    return event


@st.composite
def copies(draw: Any, span: Any, shared: dict[str, Any]) -> Any:
    """A copy of `span` as the core makes them (or as it never does): attributes and events added."""
    own = span.__dict__.get("_attributes") or {}
    added, more = draw(attributes), tuple(draw(st.lists(events(), max_size=2)))
    how = draw(st.sampled_from(["appended", "compared", "appended", "compared", "copy of a copy", "changed field",
                                "replaced value"]))
    if how == "appended":  # the enricher's: counts and the catalog-fixed part
        fixed = draw(st.sampled_from([shared, MappingProxyType(shared), MappingProxyType({})]))
        return EnrichedSpan(span, {**own, **fixed, **added}, (*span.events, *more),
                            appended=(len(own), len(span.events), fixed))
    copy = EnrichedSpan(span, {**own, **added}, draw(st.sampled_from([tuple, list]))((*span.events, *more)))
    if how == "copy of a copy":
        copy = EnrichedSpan(copy, {**copy._attributes, **draw(attributes)},
                            (*copy._events, *draw(st.lists(events(), max_size=1))))
    elif how == "changed field":
        setattr(copy, draw(st.sampled_from(messages._SHARED)), "changed")
    elif how == "replaced value" and own:
        copy._attributes = {**copy._attributes, next(iter(own)): "replaced"}
    return copy


@st.composite
def batches(draw: Any) -> list[Any]:
    spans, _ = spans_of_message(draw(requests()), keep=True)
    pipeline_spans = draw(st.sampled_from(EVALUATED))
    spans += draw(st.lists(st.sampled_from(pipeline_spans), max_size=20)) if pipeline_spans else []
    shared = draw(attributes)
    out = []
    for span in spans:
        out.append(span)
        if draw(st.booleans()):
            out.append(draw(copies(span, shared)))
    return draw(st.permutations(out))


@settings(max_examples=300, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches())
def test_the_native_writer_writes_the_bytes_the_python_writer_writes(spans: list[Any]) -> None:
    same(spans)


def test_the_pipelines_requests_are_written_natively_as_in_python() -> None:
    copies = 0
    for batch in EVALUATED:
        same(batch)
        copies += sum(1 for s in batch if type(s) is EnrichedSpan and s._appended is not None)
    assert copies > 20


@pytest.mark.parametrize("value", ["web_search", "", "ünïcode ✓", True, False, 0, 1, -1, 2**63 - 1, -(2**63), 0.0, -0.0,
                                   0.25, float("inf"), float("nan"), ["a", "b"], (1, 2.5, True), [], [-0.0]])
@pytest.mark.parametrize("key", ["agent_eval.score", ""])
def test_an_added_attribute_is_written_as_the_sdk_encoder_writes_it(key: str, value: Any) -> None:
    # held against the SDK's encoder, not only the Python twin: a wrong tag or length in both would show here
    (span,), _ = spans_of_message(_one_request(), keep=True)
    copy = EnrichedSpan(span, {**span._attributes, key: value}, span.events)
    written = _native.request_of([copy])
    assert written is not None and not written[1]
    ours = ExportTraceServiceRequest.FromString(written[0]).resource_spans[0].scope_spans[0].spans[0].attributes
    theirs = encode_spans([copy]).resource_spans[0].scope_spans[0].spans[0].attributes
    assert [kv.SerializeToString() for kv in ours] == [kv.SerializeToString() for kv in theirs]


def _one_request() -> bytes:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="s")
    return request.SerializeToString()


# -- what it hands back --------------------------------------------------------------------------------------------

def test_what_it_does_not_model_is_handed_back_and_written_by_python() -> None:
    (span,), _ = spans_of_message(_one_request(), keep=True)
    odd = MessageSpan.__new__(MessageSpan)
    odd.__dict__.update(span.__dict__, _message=bytearray(span._message))  # bytes of another type
    bad = EnrichedSpan(span, dict(span._attributes), span.events, appended=[0, 0, {}])  # not a tuple: not ours
    for spans in ([odd], [bad], (s for s in [span])):  # an iterator is not read twice
        assert _native.request_of(spans) is None
    assert messages.request_of([odd]) == messages._written_request([odd])[0]
    assert messages.request_of([bad]) == messages._written_request([bad])[0]


def test_spans_it_cannot_write_are_left_to_the_sdk_in_order() -> None:
    (span,), _ = spans_of_message(_one_request(), keep=True)
    plain = ReadableSpan(name="plain", context=span.context)
    surrogate = EnrichedSpan(span, {**span._attributes, "k": "\ud800"}, span.events)
    big = EnrichedSpan(span, {**span._attributes, "k": 2**64}, span.events)
    data, others = _native.request_of([plain, span, surrogate, big])
    assert list(others) == [plain, surrogate, big] and data == messages._written_request([span])[0]

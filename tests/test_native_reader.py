"""The native OTLP protobuf reader (native/, Rust) against the Python reader it stands in for.

Both read the same bytes; the native one must give the very spans `proto_spans.spans_of_request` builds
from upb's parse (every field, value types included), or hand the request back (None) where it does not
model what upb does. Requests are generated as protobuf messages, so every AnyValue kind, nesting, empty
values, repeated keys, bad ids, flags, kinds and statuses come up, not only what an SDK writes.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from otel_agent_eval.otlp import native, proto_spans
from otel_agent_eval.otlp.json_spans import SpanProblem

try:
    from otel_agent_eval.otlp import _native
except ImportError:  # the assertion below says how to build it
    _native = None


def test_the_native_reader_is_built_and_in_use() -> None:
    assert _native is not None, ("the native reader is not built: install with a Rust toolchain (cargo) on PATH, "
                                 "`pip install -e .`")
    assert native.NATIVE


def test_it_can_be_turned_off() -> None:
    code = "from otel_agent_eval.otlp import native; print(native.NATIVE)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OTEL_AGENT_EVAL_NATIVE": "0"}).stdout
    assert out.strip() == "False"


# -- comparing what the two readers built ------------------------------------------------------------------------

def canon(value: Any) -> Any:
    """A value with its type, recursively: 1, 1.0 and True differ; NaN equals NaN."""
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    if isinstance(value, dict):
        return ("dict", [(k, canon(v)) for k, v in value.items()])
    if isinstance(value, tuple):
        return ("tuple", [canon(v) for v in value])
    return (type(value).__name__, value)


def context(ctx: Any) -> Any:
    return None if ctx is None else (type(ctx).__name__, tuple(ctx[:3]), int(ctx[3]), canon(dict(ctx[4])), ctx[5])


def described(span: Any) -> Any:
    """Everything the span holds, as comparable values."""
    d = span.__dict__
    scope, resource, status = d["_instrumentation_scope"], d["_resource"], d["_status"]
    out = [type(span).__name__, list(d), d["_name"], context(d["_context"]), context(d["_parent"]), d["_kind"],
           d["_instrumentation_info"], d["_start_time"], d["_end_time"], canon(d["_attributes"]),
           [(e.name, e.timestamp, canon(dict(e.attributes))) for e in d["_events"]],
           [(context(link.context), canon(dict(link.attributes))) for link in d["_links"]],
           (canon(dict(resource.attributes)), resource.schema_url),
           None if scope is None else (scope.name, scope.version, scope.schema_url, canon(dict(scope.attributes))),
           (status.status_code, status.description)]
    if "_message" in d:
        out += [d["_message"], d["_origin"].resource_key, d["_origin"].scope_key]
    return out


def both(data: bytes, keep: bool) -> tuple[Any, Any]:
    python = proto_spans.spans_of_request(proto_spans.parsed(data), keep=keep)
    native = _native.spans_of_message(data, keep)
    return python, native


def same(python: Any, native: Any) -> None:
    assert native is not None
    (p_spans, p_problems), (n_spans, n_problems) = python, native
    assert [described(s) for s in n_spans] == [described(s) for s in p_spans]
    assert list(n_problems) == list(p_problems)


# -- generated requests ---------------------------------------------------------------------------------------

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
keys = st.sampled_from(["gen_ai.operation.name", "gen_ai.tool.name", "k", "", "ключ", "a.b"]) | texts
scalars = st.one_of(
    texts.map(lambda v: AnyValue(string_value=v)),
    st.booleans().map(lambda v: AnyValue(bool_value=v)),
    st.integers(-2**63, 2**63 - 1).map(lambda v: AnyValue(int_value=v)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda v: AnyValue(double_value=v)),
    st.binary(max_size=8).map(lambda v: AnyValue(bytes_value=v)),
    st.just(AnyValue()),  # empty: dropped
)


def _array(values: list[AnyValue]) -> AnyValue:
    value = AnyValue()
    value.array_value.values.extend(values)
    return value


def _kvlist(items: list[tuple[str, AnyValue]]) -> AnyValue:
    value = AnyValue()
    value.kvlist_value.values.extend(KeyValue(key=k, value=v) for k, v in items)
    return value


values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(_array),
    st.lists(st.tuples(keys, inner), max_size=3).map(_kvlist)), max_leaves=12)
attributes = st.lists(st.builds(lambda k, v: KeyValue(key=k, value=v), keys, values), max_size=6)
ids = st.one_of(st.binary(min_size=16, max_size=16), st.binary(min_size=8, max_size=8), st.just(b"\0" * 16),
                st.just(b""), st.binary(max_size=20))


@st.composite
def spans(draw: Any) -> dict[str, Any]:
    trace_id = draw(st.binary(min_size=16, max_size=16) | ids)
    span = {
        "trace_id": trace_id, "span_id": draw(st.binary(min_size=8, max_size=8) | ids),
        "parent_span_id": draw(st.just(b"") | st.binary(min_size=8, max_size=8) | ids),
        "name": draw(texts), "kind": draw(st.integers(-1, 7)), "flags": draw(st.sampled_from([0, 1, 0x100, 0x301, 0x300, 2**32 - 1])),
        "trace_state": draw(st.sampled_from(["", "a=1", "vendor=x,b=2", "bad state"])),
        "start_time_unix_nano": draw(st.integers(0, 2**64 - 1)), "end_time_unix_nano": draw(st.integers(0, 2**64 - 1)),
        "attributes": draw(attributes),
        # (an event without a time gets the reading's time from the SDK's Event, in either reader)
        "events": [{"name": draw(texts), "time_unix_nano": draw(st.integers(1, 2**64 - 1)), "attributes": draw(attributes)}
                   for _ in range(draw(st.integers(0, 2)))],
        "links": [{"trace_id": draw(ids), "span_id": draw(ids), "trace_state": draw(texts), "attributes": draw(attributes)}
                  for _ in range(draw(st.integers(0, 2)))],
    }
    status = draw(st.sampled_from([None, (0, ""), (1, ""), (2, ""), (2, "boom"), (1, "ignored"), (5, "x")]))
    if status is not None:
        span["status"] = {"code": status[0], "message": status[1]}
    return span


@st.composite
def requests(draw: Any) -> bytes:
    request = ExportTraceServiceRequest()
    for _ in range(draw(st.integers(1, 3))):
        entry = request.resource_spans.add()
        if draw(st.booleans()):
            entry.resource.attributes.extend(draw(attributes))
        entry.schema_url = draw(st.sampled_from(["", "https://opentelemetry.io/schemas/1.30.0"]))
        for _ in range(draw(st.integers(0, 3))):
            scope_entry = entry.scope_spans.add()
            if draw(st.booleans()):
                scope_entry.scope.name = draw(texts)
                scope_entry.scope.version = draw(texts)
                scope_entry.scope.attributes.extend(draw(attributes))
            scope_entry.schema_url = draw(st.sampled_from(["", "https://example.com/s"]))
            for fields in draw(st.lists(spans(), max_size=4)):
                added = scope_entry.spans.add()
                for name, value in fields.items():
                    if name in ("attributes", "events", "links"):
                        for item in value:
                            if name == "attributes":
                                added.attributes.append(item)
                            else:
                                getattr(added, name).add(**item)
                    elif name == "status":
                        added.status.code, added.status.message = value["code"], value["message"]
                    else:
                        setattr(added, name, value)
    return request.SerializeToString()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(requests(), st.booleans())
def test_the_native_reader_builds_the_spans_the_python_reader_builds(data: bytes, keep: bool) -> None:
    same(*both(data, keep))


def test_the_comparison_sees_a_changed_field() -> None:
    python, native = both(_one_request(), True)
    native[0][0]._attributes["k"] = 1.0  # was 1
    with pytest.raises(AssertionError):
        same(python, native)


def _one_request() -> bytes:
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="s")
    span.attributes.append(KeyValue(key="k", value=AnyValue(int_value=1)))
    return request.SerializeToString()


# -- what it hands back -------------------------------------------------------------------------------------------

def _field(number: int, data: bytes) -> bytes:
    return bytes([number << 3 | 2, len(data)]) + data


def test_a_request_it_does_not_model_is_handed_back_and_read_by_python() -> None:
    # a ResourceSpans with its resource written twice: protobuf merges the two (both attributes), so the native
    # reader hands it back and the public path reads it the Python way
    entry = ResourceSpans()
    entry.resource.attributes.append(KeyValue(key="a", value=AnyValue(string_value="1")))
    entry.scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="s")
    second = _field(1, KeyValue(key="b", value=AnyValue(string_value="2")).SerializeToString())
    data = _field(1, entry.SerializeToString() + _field(1, second))
    assert _native.spans_of_message(data, True) is None
    spans, problems = proto_spans.spans_of_message(data, keep=True)
    assert dict(spans[0].resource.attributes) == {"a": "1", "b": "2"} and problems == []


@pytest.mark.parametrize("value", [
    _field(5, b"") + _field(5, _field(1, AnyValue(string_value="x").SerializeToString())),  # two arrays: merged
    _field(6, b"") + _field(6, b""),  # two kvlists
])
def test_an_any_value_whose_array_or_kvlist_repeats_is_handed_back(value: bytes) -> None:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="s")
    kv = _field(1, b"k") + _field(2, value)
    span = request.resource_spans[0].scope_spans[0].spans[0].SerializeToString() + _field(9, kv)
    data = _field(1, _field(2, _field(2, span)))
    assert ExportTraceServiceRequest.FromString(data)  # valid protobuf
    assert _native.spans_of_message(data, False) is None
    spans, _ = proto_spans.spans_of_message(data)  # read by the Python reader: the arrays merged, the kvlists too
    assert spans[0].attributes["k"] == proto_spans.spans_of_request(proto_spans.parsed(data))[0][0].attributes["k"]


def test_a_span_whose_status_repeats_is_handed_back() -> None:
    # upb merges the two statuses into one, so its re-serialized message differs from the bytes that came
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="s")
    span.status.code = 2
    message = span.SerializeToString() + _field(15, _field(2, b"boom"))
    data = _field(1, _field(2, _field(2, message)))
    assert _native.spans_of_message(data, True) is None
    spans, _ = proto_spans.spans_of_message(data, keep=True)
    assert spans[0].status.description == "boom"
    assert spans[0]._message.count(b"boom") == 1  # one status, as upb writes it back


def test_bytes_that_are_not_a_request_raise_the_python_readers_error() -> None:
    with pytest.raises(SpanProblem, match="not an OTLP ExportTraceServiceRequest"):
        proto_spans.spans_of_message(b"\x0a\x05abc")

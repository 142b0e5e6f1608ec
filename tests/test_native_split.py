"""`serve --workers`' split by trace id, native (native/src/split.rs) against upb's (serve/split.py)."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from test_native_reader import _field, requests

from otel_agent_eval.serve import split

try:
    from otel_agent_eval.otlp import _native
except ImportError:  # test_native_reader says how to build it
    _native = None


def python_split(data: bytes, workers: int) -> list[Any]:
    native = split._native_split
    split._native_split = None
    try:
        return split.split_protobuf(data, workers)
    finally:
        split._native_split = native


def parsed(parts: list[Any]) -> list[Any]:
    return [(w, ExportTraceServiceRequest.FromString(body), n) for w, body, n in parts]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(requests(), st.integers(1, 4))
def test_the_native_split_gives_the_requests_upb_builds(data: bytes, workers: int) -> None:
    assert _native is not None
    counts = _native.spans_per_worker(data, workers)
    native, python = _native.split_by_trace(data, workers), python_split(data, workers)
    assert parsed(native) == parsed(python)
    assert [n for _, _, n in native] == [n for n in counts if n]
    assert split.split_protobuf(data, workers) == native  # the path serve takes


def test_a_resource_written_twice_is_split_by_upb() -> None:
    span = lambda trace: _field(2, _field(2, _field(1, trace) + _field(2, b"\2" * 8)))  # noqa: E731
    entry = _field(1, b"") + _field(1, b"") + span(b"\1" * 16) + span(b"\2" * 16)
    data = _field(1, entry)
    assert _native.split_by_trace(data, 2) is None and _native.spans_per_worker(data, 2) is None
    assert parsed(split.split_protobuf(data, 2)) == parsed(python_split(data, 2))


def test_a_request_without_room_is_refused_from_its_counts() -> None:
    data = _field(1, _field(2, _field(2, _field(1, b"\1" * 16))))
    with pytest.raises(split.NoRoom):
        split.split_protobuf(data, 2, room=lambda counts: False)

"""Spans that keep the OTLP protobuf they arrived as, and export requests written from it: one serialization a hop.

Re-encoding every span with the SDK's OTLP encoder cost `serve` a third of its CPU (issue 27),
for bytes that were already there. A `MessageSpan` is the `ReadableSpan` the reader builds
(`proto_spans.py`), everything the core reads, plus the span's own serialized message, and
its resource and scope as they arrived (`Origin`). Forwarding the message forwards what the
sender sent, as a Collector does: what the reader does not model (links, trace state,
dropped counts, an unspecified kind, a status message on a non-error) goes on unchanged. Two
fields are written as the SDK's encoder writes them (appended: the last value wins), so a
span through `serve` is the one the in-process processor forwards: the span flags (the
SDK's carry no W3C trace flags) and the status (always present). Only a span whose
attributes repeat a key or hold an empty value is not kept (an attribute the core adds
could then collide with one the reader dropped): the SDK encodes it.

`request_of` writes the spans to forward as one `ExportTraceServiceRequest`: a `MessageSpan`
or a copy of one the core made (`core/enrich.py`'s `EnrichedSpan`) as the original bytes
plus what the copy added (attributes and events, appended: a parser merges repeated fields
in order), grouped by resource and scope as the SDK groups them. A copy the enricher marked as
only appended (`EnrichedSpan._appended`: the original's counts and the catalog-fixed attributes,
written once per score) is written without comparing it with its original; any other copy is
compared field by field. Any other span, or a copy that
changed anything else (a replaced attribute value, a redacted name), is encoded by the SDK as before.
Where the native part is built, `request_of` writes the same bytes in Rust (`native/src/write.rs`, about 1 us a
span where this takes 7-8), handing back to `_written_request` what it does not model (`tests/test_native_writer.py`).

    >>> spans, problems = spans_of_message(data, keep=True)   # proto_spans.py
    >>> body = request_of(forwarded)                          # bytes of an ExportTraceServiceRequest
"""
from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from itertools import islice
from operator import is_
from types import MappingProxyType
from typing import Any

from opentelemetry.exporter.otlp.proto.common._internal import _encode_key_value
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import Event, ReadableSpan

from . import native

__all__ = ["MessageSpan", "Noise", "Origin", "request_of"]

# The fields a copy shares with its original when the core only added attributes and events to it.
_SHARED = ("_name", "_context", "_parent", "_kind", "_status", "_links", "_resource", "_start_time", "_end_time",
           "_instrumentation_scope")
_CACHE_LIMIT = 20_000
_PLAIN = (dict, MappingProxyType)  # attributes that drop nothing (the SDK's own count what they dropped)


class Origin:
    """The resource and scope of the spans of one `ScopeSpans`, serialized as they arrived (the scope None when
    none came), with their schema URLs: the keys spans are grouped by when written back."""

    __slots__ = ("resource_key", "scope_key")

    def __init__(self, resource_spans: Any, scope_spans: Any) -> None:
        self.resource_key = (resource_spans.resource.SerializeToString(), resource_spans.schema_url)
        self.scope_key = (scope_spans.scope.SerializeToString() if scope_spans.HasField("scope") else None,
                          scope_spans.schema_url)


class MessageSpan(ReadableSpan):
    """A received span that keeps its serialized message (`_message`) and where it came from (`_origin`)."""

    _message: bytes
    _origin: Origin


class Noise(tuple):
    """A span that cannot matter (`core/noise.py`), read only as far as its place in a replay and what forwards it:
    `(trace_id, span_id, parent_id, is_root, start_ns, end_ns, message, origin)`, its first six items its
    `SpanFacts` (so it is read as they are), then its serialized message as the full reader would keep it and its
    `Origin` (both None where nothing is forwarded: `score`). Built by `tuple.__new__(Noise, items)` (in Rust too)."""

    __slots__ = ()

    trace_id = property(lambda self: self[0])
    span_id = property(lambda self: self[1])
    parent_id = property(lambda self: self[2])
    is_root = property(lambda self: self[3])
    start_ns = property(lambda self: self[4])
    end_ns = property(lambda self: self[5])

    def __repr__(self) -> str:
        return f"Noise(trace_id={self[0]:032x}, span_id={self[1]:016x})"


# -- writing ---------------------------------------------------------------------------------------------------

def request_of(spans: Sequence[ReadableSpan]) -> bytes:
    """The serialized `ExportTraceServiceRequest` of `spans`: kept messages as they are, with the core's additions."""
    written = _native_request_of(spans) if _native_request_of is not None else None
    data, others = written if written is not None else _written_request(spans)
    if others:  # requests concatenate: their resource_spans add up
        return data + encode_spans(others).SerializeToString()
    return data


_native_request_of = native.reader("request_of")  # the same, in Rust (native/src/write.rs); None: not modelled there


def _written_request(spans: Iterable[ReadableSpan]) -> tuple[bytes, list[ReadableSpan]]:
    """The request of the spans written from their messages, and the others, which the SDK's encoder writes."""
    groups: dict[tuple[bytes, str], dict[tuple[bytes | None, str], list[bytes]]] = {}
    others: list[ReadableSpan] = []
    for span in spans:
        written = _written(span)
        if written is None:
            others.append(span)
            continue
        data, origin = written
        scopes = groups.get(origin.resource_key)
        if scopes is None:
            scopes = groups[origin.resource_key] = {}
        chunks = scopes.get(origin.scope_key)
        if chunks is None:
            chunks = scopes[origin.scope_key] = []
        chunks.append(data)
    out: list[bytes] = []
    for (resource, resource_schema), scopes in groups.items():
        body = [_field(b"\x0a", resource)]  # ResourceSpans.resource
        for (scope, scope_schema), chunks in scopes.items():
            inner = [_field(b"\x0a", scope)] if scope is not None else []  # ScopeSpans.scope
            for data in chunks:
                inner += (b"\x12", _varint(len(data)), data)  # ScopeSpans.spans
            if scope_schema:
                inner.append(_field(b"\x1a", scope_schema.encode()))
            body.append(_field(b"\x12", b"".join(inner)))  # ResourceSpans.scope_spans
        if resource_schema:
            body.append(_field(b"\x1a", resource_schema.encode()))
        out.append(_field(b"\x0a", b"".join(body)))  # ExportTraceServiceRequest.resource_spans
    return b"".join(out), others


def _written(span: ReadableSpan) -> tuple[bytes, Origin] | None:
    """The span's message with what the core added, or None when it is not (a copy of) a kept one."""
    if type(span) is Noise:  # passed on as it came
        return (span[6], span[7]) if span[6] is not None else None
    original = span
    while type(original) is not MessageSpan:
        original = original.__dict__.get("_original")  # our copies (EnrichedSpan) keep what they copy
        if original is None:
            return None
    if original is span:
        return span._message, span._origin
    mine, theirs = span.__dict__, original.__dict__
    appended = mine.get("_appended")  # set by the enricher when the copy only appended to its original
    if appended is not None and mine["_original"] is original:
        n, m, static = appended
        cached = _static_attributes.get(id(static))  # the catalog-fixed part: one mapping per score, its bytes once
        if cached is None or cached[0] is not static:
            fields = _fields_of(b"\x4a", static.items())  # Span.attributes
            if fields is None:
                return None
            if len(_static_attributes) >= _CACHE_LIMIT:
                _static_attributes.clear()
            cached = _static_attributes[id(static)] = (static, fields)
        fields = _fields_of(b"\x4a", islice(mine["_attributes"].items(), n + len(static), None))  # the per-call part
        if fields is None:
            return None
        parts = [original._message, cached[1], fields]
        return (b"".join(parts), original._origin) if _add_events(parts, mine["_events"][m:]) else None
    for name in _SHARED:
        if mine.get(name) is not theirs[name]:
            return None
    added = [original._message]
    attrs, base = mine.get("_attributes"), theirs["_attributes"]
    if attrs is not base:
        n = len(base)  # the copy's first n attributes must be the original's, as they were; the rest are added
        if (type(attrs) is not dict or len(attrs) < n or list(islice(attrs, n)) != list(base)
                or not all(map(is_, islice(attrs.values(), n), base.values()))):
            return None
        fields = _fields_of(b"\x4a", islice(attrs.items(), n, None))  # Span.attributes
        if fields is None:
            return None
        added.append(fields)
    events, own = mine.get("_events"), theirs["_events"]
    if events is not own:
        n = len(own)
        if len(events) < n or any(a is not b for a, b in zip(events, own)) or not _add_events(added, events[n:]):
            return None
    return b"".join(added), original._origin


def _add_events(parts: list[bytes], events: Sequence[Any]) -> bool:
    """Appends the events as `Span.events` fields; False when one cannot be written here (the SDK then encodes the span)."""
    for event in events:
        data = _event_bytes(event)
        if data is None:
            return False
        parts += (b"\x5a", _varint(len(data)), data)  # Span.events
    return True


def _event_bytes(event: Any) -> bytes | None:
    if type(event) is Event and type(event._attributes) in _PLAIN:  # the SDK's fields (its properties cost calls)
        timestamp, name, attributes = event._timestamp, event._name, event._attributes
    elif event.dropped_attributes:
        return None
    else:
        timestamp, name, attributes = event.timestamp, event.name, event.attributes
    out = bytearray()
    if timestamp:
        out += b"\x09" + timestamp.to_bytes(8, "little")  # Event.time_unix_nano, fixed64
    if name:
        out += _field(b"\x12", name.encode())
    if attributes:
        cached = _event_attributes.get(id(attributes))  # the core's evaluation events share one mapping per score
        if cached is not None and cached[0] is attributes:
            out += cached[1]
        else:
            fields = _fields_of(b"\x1a", attributes.items())  # Event.attributes
            if fields is None:
                return None
            if type(attributes) is MappingProxyType:  # read-only: its bytes stay right while it lives (held here)
                if len(_event_attributes) >= _CACHE_LIMIT:
                    _event_attributes.clear()
                _event_attributes[id(attributes)] = (attributes, fields)
            out += fields
    return bytes(out)


_event_attributes: dict[int, tuple[Any, bytes]] = {}
_static_attributes: dict[int, tuple[Any, bytes]] = {}  # by the enricher's catalog-fixed attributes (never changed)


def _fields_of(tag: bytes, items: Iterable[tuple[str, Any]]) -> bytes | None:
    """Attributes as `KeyValue` fields under `tag`, as the SDK's encoder writes them; None if one cannot be.
    Cached by key, then value (most of ours repeat), its type checked on a hit: 1, 1.0 and True are equal keys.
    Only scalars whose equal values have equal bytes are cached: not 0.0 (equal to -0.0), nor a tuple ((1,), (1.0,))."""
    by_key = _fields[tag]
    parts = []
    for key, value in items:
        values = by_key.get(key)
        if values is None:
            values = by_key[key] = {}
        try:
            hit = values.get(value)
        except TypeError:  # unhashable: a list or dict value
            hit = values = None
        kind = type(value)
        if hit is not None and hit[0] is kind:
            parts.append(hit[1])
            continue
        kv = _kv_bytes(key, value)
        if kv is None:
            return None
        field = _field(tag, kv)
        if values is not None and kind in _CACHED_TYPES and (value or kind is not float):
            if _cached[0] >= _CACHE_LIMIT:
                for cache in _fields.values():
                    cache.clear()
                _cached[0] = 0
            values[value] = (kind, field)
            _cached[0] += 1
        parts.append(field)
    return b"".join(parts)


_fields: dict[bytes, dict[str, dict[Any, tuple[type, bytes]]]] = {b"\x4a": {}, b"\x1a": {}}  # Span, Event attributes
_cached = [0]  # values cached in _fields
_CACHED_TYPES = (str, int, bool, float)


def _kv_bytes(key: str, value: Any) -> bytes | None:
    """One `KeyValue` as the SDK's encoder writes it; None if it cannot (the SDK's encoder then decides: it logs).
    The scalars most of ours are (text, flags, counts, scores) are written here, the SDK's way, five times faster
    than building its message: new values (durations, costs) miss the cache on every span."""
    kind = type(value)
    try:
        if kind is str:
            text = value.encode()
            data = b"\x0a" + _varint(len(text)) + text  # AnyValue.string_value
        elif kind is float:
            data = _DOUBLE + _pack_double(value)  # AnyValue.double_value, fixed64
        elif kind is bool:
            data = b"\x10\x01" if value else b"\x10\x00"  # AnyValue.bool_value
        elif kind is int and _INT64_MIN <= value <= _INT64_MAX:
            data = b"\x18" + _varint(value & _UINT64)  # AnyValue.int_value: a negative one as 10 bytes, as int64
        else:
            return _encode_key_value(key, value).SerializeToString()
        name = key.encode()
    except Exception:  # noqa: BLE001
        return None
    head = b"\x0a" + _varint(len(name)) + name if name else b""  # KeyValue.key (proto3: an empty one is not written)
    return head + b"\x12" + _varint(len(data)) + data  # KeyValue.value


_DOUBLE = b"\x21"
_pack_double = struct.Struct("<d").pack
_INT64_MIN, _INT64_MAX, _UINT64 = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1


def _field(tag: bytes, data: bytes | bytearray) -> bytes:
    """A length-delimited field: its tag, the length as a varint, the bytes."""
    return tag + _varint(len(data)) + data


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))


def _varint(n: int) -> bytes:
    if n < 0x80:
        return _ONE_BYTE[n]
    if n < 0x4000:
        return bytes((n & 0x7F | 0x80, n >> 7))
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)

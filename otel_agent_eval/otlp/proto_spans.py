"""Recorded spans in OTLP protobuf (`ExportTraceServiceRequest`) back into `ReadableSpan`s.

The messages are parsed with opentelemetry-proto (installed with the OTLP exporter); each
span becomes the `ReadableSpan` the SDK would have built, sharing its resource and scope
with its neighbours. One bad span is skipped and counted, its neighbours are kept.

Parsing (in C) and building the spans (in Python, most of the cost) are two steps, so a
receiver can count a request's spans and refuse it before building any (`parsed`,
`span_count`, `spans_of_request`). The spans are built field by field as
`ReadableSpan.__init__` stores them, without its keyword call or `SpanContext`'s checks
(the ids are checked here), reading each upb field once.

The native reader (`native/`, Rust, built by the install where a Rust toolchain is present) reads the
same bytes into the same spans about five times faster; it runs only on bytes checked as upb checks them
and hands back (None) what it does not model as upb does, which this module then reads (`native.py`).
Where it is in use, the bytes are checked and their spans counted natively too (`checked`: the one parse
of a request, `native/src/check.rs`, with the installed schema), and upb parses only what that refuses
(for its words) or what the native reader hands back.

    >>> spans, problems = spans_of_message(data)
"""
from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.internal import api_implementation
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.trace.span import DEFAULT_TRACE_OPTIONS, DEFAULT_TRACE_STATE

from . import native
from .json_spans import HAS_IS_REMOTE, IS_REMOTE, KINDS, MAX_DEPTH, UNSET, SpanProblem
from .messages import MessageSpan, Origin

__all__ = ["checked", "parsed", "span_count", "spans_of_message", "spans_of_request"]

_OK = Status(StatusCode.OK)  # immutable: shared, as UNSET is
_ERROR = StatusCode.ERROR
_KINDS = tuple(KINDS[n] for n in range(6))
_FLAGS = tuple(TraceFlags(n) for n in range(256))
_REMOTE = HAS_IS_REMOTE | IS_REMOTE
_SCALARS = frozenset(("string_value", "int_value", "bool_value", "double_value", "bytes_value"))
_new_tuple = tuple.__new__
_new = object.__new__


_native = native.reader("spans_of_message")


def _counter_schema(root: Any) -> tuple[list[list[tuple[int, int, int]]], tuple[int, int]]:
    """The installed schema of the message `root` as `native/src/check.rs` takes it: per message, its fields as
    (number, kind, sub-message index); and the field counted (ScopeSpans.spans). Every `string` is checked as UTF-8
    (upb checks proto3's; were one not checked there, a request would only be handed to upb), and what the checker
    does not model (groups, repeated scalars, which may be packed) hands a request that holds it to upb."""
    index: dict[str, int] = {}
    order: list[Any] = []

    def number_of(descriptor: Any) -> int:
        if descriptor.full_name not in index:
            index[descriptor.full_name] = len(order)
            order.append(descriptor)
        return index[descriptor.full_name]

    number_of(root)
    messages: list[list[tuple[int, int, int]]] = []
    while len(messages) < len(order):
        fields = []
        for field in order[len(messages)].fields:
            kind = _WIRE_KINDS.get(field.type, _UNMODELLED)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                fields.append((field.number, kind, number_of(field.message_type)))
                continue
            if field.is_repeated and field.type not in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
                kind = _UNMODELLED
            fields.append((field.number, kind, 0))
        messages.append(fields)
    scope_spans = root.fields_by_name["resource_spans"].message_type.fields_by_name["scope_spans"].message_type
    return messages, (index[scope_spans.full_name], scope_spans.fields_by_name["spans"].number)


_UNMODELLED = 99
_WIRE_KINDS = {
    **dict.fromkeys((FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_INT32,
                     FieldDescriptor.TYPE_BOOL, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_ENUM,
                     FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SINT64), 0),
    **dict.fromkeys((FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64), 1),
    **dict.fromkeys((FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32), 5),
    FieldDescriptor.TYPE_BYTES: 2, FieldDescriptor.TYPE_STRING: 9, FieldDescriptor.TYPE_MESSAGE: 11,
}


def _span_counter() -> Any:
    """The native checker, where the native reader is in use and protobuf parses with upb (whose rules it follows)."""
    counter = native.reader("SpanCounter")
    if counter is None or api_implementation.Type() != "upb":
        return None
    return counter(*_counter_schema(ExportTraceServiceRequest.DESCRIPTOR))


_counter = _span_counter()


def checked(data: bytes) -> int | None:
    """The spans of a serialized `ExportTraceServiceRequest`, its bytes checked as upb's parse checks them, without
    parsing it into a message; None where upb must parse it (it refuses the bytes, or no native checker is in use)."""
    return _counter(data) if _counter is not None else None


def spans_of_message(data: bytes, *, keep: bool = False, noise: list[str] | None = None) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of one serialized `ExportTraceServiceRequest`, and why any were skipped.

    With `keep`, spans keep their serialized messages, to be forwarded as they came (`messages.MessageSpan`).
    `noise`: see `spans_of_request`. Raises `SpanProblem` when the bytes are not such a message.
    """
    return spans_of_request(None if checked(data) is not None else parsed(data), keep=keep, data=data, noise=noise)


def parsed(data: bytes) -> Any:
    """The `ExportTraceServiceRequest` in `data` (parsed in C); `SpanProblem` when it is not one."""
    try:
        return ExportTraceServiceRequest.FromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise SpanProblem(f"not an OTLP ExportTraceServiceRequest ({exc})") from None


def span_count(request: Any) -> int:
    """How many spans a parsed request holds, read or not."""
    return sum(len(scope_entry.spans) for entry in request.resource_spans for scope_entry in entry.scope_spans)


def spans_of_request(request: Any, *, keep: bool = False, data: bytes | None = None,
                     noise: list[str] | None = None) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of a parsed `ExportTraceServiceRequest` (`parsed`), and why any were skipped; given `data`, the bytes
    it was parsed from, the native reader reads those when it is in use (the same spans). `request` may be None
    for bytes `checked` accepted: upb parses them only if the native reader hands them back. With `keep` and `noise`
    (`core.noise.pipeline_keys`), the native reader passes a span that cannot matter as a `messages.Noise`, built
    no further (`serve`'s fast path); this reader builds every span."""
    if data is not None and _native is not None:
        read = _native(data, keep, noise if keep else None)
        if read is not None:
            return read
    if request is None:
        request = parsed(data)
    spans: list[ReadableSpan] = []
    problems: list[str] = []
    for entry in request.resource_spans:
        resource = Resource(attributes(entry.resource.attributes), entry.schema_url or None)
        for scope_entry in entry.scope_spans:
            scope = _scope(scope_entry)
            origin = Origin(entry, scope_entry) if keep else None
            for item in scope_entry.spans:
                try:
                    spans.append(_span(item, resource, scope, origin))
                except (SpanProblem, ValueError, TypeError, OverflowError) as exc:
                    problems.append(str(exc))
    return spans, problems


def _span(item: Any, resource: Resource, scope: InstrumentationScope | None, origin: Origin | None) -> ReadableSpan:
    raw = item.trace_id
    trace_id = int.from_bytes(raw, "big")
    if len(raw) != 16 or not trace_id:
        _id(raw, 16, "traceId")
    raw = item.span_id
    span_id = int.from_bytes(raw, "big")
    if len(raw) != 8 or not span_id:
        _id(raw, 8, "spanId")
    flags = item.flags
    state = item.trace_state
    context = _new_tuple(SpanContext, (trace_id, span_id, False, _FLAGS[flags & 0xFF],
                                       TraceState.from_header([state]) if state else DEFAULT_TRACE_STATE, True))
    parent = None
    written = HAS_IS_REMOTE  # the span flags as the SDK's encoder writes them
    raw = item.parent_span_id
    if raw:
        parent_id = int.from_bytes(raw, "big")
        if len(raw) != 8 or not parent_id:
            _id(raw, 8, "parentSpanId")
        remote = flags & _REMOTE == _REMOTE
        parent = _new_tuple(SpanContext, (trace_id, parent_id, remote, DEFAULT_TRACE_OPTIONS, DEFAULT_TRACE_STATE, True))
        if remote:
            written = _REMOTE
    status = item.status
    code = status.code
    if code == 1:
        status = _OK
    elif code == 2:
        status = Status(_ERROR, status.message or None)
    else:
        status = UNSET
    messages = item.attributes
    attrs = attributes(messages)
    events, links = item.events, item.links
    kind = item.kind
    span = _new(ReadableSpan if origin is None else MessageSpan)
    span.__dict__ = {
        "_name": item.name, "_context": context, "_kind": _KINDS[kind] if 0 <= kind < 6 else SpanKind.INTERNAL,
        "_instrumentation_info": None, "_instrumentation_scope": scope, "_parent": parent,
        "_start_time": item.start_time_unix_nano or None, "_end_time": item.end_time_unix_nano or None,
        "_attributes": attrs,
        "_events": tuple(Event(e.name, attributes(e.attributes), e.time_unix_nano or None) for e in events) if events else (),
        "_links": tuple(Link(SpanContext(_id(link.trace_id, 16, "link traceId"), _id(link.span_id, 8, "link spanId"),
                                         is_remote=True), attributes(link.attributes)) for link in links) if links else (),
        "_resource": resource, "_status": status,
    }
    if origin is not None:
        if len(messages) == len(attrs):  # else a key repeats or a value is empty: what the core adds could collide
            data = item.SerializeToString()
            if flags != written:  # the last value of a field wins: the flags as the SDK writes them
                data += b"\x85\x01" + written.to_bytes(4, "little")
            if not item.HasField("status"):  # the SDK writes one always, empty when unset
                data += b"\x7a\x00"
            span._message, span._origin = data, origin
        else:
            span.__class__ = ReadableSpan
    return span


def attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind in _SCALARS:
            out[kv.key] = getattr(value, kind)
        elif kind is not None:
            value = any_value(value, depth)
            if value is not None:
                out[kv.key] = value
    return out


def any_value(value: Any, depth: int = 0) -> Any:
    """An `AnyValue` as the Python value the SDK holds (arrays as tuples, kvlists as dicts); None if empty."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        if depth >= MAX_DEPTH:
            return None
        out = []
        for item in value.array_value.values:
            kind = item.WhichOneof("value")
            if kind in _SCALARS:
                out.append(getattr(item, kind))
            elif kind is not None:
                item = any_value(item, depth + 1)
                if item is not None:
                    out.append(item)
        return tuple(out)
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values, depth + 1) if depth < MAX_DEPTH else None
    return getattr(value, kind)


def _id(raw: bytes, size: int, field: str) -> int:
    if len(raw) != size:
        raise SpanProblem(f"{field} has {len(raw)} bytes, not {size}")
    number = int.from_bytes(raw, "big")
    if number == 0:
        raise SpanProblem(f"{field} is all zeros (invalid)")
    return number


def _scope(entry: Any) -> InstrumentationScope | None:
    if not entry.HasField("scope"):
        return None
    scope = entry.scope
    return InstrumentationScope(scope.name, scope.version or None, entry.schema_url or None, attributes(scope.attributes) or None)

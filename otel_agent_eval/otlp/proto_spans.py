"""Recorded spans in OTLP protobuf (`ExportTraceServiceRequest`) back into `ReadableSpan`s.

The messages are parsed with opentelemetry-proto (installed with the OTLP exporter); each
span becomes the `ReadableSpan` the SDK would have built, sharing its resource and scope
with its neighbours. One bad span is skipped and counted, its neighbours are kept.

    >>> spans, problems = spans_of_message(data)
"""
from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from .json_spans import HAS_IS_REMOTE, IS_REMOTE, KINDS, MAX_DEPTH, STATUS_CODES, UNSET, SpanProblem
from .messages import Origin, kept

__all__ = ["spans_of_message"]


def spans_of_message(data: bytes, *, keep: bool = False) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of one serialized `ExportTraceServiceRequest`, and why any were skipped.

    With `keep`, each span that can be forwarded as it came keeps its message (`messages.MessageSpan`).
    Raises `SpanProblem` when the bytes are not such a message.
    """
    try:
        request = ExportTraceServiceRequest.FromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise SpanProblem(f"not an OTLP ExportTraceServiceRequest ({exc})") from None
    spans: list[ReadableSpan] = []
    problems: list[str] = []
    for entry in request.resource_spans:
        resource = Resource(attributes(entry.resource.attributes), entry.schema_url or None)
        for scope_entry in entry.scope_spans:
            scope = _scope(scope_entry)
            origin = Origin(resource, scope) if keep else None
            for item in scope_entry.spans:
                try:
                    span = _span(item, resource, scope)
                    spans.append(span if origin is None else kept(span, item, origin))
                except (SpanProblem, ValueError, TypeError, OverflowError) as exc:
                    problems.append(str(exc))
    return spans, problems


def _span(item: Any, resource: Resource, scope: InstrumentationScope | None) -> ReadableSpan:
    trace_id = _id(item.trace_id, 16, "traceId")
    span_id = _id(item.span_id, 8, "spanId")
    flags = item.flags
    context = SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(flags & 0xFF),
                          trace_state=TraceState.from_header([item.trace_state]) if item.trace_state else None)
    parent = None
    if item.parent_span_id:
        parent = SpanContext(trace_id, _id(item.parent_span_id, 8, "parentSpanId"),
                             is_remote=bool(flags & HAS_IS_REMOTE and flags & IS_REMOTE))
    code = STATUS_CODES.get(item.status.code, StatusCode.UNSET)
    if code is StatusCode.ERROR:
        status = Status(code, item.status.message or None)
    else:
        status = UNSET if code is StatusCode.UNSET else Status(code)
    return ReadableSpan(
        name=item.name, context=context, parent=parent, resource=resource,
        attributes=attributes(item.attributes),
        events=tuple(Event(e.name, attributes(e.attributes), e.time_unix_nano or None) for e in item.events),
        links=tuple(Link(SpanContext(_id(link.trace_id, 16, "link traceId"), _id(link.span_id, 8, "link spanId"), is_remote=True),
                         attributes(link.attributes)) for link in item.links),
        kind=KINDS.get(item.kind, SpanKind.INTERNAL),
        status=status,
        start_time=item.start_time_unix_nano or None,
        end_time=item.end_time_unix_nano or None,
        instrumentation_scope=scope,
    )


def attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in items:
        value = any_value(kv.value, depth)
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
        return tuple(v for v in (any_value(item, depth + 1) for item in value.array_value.values) if v is not None)
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

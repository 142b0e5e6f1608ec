"""Recorded spans in JSON back into `ReadableSpan`s: OTLP/JSON requests, OTLP/JSON spans, and the SDK's `to_json()`.

The Collector's `file` exporter writes one `ExportTraceServiceRequest` per line in OTLP/JSON:
lowerCamelCase fields, trace and span ids as hex, times as decimal strings of nanoseconds,
enums as numbers, attribute values as `AnyValue` objects. Protobuf's own JSON mapping
(`MessageToJson`) differs only in base64 ids and enum names; both are read, as are
snake_case field names. Each span is checked on its own: one bad span is skipped and
counted (`SpanProblem`), its neighbours are kept.

    >>> spans, problems = spans_of_record(json.loads(line))
"""
from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.trace.span import DEFAULT_TRACE_OPTIONS, DEFAULT_TRACE_STATE

__all__ = ["SpanProblem", "any_value", "attributes", "otlp_id", "otlp_span", "sdk_json_span", "spans_of_record",
           "spans_of_request"]

HAS_IS_REMOTE, IS_REMOTE = 0x100, 0x200  # OTLP SpanFlags: whether the parent is known remote, and whether it is
MAX_DEPTH = 16  # nesting of array/kvlist attribute values read; deeper values are dropped as unreadable
OTHER_SIGNALS = {"resourceMetrics": "metrics", "resource_metrics": "metrics", "resourceLogs": "logs",
                 "resource_logs": "logs", "resourceProfiles": "profiles", "resource_profiles": "profiles"}

# OTLP numbers its enums from UNSPECIFIED = 0; the SDK's SpanKind starts at INTERNAL = 0.
KINDS = {0: SpanKind.INTERNAL, 1: SpanKind.INTERNAL, 2: SpanKind.SERVER, 3: SpanKind.CLIENT, 4: SpanKind.PRODUCER,
         5: SpanKind.CONSUMER, "SPAN_KIND_UNSPECIFIED": SpanKind.INTERNAL, "SPAN_KIND_INTERNAL": SpanKind.INTERNAL,
         "SPAN_KIND_SERVER": SpanKind.SERVER, "SPAN_KIND_CLIENT": SpanKind.CLIENT, "SPAN_KIND_PRODUCER": SpanKind.PRODUCER,
         "SPAN_KIND_CONSUMER": SpanKind.CONSUMER}
STATUS_CODES = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR, "STATUS_CODE_UNSET": StatusCode.UNSET,
                "STATUS_CODE_OK": StatusCode.OK, "STATUS_CODE_ERROR": StatusCode.ERROR}
UNSET = Status(StatusCode.UNSET)
JSON_TYPES = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string", list: "array"}


class SpanProblem(ValueError):
    """Why one recorded span (or record) cannot be read; the span is skipped and counted."""


def decode(text: str | bytes) -> Any:
    """JSON text as Python values: orjson (2-3x faster on a Collector batch) where it takes the text, else
    the standard library, whose results and error messages the readers report: NaN, nesting past 1,024
    levels and lone surrogates take that path. (orjson reads an integer past 64 bits as a float; OTLP/JSON
    writes 64-bit integers as strings.)"""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        value = json.loads(text)
    if _SURROGATE_ESCAPE.search(text if isinstance(text, (bytes, bytearray)) else text.encode("utf-8", "surrogatepass")):
        value = _mended(value)
    return value


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # json.loads joins a valid pair: what is left is alone


def _mended(value: Any) -> Any:
    """`value` with every lone surrogate (a `\\ud800` escape, which the standard library reads and UTF-8 cannot
    hold) in its strings and keys replaced by U+FFFD, as a UTF-8 decoder mends bad bytes: the span is kept
    (its ids and times are what it is scored by), and the encoder on the next hop's side never fails on it."""
    def mend(item: Any) -> Any:
        if type(item) is str:
            return item if item.isascii() else _LONE_SURROGATE.sub("\ufffd", item)
        if type(item) is list:
            stack.append(item)
        elif type(item) is dict:
            stack.append(item)
        return item

    root = [value]
    stack: list[Any] = [root]
    while stack:  # no recursion: the standard library reads up to ~1,000 levels
        node = stack.pop()
        if type(node) is list:
            node[:] = [mend(item) for item in node]
        else:
            items = [(mend(key), mend(item)) for key, item in node.items()]
            node.clear()
            node.update(items)
    return root[0]


def spans_of_record(record: Any, noise: Callable[[Any], Any] | None = None) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of one JSON record (a request, a span, or an SDK `to_json()` span), and why any were skipped.
    `noise(span object)`: what stands in for a span of a request that cannot matter, else None (`core/noise.py`).

    Raises `SpanProblem` when the record as a whole is not trace data.
    """
    if not isinstance(record, dict):
        raise SpanProblem(f"not OTLP trace data (a JSON {JSON_TYPES.get(type(record), type(record).__name__)}, not an object)")
    requests = _get(record, "resourceSpans", "resource_spans")
    if requests is not None:
        return spans_of_request(requests, noise)
    for key, signal in OTHER_SIGNALS.items():
        if key in record:
            raise SpanProblem(f"{signal} data, not traces")
    if isinstance(record.get("context"), dict):  # ReadableSpan.to_json()
        return _one(lambda: sdk_json_span(record))
    if "traceId" in record and "id" in record and "spanId" not in record:  # Zipkin v2 names the span's id `id`
        raise SpanProblem("looks like Zipkin JSON, not OTLP trace data: export OTLP (an OTLP exporter, or the Collector "
                          "with a zipkin receiver and a file exporter)")
    if "traceId" in record or "trace_id" in record:  # one OTLP/JSON span per line
        resource = record.get("resource")
        return _one(lambda: otlp_span(record, _resource(resource) if isinstance(resource, dict) else EMPTY_RESOURCE, None))
    keys = ", ".join(sorted(map(str, record))[:5]) or "none"
    raise SpanProblem(f"not OTLP trace data (a JSON object with keys: {keys})")


def spans_of_request(resource_spans: Any, noise: Callable[[Any], Any] | None = None) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of an `ExportTraceServiceRequest`'s `resourceSpans`, each resource and scope shared by its spans;
    with `noise`, what it returns (not None) stands in for a span it read (`spans_of_record`)."""
    spans: list[ReadableSpan] = []
    problems: list[str] = []
    if not isinstance(resource_spans, list):
        raise SpanProblem("resourceSpans is not a list")
    for entry in resource_spans:
        try:
            resource = _resource(_get(entry, "resource") or {}, _get(entry, "schemaUrl", "schema_url"))
            scopes = _get(entry, "scopeSpans", "scope_spans", "instrumentationLibrarySpans") or []
        except (TypeError, ValueError, AttributeError) as exc:
            problems.append(f"unreadable resource: {_why(exc)}")
            continue
        for scope_entry in scopes if isinstance(scopes, list) else ():
            try:
                scope = _scope(_get(scope_entry, "scope", "instrumentationLibrary"), _get(scope_entry, "schemaUrl", "schema_url"))
                items = _get(scope_entry, "spans") or []
            except (TypeError, ValueError, AttributeError) as exc:
                problems.append(f"unreadable scope: {_why(exc)}")
                continue
            for item in items if isinstance(items, list) else ():
                try:
                    if noise is not None and type(item) is dict:
                        light = noise(item)
                        if light is not None:
                            spans.append(light)
                            continue
                    spans.append(otlp_span(item, resource, scope))
                except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
                    problems.append(_why(exc))
    return spans, problems


def otlp_span(item: Mapping[str, Any], resource: Resource, scope: InstrumentationScope | None) -> ReadableSpan:
    """One OTLP/JSON span object as a `ReadableSpan` (raises `SpanProblem` on ids or fields that cannot be read).

    Hot: a million spans in seconds is the aim, so the common spelling (lowerCamelCase) is
    looked up first and the rarer ones only when it is missing, and the span and its contexts
    are built as their constructors would build them from values already checked, without
    their Python-level `__init__`/`__new__` (a third of the cost of reading a span).
    """
    get = item.get
    trace_text, span_text = get("traceId") or get("trace_id"), get("spanId") or get("span_id")
    try:  # otlp_id's common case, inline: hex of the right length (else otlp_id reads it, or says why not)
        trace_id = int(trace_text, 16) if type(trace_text) is str and len(trace_text) == 32 and _hex(trace_text) else 0
        span_id = int(span_text, 16) if type(span_text) is str and len(span_text) == 16 and _hex(span_text) else 0
    except ValueError:
        trace_id = span_id = 0
    if trace_id <= 0 or span_id <= 0:
        trace_id, span_id = otlp_id(trace_text, 16, "traceId"), otlp_id(span_text, 8, "spanId")
    flags = get("flags") or 0
    if type(flags) is not int:
        flags = _int(flags, "flags")
    trace_state = get("traceState") or get("trace_state")
    # SpanContext(trace_id, span_id, False, flags, state): otlp_id's ids are never zero, negative nor too long
    context = _new_tuple(SpanContext, (trace_id, span_id, False, _TRACE_FLAGS[flags & 0xFF],
                                       TraceState.from_header([trace_state]) if trace_state else DEFAULT_TRACE_STATE,
                                       trace_id > 0 and span_id > 0))
    parent_text = get("parentSpanId") or get("parent_span_id")
    parent = None
    if parent_text:
        # A parent in another process is remote (its span is a local root here): OTLP says so in `flags`
        # (the SDK always sets it); without that bit it is taken as local, the OTLP default.
        try:  # otlp_id's common case, inline, as above
            parent_id = int(parent_text, 16) if type(parent_text) is str and len(parent_text) == 16 and _hex(parent_text) else 0
        except ValueError:
            parent_id = 0
        if parent_id <= 0:
            parent_id = otlp_id(parent_text, 8, "parentSpanId")
        parent = _new_tuple(SpanContext, (trace_id, parent_id, flags & _REMOTE_BITS == _REMOTE_BITS, DEFAULT_TRACE_OPTIONS,
                                          DEFAULT_TRACE_STATE, trace_id > 0 and parent_id > 0))
    name = get("name", "")
    if type(name) is not str:
        raise SpanProblem(f"span name is a {type(name).__name__}")
    events, links, status = get("events"), get("links"), get("status")
    span = _new_object(ReadableSpan)
    span.__dict__ = {  # what ReadableSpan.__init__ sets, in its order
        "_name": name, "_context": context, "_kind": KINDS.get(get("kind", 0), SpanKind.INTERNAL),
        "_instrumentation_info": None, "_instrumentation_scope": scope, "_parent": parent,
        "_start_time": _time(get("startTimeUnixNano") or get("start_time_unix_nano")),
        "_end_time": _time(get("endTimeUnixNano") or get("end_time_unix_nano")),
        "_attributes": attributes(get("attributes")),
        "_events": tuple(_event(e) for e in events) if events else (),
        "_links": tuple(_link(link) for link in links) if links else (),
        "_resource": resource, "_status": _status(status) if status else UNSET,
    }
    return span


_new_tuple, _new_object = tuple.__new__, object.__new__


def _hex(text: str) -> bool:
    """Only ASCII letters and digits, so `int(text, 16)` reads hex digits and nothing else (it takes a sign,
    underscores, spaces, a 0x prefix and non-ASCII digits too: a trace id "-0af7..." would read as a negative number)."""
    return text.isascii() and text.isalnum() and "x" not in text and "X" not in text  # nor a 0x prefix
_TRACE_FLAGS = [TraceFlags(i) for i in range(256)]
_REMOTE_BITS = HAS_IS_REMOTE | IS_REMOTE


def otlp_id(value: Any, size: int, field: str) -> int:
    """A trace or span id: hex as OTLP/JSON writes it, or base64 as protobuf's JSON mapping does; never zero."""
    if not isinstance(value, str) or not value:
        raise SpanProblem(f"{field} missing")
    try:
        if len(value) == 2 * size:
            if not _hex(value):
                raise ValueError
            number = int(value, 16)
        else:
            raw = base64.b64decode(value, validate=True)
            if len(raw) != size:
                raise ValueError
            number = int.from_bytes(raw, "big")
    except (ValueError, binascii.Error):
        raise SpanProblem(f"{field} {value[:40]!r} is not a {size}-byte id in hex or base64") from None
    if number == 0:
        raise SpanProblem(f"{field} is all zeros (invalid)")
    return number


def attributes(items: Any, depth: int = 0) -> dict[str, Any]:
    """OTLP `KeyValue`s as a plain dict (the pipeline reads a dict fastest); later duplicates win."""
    out: dict[str, Any] = {}
    if not items:
        return out
    if not isinstance(items, list):
        raise SpanProblem("attributes are not a list")
    for kv in items:
        key = kv.get("key")
        if type(key) is not str:
            raise SpanProblem(f"an attribute key is a {JSON_TYPES.get(type(key), type(key).__name__)}, not a string")
        value = kv.get("value")
        if type(value) is dict:  # the common cases, without the dispatch
            text = value.get("stringValue")
            if type(text) is str:
                out[key] = text
                continue
            text = value.get("intValue")
            if type(text) is str and len(value) == 1 and len(text) < 19 and text.isascii() and text.isdigit():
                out[key] = int(text)
                continue
        try:
            value = any_value(value, depth)
        except SpanProblem as exc:
            raise SpanProblem(f"attribute {key[:60]!r}: {exc}") from None
        if value is not None:
            out[key] = value
    return out


def any_value(value: Any, depth: int = 0) -> Any:
    """An OTLP `AnyValue` as the Python value the SDK holds (arrays as tuples, kvlists as dicts); None if empty
    (no value is legal OTLP). `SpanProblem` for what is not an AnyValue (a plain JSON value, an unknown field),
    as for a value of the wrong type: the span is refused with the reason rather than kept without it."""
    if value is None:
        return None
    if type(value) is not dict:
        raise SpanProblem(f"a JSON {JSON_TYPES.get(type(value), type(value).__name__)}, not an AnyValue object")
    for key, raw in value.items():  # one key in a well-formed AnyValue
        read = _VALUE_READERS.get(key)
        if read is not None:
            return read(raw, depth)
    if value:
        raise SpanProblem(f"unknown AnyValue field {str(next(iter(value)))[:40]!r}")
    return None


def _array(raw: Any, depth: int) -> tuple[Any, ...] | None:
    if depth >= MAX_DEPTH or not isinstance(raw, dict):
        return None
    out = []
    items = raw.get("values") or ()
    if type(items) is not list:
        raise SpanProblem("arrayValue values are not a list")
    for item in items:
        text = item.get("stringValue") if type(item) is dict and len(item) == 1 else None  # the common case
        value = text if type(text) is str else any_value(item, depth + 1)
        if value is not None:
            out.append(value)
    return tuple(out)


def _kvlist(raw: Any, depth: int) -> dict[str, Any] | None:
    if depth >= MAX_DEPTH or not isinstance(raw, dict):
        return None
    return attributes(raw.get("values"), depth + 1)


def _double(raw: Any, depth: int) -> float:
    if isinstance(raw, str):  # protobuf JSON spells the non-finite ones "NaN", "Infinity", "-Infinity"
        return float(raw)
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise SpanProblem(f"doubleValue is a {type(raw).__name__}")
    return float(raw)


def _text(raw: Any, depth: int) -> str:
    if not isinstance(raw, str):
        raise SpanProblem(f"stringValue is a {type(raw).__name__}")
    return raw


def _bool(raw: Any, depth: int) -> bool:
    if not isinstance(raw, bool):
        raise SpanProblem(f"boolValue is a {type(raw).__name__}")
    return raw


def _bytes(raw: Any, depth: int) -> bytes:
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise SpanProblem("bytesValue is not base64") from None


_VALUE_READERS: dict[str, Callable[[Any, int], Any]] = {
    "stringValue": _text, "string_value": _text,
    "intValue": lambda raw, depth: _int64(raw, "intValue"), "int_value": lambda raw, depth: _int64(raw, "int_value"),
    "doubleValue": _double, "double_value": _double,
    "boolValue": _bool, "bool_value": _bool,
    "arrayValue": _array, "array_value": _array,
    "kvlistValue": _kvlist, "kvlist_value": _kvlist,
    "bytesValue": _bytes, "bytes_value": _bytes,
}


def _int(raw: Any, field: str) -> int:
    """An int64 as OTLP/JSON writes it: a decimal string, or a JSON number."""
    if isinstance(raw, bool):
        raise SpanProblem(f"{field} is a bool")
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise SpanProblem(f"{field} {str(raw)[:40]!r} is not an integer") from None


def _int64(raw: Any, field: str) -> int:
    """An AnyValue's int: one the OTLP encoder can write (an int64), else the span is refused with why."""
    value = _int(raw, field)
    if not -(1 << 63) <= value < 1 << 63:
        raise SpanProblem(f"{field} {str(raw)[:40]!r} is out of the int64 range")
    return value


def _time(raw: Any) -> int | None:
    """Nanoseconds since the epoch; None when absent (the pipeline counts such a span as malformed, like live)."""
    if type(raw) is str and raw:  # how OTLP/JSON writes a fixed64 (`int` reads a str as `_int` would, sooner)
        try:
            value = int(raw)
        except ValueError:
            raise SpanProblem(f"time {raw[:40]!r} is not an integer") from None
    elif not raw:
        return None
    else:
        value = _int(raw, "time")
    if not 0 <= value < 1 << 64:
        raise SpanProblem(f"time {str(raw)[:40]!r} is out of range (a fixed64: nanoseconds since the epoch)")
    return value or None


def _status(raw: Any) -> Status:
    if not raw:
        return UNSET
    code = STATUS_CODES.get(raw.get("code", 0), StatusCode.UNSET)
    if code is StatusCode.ERROR:
        message = raw.get("message")
        return Status(code, message if isinstance(message, str) and message else None)
    return UNSET if code is StatusCode.UNSET else Status(code)


def _event(raw: Mapping[str, Any]) -> Event:
    name = raw.get("name", "")
    return Event(name if isinstance(name, str) else str(name), attributes(raw.get("attributes")),
                 _time(_get(raw, "timeUnixNano", "time_unix_nano")))


def _link(raw: Mapping[str, Any]) -> Link:
    context = SpanContext(otlp_id(_get(raw, "traceId", "trace_id"), 16, "link traceId"),
                          otlp_id(_get(raw, "spanId", "span_id"), 8, "link spanId"), is_remote=True)
    return Link(context, attributes(raw.get("attributes")))


EMPTY_RESOURCE = Resource({})


def _resource(raw: Any, schema_url: Any = None) -> Resource:
    if not isinstance(raw, dict):
        raise SpanProblem("resource is not an object")
    attrs = raw.get("attributes")
    if isinstance(attrs, dict):  # the SDK's to_json() writes a plain object
        return Resource(attrs, raw.get("schema_url") or None)
    return Resource(attributes(attrs), schema_url if isinstance(schema_url, str) and schema_url else None)


def _scope(raw: Any, schema_url: Any) -> InstrumentationScope | None:
    if not raw:
        return None
    name = raw.get("name", "")
    version = raw.get("version")
    return InstrumentationScope(name if isinstance(name, str) else str(name), version if isinstance(version, str) and version else None,
                                schema_url if isinstance(schema_url, str) and schema_url else None,
                                attributes(raw.get("attributes")) or None)


# -- the SDK's own JSON (`ReadableSpan.to_json()`, e.g. ConsoleSpanExporter), one span per line ----------------

SDK_KINDS = {f"SpanKind.{kind.name}": kind for kind in SpanKind}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def sdk_json_span(record: Mapping[str, Any]) -> ReadableSpan:
    """A span as `ReadableSpan.to_json()` writes it: hex ids with 0x, ISO times to the microsecond.

    The SDK's JSON drops the nanoseconds and whether the parent was remote: durations are
    read to the microsecond, and a parent is taken as local.
    """
    context = record["context"]
    trace_id = _sdk_id(context.get("trace_id"), "trace_id")
    span_id = _sdk_id(context.get("span_id"), "span_id")
    parent_id = record.get("parent_id")
    status = record.get("status") or {}
    code = getattr(StatusCode, str(status.get("status_code", "UNSET")), StatusCode.UNSET)
    resource = record.get("resource")
    name = record.get("name", "")
    attrs = record.get("attributes") or {}
    if not isinstance(attrs, dict) or not isinstance(name, str):
        raise SpanProblem("name or attributes of an unexpected type")
    return ReadableSpan(
        name=name,
        context=SpanContext(trace_id, span_id, is_remote=False),
        parent=SpanContext(trace_id, _sdk_id(parent_id, "parent_id"), is_remote=False) if parent_id else None,
        resource=_resource(resource) if isinstance(resource, dict) else EMPTY_RESOURCE,
        attributes={k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()},
        events=tuple(Event(str(e.get("name", "")), e.get("attributes") or {}, _iso_ns(e.get("timestamp")))
                     for e in record.get("events") or ()),
        kind=SDK_KINDS.get(record.get("kind"), SpanKind.INTERNAL),
        status=Status(code, status.get("description")) if code is StatusCode.ERROR else (UNSET if code is StatusCode.UNSET else Status(code)),
        start_time=_iso_ns(record.get("start_time")),
        end_time=_iso_ns(record.get("end_time")),
    )


def _sdk_id(value: Any, field: str) -> int:
    try:
        number = int(value, 16)
    except (TypeError, ValueError):
        raise SpanProblem(f"{field} {str(value)[:40]!r} is not a hex id") from None
    if number <= 0:
        raise SpanProblem(f"{field} is invalid")
    return number


def _iso_ns(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise SpanProblem(f"time {value[:40]!r} is not ISO 8601") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - _EPOCH
    return ((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds) * 1_000


# -- helpers -----------------------------------------------------------------------------------------------

def _get(mapping: Any, *keys: str) -> Any:
    """The first of `keys` present (lowerCamelCase first, then the proto field names)."""
    for key in keys:
        value = mapping.get(key)
        if value is not None:
            return value
    return None


def _one(read: Callable[[], ReadableSpan]) -> tuple[list[ReadableSpan], list[str]]:
    try:
        return [read()], []
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        return [], [_why(exc)]


def _why(exc: BaseException) -> str:
    if isinstance(exc, SpanProblem):
        return str(exc)
    if isinstance(exc, KeyError):
        return f"field {exc} missing"
    return f"unexpected value ({type(exc).__name__}: {str(exc)[:120]})"


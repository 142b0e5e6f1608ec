"""One export request into one sub-request per worker, by trace id, so every span of a trace meets the same worker.

`serve --workers N` routes a span to worker `trace_id % N`. Splitting never builds SDK spans:
protobuf is parsed by the generated message (upb, in C) and one `ExportTraceServiceRequest`
per worker is built with the resource and scope of the spans it takes (where the native reader is in use, the bytes
are checked as upb checks them, `proto_spans.checked`, and `split_by_trace` frames the same requests from the spans'
bytes, without a upb parse); JSON is read with
orjson and written back per worker. The worker decodes its part with the same readers as a
single process (`payload.py`), so a span reads the same either way, and a span that cannot
be read is reported by the worker in the same words. Whatever cannot be routed (an id that
is not 16 bytes, a resource or scope that cannot be read) goes to worker 0, whole, which
reports it. A request whose spans all go to one worker is passed on as it came.

    >>> parts = split_body(data, PROTOBUF, workers=4)   # [(worker, body, spans), ...]

With `room`, the spans per worker are checked against it before any part is built: a request
that cannot be taken (the usual case at full load) costs a parse and a count (`NoRoom`).
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ..otlp import native
from ..otlp.json_spans import _get, _resource, _scope, otlp_id
from ..otlp.proto_spans import checked
from .payload import PROTOBUF, PayloadError

__all__ = ["NoRoom", "Part", "split_body"]

Part = tuple[int, bytes, int]  # (worker, body of the sub-request, spans in it)
_SCOPE_KEYS = ("scopeSpans", "scope_spans", "instrumentationLibrarySpans")


class NoRoom(Exception):
    """The workers have no room for a request's spans now (`spans`: how many it holds)."""

    def __init__(self, spans: int) -> None:
        super().__init__(f"no room for {spans} spans")
        self.spans = spans


def split_body(data: bytes, kind: str, workers: int, *, room: Callable[[list[int]], bool] | None = None) -> list[Part]:
    """`data` (already inflated) as one part per worker that gets spans; PayloadError when it cannot be read at all,
    `NoRoom` when `room(spans per worker)` says no."""
    if kind == PROTOBUF:
        return split_protobuf(data, workers, room)
    return split_json(data, workers, room)


def _check(room: Callable[[list[int]], bool] | None, counts: list[int]) -> None:
    if room is not None and not room(counts):
        raise NoRoom(sum(counts))


def split_protobuf(data: bytes, workers: int, room: Callable[[list[int]], bool] | None = None) -> list[Part]:
    if _native_split is not None and checked(data) is not None:  # checked as upb parses: the same parts, no upb parse
        counts = _native_counts(data, workers)  # (None: not modelled there)
        if counts is not None:
            _check(room, counts)
            parts = _native_split(data, workers)
            if parts is not None:
                return parts
    try:
        request = ExportTraceServiceRequest.FromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as exc:  # the words of otlp/proto_spans.py
        raise PayloadError(f"not an OTLP ExportTraceServiceRequest ({exc})") from None
    except RecursionError:
        raise PayloadError("not an OTLP ExportTraceServiceRequest (nested too deeply)") from None
    routes: list[list[list[int]]] = []  # per resource, per scope: each span's worker
    counts = [0] * workers
    for entry in request.resource_spans:
        per_scope = []
        for scope_entry in entry.scope_spans:
            targets = [_worker_of_bytes(span.trace_id, workers) for span in scope_entry.spans]
            for w in targets:
                counts[w] += 1
            per_scope.append(targets)
        routes.append(per_scope)
    _check(room, counts)
    used = [w for w in range(workers) if counts[w]]
    if len(used) <= 1:
        return [(used[0], data, counts[used[0]])] if used else []
    out = {w: ExportTraceServiceRequest() for w in used}
    for entry, per_scope in zip(request.resource_spans, routes):
        made: dict[int, Any] = {}
        for scope_entry, targets in zip(entry.scope_spans, per_scope):
            scopes: dict[int, Any] = {}
            for span, w in zip(scope_entry.spans, targets):
                target = scopes.get(w)
                if target is None:
                    resource = made.get(w)
                    if resource is None:
                        resource = made[w] = out[w].resource_spans.add()
                        if entry.HasField("resource"):
                            resource.resource.CopyFrom(entry.resource)
                        resource.schema_url = entry.schema_url
                    target = scopes[w] = resource.scope_spans.add()
                    if scope_entry.HasField("scope"):
                        target.scope.CopyFrom(scope_entry.scope)
                    target.schema_url = scope_entry.schema_url
                target.spans.append(span)
    return [(w, out[w].SerializeToString(), counts[w]) for w in used]


_native_counts, _native_split = native.reader("spans_per_worker"), native.reader("split_by_trace")


def _worker_of_bytes(trace_id: bytes, workers: int) -> int:
    return int.from_bytes(trace_id, "big") % workers if len(trace_id) == 16 else 0


def split_json(data: bytes, workers: int, room: Callable[[list[int]], bool] | None = None) -> list[Part]:
    try:
        try:
            request, fast = orjson.loads(data), True
        except orjson.JSONDecodeError:  # NaN, deep nesting, lone surrogates: the standard library's path, as `decode`
            request, fast = json.loads(data), False
    except RecursionError:  # the words of payload.json_spans
        raise PayloadError("JSON nested too deeply") from None
    except ValueError as exc:
        raise PayloadError(f"not JSON ({str(exc)[:120]})") from None
    if not isinstance(request, dict):
        raise PayloadError(f"a JSON {type(request).__name__}, not an ExportTraceServiceRequest object")
    resource_spans = request.get("resourceSpans", request.get("resource_spans", []))
    if not isinstance(resource_spans, list):
        raise PayloadError("resourceSpans is not a list")
    per_worker: list[list[Any]] = [[] for _ in range(workers)]
    counts = [0] * workers
    for entry in resource_spans:
        _split_entry(entry, per_worker, counts, workers)
    _check(room, counts)
    used = [w for w in range(workers) if per_worker[w]]
    if len(used) <= 1:
        return [(used[0], data, counts[used[0]])] if used else []
    dump = orjson.dumps if fast else _dumps
    return [(w, dump({"resourceSpans": per_worker[w]}), counts[w]) for w in used]


def _dumps(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()  # lone surrogates escaped, NaN kept: read back as they came


def _split_entry(entry: Any, per_worker: list[list[Any]], counts: list[int], workers: int) -> None:
    """One resource entry, its spans by trace id; what cannot be read goes whole to worker 0, which says why."""
    try:
        _resource(_get(entry, "resource") or {}, _get(entry, "schemaUrl", "schema_url"))
        scopes = _get(entry, "scopeSpans", "scope_spans", "instrumentationLibrarySpans") or []
    except (TypeError, ValueError, AttributeError, RecursionError):
        per_worker[0].append(entry)  # no spans read from it: one problem, counted by the worker
        return
    if not isinstance(scopes, list):
        per_worker[0].append(entry)
        return
    base = {k: v for k, v in entry.items() if k not in _SCOPE_KEYS}
    made: dict[int, list[Any]] = {}
    for scope_entry in scopes:
        try:
            _scope(_get(scope_entry, "scope", "instrumentationLibrary"), _get(scope_entry, "schemaUrl", "schema_url"))
            items = _get(scope_entry, "spans") or []
        except (TypeError, ValueError, AttributeError, RecursionError):
            _scopes_of(0, made, base, per_worker).append(scope_entry)
            continue
        if not isinstance(items, list):
            continue  # no spans, no problem: as the reader does
        scope_base = {k: v for k, v in scope_entry.items() if k != "spans"}
        groups: dict[int, list[Any]] = {}
        for item in items:
            w = _worker_of_item(item, workers)
            groups.setdefault(w, []).append(item)
            counts[w] += 1
        for w, spans in groups.items():
            _scopes_of(w, made, base, per_worker).append({**scope_base, "spans": spans})


def _scopes_of(w: int, made: dict[int, list[Any]], base: dict[str, Any], per_worker: list[list[Any]]) -> list[Any]:
    scopes = made.get(w)
    if scopes is None:
        scopes = made[w] = []
        per_worker[w].append({**base, "scopeSpans": scopes})
    return scopes


def _worker_of_item(item: Any, workers: int) -> int:
    try:
        raw = _get(item, "traceId", "trace_id")
        return otlp_id(raw, 16, "traceId") % workers
    except (TypeError, ValueError, AttributeError):
        return 0

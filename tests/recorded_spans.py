"""Spans recorded from a real framework run, replayed as real SDK spans.

Some frameworks cannot be installed beside this project's test dependencies (their pins clash with
packages the other tests need; see record_frameworks.py). Their runs are recorded once, in a
separate virtual environment, by the framework itself in its default telemetry settings, and kept
as data (recorded_<framework>.py). `replay` plays such a recording through a real SDK
``TracerProvider``: every span is started and ended by the SDK with the recorded name, kind,
parent, attributes, events and status, in the recorded order, with the recorded durations, so a
processor sees the run as it saw it live::

    replay(recorded_strands.SPANS, provider)

`record` turns finished spans into such data.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.trace import SpanKind, Status, StatusCode


def _value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def record(spans: Iterable[ReadableSpan]) -> list[dict[str, Any]]:
    """Finished spans (in end order) as plain data: ids are renumbered, times made relative to the first start."""
    spans = list(spans)
    ids = {s.context.span_id: n for n, s in enumerate(sorted(spans, key=lambda s: s.start_time), 1)}
    origin = min(s.start_time for s in spans)
    return [{
        "id": ids[s.context.span_id],
        "parent": ids.get(s.parent.span_id) if s.parent is not None else None,
        "name": s.name,
        "scope": s.instrumentation_scope.name if s.instrumentation_scope else "",
        "kind": s.kind.name,
        "start": s.start_time - origin,
        "end": s.end_time - origin,
        "status": [s.status.status_code.name, s.status.description],
        "attributes": {k: _value(v) for k, v in (s.attributes or {}).items()},
        "events": [{"name": e.name, "at": e.timestamp - origin, "attributes": {k: _value(v) for k, v in (e.attributes or {}).items()}}
                   for e in s.events],
    } for s in spans]


def replay(recording: Sequence[dict[str, Any]], provider: TracerProvider) -> None:
    """Start and end the recorded spans through `provider`, in the recorded order and tree, timed from now."""
    origin = time.time_ns()
    started: dict[int, Any] = {}
    for data in sorted(recording, key=lambda d: (d["start"], d["id"])):
        parent = started.get(data["parent"]) if data["parent"] is not None else None
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = provider.get_tracer(data["scope"]).start_span(
            data["name"], context=context, kind=SpanKind[data["kind"]], attributes=data["attributes"],
            start_time=origin + data["start"])
        for event in data["events"]:
            span.add_event(event["name"], attributes=event["attributes"], timestamp=origin + event["at"])
        code, description = data["status"]
        if code != "UNSET":
            span.set_status(Status(StatusCode[code], description))
        started[data["id"]] = span
    for data in recording:  # in the recorded end order
        started[data["id"]].end(end_time=origin + data["end"])

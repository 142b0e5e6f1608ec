"""Real SDK spans for tests: a private TracerProvider with an in-memory exporter."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode


def finished_span(
    attributes: Mapping[str, Any] | None = None,
    *,
    name: str = "span",
    duration_ns: int = 250_000_000,
    error: str | None = None,
) -> ReadableSpan:
    """One ended span with these attributes and duration, through the real SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("tests").start_span(name, attributes=attributes, start_time=1_000_000_000)
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=1_000_000_000 + duration_ns)
    provider.shutdown()
    (finished,) = exporter.get_finished_spans()
    return finished

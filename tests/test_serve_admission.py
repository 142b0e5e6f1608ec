"""`serve` admits a request from its span count before building any span: refused requests cost no decode.

The receiver parses a request (in C), counts its spans, reserves room for all of them in
the intake, and only then builds the spans (`Receiving.take`, `Intake.reserve` / `admit`).
Held here: a request that does not fit is refused whole and counted span for span without
being decoded; what a request's unreadable spans reserved is given back; and a request
admitted while the intake stops is still evaluated and forwarded (the intake's thread waits
for the reservations it has granted).
"""
from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from serve_process import local_only

from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.otel.wiring import build_pipeline
from otel_agent_eval.serve import ServeConfig, Service, payload
from otel_agent_eval.serve.intake import Intake
from otel_agent_eval.serve.payload import PROTOBUF


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def tool_spans(n: int) -> list[Any]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        provider.get_tracer("admission").start_span(f"tool {i}", attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "web_search"}).end()
    return list(memory.get_finished_spans())


def body_of(n: int, *, broken: int = 0) -> bytes:
    """A request of `n` tool spans, the last `broken` of them with a trace id of 3 bytes (unreadable)."""
    request = ExportTraceServiceRequest.FromString(encode_spans(tool_spans(n)).SerializeToString())
    spans = request.resource_spans[0].scope_spans[0].spans
    for span in spans[len(spans) - broken:]:
        span.trace_id = b"\x01\x02\x03"
    return request.SerializeToString()


@pytest.fixture
def svc() -> Any:
    service = Service(ServeConfig(grpc_port=None, http_port=None, metrics_port=None, queue_spans=4),
                      settings=Settings(metrics_enabled=False), registry=CollectorRegistry())
    yield service
    service.stop()


def counted(service: Service) -> dict[str, float]:
    return {outcome: service.serve_metrics.span_count(outcome) for outcome in ("accepted", "refused", "invalid")}


def test_a_request_that_does_not_fit_is_refused_from_its_count_without_being_decoded(
        svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    spans_of = payload.Request.spans
    monkeypatch.setattr(payload.Request, "spans", lambda self: built.append(self.count) or spans_of(self))

    answer = svc.receiving.take("http", body_of(5), PROTOBUF)  # 5 spans, room for 4: the queue is empty
    assert answer.kind == "queue_full" and built == [] and len(svc.intake) == 0
    assert counted(svc) == {"accepted": 0, "refused": 5, "invalid": 0}

    # the same with one unreadable span: still 5 spans to hold, refused whole (the old order decoded it, then took 4)
    assert svc.receiving.take("http", body_of(5, broken=1), PROTOBUF).kind == "queue_full" and built == []
    assert counted(svc) == {"accepted": 0, "refused": 10, "invalid": 0}

    answer = svc.receiving.take("http", body_of(4, broken=1), PROTOBUF)  # fits: decoded once, 3 taken, 1 skipped
    assert answer.kind == "accepted" and answer.rejected_spans == 1 and built == [4]
    assert counted(svc) == {"accepted": 3, "refused": 10, "invalid": 1}
    assert svc.drain(10) and len(svc.intake) == 0  # the room the unreadable span reserved was given back
    assert svc.metrics.seen.value == 3


def test_a_request_reserved_before_the_intake_stops_is_still_evaluated_and_forwarded() -> None:
    pipeline, _ = build_pipeline(registry=None, sees_starts=False)
    forwarded: list[Any] = []
    intake = Intake(pipeline, forward=forwarded.extend, limit=8)
    spans = tool_spans(3)
    assert intake.reserve(3) and not intake.reserve(6) and len(intake) == 3  # all or none

    stopper = threading.Thread(target=intake.stop, kwargs={"timeout_s": 30})
    stopper.start()
    intake._worker.join(0.2)  # the intake's thread waits for what it reserved; were it gone, the spans would be lost
    assert intake._worker.is_alive() and not intake.reserve(1)  # stopping: nothing new is reserved
    intake.admit(spans, 3)
    stopper.join(30)
    assert not stopper.is_alive() and len(intake) == 0
    assert {s.context.span_id for s in forwarded} == {s.context.span_id for s in spans}


def test_room_given_back_is_room_again() -> None:
    pipeline, _ = build_pipeline(registry=None, sees_starts=False)
    intake = Intake(pipeline, forward=lambda spans: None, limit=4)
    try:
        assert intake.reserve(4) and not intake.reserve(1)
        intake.release(4)  # a request that turned out unreadable after all
        assert len(intake) == 0 and intake.reserve(4)
        intake.admit([], 4)  # none of its spans was readable
        assert len(intake) == 0 and intake.offer(tool_spans(4)) and intake.drain(10) and len(intake) == 0
    finally:
        intake.stop()


@pytest.mark.parametrize("kind", [PROTOBUF, "application/json"])
def test_with_workers_a_request_is_checked_for_room_per_worker_before_its_parts_are_built(kind: str) -> None:
    from google.protobuf import json_format

    from otel_agent_eval.serve.split import NoRoom, split_body

    data = body_of(40)
    if kind != PROTOBUF:
        data = json_format.MessageToJson(ExportTraceServiceRequest.FromString(data)).encode()
    asked: list[list[int]] = []
    with pytest.raises(NoRoom) as refused:
        split_body(data, kind, 2, room=lambda spans: asked.append(spans) or False)
    assert refused.value.spans == 40 and len(asked) == 1 and sum(asked[0]) == 40 and all(asked[0])

    parts = split_body(data, kind, 2, room=lambda spans: spans == asked[0])  # room: the same parts as without a check
    assert [(w, n) for w, _, n in parts] == [(w, n) for w, _, n in split_body(data, kind, 2)] == list(enumerate(asked[0]))

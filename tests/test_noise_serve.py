"""`serve`'s fast path for spans that cannot matter (core/noise.py): the native reader passes them as their bytes.

The same generated traces (`noise_traces.py`), sent as OTLP/protobuf requests, go through two services that differ
only in the noise keys their reader gets: with them (the fast path) and without (every span built, as before).
Everything that comes out is compared: scored calls, evaluated runs, the Prometheus exposition of both registries,
and the forwarded requests span by span, as bytes (the noise spans' bytes too: the reader writes them as the full
path keeps them). Then the native reader's rule is held against the Python rule on generated spans.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry, generate_latest

from noise_traces import traces
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core.noise import Noise, may_matter, typed_keys
from otel_agent_eval.core.recognize import span_facts
from otel_agent_eval.otlp import native
from otel_agent_eval.otlp.messages import MessageSpan, request_of
from otel_agent_eval.otlp.proto_spans import parsed
from otel_agent_eval.otlp.proto_spans import spans_of_request as python_reader
from otel_agent_eval.serve import ServeConfig, Service
from test_noise import _run_view

EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PROTOBUF = "application/x-protobuf"


class Requests(SpanExporter):
    """Keeps what a service forwards, as the requests its exporter writes (`request_of`)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.noise = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.noise += sum(type(s) is Noise for s in spans)
        self.bodies.append(request_of(spans))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def spans(self) -> list[tuple[bytes, bytes, bytes]]:
        """Every forwarded span as (its resource, its scope, its message), sorted."""
        out = []
        for body in self.bodies:
            for entry in ExportTraceServiceRequest.FromString(body).resource_spans:
                for scope_spans in entry.scope_spans:
                    for span in scope_spans.spans:
                        out.append((entry.resource.SerializeToString(), scope_spans.scope.SerializeToString(),
                                    span.SerializeToString()))
        return sorted(out)


def _requests(calls: list[tuple[bool, Any, Any]], seed: int) -> list[bytes]:
    """The ended spans as an SDK exporter sends them, in requests of random sizes."""
    rng, spans, out = random.Random(seed), [span for is_start, span, _ in calls if not is_start], []
    while spans:
        size = rng.randint(1, 60)
        out.append(encode_spans(spans[:size]).SerializeToString())
        spans = spans[size:]
    return out


def _served(requests: list[bytes], fast: bool) -> dict[str, Any]:
    registry, exporter, scored, runs = CollectorRegistry(), Requests(), [], []
    svc = Service(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.0),
                  settings=Settings(metrics_enabled=False), registry=registry, exporter=exporter)
    if not fast:
        svc.receiving.noise_keys = None  # every span built and evaluated: the full path
    svc.pipeline.on_call = lambda record, score: scored.append((record.span_id, record.name, record.agent, record.error,
                                                                repr(score)))
    svc.pipeline.on_run = lambda run: runs.append(_run_view(run))
    for body in requests:
        answer = svc.receiving.take("http", body, PROTOBUF)
        assert answer.kind == "accepted", answer
    svc.stop()
    return {"calls": scored, "runs": runs, "metrics": generate_latest(registry).decode(), "spans": exporter.spans(),
            "noise": exporter.noise}


@pytest.mark.skipif(not native.NATIVE, reason="the native reader is not built (make test requires it: see docs/development.md)")
@EXAMPLES
@given(seed=st.integers(0, 2**32 - 1))
def test_serve_fast_path_equals_full_path(seed: int) -> None:
    requests = _requests(traces(seed, count=5), seed)
    fast, full = _served(requests, fast=True), _served(requests, fast=False)
    assert fast["noise"] > 0 and full["noise"] == 0  # the fast path passed noise unbuilt; the full path built it
    for key in ("calls", "runs", "metrics", "spans"):
        assert fast[key] == full[key], key


# -- the native rule against the Python rule ---------------------------------------------------------------------------

def _decorated(calls: list[tuple[bool, Any, Any]], rng: random.Random) -> list[bytes]:
    """The traces' requests with some spans given what the native rule leaves to the full read: events, links, a trace
    state, a repeated key, an array value, an empty value, a custom tool-name key."""
    requests = []
    for body in _requests(calls, rng.randrange(1 << 30)):
        message = ExportTraceServiceRequest.FromString(body)
        for entry in message.resource_spans:
            for scope_spans in entry.scope_spans:
                for span in scope_spans.spans:
                    pick = rng.randrange(10)
                    if pick == 0:
                        span.events.add(name="retry", time_unix_nano=span.start_time_unix_nano)
                    elif pick == 1:
                        span.trace_state = "vendor=1"
                    elif pick == 2:
                        kv = span.attributes.add(key="dup")
                        kv.value.string_value = "a"
                        kv = span.attributes.add(key="dup")
                        kv.value.string_value = "b"
                    elif pick == 3:
                        span.attributes.add(key="list").value.array_value.values.add(string_value="x")
                    elif pick == 4:
                        span.attributes.add(key="empty")
                    elif pick == 5:
                        span.attributes.add(key="tool_name").value.string_value = "lookup"
        requests.append(message.SerializeToString())
    return requests


@pytest.mark.skipif(not native.NATIVE, reason="the native reader is not built (make test requires it: see docs/development.md)")
@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), custom=st.sampled_from([None, "tool_name"]))
def test_native_noise_rule_equals_the_python_rule(seed: int, custom: str | None) -> None:
    """A span the native reader passes as Noise is one the Python rule calls noise, read whole by the Python reader
    into the same facts and kept message; and every plain span (no events, links, trace state; each key once with a
    scalar value) the Python rule calls noise, the native reader passes as Noise."""
    keys = sorted(typed_keys(custom))
    rng = random.Random(seed)
    passed = 0
    for body in _decorated(traces(seed, count=3), rng):
        fast, problems = native.reader("spans_of_message")(body, True, keys)
        whole, whole_problems = python_reader(parsed(body), keep=True)  # the Python reader: every span built
        assert problems == whole_problems and len(fast) == len(whole)
        message = ExportTraceServiceRequest.FromString(body)
        plain = [not span.events and not span.links and not span.trace_state and _plain(span.attributes)
                 for entry in message.resource_spans for scope in entry.scope_spans for span in scope.spans]
        for got, span, is_plain in zip(fast, whole, plain):
            facts = span_facts(span)
            typed = any(key in span.attributes for key in keys)
            python_noise = not may_matter(typed, span.name, span.status.status_code.name == "ERROR", facts.is_root)
            if type(got) is Noise:
                passed += 1
                assert python_noise and is_plain
                assert tuple(got[:6]) == tuple(facts)
                assert type(span) is MessageSpan and got[6] == span._message
                assert got[7].resource_key == span._origin.resource_key and got[7].scope_key == span._origin.scope_key
            else:
                assert not (python_noise and is_plain), span.name
    assert passed


def _plain(attributes: Any) -> bool:
    keys = [kv.key for kv in attributes]
    return len(set(keys)) == len(keys) and all(kv.value.WhichOneof("value") in ("string_value", "bool_value", "int_value",
                                                                                 "double_value", "bytes_value")
                                               for kv in attributes)

"""End to end: enriched spans reach a real OTLP receiver over gRPC and HTTP/protobuf.

The real `OTLPSpanExporter`s behind a `BatchSpanProcessor` behind the
`AgentEvalSpanProcessor`, sending to receivers in this process on 127.0.0.1.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Status, StatusCode
from otlp_receiver import HttpReceiver, OtlpReceiver, closed_port, running_receiver
from prometheus_client import CollectorRegistry

from otel_agent_eval.core import conventions as c
from otel_agent_eval.core import enrich as e
from otel_agent_eval.otel.processor import AgentEvalSpanProcessor

SERVICE = "otel-agent-eval-otlp-test"
T0 = 1_700_000_000_000_000_000  # explicit span times (ns): durations are exact, scores deterministic
MS = 1_000_000
STATUS_CODE_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR

# (protocol, compression) pairs: both exporters, plain and gzip-compressed.
TRANSPORTS = [("grpc", "none"), ("grpc", "gzip"), ("http", "none"), ("http", "gzip")]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """requests and grpc both honour proxy variables; 127.0.0.1 must be reached directly."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "grpc_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def exporter_for(protocol: str, endpoint: str, *, compression: str = "none", timeout: float = 5) -> SpanExporter:
    if protocol == "grpc":
        grpc_compression = grpc.Compression.Gzip if compression == "gzip" else grpc.Compression.NoCompression
        return GrpcSpanExporter(endpoint=endpoint, insecure=True, timeout=timeout, compression=grpc_compression)
    http_compression = HttpCompression.Gzip if compression == "gzip" else HttpCompression.NoCompression
    return HttpSpanExporter(endpoint=endpoint, timeout=timeout, compression=http_compression)


class Pipeline:
    """TracerProvider -> AgentEvalSpanProcessor -> BatchSpanProcessor -> real OTLP exporter."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.registry = CollectorRegistry()
        self.processor = AgentEvalSpanProcessor(registry=self.registry, forward_to=BatchSpanProcessor(exporter))
        self.provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}), shutdown_on_exit=False)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("otlp-export-test")

    def counter(self, name: str) -> float | None:
        return self.registry.get_sample_value(f"agent_eval_processor_{name}_total")


@pytest.fixture(params=TRANSPORTS, ids=[f"{p}-{z}" for p, z in TRANSPORTS])
def connected(request: pytest.FixtureRequest) -> Iterator[tuple[Pipeline, OtlpReceiver, str]]:
    protocol, compression = request.param
    with running_receiver(protocol) as receiver:
        pipeline = Pipeline(exporter_for(protocol, receiver.endpoint, compression=compression))
        try:
            yield pipeline, receiver, compression
        finally:
            pipeline.provider.shutdown()


def run_support_agent(tracer: trace.Tracer) -> dict[str, Any]:
    """An agent run: two tool calls (optimal and suboptimal for the `faq` task) and a plain step."""
    agent = tracer.start_span("invoke_agent support_agent", start_time=T0, attributes={
        c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent"})
    inside = trace.set_span_in_context(agent)
    spans = {"agent": agent}
    for i, (tool, duration_ms) in enumerate((("local_index", 20), ("web_search", 500))):
        start = T0 + (1 + i * 600) * MS
        span = tracer.start_span(f"execute_tool {tool}", context=inside, start_time=start, attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: tool,
            c.GEN_AI_TOOL_CALL_ID: f"call_{i}", c.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({"query": "refund policy"}),
            "app.retries": [0, 1], "app.cached": False})
        span.end(end_time=start + duration_ms * MS)
        spans[tool] = span
    plain = tracer.start_span("format_answer", context=inside, start_time=T0 + 1200 * MS,
                              attributes={"app.step": "format", "app.tokens": 42, "app.ratio": 0.5})
    plain.end(end_time=T0 + 1210 * MS)
    spans["plain"] = plain
    agent.end(end_time=T0 + 1300 * MS)
    return spans


def by_name(received: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    names = [s["name"] for s in received]
    assert len(names) == len(set(names)), f"duplicate spans received: {names}"
    return {s["name"]: s for s in received}


def agent_eval_keys(attributes: dict[str, Any]) -> set[str]:
    return {k for k in attributes if k.startswith(c.AGENT_EVAL_PREFIX)}


# -- spans arrive enriched over both transports -----------------------------------------

def test_enriched_tool_spans_reach_the_receiver(connected: tuple[Pipeline, OtlpReceiver, str]) -> None:
    pipeline, receiver, compression = connected
    sent = run_support_agent(pipeline.tracer)
    assert pipeline.provider.force_flush()

    spans = by_name(receiver.wait_for_spans(4))
    names = ("invoke_agent support_agent", "execute_tool local_index", "execute_tool web_search", "format_answer")
    assert set(spans) == set(names)
    if isinstance(receiver, HttpReceiver):  # the body really was (or was not) gzip-compressed
        assert set(receiver.encodings) == {"gzip" if compression == "gzip" else "identity"}

    agent, local, web, plain = (spans[n] for n in names)
    # ids and parentage are preserved on the enriched copies
    for key, span in (("agent", agent), ("local_index", local), ("web_search", web), ("plain", plain)):
        context = sent[key].get_span_context()
        assert (span["trace_id"], span["span_id"]) == (context.trace_id, context.span_id)
    assert agent["parent_span_id"] is None
    assert {local["parent_span_id"], web["parent_span_id"], plain["parent_span_id"]} == {agent["span_id"]}
    assert all(s["resource"].get("service.name") == SERVICE for s in spans.values())

    # web_search: suboptimal for `faq`, which prefers the free local index
    attrs = web["attributes"]
    assert attrs[e.OUTCOME] == "suboptimal"
    assert attrs[e.OPTIMAL_TOOL] == "local_index"
    assert attrs[e.PASSED] is False
    assert attrs[e.VERDICT] == "fail"
    assert attrs[e.TASK] == "faq"
    assert attrs[e.PROFILE] == "latency_critical"
    assert attrs[e.AGENT] == "support_agent"
    assert attrs[e.COST_USD] == pytest.approx(0.003)
    assert attrs[e.EXCESS_COST_USD] == pytest.approx(0.003)
    assert attrs[e.EXCESS_LATENCY_S] == pytest.approx(0.47)  # 500 ms against local_index's 30 ms
    assert attrs[e.SLO_EXCEEDED] is False
    assert 0.0 <= attrs[e.EFFICIENCY_SCORE] < attrs[e.THRESHOLD]
    assert "local_index" in attrs[e.REASON]

    # local_index: the optimal tool
    attrs = local["attributes"]
    assert attrs[e.OUTCOME] == "optimal"
    assert attrs[e.EFFICIENCY_SCORE] == 1.0
    assert attrs[e.OPTIMAL_TOOL] == "local_index"
    assert attrs[e.PASSED] is True
    assert attrs[e.EXCESS_COST_USD] == 0.0
    assert attrs[e.EXCESS_LATENCY_S] == 0.0
    assert attrs[e.AGENT] == "support_agent"

    # every agent_eval.* value survives the wire exactly as the scorer computed it
    route = pipeline.processor.scorer.route("support_agent")
    for tool, span in (("local_index", local), ("web_search", web)):
        expected = e.static_attributes(pipeline.processor.scorer.static_score(tool, route))
        assert {k: span["attributes"][k] for k in expected} == expected
        per_call = {e.OUTCOME, e.SLO_EXCEEDED, e.EXCESS_LATENCY_S, e.AGENT}
        assert agent_eval_keys(span["attributes"]) == set(expected) | per_call

    # the GenAI evaluation event, with its four attributes
    for span, label in ((web, "fail"), (local, "pass")):
        (event,) = span["events"]
        assert event["name"] == c.GEN_AI_EVALUATION_RESULT
        assert event["attributes"] == {
            c.GEN_AI_EVALUATION_NAME: e.EVALUATION_NAME,
            c.GEN_AI_EVALUATION_SCORE_VALUE: span["attributes"][e.EFFICIENCY_SCORE],
            c.GEN_AI_EVALUATION_SCORE_LABEL: label,
            c.GEN_AI_EVALUATION_EXPLANATION: span["attributes"][e.REASON],
        }

    # the original attributes are all still there, arrays and bools included
    for span, tool, call_id in ((local, "local_index", "call_0"), (web, "web_search", "call_1")):
        originals = {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: tool, c.GEN_AI_TOOL_CALL_ID: call_id,
            c.GEN_AI_TOOL_CALL_ARGUMENTS: '{"query": "refund policy"}', "app.retries": [0, 1], "app.cached": False,
        }
        assert {k: span["attributes"].get(k) for k in originals} == originals
        assert set(span["attributes"]) == set(originals) | agent_eval_keys(span["attributes"])

    # non-tool spans arrive unmodified
    assert plain["attributes"] == {"app.step": "format", "app.tokens": 42, "app.ratio": 0.5}
    assert plain["events"] == []
    # the agent span is the run's root: its own attributes plus the run's scores and evaluation events
    original = {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent"}
    assert {k: v for k, v in agent["attributes"].items() if not k.startswith("agent_eval.run.")} == original
    run = {k.removeprefix("agent_eval.run."): v for k, v in agent["attributes"].items() if k.startswith("agent_eval.run.")}
    assert (run["outcome"], run["task"], run["tool_calls"], run["spurious_calls"]) == ("completed", "faq", 2, 1)
    assert run["cost_usd"] == pytest.approx(0.003) and run["tool_correctness"] == 1.0
    assert [ev["attributes"][c.GEN_AI_EVALUATION_NAME] for ev in agent["events"]] == [
        "agent_eval.task_completion", "agent_eval.run_health", "agent_eval.tool_correctness"]

    assert pipeline.counter("spans_scored") == 2
    assert pipeline.counter("spans_ignored") == 2
    assert pipeline.counter("forward_errors") == 0
    assert pipeline.counter("enrichments_dropped") == 0


def test_failed_tool_span_arrives_with_outcome_error(connected: tuple[Pipeline, OtlpReceiver, str]) -> None:
    pipeline, receiver, _ = connected
    with pipeline.tracer.start_as_current_span("invoke_agent support_agent", attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_agent"}):
        span = pipeline.tracer.start_span("execute_tool local_index", attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: "local_index"})
        span.record_exception(TimeoutError("index unreachable"))
        span.set_status(Status(StatusCode.ERROR, "index unreachable"))
        span.end()
    assert pipeline.provider.force_flush()

    tool = by_name(receiver.wait_for_spans(2))["execute_tool local_index"]
    assert tool["status_code"] == STATUS_CODE_ERROR
    assert tool["attributes"][e.OUTCOME] == "error"
    assert tool["attributes"][e.OPTIMAL_TOOL] == "local_index"
    assert tool["attributes"][e.EFFICIENCY_SCORE] == 1.0  # an error changes the outcome, not the score
    exception, evaluation = tool["events"]
    assert exception["name"] == "exception"
    assert exception["attributes"]["exception.type"] == "TimeoutError"
    assert evaluation["name"] == c.GEN_AI_EVALUATION_RESULT
    assert evaluation["attributes"][c.GEN_AI_EVALUATION_EXPLANATION].startswith("Tool call failed (TimeoutError).")


# -- an unreachable receiver does not hurt the app ---------------------------------------

class RecordingExporter(SpanExporter):
    """Delegates to a real exporter and keeps its results.

    The export failure cannot be asserted from the log: the gRPC exporter's logger has the
    SDK's `DuplicateFilter`, which drops a repeat of the same message within ~20 s process-wide.
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.results: list[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unreachable_receiver_does_not_break_spans_or_scoring(protocol: str) -> None:
    port = closed_port()
    endpoint = f"127.0.0.1:{port}" if protocol == "grpc" else f"http://127.0.0.1:{port}/v1/traces"
    # Below the exporters' first retry backoff (1 s +-20%), so each export gives up after one attempt.
    exporter = RecordingExporter(exporter_for(protocol, endpoint, timeout=0.5))
    pipeline = Pipeline(exporter)

    run_support_agent(pipeline.tracer)  # span.end() must not raise
    pipeline.provider.force_flush()  # exports (and fails) on this thread; BatchSpanProcessor returns True regardless

    assert exporter.results == [SpanExportResult.FAILURE]
    assert pipeline.counter("spans_seen") == 4
    assert pipeline.counter("spans_scored") == 2
    assert pipeline.counter("forward_errors") == 0
    assert pipeline.counter("internal_errors") == 0

    done = threading.Event()
    worker = threading.Thread(target=lambda: (pipeline.provider.shutdown(), done.set()), daemon=True)
    worker.start()
    worker.join(timeout=15)  # generous bound; the exporter timeout keeps it far shorter
    assert done.is_set(), "provider.shutdown() did not return"

"""Scoring recorded traces: `score_traces` and `otel-agent-eval score` on real OTLP files.

Spans come from the real SDK (a TracerProvider per service, GenAI `invoke_agent` roots with
`execute_tool` children, LLM calls, errors, a parent in another service), scored live by an
`AgentEvalSpanProcessor` as they end, and written by the SDK's own OTLP encoder: as the
Collector's file exporter writes them (OTLP/JSON lines: lowerCamelCase, hex ids, numeric
enums), as its `format: proto` (length-prefixed protobuf), as one bare request, gzipped.
Read back, every call, run and Prometheus series must be exactly the live processor's.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import math
import os
import random
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, set_span_in_context
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor, load_catalog
from otel_agent_eval.offline.gate import evaluate_gate, parse_fail_under
from otel_agent_eval.offline.recorded import RecordedSpans, TraceInputError
from otel_agent_eval.offline.score import in_replay_order, score_traces
from otel_agent_eval.tools.bench.score import collector_json  # the Collector file exporter's JSON, as the bench writes it
from otel_agent_eval.tools.cli import main
from otel_agent_eval.tools.score_table import agent_label, task_label

CATALOG = load_catalog()
T0 = 1_750_000_000_000_000_000  # recorded time, ns since the epoch
TOOLS = [*CATALOG.tools, "mystery_tool"]
AGENTS = ["support_agent", "math_agent", "analytics_bot", "forecaster", "unrouted_agent"]
SCORED_FAMILIES = ("agent_eval_tool_", "gen_ai_execute_tool_duration", "agent_eval_run", "agent_eval_redundant",
                   "agent_eval_spurious", "agent_eval_processor_spans_scored", "agent_eval_processor_spans_seen")
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_AGENT_EVAL_")}


# -- what a call and a run look like, live or replayed -------------------------------------------------------

def call_view(record: Any, score: Any) -> tuple[Any, ...]:
    return (record.agent, score.task, score.tool, score.outcome, score.verdict, score.optimal_tool, score.efficiency,
            score.excess_cost_usd, score.duration_s, score.slo_exceeded, score.excess_latency_s, score.error_type)


def run_view(run: Any) -> tuple[Any, ...]:
    e = run.evaluation
    return (run.agent, run.task, run.kind, run.status, run.closed_by, e.outcome, e.health, e.cost_usd, e.tool_correctness,
            e.duration_s, tuple(r.span_id for r in run.tool_calls), e.redundant_calls, e.spurious_calls)


class Seen:
    """Calls by span id and runs by root span id, as a pipeline's callbacks report them."""

    def __init__(self) -> None:
        self.calls: dict[int, tuple[Any, ...]] = {}
        self.runs: dict[tuple[int, int], tuple[Any, ...]] = {}

    def on_call(self, record: Any, score: Any) -> None:
        assert record.span_id not in self.calls, "a call scored twice"
        self.calls[record.span_id] = call_view(record, score)

    def on_run(self, run: Any) -> None:
        self.runs[(run.trace_id, run.root_span_id)] = run_view(run)


def series(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples
            if s.name.startswith(SCORED_FAMILIES)}


def assert_same_series(live: CollectorRegistry, replayed: CollectorRegistry) -> None:
    mine, theirs = series(live), series(replayed)
    assert mine.keys() == theirs.keys()
    for key, value in mine.items():  # counts exactly; sums may differ in the last bits by the order of addition
        if key[0].endswith("_sum"):
            assert math.isclose(value, theirs[key], rel_tol=1e-9), key
        else:
            assert value == theirs[key] or (math.isnan(value) and math.isnan(theirs[key])), key


# -- an app whose spans are scored live and recorded -------------------------------------------------------

class App:
    """Two services (a gateway and the agents) on real TracerProviders; a live processor on both."""

    def __init__(self) -> None:
        self.live = Seen()
        self.registry = CollectorRegistry()
        self.processor = AgentEvalSpanProcessor(registry=self.registry, on_call=self.live.on_call, on_run=self.live.on_run)
        self.memory = InMemorySpanExporter()
        self.tracers = {}
        for service in ("gateway", "agents"):
            provider = TracerProvider(resource=Resource.create({"service.name": service, "deployment.environment": "ci"}))
            provider.add_span_processor(self.processor)
            provider.add_span_processor(SimpleSpanProcessor(self.memory))
            self.tracers[service] = provider.get_tracer("app", "1.0")
        self.clock = T0
        self.tool_spans = 0

    def tick(self, ms: int = 1) -> int:
        self.clock += ms * 1_000_000
        return self.clock

    def spans(self) -> list[ReadableSpan]:
        """The finished spans, in end order, once the live processor has scored them all."""
        self.processor.drain()
        return list(self.memory.get_finished_spans())

    def tool(self, context: Any, tool: str, rng: random.Random, *, error: bool = False) -> None:
        tracer = self.tracers["agents"]
        span = tracer.start_span(f"execute_tool {tool}", context=context, start_time=self.tick(), attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": f"call_{rng.randrange(10**6)}",
            "gen_ai.tool.call.arguments": json.dumps({"query": rng.choice(["return policy", "2+2", "orders in May"])})})
        if error:
            span.set_attribute("error.type", "TimeoutError")
            span.set_status(Status(StatusCode.ERROR, "timed out"))
        span.end(end_time=self.tick(rng.randint(1, 3_000)))
        self.tool_spans += 1

    def agent_run(self, agent: str, rng: random.Random, *, context: Any = None, nested: str | None = None, failed: bool = False) -> None:
        tracer = self.tracers["agents"]
        root = tracer.start_span(f"invoke_agent {agent}", context=context, start_time=self.tick(), attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
        inside = set_span_in_context(root)
        if rng.random() < 0.7:
            llm = tracer.start_span("chat gpt-4o-mini", context=inside, start_time=self.tick(), attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.usage.input_tokens": rng.randint(10, 3_000), "gen_ai.usage.output_tokens": rng.randint(1, 800)})
            llm.end(end_time=self.tick(rng.randint(50, 900)))
        for _ in range(rng.randint(1, 4)):
            self.tool(inside, rng.choice(TOOLS), rng, error=rng.random() < 0.15)
        if nested:
            self.agent_run(nested, rng, context=inside)
        if failed:
            root.set_status(Status(StatusCode.ERROR, "gave up"))
        root.end(end_time=self.tick(5))

    def traces(self, count: int, seed: int = 7) -> App:
        rng = random.Random(seed)
        for _ in range(count):
            shape = rng.choice(["agent", "agent", "gateway", "plain", "nested", "lone_tool"])
            if shape == "agent":
                self.agent_run(rng.choice(AGENTS), rng, failed=rng.random() < 0.1)
            elif shape == "nested":
                self.agent_run("support_agent", rng, nested="math_agent")
            elif shape == "lone_tool":  # a tool span with no parent: a run of one call
                self.tool(None, rng.choice(TOOLS), rng)
            else:  # a request to the gateway service; the agents' spans are in another service
                gateway = self.tracers["gateway"]
                request = gateway.start_span("POST /chat", kind=SpanKind.SERVER, start_time=self.tick(),
                                             attributes={"http.route": "/chat"})
                if shape == "gateway":  # the parent arrives through propagation: remote in the agents' service
                    sc = request.get_span_context()
                    remote = SpanContext(sc.trace_id, sc.span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
                    self.agent_run(rng.choice(AGENTS), rng, context=set_span_in_context(NonRecordingSpan(remote)))
                else:  # tools straight under a plain root: a trace run, no agent
                    for _ in range(rng.randint(1, 3)):
                        self.tool(set_span_in_context(request), rng.choice(TOOLS), rng)
                request.end(end_time=self.tick(3))
        return self


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [k for k in os.environ if k.startswith("OTEL_AGENT_EVAL_")]:
        monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def app() -> Any:
    app = App().traces(60)
    yield app
    app.processor.shutdown()


# -- the formats, written as the Collector and the SDK write them ----------------------------------------------

def batches(spans: list[ReadableSpan], size: int = 16) -> list[list[ReadableSpan]]:
    return [spans[i:i + size] for i in range(0, len(spans), size)]


def collector_lines(spans: list[ReadableSpan], size: int = 16) -> str:
    return "".join(json.dumps(collector_json(batch), separators=(",", ":")) + "\n" for batch in batches(spans, size))


def framed_protobuf(spans: list[ReadableSpan], size: int = 16) -> bytes:
    """The Collector's `format: proto`: each request after its length, 4 bytes big-endian."""
    out = b""
    for batch in batches(spans, size):
        data = encode_spans(batch).SerializeToString()
        out += len(data).to_bytes(4, "big") + data
    return out


def replay(path: Any, **options: Any) -> tuple[Any, Seen, CollectorRegistry]:
    seen, registry = Seen(), CollectorRegistry()
    report = score_traces(path, registry=registry, on_call=seen.on_call, on_run=seen.on_run, **options)
    return report, seen, registry


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# -- the same numbers as live ------------------------------------------------------------------------------

def test_collector_json_scores_exactly_like_the_live_processor(app, tmp_path):
    spans = app.spans()
    path = write(tmp_path / "traces.json", collector_lines(spans))
    assert json.loads(path.read_text().splitlines()[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"].isalnum()
    report, seen, registry = replay(path)

    assert len(app.live.calls) == app.tool_spans > 100
    assert seen.calls == app.live.calls  # every call: agent, task, tool, outcome, efficiency, money wasted, duration
    assert seen.runs == app.live.runs  # every run: the same calls, outcome, health, cost, closed by its root
    assert_same_series(app.registry, registry)
    assert report.calls == app.tool_spans and report.runs == len(app.live.runs)
    assert report.inputs.spans == len(spans) and report.inputs.records_skipped == report.inputs.spans_skipped == 0
    outcomes = {view[3] for view in seen.calls.values()}
    assert {"optimal", "suboptimal", "unknown_tool", "error"} <= outcomes  # the data exercises every kind of call
    assert sum(g.runs_closed_early for g in report.groups) == 0  # remote parents read as remote: their runs close at the root


def test_protobuf_framed_bare_and_gzip_read_the_same_as_json(app, tmp_path):
    spans = app.spans()
    reference = replay(write(tmp_path / "a.json", collector_lines(spans)))[0].to_dict()
    framed = write(tmp_path / "b.binpb", framed_protobuf(spans))
    bare = write(tmp_path / "c.pb", encode_spans(spans).SerializeToString())
    zipped = write(tmp_path / "d.json.gz", gzip.compress(collector_lines(spans).encode()))
    zipped_proto = write(tmp_path / "e.pb.gz", gzip.compress(framed_protobuf(spans)))
    for path in (framed, bare, zipped, zipped_proto):
        report, seen, _ = replay(path)
        assert seen.calls == app.live.calls, path.name
        got = report.to_dict()
        assert got["inputs"]["spans_read"] == len(spans)
        assert {**got, "inputs": None} == {**reference, "inputs": None}, path.name


def test_resources_scopes_events_and_remote_parents_survive_the_round_trip(app, tmp_path):
    spans = {s.context.span_id: s for s in app.spans()}
    path = write(tmp_path / "t.json", collector_lines(list(spans.values()), size=5))
    read = list(RecordedSpans(path))
    assert len(read) == len(spans)
    for span in read:
        original = spans[span.context.span_id]
        assert span.name == original.name and span.kind == original.kind
        assert (span.start_time, span.end_time) == (original.start_time, original.end_time)
        assert dict(span.attributes) == dict(original.attributes)
        assert dict(span.resource.attributes) == dict(original.resource.attributes)
        assert span.instrumentation_scope.name == "app" and span.instrumentation_scope.version == "1.0"
        assert span.status.status_code == original.status.status_code
        assert span.status.description == original.status.description
        assert (span.parent is None) == (original.parent is None)
        if span.parent is not None:
            assert (span.parent.span_id, span.parent.is_remote) == (original.parent.span_id, original.parent.is_remote)
    assert any(s.parent is not None and s.parent.is_remote for s in read)


def test_real_instrumented_frameworks_score_the_same_recorded_as_live(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    import instrumented  # noqa: PLC0415 - real frameworks: a few seconds to import, only here

    live, registry = Seen(), CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, on_call=live.on_call, on_run=live.on_run)
    spans = [*instrumented.pydantic_ai_spans(processors=[processor]),
             *instrumented.pydantic_ai_spans(instrumented.FLAKY_RUN, processors=[processor]),
             *instrumented.openai_agents_openinference_spans(processors=[processor]),
             *instrumented.openai_agents_openllmetry_spans(processors=[processor]),
             *instrumented.langchain_openinference_spans(processors=[processor])]
    processor.drain()
    report, seen, replayed = replay(write(tmp_path / "frameworks.json", collector_lines(spans, size=4)))
    assert len(live.calls) >= 12 and len(live.runs) >= 5
    assert seen.calls == live.calls and seen.runs == live.runs
    assert_same_series(registry, replayed)
    assert {view[0] for view in seen.calls.values()} == {"support_agent"}


def test_out_of_order_batches_are_put_back_in_time_order(app, tmp_path):
    spans = app.spans()
    # Each batch written back to front: roots before their children, as grouping by resource and scope can do.
    text = "".join(json.dumps(collector_json(batch[::-1])) + "\n" for batch in batches(spans, 12))
    path = write(tmp_path / "shuffled.json", text)
    report, seen, _ = replay(path)
    assert seen.calls == app.live.calls and seen.runs == app.live.runs
    _, unsorted, _ = replay(path, reorder_spans=0)  # without the reordering, runs fall apart
    assert unsorted.runs != app.live.runs


def test_repeated_input_is_scored_once(app, tmp_path):
    path = write(tmp_path / "traces.json", collector_lines(app.spans()))
    once = replay(path)[0]
    twice, seen, _ = replay([path, path])
    assert seen.calls == app.live.calls and seen.runs == app.live.runs
    assert twice.inputs.spans_duplicate == once.inputs.spans
    assert [g.calls for g in twice.groups] == [g.calls for g in once.groups]


def test_sdk_json_lines_are_read_to_the_microsecond(app, tmp_path):
    spans = app.spans()
    path = write(tmp_path / "console.jsonl", "".join(s.to_json(indent=None) + "\n" for s in spans))
    report, seen, _ = replay(path)
    assert seen.calls.keys() == app.live.calls.keys()
    for span_id, view in seen.calls.items():
        live = app.live.calls[span_id]
        assert view[:8] == live[:8]  # agent, task, tool, outcome, verdict, optimal tool, efficiency, money wasted
        assert math.isclose(view[8], live[8], abs_tol=2e-6)  # the SDK's JSON keeps microseconds


def test_a_route_on_a_resource_attribute_routes_recorded_calls(tmp_path):
    catalog = write(tmp_path / "catalog.yaml", """
tools:
  cheap: {cost_usd: 0.0, latency_ms: 10, capabilities: [lookup], complexity: simple}
  pricey: {cost_usd: 0.5, latency_ms: 900, capabilities: [lookup], complexity: simple}
tasks:
  checkout_lookup:
    match: {service.name: checkout}
    capability: lookup
    optimal_tool: cheap
""")
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "checkout"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    span = provider.get_tracer("t").start_span("execute_tool pricey", start_time=T0, attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "pricey"})
    span.end(end_time=T0 + 10**8)
    runs: list = []
    report = score_traces(write(tmp_path / "t.json", collector_lines(memory.get_finished_spans())), catalog, on_run=runs.append)
    (group,) = report.groups  # the call and its run (the span is its own root) in one task: both routed on the resource
    assert (group.task, group.wasted_usd) == ("checkout_lookup", 0.5)
    assert [run.task for run in runs] == ["checkout_lookup"]
    assert [(p.tool, p.optimal_tool) for p in report.poor_choices] == [("pricey", "cheap")]


# -- bad input: skipped, counted, one line per file, never a traceback -------------------------------------------

def test_bad_input_is_skipped_counted_and_named_by_file_and_line(app, tmp_path):
    spans = app.spans()
    lines = collector_lines(spans, size=10).splitlines(keepends=True)
    cut_spans = len(json.loads(lines[-1])["resourceSpans"][0]["scopeSpans"][0]["spans"])
    truncated = write(tmp_path / "in" / "a_truncated.json", "".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    write(tmp_path / "in" / "b_empty.json", "")
    write(tmp_path / "in" / "c_garbage.txt", "hello, this is not a trace\n")
    mixed = collector_json(spans[:3])
    mixed["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["traceId"] = "not-an-id"
    write(tmp_path / "in" / "d_mixed.json", b"\xff\xfe not utf-8\n" + json.dumps({"resourceMetrics": []}).encode() + b"\n"
          + json.dumps(mixed).encode() + b"\n")
    write(tmp_path / "in" / "e_cut.json.gz", gzip.compress(collector_lines(spans).encode())[:-40])
    write(tmp_path / "in" / "f_cut.binpb", framed_protobuf(spans)[:-7])
    write(tmp_path / "in" / ".hidden" / "ignored.json", "garbage")
    problems: list[str] = []

    report = score_traces(tmp_path / "in", on_problem=lambda p: problems.append(str(p)))
    by_file = {Path(p.split(":")[0]).name: p for p in problems}
    assert len(problems) == len(by_file) == 6  # one line per file with problems
    assert by_file["a_truncated.json"].startswith(f"{truncated}:{len(lines)}: truncated JSON: the record ends early (")
    assert by_file["b_empty.json"].endswith(": empty file")
    assert "not OTLP trace data" in by_file["c_garbage.txt"]
    assert by_file["d_mixed.json"].endswith(":1: not UTF-8 text (byte 1 of the line) (2 more problems in this file)")
    assert "the compressed stream ends early" in by_file["e_cut.json.gz"]
    assert "truncated or corrupt: the file ends inside a message, after" in by_file["f_cut.binpb"]
    stats = report.inputs
    assert stats.files == 6 and stats.files_without_spans == 2
    assert stats.spans_skipped == 1  # the span with the bad id; its two neighbours were read
    complete = (len(spans) - cut_spans) + 2 + (len(spans) - (len(spans) % 16 or 16))  # a, d, and f less its cut message
    assert complete <= stats.spans < complete + len(spans)  # and e up to where its gzip stream was cut
    assert report.calls > 0


def test_recorded_spans_report_what_each_problem_is(tmp_path):
    def problem(data: bytes | str) -> str:
        seen: list[str] = []
        assert list(RecordedSpans(write(tmp_path / "f", data), on_problem=lambda p: seen.append(p.message))) == []
        (message,) = seen
        return message

    assert problem('{"resourceLogs": []}\n') == "logs data, not traces"
    assert problem('{"foo": 1, "bar": 2}\n') == "not OTLP trace data (a JSON object with keys: bar, foo)"
    assert problem('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "00000000000000000000000000000000", '
                   '"spanId": "0000000000000001"}]}]}]}\n') == "span skipped: traceId is all zeros (invalid)"
    for time in ('"-1000"', "-1000", '"18446744073709551616"'):  # OTLP times are unsigned 64-bit nanoseconds
        assert problem('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "0000000000000000000000000000000a", '
                       f'"spanId": "0000000000000001", "startTimeUnixNano": {time}}}]}}]}}]}}\n') == (
            f"span skipped: time {time.strip(chr(34))!r} is out of range (a fixed64: nanoseconds since the epoch)")
    assert problem(b"\x28\xb5\x2f\xfd\x00\x01") == "cannot read further: the compressed stream ends early (a zstd frame is cut short)"
    assert problem(b"\x00\x00\x01\x00\x0a").startswith("truncated or corrupt: the file ends inside a message, after 1 of its 256 bytes")
    assert problem(b"\x10garbage").startswith("not OTLP trace data: neither JSON nor OTLP protobuf")
    assert problem(b"\x0a\x05\x01").startswith("not an OTLP ExportTraceServiceRequest")
    assert problem('{"resourceSpans": [}\n') == "not valid JSON: Expecting value at column 20"
    with pytest.raises(TraceInputError, match="no such file or directory"):
        RecordedSpans(tmp_path / "missing.json")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(TraceInputError, match="no files in this directory"):
        RecordedSpans(tmp_path / "empty_dir")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                           max_leaves=20)
otlp_keys = st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "parentSpanId", "attributes",
                             "key", "value", "stringValue", "intValue", "arrayValue", "kvlistValue", "values", "status",
                             "code", "kind", "events", "links", "startTimeUnixNano", "endTimeUnixNano", "flags", "context"])
otlp_like = st.recursive(json_values, lambda inner: st.dictionaries(otlp_keys, inner, max_size=5) | st.lists(inner, max_size=3),
                         max_leaves=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(otlp_like.map(lambda v: json.dumps(v).encode()), st.binary(max_size=60)), max_size=6))
def test_no_input_makes_scoring_raise(tmp_path, lines):
    path = write(tmp_path / "fuzz.json", b"\n".join(lines))
    report = score_traces(path)  # whatever the bytes: skipped and counted, never raised
    assert report.inputs.files == 1


def test_a_pretty_printed_document_and_span_lines_are_read(app, tmp_path):
    spans = app.spans()[:20]
    request = collector_json(spans)
    pretty = write(tmp_path / "pretty.json", json.dumps(request, indent=2))
    assert sorted(s.context.span_id for s in RecordedSpans(pretty)) == sorted(s.context.span_id for s in spans)
    one_scope = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    lines = write(tmp_path / "spans.jsonl", "".join(json.dumps(span) + "\n" for span in one_scope))
    assert [s.context.span_id for s in RecordedSpans(lines)] == [int(span["spanId"], 16) for span in one_scope]


def test_protobuf_json_mapping_spellings_and_unknown_kinds_are_read(app, tmp_path):
    spans = app.spans()[:30]
    collector = sorted((s.context.span_id, s.name, s.kind, dict(s.attributes)) for s in RecordedSpans(
        write(tmp_path / "collector.json", collector_lines(spans, size=len(spans)))))
    request = encode_spans(spans)
    for name, text in (("base64 ids, enum names", MessageToJson(request, indent=None)),
                       ("snake_case fields", MessageToJson(request, indent=None, preserving_proto_field_name=True))):
        read = sorted((s.context.span_id, s.name, s.kind, dict(s.attributes)) for s in RecordedSpans(write(tmp_path / "p.json", text + "\n")))
        assert read == collector, name
    odd = collector_json(spans[:1])
    odd["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["kind"] = 9  # a kind from a newer OTLP
    (span,) = RecordedSpans(write(tmp_path / "odd.json", json.dumps(odd) + "\n"))
    assert span.kind == SpanKind.INTERNAL and span.name == spans[0].name


def test_replay_order_holds_a_bounded_window():
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(200):  # written in reverse end order
        tracer.start_span(f"s{i}", start_time=T0 + 1_000 * (200 - i)).end(end_time=T0 + 1_000 * (200 - i) + 500)
    spans = list(memory.get_finished_spans())
    pulled = []

    def source():
        for span in spans:
            pulled.append(span)
            yield span

    out = []
    for span, agent in in_replay_order(source(), lambda span: None, window=10):
        assert len(pulled) - len(out) <= 11  # never more than the window held back
        out.append(span)
    assert len(out) == 200
    ends = [s.end_time for s in out]
    assert ends != sorted(ends)  # reversed input is sorted only as far as the window reaches
    assert [s.end_time for s in in_replay_order_all(spans)] == sorted(ends)


def test_a_call_that_starts_and_ends_with_its_agent_is_scored_in_its_run_whatever_the_file_order(tmp_path):
    """Times cut to microseconds (`ReadableSpan.to_json`) or a coarse clock can make a tool span and its agent
    spans start and end at the same instants: the call still belongs to its agent's run, parent written first or not."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    root = tracer.start_span("invoke_agent support_agent", start_time=T0,
                             attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
    planner = tracer.start_span("invoke_agent planner", context=set_span_in_context(root), start_time=T0,
                                attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})
    tool = tracer.start_span("execute_tool web_search", context=set_span_in_context(planner), start_time=T0,
                             attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"})
    for span in (tool, planner, root):
        span.end(end_time=T0 + 5_000_000)
    child_first = list(memory.get_finished_spans())
    for name, order in (("child_first", child_first), ("parent_first", child_first[::-1]),
                        ("middle_first", [child_first[1], child_first[2], child_first[0]])):
        calls, runs = [], []
        score_traces(write(tmp_path / f"{name}.json", collector_lines(order)), on_call=lambda r, s: calls.append(r.agent),
                     on_run=lambda run: runs.append((run.agent, len(run.tool_calls))))
        assert calls == ["planner"], name
        assert runs == [("planner", 1)], name  # the root only wraps the planner's run: no run of its own


def in_replay_order_all(spans: list[ReadableSpan]) -> list[ReadableSpan]:
    return [span for span, _ in in_replay_order(spans, lambda span: None, window=len(spans))]


# -- the gate -------------------------------------------------------------------------------------------------

def test_gate_uses_the_catalog_levels_and_fail_under_overrides(app, tmp_path):
    report = score_traces(write(tmp_path / "t.json", collector_lines(app.spans())), environment="development")
    gate = evaluate_gate(report)
    efficiency = {g.name: g.efficiency for g in report.groups if g.efficiency is not None}
    assert {c.group for c in gate.failed} == {name for name, e in efficiency.items() if e < 0.6}  # development fail level
    assert {c.group for c in gate.warnings} == {name for name, e in efficiency.items() if 0.6 <= e < 0.7}
    lenient = evaluate_gate(report, parse_fail_under(["efficiency=0"]))
    assert lenient.passed and all(c.threshold == 0 for c in lenient.checks if c.level == "fail")
    strict = evaluate_gate(report, parse_fail_under(["completion=1", "efficiency=0"]))
    assert {c.group for c in strict.failed} == {g.name for g in report.groups if g.completion is not None and g.completion < 1}
    for bad, message in (("speed=1", "METRIC one of"), ("efficiency=high", "not a number"), ("health=101", "out of range"),
                         ("efficiency", "METRIC=VALUE")):
        with pytest.raises(ValueError, match=message):
            parse_fail_under([bad])


# -- the command ----------------------------------------------------------------------------------------------

def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "score", *args], cwd=cwd, env=CLEAN_ENV,
                          capture_output=True, text=True, timeout=120)


def test_cli_gate_exit_codes_and_one_line_per_failing_gate(app, tmp_path):
    traces = write(tmp_path / "traces" / "traces.json", collector_lines(app.spans()))
    report = score_traces(traces)  # production levels
    failing = evaluate_gate(report).failed
    assert failing  # suboptimal and unknown tools fail production's 0.85

    failed = cli("traces", cwd=tmp_path)
    assert failed.returncode == 1, failed.stderr
    gate_lines = [line for line in failed.stderr.splitlines() if line.startswith("otel-agent-eval: gate failed: ")]
    assert gate_lines == [f"otel-agent-eval: gate failed: {check}" for check in failing]
    coverage = ("otel-agent-eval: the catalog lacks 1 tool (mystery_tool: "
                f"{sum(t.calls for g in report.groups for t in g.tools if not t.known)} calls). Unknown tools score 0. "
                "Draft what it lacks: otel-agent-eval catalog draft traces -o catalog.yaml")
    assert failed.stderr.splitlines() == [*gate_lines, coverage] and "Traceback" not in failed.stderr
    assert "Gate: FAILED" in failed.stdout and "Poorest tool choices" in failed.stdout
    for group in report.groups:
        assert any(re.split(r"  +", line.strip())[:2] == [agent_label(group.agent), task_label(group.task)]
                   for line in failed.stdout.splitlines())

    passed = cli("traces", "--fail-under", "efficiency=0", cwd=tmp_path)
    assert (passed.returncode, passed.stderr) == (0, "")
    assert "Gate: passed" in passed.stdout

    piped = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "score", "-", "--json"], cwd=tmp_path,
                           env=CLEAN_ENV, input=gzip.compress(traces.read_bytes()), capture_output=True, timeout=120)
    assert piped.returncode == 1 and json.loads(piped.stdout)["totals"]["tool_calls"] == report.calls


@pytest.mark.parametrize("args, message", [
    (["missing.json"], "otel-agent-eval: missing.json: no such file or directory\n"),
    (["garbage.txt"], "otel-agent-eval: no spans could be read from 1 file\n"),
    (["traces.json", "--catalog", "nope.yaml"], "otel-agent-eval: nope.yaml: cannot read the file: No such file or directory\n"),
    (["traces.json", "--environment", "moon"], "unknown environment 'moon'"),
    (["traces.json", "--fail-under", "speed=2"], "--fail-under 'speed=2': expected METRIC=VALUE"),
    (["traces.json", "--junit", "no/such/dir/out.xml"], "--junit no/such/dir/out.xml: the directory no/such/dir does not exist"),
    (["plain.json"], "no tool calls or agent runs in 1 span: none follows the GenAI, OpenInference or OpenLLMetry "
                       "conventions or the Vercel AI SDK's ai.* spans"),
])
def test_cli_bad_input_exits_2_with_one_line(app, tmp_path, args, message):
    write(tmp_path / "traces.json", collector_lines(app.spans()[:30]))
    write(tmp_path / "garbage.txt", "not a trace at all\n")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("t").start_span("GET /health").end()
    write(tmp_path / "plain.json", collector_lines(memory.get_finished_spans()))
    before = set(tmp_path.iterdir())
    run = main_in_process(args, tmp_path)
    assert run[0] == 2
    assert message in run[2] and "Traceback" not in run[2]
    assert run[2].count("\n") == (2 if args == ["garbage.txt"] else 1)  # garbage.txt: its own line, then the verdict
    assert set(tmp_path.iterdir()) == before  # nothing written


def main_in_process(args: list[str], cwd: Path) -> tuple[int, str, str]:
    """`otel-agent-eval score ARGS` in this process (fast), from `cwd`, with stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["score", *args])
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def test_cli_json_and_junit(app, tmp_path):
    write(tmp_path / "t.json", collector_lines(app.spans()))
    (tmp_path / "out").mkdir()
    run = cli("t.json", "--json", "--junit", "out/report.xml", "--environment", "staging", cwd=tmp_path)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    data = json.loads(run.stdout)
    report = score_traces(tmp_path / "t.json", environment="staging")
    assert data["totals"] == {"tool_calls": report.calls, "runs": report.runs, "wasted_usd": report.wasted_usd}
    assert data["environment"] == "staging" and data["thresholds"] == {"warn": 0.85, "fail": 0.75}
    assert [(g["agent"], g["task"], g["calls"], g["efficiency"]) for g in data["groups"]] == [
        (g.agent, g.task, g.calls, g.efficiency) for g in report.groups]
    gate = evaluate_gate(report)
    assert data["gate"]["passed"] is False and len(data["gate"]["checks"]) == len(gate.checks)

    suite = ET.parse(tmp_path / "out" / "report.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        (f"otel-agent-eval.{g.agent or '(no agent)'}", g.task or "(unrouted)") for g in report.groups]
    failed = {c.group for c in gate.failed}
    assert int(suite.get("failures")) == len(failed) > 0
    for case, group in zip(cases, report.groups):
        failure = case.find("failure")
        assert (failure is not None) == (group.name in failed)
        if failure is not None:
            assert failure.get("message") == "; ".join(c.reason for c in gate.failed if c.group == group.name)
            assert "efficiency" in failure.get("message") and "staging fail level" in failure.get("message")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.xml"]  # no temporary file left


def test_cli_strict_turns_skipped_input_into_exit_2(app, tmp_path):
    text = collector_lines(app.spans())
    write(tmp_path / "t.json", text + text.splitlines()[0][:50] + "\n")
    code, out, err = main_in_process(["t.json", "--fail-under", "efficiency=0"], tmp_path)
    assert code == 0 and err.startswith(f"otel-agent-eval: t.json:{text.count(chr(10)) + 1}: truncated JSON")
    assert "1 unreadable record or span skipped" in out
    code, _, err = main_in_process(["t.json", "--fail-under", "efficiency=0", "--strict"], tmp_path)
    assert code == 2 and err.splitlines()[-1] == "otel-agent-eval: --strict: 1 record or span skipped, 0 files without spans"


def test_reports_get_the_mode_a_plain_open_gives(tmp_path):
    """mkstemp creates 0600 files: a report meant for a CI artifact or a colleague must not stay private."""
    import os

    from otel_agent_eval.tools.output_file import write_atomically

    mask = os.umask(0o022)
    try:
        write_atomically(tmp_path / "report.html", "<p>ok</p>")
    finally:
        os.umask(mask)
    assert (tmp_path / "report.html").read_text() == "<p>ok</p>"
    assert (tmp_path / "report.html").stat().st_mode & 0o777 == 0o666 & ~mask

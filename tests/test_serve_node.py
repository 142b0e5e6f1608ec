"""Spans from another language: a Node.js agent (OpenTelemetry JS SDK, OTLP/protobuf exporter) to `serve`.

`tests/node/agent.mjs` emits whole GenAI agent runs (`invoke_agent` roots, `execute_tool` and
`chat` children, failing calls) through the JS SDK's BatchSpanProcessor and OTLP/HTTP
protobuf exporter to a real `otel-agent-eval serve` process, which forwards to an OTLP
receiver in this test (`otlp_receiver.py`). The script also writes down what the JS SDK saw:
every span start and end, in order, with ids, times, attributes, events and status.

The Python side rebuilds those very spans with the Python SDK (same ids and nanosecond
times, started and ended in the same order) under the Python `AgentEvalSpanProcessor`, and
never looks at what `serve` produced. Then serve's scored series must equal the processor's,
and every span at the next hop must equal the processor's forwarded copy, in OTLP form:
the original content and the `agent_eval.*` attributes and `gen_ai.evaluation.result` events.

Needs node and `npm ci --prefix tests/node` (`make setup` does both); without them the test fails
in one line saying so.
"""
from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from google.protobuf import json_format
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind, Status, StatusCode
from otlp_receiver import HttpReceiver, running_receiver
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from serve_process import local_only, serving, stop_cleanly

import otel_agent_eval
from otel_agent_eval.otel.processor import AgentEvalSpanProcessor

NODE_DIR = Path(__file__).parent / "node"
AGENT = NODE_DIR / "agent.mjs"
CATALOG = Path(otel_agent_eval.__file__).parent / "config" / "default_catalog.yaml"  # given to both sides explicitly
SETUP = "run `npm ci --prefix tests/node` (or `make setup`, which installs node and npm first)"
DEADLINE_S = 30  # liveness only: how long to wait for a process or for spans


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def node_or_fail() -> str:
    """The node binary; the test fails (not skips) in one line when node or the npm packages are missing."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not installed: install nodejs and npm, then {SETUP}", pytrace=False)
    for package in ("sdk-trace-base", "exporter-trace-otlp-proto", "resources", "semantic-conventions", "api"):
        if not (NODE_DIR / "node_modules" / "@opentelemetry" / package / "package.json").is_file():
            pytest.fail(f"tests/node/node_modules/@opentelemetry/{package} is missing: {SETUP}", pytrace=False)
    return node


def clean_env() -> dict[str, str]:
    """This environment without OTel and otel-agent-eval settings: both sides run with the same, explicit options."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PROMETHEUS_MULTIPROC"))}


# -- the `serve` command ------------------------------------------------------------------------------

@contextmanager
def serving_to_receiver() -> Iterator[tuple[subprocess.Popen[str], dict[str, str], HttpReceiver]]:
    """`otel-agent-eval serve` as a process (OTLP/HTTP only), forwarding to an in-test OTLP/HTTP receiver."""
    with running_receiver("http") as receiver, serving(
            "--no-grpc", "--http-port", "0", "--metrics-port", "0", "--catalog", str(CATALOG),
            "--forward-to", receiver.endpoint, "--forward-delay", "0.05", env=clean_env()) as (process, where):
        yield process, where, receiver


def scrape(url: str) -> str:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=DEADLINE_S)
    try:
        connection.request("GET", parts.path)
        response = connection.getresponse()
        assert response.status == 200
        return response.read().decode()
    finally:
        connection.close()


def scored(exposition: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    """Every scored series of a /metrics page (not the self-metrics, which describe each entry point itself)."""
    out = []
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name.startswith("agent_eval_") and not sample.name.startswith(("agent_eval_processor_", "agent_eval_serve_")):
                out.append((sample.name, tuple(sorted(sample.labels.items())), sample.value))
    return sorted(out)


def total(exposition: str, name: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(exposition) for sample in family.samples
               if sample.name == name)


def value(exposition: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


# -- the Python side: the same spans, rebuilt from the Node script's record ---------------------------------

class RecordedIds(IdGenerator):
    """Hands out the ids the JS SDK gave the span about to start."""

    trace_id = span_id = 0

    def generate_trace_id(self) -> int:
        return self.trace_id

    def generate_span_id(self) -> int:
        return self.span_id


def replay(record: Mapping[str, Any], processor: AgentEvalSpanProcessor) -> None:
    """Start and end every recorded span with the Python SDK, in the recorded order, under `processor`."""
    ids = RecordedIds()
    provider = TracerProvider(resource=Resource(record["resource"]), id_generator=ids, shutdown_on_exit=False)
    provider.add_span_processor(processor)
    live: dict[str, Any] = {}
    for entry in record["spans"]:
        if entry["op"] == "start":
            parent = entry["parent_span_id"]
            inside = trace.set_span_in_context(live[parent], otel_context.Context()) if parent else otel_context.Context()
            ids.trace_id, ids.span_id = int(entry["trace_id"], 16), int(entry["span_id"], 16)
            tracer = provider.get_tracer(entry["scope"]["name"], entry["scope"]["version"])
            span = tracer.start_span(entry["name"], context=inside, kind=SpanKind(entry["kind"]),
                                     attributes=entry["attributes"], start_time=int(entry["start_time_unix_nano"]))
            assert (span.context.trace_id, span.context.span_id) == (ids.trace_id, ids.span_id)
            live[entry["span_id"]] = span
        else:
            span = live[entry["span_id"]]
            span.set_attributes(entry["attributes"])  # those set after the start; the others again, unchanged
            for event in entry["events"]:
                span.add_event(event["name"], event["attributes"], timestamp=int(event["time_unix_nano"]))
            code = StatusCode(entry["status"]["code"])
            if code is not StatusCode.UNSET:
                span.set_status(Status(code, entry["status"]["message"]))
            span.end(end_time=int(entry["end_time_unix_nano"]))
    assert provider.force_flush()
    provider.shutdown()


# -- comparing spans in their OTLP form ------------------------------------------------------------------

def key_values(items: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: kv.get("value") for kv in items}


def otlp_spans(requests: Iterable[ExportTraceServiceRequest]) -> dict[str, dict[str, Any]]:
    """Every span of these requests as its OTLP JSON mapping, by hex span id; attributes as dicts (their order is free)."""
    out: dict[str, dict[str, Any]] = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            resource = key_values(json_format.MessageToDict(resource_spans.resource).get("attributes", []))
            for scope_spans in resource_spans.scope_spans:
                scope = json_format.MessageToDict(scope_spans.scope)
                for proto in scope_spans.spans:
                    span = json_format.MessageToDict(proto)
                    for field in ("traceId", "spanId", "parentSpanId"):
                        if field in span:  # base64 in OTLP JSON; hex as the JS SDK and the record write them
                            span[field] = base64.b64decode(span[field]).hex()
                    span["attributes"] = key_values(span.get("attributes", []))
                    for event in span.get("events", []):
                        event["attributes"] = key_values(event.get("attributes", []))
                    span.update(resource=resource, scope=scope)
                    assert span["spanId"] not in out, f"span {span['spanId']} twice"
                    out[span["spanId"]] = span
    return out


def evaluation(span: Mapping[str, Any]) -> tuple[dict[str, Any], list[Any]]:
    return ({k: v for k, v in span["attributes"].items() if k.startswith("agent_eval.")},
            [e for e in span.get("events", []) if e["name"] == "gen_ai.evaluation.result"])


def test_a_node_agent_through_serve_gets_exactly_what_the_python_processor_gives(tmp_path: Path) -> None:
    node = node_or_fail()
    record_file = tmp_path / "spans.json"
    with serving_to_receiver() as (process, where, receiver):
        agent = subprocess.run([node, str(AGENT), "--endpoint", where["OTLP/HTTP"], "--record", str(record_file)],
                               capture_output=True, text=True, timeout=DEADLINE_S, env=clean_env())
        assert agent.returncode == 0, f"the Node agent could not export to serve: {agent.stderr.strip()}"
        record = json.loads(record_file.read_text())
        count = sum(1 for entry in record["spans"] if entry["op"] == "end")
        assert count == 15 and f"{count} spans, {count} exported" in agent.stdout

        received = receiver.wait_for_spans(count, timeout=DEADLINE_S)  # forwarded once evaluated: scores are in
        assert len(received) == count
        theirs_metrics = scrape(where["metrics"])
        stop_cleanly(process)
        assert receiver.span_count() == count  # the shutdown forwarded nothing more, and nothing twice
        requests = receiver.requests

    # the Python processor, fed the same spans rebuilt from the record (not from anything serve produced)
    registry, processed = CollectorRegistry(), InMemorySpanExporter()
    processor = AgentEvalSpanProcessor(CATALOG, registry=registry, forward_to=SimpleSpanProcessor(processed))
    replay(record, processor)  # ends with the provider's shutdown, which shuts the processor down after draining it
    ours_metrics = generate_latest(registry).decode()

    # (a) the metrics: every scored series, the same values (histograms, summaries, counters, gauges)
    assert scored(theirs_metrics) == scored(ours_metrics)  # exactly: same values, not merely close ones
    # 8 calls scored (final_answer is ignored); 4 runs: the 3 agents and the lone tool call, a run of its own
    assert total(theirs_metrics, "agent_eval_tool_calls_total") == 8 and total(theirs_metrics, "agent_eval_runs_total") == 4
    assert value(theirs_metrics, "agent_eval_serve_spans_total", transport="http", outcome="accepted") == count
    assert value(theirs_metrics, "agent_eval_processor_spans_seen_total") == count
    assert value(ours_metrics, "agent_eval_processor_spans_seen_total") == count

    # (b) the spans at the next hop: each is the processor's forwarded copy, to the last attribute and event
    theirs = otlp_spans(requests)
    ours = otlp_spans([encode_spans(processed.get_finished_spans())])
    assert sorted(theirs) == sorted(ours)
    for span_id, span in ours.items():
        assert theirs[span_id] == span, span["name"]
    enriched = {span["name"] for span in ours.values() if evaluation(span)[0]}
    assert enriched == {"invoke_agent support_agent", "invoke_agent math_agent", "invoke_agent analytics_bot",
                        "execute_tool local_index", "execute_tool web_search", "execute_tool calculator",
                        "execute_tool wolfram_alpha", "execute_tool ml_pipeline", "execute_tool mystery_tool"}
    judged = [span["name"].split()[0] for span in ours.values() if evaluation(span)[1]]
    assert sorted(judged) == ["execute_tool"] * 8 + ["invoke_agent"] * 3  # every call but final_answer (ignored), every run

    # and nothing of the original was lost on either way: every attribute and event the JS SDK recorded is there
    for entry in record["spans"]:
        if entry["op"] == "end":
            span = ours[entry["span_id"]]
            assert set(entry["attributes"]) == {k for k in span["attributes"] if not k.startswith("agent_eval.")}, span["name"]
            assert [e["name"] for e in entry["events"]] == [e["name"] for e in span.get("events", []) if e["name"] != "gen_ai.evaluation.result"]

"""Redaction covers everything a forwarded span and an evaluation event carry (README: "Redaction fails closed").

Each test is a leak a QA pass found with real SDK spans, redaction on, in the processor and the
zero-code exporter: the `gen_ai.evaluation.result` explanation (span events and log records),
the span's status description, its links' attributes, its name, its resource, and bytes
attributes holding UTF-16 text.
"""
from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, StatusCode
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core.enrich import redacted
from otel_agent_eval.core.redact import Redactor
from otel_agent_eval.otel.exporter import AgentEvalSpanExporter

MASK = "[REDACTED]"
S = "SEKRIT7Q9"  # the secret; appears nowhere else
PATTERN = "password|token|secret|api_key"
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}


def tool(name: str, **extra: Any) -> dict[str, Any]:
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **extra}


def logs() -> tuple[LoggerProvider, InMemoryLogRecordExporter]:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    return provider, exporter


def app(via: str = "processor", resource: Resource | None = None, **options: Any) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A TracerProvider whose spans leave through the processor or the zero-code exporter, redaction on."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=resource) if resource is not None else TracerProvider()
    if via == "processor":
        provider.add_span_processor(AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SimpleSpanProcessor(spans),
                                                           background=False, redact_keys=PATTERN, **options))
    else:
        exporter = AgentEvalSpanExporter(spans, registry=CollectorRegistry(),
                                         settings=Settings(metrics_enabled=False, redact_keys=PATTERN), **options)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, spans


def everything(span: ReadableSpan) -> str:
    """All a span exporter could read of `span`, as text."""
    return json.dumps({
        "name": span.name, "attributes": dict(span.attributes or {}),
        "events": [(e.name, dict(e.attributes or {})) for e in span.events],
        "links": [dict(link.attributes or {}) for link in span.links],
        "status": span.status.description, "resource": dict(span.resource.attributes),
        "json": span.to_json(),
    }, default=repr)


def assert_clean(spans: Any, records: Any = ()) -> None:
    for span in spans:
        text = everything(span)
        assert S not in text, text[max(0, text.find(S) - 300):text.find(S) + 50]
    for record in records:
        assert S not in json.dumps(dict(record.log_record.attributes or {}), default=repr)


VIA = pytest.mark.parametrize("via", ["processor", "exporter"])


# -- 1. evaluation events: span events and log records -------------------------------------

@VIA
@pytest.mark.parametrize("mode", ["span", "log", "both"])
def test_evaluation_events_are_redacted_in_span_events_and_log_records(via, mode):
    logger_provider, log_exporter = logs()
    provider, spans = app(via, evaluation_events=mode, logger_provider=logger_provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
        with tracer.start_as_current_span("execute_tool web_search", attributes=tool("web_search", **{"error.type": f"api_key={S}"})):
            pass
        with tracer.start_as_current_span("execute_tool unknown", attributes=tool(f"token={S}")):
            pass
    provider.shutdown()
    finished, records = spans.get_finished_spans(), log_exporter.get_finished_logs()
    assert_clean(finished, records)
    by_name = {s.name: s for s in finished}
    assert by_name["execute_tool web_search"].attributes["error.type"] == f"api_key={MASK}"
    explanations = [dict(e.attributes)["gen_ai.evaluation.explanation"] for s in finished for e in s.events
                    if e.name == "gen_ai.evaluation.result"]
    explanations += [r.log_record.attributes["gen_ai.evaluation.explanation"] for r in records]
    assert len(explanations) == (5 if mode != "both" else 10)
    assert any(x.startswith(f"Tool call failed (api_key={MASK})") for x in explanations)
    assert any(x.startswith(f"Unknown tool 'token={MASK}") for x in explanations)


@VIA
@pytest.mark.parametrize("mode", ["span", "both"])
def test_run_evaluation_events_are_redacted(via, mode):
    """The run's completion reason quotes the root's status description: the root's events and logs are masked too."""
    logger_provider, log_exporter = logs()
    provider, spans = app(via, evaluation_events=mode, logger_provider=logger_provider)
    tracer = provider.get_tracer("app")
    with pytest.raises(RuntimeError):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
            with tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index")):
                pass
            raise RuntimeError(f"GET https://api.example/x?token={S} failed")
    provider.shutdown()
    finished, records = spans.get_finished_spans(), log_exporter.get_finished_logs()
    assert_clean(finished, records)
    root = next(s for s in finished if s.name == "invoke_agent support_agent")
    completion = [dict(e.attributes) for e in root.events if dict(e.attributes or {}).get("gen_ai.evaluation.name")
                  == "agent_eval.task_completion"]
    assert completion and f"token={MASK}" in completion[0]["gen_ai.evaluation.explanation"]
    assert f"token={MASK}" in root.attributes["agent_eval.run.completion_reason"]


def test_a_tool_span_that_is_its_own_root_has_its_run_events_redacted():
    provider, spans = app()
    with pytest.raises(RuntimeError):
        with provider.get_tracer("app").start_as_current_span("execute_tool local_index", attributes=tool("local_index")):
            raise RuntimeError(f"password={S}")
    provider.shutdown()
    (span,) = spans.get_finished_spans()
    assert_clean([span])
    assert span.attributes["agent_eval.outcome"] and "agent_eval.run.completion_reason" in span.attributes


# -- 2. status, links, name, resource -----------------------------------------------------

@VIA
def test_status_description_from_a_raised_exception_is_masked(via):
    provider, spans = app(via)
    with pytest.raises(ValueError):
        with provider.get_tracer("app").start_as_current_span("fetch"):
            raise ValueError(f"GET https://api/x?token={S} failed")
    provider.shutdown()
    (span,) = spans.get_finished_spans()
    assert_clean([span])
    assert span.status.status_code is StatusCode.ERROR
    # masked as the exception event's `exception.message` is: an unquoted value runs to the end of the text
    assert span.status.description == f"ValueError: GET https://api/x?token={MASK}"
    (event,) = span.events
    assert event.attributes["exception.message"] == f"GET https://api/x?token={MASK}"


@VIA
def test_link_attributes_are_masked(via):
    provider, spans = app(via)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("upstream") as upstream:
        context = upstream.get_span_context()
    links = [Link(context, {"app.token": S, "app.note": f"url=https://x/?secret={S}", "app.kind": "follows"}),
             Link(context, {"app.kind": "plain"})]
    with tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index"), links=links):
        pass
    provider.shutdown()
    finished = spans.get_finished_spans()
    assert_clean(finished)
    span = next(s for s in finished if s.name == "execute_tool local_index")
    first, second = span.links
    assert dict(first.attributes) == {"app.token": MASK, "app.note": f"url=https://x/?secret={MASK}", "app.kind": "follows"}
    assert first.context == context and dict(second.attributes) == {"app.kind": "plain"}


@VIA
def test_span_names_are_masked_as_text(via):
    provider, spans = app(via)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span(f"GET /x?token={S}&page=2"):
        pass
    with tracer.start_as_current_span(f"execute_tool api_key={S}", attributes=tool("local_index")):
        pass
    with tracer.start_as_current_span("GET /plain"):
        pass
    provider.shutdown()
    finished = spans.get_finished_spans()
    assert_clean(finished)
    assert [s.name for s in finished] == [f"GET /x?token={MASK}&page=2", f"execute_tool api_key={MASK}", "GET /plain"]


@VIA
def test_resource_attributes_are_masked_once_per_resource(via):
    resource = Resource({"service.name": "svc", "api_key": S, "deployment": f"env=prod;token={S}"})
    provider, spans = app(via, resource=resource)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes=AGENT):
        with tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index")):
            pass
        with tracer.start_as_current_span("plain"):
            pass
    provider.shutdown()
    finished = spans.get_finished_spans()
    assert len(finished) == 3
    assert_clean(finished)
    masked = finished[0].resource
    assert dict(masked.attributes) == {"service.name": "svc", "api_key": MASK, "deployment": f"env=prod;token={MASK}"}
    assert all(s.resource is masked for s in finished)  # one masked copy per resource, not per span
    assert dict(resource.attributes)["api_key"] == S  # the app's resource is untouched


def test_unchanged_fields_are_the_originals():
    provider, spans = app()
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("upstream") as upstream:
        context = upstream.get_span_context()
    with tracer.start_as_current_span("execute_tool local_index", attributes=tool("local_index"), links=[Link(context, {"a": 1})]):
        pass
    provider.shutdown()
    plain, span = spans.get_finished_spans()
    assert span.resource is provider.resource
    assert span.links[0].attributes == {"a": 1} and span.dropped_links == 0
    assert span.status.status_code is StatusCode.UNSET and span.name == "execute_tool local_index"


class Unreadable(ReadableSpan):
    @property
    def attributes(self):  # noqa: D401 - a span whose attributes cannot be read
        raise RuntimeError("boom")


def test_a_span_that_cannot_be_redacted_keeps_nothing_it_could_leak():
    span = Unreadable(name=f"GET /?token={S}", resource=Resource({"api_key": S}), attributes={"x": 1},
                      links=[Link(None, {"token": S})])
    out = redacted(span, Redactor(PATTERN))
    assert dict(out.attributes) == {} and out.events == () and out.links == ()
    assert S not in out.name and S not in json.dumps(dict(out.resource.attributes))


# -- 3. bytes ------------------------------------------------------------------------------

@VIA
def test_bytes_holding_utf16_text_are_masked(via):
    provider, spans = app(via)
    attrs = {"app.blob": f"password={S}".encode("utf-16-le"), "app.utf32": f"token={S}".encode("utf-32"),
             "app.binary": bytes(range(256)) + S.encode(), "app.plain": b"hello world",
             "app.pair": f"token={S}".encode(), "app.list": (f"secret={S}".encode("utf-16"), "ok")}
    with provider.get_tracer("app").start_as_current_span("execute_tool local_index", attributes={**tool("local_index"), **attrs}):
        pass
    provider.shutdown()
    (span,) = spans.get_finished_spans()
    out = dict(span.attributes)
    assert S.encode("utf-16-le") not in repr(out).encode() and S not in repr(out)
    assert out["app.blob"] == out["app.utf32"] == out["app.binary"] == MASK
    assert out["app.plain"] == b"hello world"  # valid UTF-8 text without a key: as it was
    assert out["app.pair"] in (MASK, f"token={MASK}".encode())
    assert out["app.list"] == (MASK, "ok")


def test_bytes_unit():
    r = Redactor(PATTERN)
    plain = b"no keys here"
    attrs = {"a": plain, "b": "clé: ü, password=x".encode(), "c": "password=x".encode("utf-16-le"), "d": b"\xff\xfe",
             "e": bytearray(b"fine"), "f": b"tab\tand\nnewline"}
    r.apply(attrs)
    assert attrs["a"] is plain and attrs["e"] == bytearray(b"fine") and attrs["f"] == b"tab\tand\nnewline"
    assert attrs["c"] == attrs["d"] == MASK
    assert b"=x" not in (attrs["b"] if isinstance(attrs["b"], bytes) else attrs["b"].encode())


def test_redacting_a_run_root_leaves_the_original_span_as_it_was():
    """The exported copy of a root is masked; the span the SDK handed over (which other processors see) is not changed."""
    provider, exporter = TracerProvider(), InMemorySpanExporter()
    seen = []

    class Keep(SpanProcessor):
        def on_end(self, span):
            seen.append(span)

    provider.add_span_processor(AgentEvalSpanProcessor(registry=CollectorRegistry(), redact_keys="api_key",
                                                       forward_to=SimpleSpanProcessor(exporter), background=False))
    provider.add_span_processor(Keep())
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent", "api_key": "SEKRIT-root"}):
        with tracer.start_as_current_span("execute_tool web_search", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"}):
            pass
    (root,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert root.attributes["api_key"] == "[REDACTED]" and "agent_eval.run.outcome" in root.attributes
    (original,) = [s for s in seen if s.name.startswith("invoke_agent")]
    assert original.attributes["api_key"] == "SEKRIT-root"


def test_names_from_spans_are_masked_in_metric_labels_too():
    """A tool, agent, tool type or error type named with a secret would leave through /metrics as a label value."""
    from prometheus_client import generate_latest

    registry, provider = CollectorRegistry(), TracerProvider()
    processor = AgentEvalSpanProcessor(registry=registry, redact_keys="token|secret|api_key", background=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "secret=SEKRIT-agent"}):
        for tool, extra in (("token=SEKRIT-tool", {}), ("web_search", {"error.type": "api_key=SEKRIT-error"}),
                            ("local_index", {"gen_ai.tool.type": "token=SEKRIT-type"})):
            with tracer.start_as_current_span(f"execute_tool {tool}", attributes={
                    "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, **extra}):
                pass
    exposition = generate_latest(registry).decode()
    assert "web_search" in exposition and "[REDACTED]" in exposition
    assert "SEKRIT" not in exposition
    processor.shutdown()


def test_log_lines_quote_span_values_masked(caplog):
    """A log line is data leaving the process too: a failing callback's message and the malformed-span warning
    quote values from spans."""
    import logging

    def on_call(record, score):  # (the frames logged show this line: the secret must come from the span, not from it)
        raise ValueError(f"cannot handle {record.name}: token={record.arguments['token']}")

    provider = TracerProvider()
    provider.add_span_processor(AgentEvalSpanProcessor(registry=CollectorRegistry(), redact_keys="token", on_call=on_call,
                                                       background=False))
    with caplog.at_level(logging.WARNING, logger="otel_agent_eval"):
        with provider.get_tracer("t").start_as_current_span("execute_tool x", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": ["token=SEKRIT-name"],
                "gen_ai.tool.call.arguments": json.dumps({"token": "SEKRIT-arguments"})}):
            pass
    assert "on_call callback failed" in caplog.text and "unreadable values" in caplog.text
    assert "SEKRIT" not in caplog.text and "[REDACTED]" in caplog.text
    assert "test_redaction_leaks.py" in caplog.text  # the traceback's frames are still there

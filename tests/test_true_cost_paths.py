"""True cost in every path: the processor live, `serve`, and `score` offline give the same induced tokens and costs for
the same spans, on the root span's attributes, its `agent_eval.true_cost` evaluations and the metrics
(docs/true-cost.md). The spans are real SDK spans, sent to `serve` through the real OTLP/HTTP exporter."""
from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otlp_receiver import HttpReceiver, running_receiver
from prometheus_client import CollectorRegistry
from serve_process import local_only
from test_score import collector_lines, write
from true_cost_traces import record_runs

from otel_agent_eval.config.catalog import load_catalog
from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core.context_attributes import TRUE_COST_EVALUATION
from otel_agent_eval.core.pipeline import Pipeline
from otel_agent_eval.core.redact import Redactor
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.otel.processor import AgentEvalSpanProcessor
from otel_agent_eval.serve import ServeConfig, Service

RUNS = [[("search", 300), ("clock", 20)], [("search", 900)], [("clock", 15), ("search", 40), ("search", 41)]]
CONTEXT_FAMILIES = ("agent_eval_tool_context_tokens_total", "agent_eval_tool_context_cost_usd_total",
                    "agent_eval_tool_context_calls_total")


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


@pytest.fixture
def hop() -> Iterator[tuple[Service, HttpReceiver]]:
    with running_receiver("http") as receiver:
        svc = Service(ServeConfig(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.05, forward_to=receiver.endpoint),
                      settings=Settings(metrics_enabled=False), registry=CollectorRegistry()).start()
        try:
            yield svc, receiver
        finally:
            svc.stop()


def per_call(run: Any) -> list[tuple[str, int | None, float | None]]:
    return [(r.name, t.tokens, t.usd) for r, t in zip(run.tool_calls, run.evaluation.context.calls)]


def context_view(attributes: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> tuple[Any, ...]:
    """The root's context attributes and its true-cost evaluations."""
    ours = {k: v for k, v in attributes.items() if k.startswith("agent_eval.run.") and ("token" in k or "context" in k
                                                                                       or "input_cost" in k)}
    evaluations = sorted(sorted((k, v) for k, v in a.items()) for name, a in events
                         if a.get("gen_ai.evaluation.name") == TRUE_COST_EVALUATION)
    return ours, evaluations


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): round(s.value, 12) for m in registry.collect() for s in m.samples
            if s.name in CONTEXT_FAMILIES}


def test_live_serve_and_offline_give_the_same_induced_tokens_and_costs(hop, tmp_path):
    svc, receiver = hop
    live_runs: list[Any] = []
    forwarded, copies, registry = InMemorySpanExporter(), InMemorySpanExporter(), CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, forward_to=SimpleSpanProcessor(forwarded), on_run=live_runs.append)
    provider = TracerProvider(resource=Resource.create({"service.name": "true-cost"}), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=svc.http.endpoint)))
    provider.add_span_processor(SimpleSpanProcessor(copies))
    record_runs(RUNS, provider=provider)
    assert provider.force_flush()
    processor.drain()
    spans = list(copies.get_finished_spans())
    received = receiver.wait_for_spans(len(spans))
    assert svc.drain()

    offline_runs: list[Any] = []
    score_traces(write(tmp_path / "traces.jsonl", collector_lines(spans)), on_run=offline_runs.append)
    assert [per_call(r) for r in live_runs] == [per_call(r) for r in offline_runs]
    assert [r.evaluation.context for r in live_runs] == [r.evaluation.context for r in offline_runs]
    first = live_runs[0].evaluation.context
    assert [t.tokens for t in first.calls] == [600, 40] and first.calls[0].usd == pytest.approx(600e-6)

    roots = {s.context.span_id: context_view(dict(s.attributes), [(e.name, dict(e.attributes)) for e in s.events])
             for s in forwarded.get_finished_spans() if s.parent is None}
    theirs = {s["span_id"]: context_view(s["attributes"], [(e["name"], e["attributes"]) for e in s["events"]])
              for s in received if s["span_id"] in roots}
    assert theirs == roots
    attrs, evaluations = roots[live_runs[0].root_span_id]
    assert attrs["agent_eval.run.input_tokens"] == 1000 + 1370 + 1407
    assert attrs["agent_eval.run.context_tokens"] == 640
    assert attrs["agent_eval.run.input_tokens"] == attrs["agent_eval.run.context_tokens"] + attrs[
        "agent_eval.run.unattributed_input_tokens"]
    assert [dict(e)["agent_eval.context_tokens"] for e in evaluations] in ([600, 40], [40, 600])
    assert samples(svc.registry) == samples(registry) != {}
    assert registry.get_sample_value("agent_eval_tool_context_tokens_total",
                                     {"gen_ai_tool_name": "search", "gen_ai_agent_name": "support_agent"}) == 600 + 1800 + 162
    provider.shutdown()


def test_spans_arriving_out_of_order_give_the_same_context_cost():
    """The exporter's path (no start hints): a run's tool and model spans in any order before its root ends (parallel
    calls, a batch grouped by scope), the same attribution to the bit."""
    spans = record_runs(RUNS)
    catalog = load_catalog()

    def contexts(order: list[Any]) -> list[Any]:
        runs: list[Any] = []
        pipeline = Pipeline(catalog, on_run=runs.append, sees_starts=False)
        for span in order:
            pipeline.ended(span)
        return [r.evaluation.context for r in sorted(runs, key=lambda r: r.start_ns)]

    expected = contexts(spans)
    assert [c.attributed_tokens for c in expected] == [640, 1800, 192]  # each share held by two model calls
    roots = [s for s in spans if s.parent is None]
    for seed in range(10):
        shuffled = []
        for root in roots:
            children = [s for s in spans if s.parent is not None and s.context.trace_id == root.context.trace_id]
            random.Random(seed).shuffle(children)
            shuffled += [*children, root]
        assert contexts(shuffled) == expected


def test_a_result_is_measured_not_exported_and_redaction_covers_the_evaluations():
    """The true-cost evaluation carries figures and the tool's name, never the result; a secret in a tool's name (an
    MCP tool named by its command line) is masked there as on the span itself."""
    secret = "sk-live-0123456789abcdef"
    forwarded: list[Any] = []
    pipeline = Pipeline(load_catalog(), redactor=Redactor("password|token(?!s|_count)|secret|api_key", True))
    for span in record_runs([[(f"search token={secret}", 100)]]):
        forwarded += pipeline.ended(span)
    root = next(s for s in forwarded if s.parent is None)
    (evaluation,) = [dict(e.attributes) for e in root.events
                     if e.attributes.get("gen_ai.evaluation.name") == TRUE_COST_EVALUATION]
    assert evaluation["agent_eval.context_tokens"] == 200 and evaluation["gen_ai.evaluation.score.value"] == pytest.approx(2e-4)
    text = json.dumps([dict(s.attributes) for s in forwarded] + [dict(e.attributes) for e in root.events], default=str)
    assert "rrrr" not in text  # the result's text is neither in the evaluation nor (tool I/O dropped) on the span
    assert secret not in text


def test_a_nested_agent_is_a_conversation_of_its_own():
    """An outer agent delegates through a tool whose span holds an inner agent: the inner agent's model calls are its
    run's chain (its own search result charged there), the outer chain sees the delegate tool's result only. Live (the
    processor, with its start hints) and as the exporter sees the ended spans alone."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor as Simple
    from opentelemetry.trace import set_span_in_context as inside

    exporter, live_runs = InMemorySpanExporter(), []
    processor = AgentEvalSpanProcessor(registry=None, on_run=live_runs.append, background=False)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    provider.add_span_processor(Simple(exporter))
    tracer = provider.get_tracer("nested")
    ms, t0 = 1_000_000, 1_770_000_000_000_000_000

    def span(name: str, parent: Any, start: float, end: float, **attributes: Any) -> Any:
        s = tracer.start_span(name, context=inside(parent) if parent is not None else None, start_time=t0 + int(start * ms),
                              attributes=attributes)
        if end:
            s.end(end_time=t0 + int(end * ms))
        return s

    def chat(parent: Any, start: float, tokens_in: int, tokens_out: int) -> None:
        span("chat", parent, start, start + 50, **{"gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-haiku-4-5",
                                                   "gen_ai.usage.input_tokens": tokens_in,
                                                   "gen_ai.usage.output_tokens": tokens_out})

    def agent(name: str, parent: Any, start: float) -> Any:
        return span(f"invoke_agent {name}", parent, start, 0, **{"gen_ai.operation.name": "invoke_agent",
                                                                 "gen_ai.agent.name": name})

    def tool(name: str, parent: Any, start: float, end: float, result: str) -> Any:
        return span(f"execute_tool {name}", parent, start, end, **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.result": result})

    outer = agent("planner", None, 0)
    chat(outer, 1, 2000, 40)
    delegate = tool("delegate", outer, 100, 0, "the researcher's summary")
    inner = agent("researcher", delegate, 101)
    chat(inner, 102, 300, 20)  # small: a conversation of its own, no shrink of the planner's
    tool("search", inner, 160, 170, "r" * 2000)
    chat(inner, 180, 820, 30)  # 820 - 320 = 500 added by search
    inner.end(end_time=t0 + 240 * ms)
    delegate.end(end_time=t0 + 250 * ms)
    chat(outer, 260, 2100, 30)  # 2100 - 2040 = 60 added by delegate
    outer.end(end_time=t0 + 400 * ms)
    provider.shutdown()

    exported_runs: list[Any] = []
    pipeline = Pipeline(load_catalog(), on_run=exported_runs.append, sees_starts=False)
    for s in exporter.get_finished_spans():
        pipeline.ended(s)
    for runs in (live_runs, exported_runs):
        by_agent = {r.agent: r.evaluation.context for r in runs}
        assert by_agent["researcher"].shrinks == 0 and [t.tokens for t in by_agent["researcher"].calls] == [500]
        assert by_agent["planner"].shrinks == 0 and [t.tokens for t in by_agent["planner"].calls] == [60]
        assert by_agent["planner"].input_tokens == 2000 + 2100

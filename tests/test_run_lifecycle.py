"""When runs close: a tool span that ends after its agent, the TTL counted from a trace's last span, and runs
closed by the TTL in a quiet process (the hand-off worker's periodic hook, and a drain with background=False)."""
from __future__ import annotations

import time

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor

MS = 10**6
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"}


def tool_attrs(name):
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.arguments": '{"query": "return policy"}'}


class App:
    def __init__(self, **options):
        self.now = 0.0  # the pipeline's clock (seconds)
        self.registry = CollectorRegistry()
        self.exported = InMemorySpanExporter()
        self.runs, self.calls = [], []
        options.setdefault("background", False)
        self.processor = AgentEvalSpanProcessor(
            registry=self.registry, forward_to=SimpleSpanProcessor(self.exported), on_run=self.runs.append,
            on_call=lambda record, score: self.calls.append((record, score)), clock=lambda: self.now, **options)
        provider = TracerProvider()
        provider.add_span_processor(self.processor)
        self.tracer = provider.get_tracer("app")

    def start(self, name, attrs, at_ms, parent=None):
        context = set_span_in_context(parent) if parent is not None else None
        return self.tracer.start_span(name, context=context, attributes=attrs, start_time=10**18 + at_ms * MS)

    def sample(self, name, **labels):
        return self.registry.get_sample_value(name, labels)

    def exported_names(self):
        self.processor.force_flush()
        return [s.name for s in self.exported.get_finished_spans()]


def test_a_tool_span_ending_after_its_agent_is_scored_at_once_with_that_agent():
    app = App()
    agent = app.start("invoke_agent support_agent", AGENT, 0)  # the trace's root
    tool = app.start("execute_tool web_search", tool_attrs("web_search"), 10, parent=agent)
    chat = app.start("chat gpt-4o-mini", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                                          "gen_ai.usage.input_tokens": 10}, 20, parent=agent)
    agent.end(end_time=10**18 + 100 * MS)
    tool.end(end_time=10**18 + 150 * MS)
    chat.end(end_time=10**18 + 160 * MS)  # a late model call joins no run either
    app.processor.force_flush()
    (run,) = app.runs  # the agent's run, evaluated when it ended: the late call is in no run
    assert (run.agent, run.kind, run.tool_calls) == ("support_agent", "agent", [])
    ((record, score),) = app.calls  # scored at once, routed by its agent
    assert (record.agent, score.task, score.verdict) == ("support_agent", "faq", "fail")
    assert score.efficiency < 0.1
    assert app.sample("agent_eval_processor_late_tool_spans_total") == 1
    assert app.sample("agent_eval_processor_held_back_calls") == 0
    assert app.sample("agent_eval_processor_open_runs") == 0
    tool_span = next(s for s in app.exported.get_finished_spans() if s.name == "execute_tool web_search")
    assert tool_span.attributes["agent_eval.task"] == "faq"  # forwarded enriched, at once
    app.now = 10_000.0  # long past the TTL: no bogus run for the late call
    app.processor.force_flush()
    assert len(app.runs) == 1 and app.sample("agent_eval_processor_runs_closed_early_total", reason="ttl") == 0


def test_a_later_local_root_of_the_same_trace_is_a_run_of_its_own():
    """A service called twice in one trace: the second request's spans start after the first root ended."""
    app = App()
    first = app.start("invoke_agent support_agent", AGENT, 0)
    app.start("execute_tool local_index", tool_attrs("local_index"), 10, parent=first).end(end_time=10**18 + 20 * MS)
    first.end(end_time=10**18 + 30 * MS)
    remote = NonRecordingSpan(SpanContext(first.context.trace_id, 0xABC, is_remote=True, trace_flags=TraceFlags(1)))
    second = app.start("POST /again", {}, 50, parent=remote)
    app.start("execute_tool web_search", tool_attrs("web_search"), 60, parent=second).end(end_time=10**18 + 70 * MS)
    second.end(end_time=10**18 + 80 * MS)
    app.processor.force_flush()
    assert [(r.kind, len(r.tool_calls)) for r in app.runs] == [("agent", 1), ("trace", 1)]
    assert app.sample("agent_eval_processor_late_tool_spans_total") == 0


def test_the_ttl_counts_from_a_traces_last_span_so_a_long_run_that_ends_is_one_run():
    app = App(run_ttl_s=600)
    agent = app.start("invoke_agent support_agent", AGENT, 0)
    for i in range(9):  # a tool call every 100 s
        app.now = 100.0 * i
        app.start("execute_tool local_index", tool_attrs("local_index"), i * 100_000, parent=agent).end(
            end_time=10**18 + (i * 100_000 + 10) * MS)
        app.start("invoke_agent other", {**AGENT, "gen_ai.agent.name": "other"}, i * 100_000).end(  # other traces
            end_time=10**18 + (i * 100_000 + 1) * MS)
    app.now = 900.0
    agent.end(end_time=10**18 + 900_000 * MS)
    app.processor.force_flush()
    (run,) = [r for r in app.runs if r.agent == "support_agent"]
    assert (run.closed_by, len(run.tool_calls)) == ("end", 9)
    assert app.sample("agent_eval_processor_runs_closed_early_total", reason="ttl") == 0


def test_an_idle_trace_closes_after_the_ttl_on_a_drain_without_new_traces():
    app = App(run_ttl_s=60)
    root = app.start("POST /stuck", {}, 0)  # never ends
    app.start("execute_tool web_search", tool_attrs("web_search"), 10, parent=root).end(end_time=10**18 + 20 * MS)
    assert "execute_tool web_search" not in app.exported_names()  # agent unknown: held back
    app.now = 59.0
    app.processor.force_flush()
    assert app.runs == [] and app.sample("agent_eval_processor_open_runs") == 1
    app.now = 61.0
    assert app.sample("agent_eval_processor_open_runs") == 0  # a scrape drains, and the drain expires
    assert [(r.closed_by, len(r.tool_calls)) for r in app.runs] == [("ttl", 1)]
    assert "execute_tool web_search" in app.exported_names()
    assert app.sample("agent_eval_processor_runs_closed_early_total", reason="ttl") == 1


def test_the_hand_off_worker_closes_idle_traces_by_itself():
    app = App(run_ttl_s=60, background=True)
    root = app.start("POST /stuck", {}, 0)
    app.start("execute_tool web_search", tool_attrs("web_search"), 10, parent=root).end(end_time=10**18 + 20 * MS)
    app.processor.force_flush()
    assert app.runs == []
    app.now = 61.0  # no span, no flush, no scrape: the worker's next wake-up closes it
    deadline = time.monotonic() + 5
    while not app.runs and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(r.closed_by, len(r.tool_calls)) for r in app.runs] == [("ttl", 1)]
    deadline = time.monotonic() + 5
    while not app.exported.get_finished_spans() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [s.name for s in app.exported.get_finished_spans()] == ["execute_tool web_search"]
    app.processor.shutdown()


def test_serve_closes_idle_traces_between_requests(monkeypatch):
    from otel_agent_eval.otel.wiring import build_pipeline
    from otel_agent_eval.serve import intake as intake_module

    monkeypatch.setattr(intake_module, "EXPIRE_EVERY_S", 0.01)
    now, runs, forwarded = [0.0], [], []
    pipeline, _ = build_pipeline(None, registry=None, sees_starts=False, run_ttl_s=60, on_run=runs.append,
                                 clock=lambda: now[0])
    intake = intake_module.Intake(pipeline, forward=forwarded.extend)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    root = tracer.start_span("POST /stuck", start_time=10**18)  # never ends (or its batch never comes)
    tracer.start_span("execute_tool web_search", context=set_span_in_context(root), attributes=tool_attrs("web_search"),
                      start_time=10**18 + 10 * MS).end(end_time=10**18 + 20 * MS)
    assert intake.offer(exporter.get_finished_spans()) and intake.drain(5)
    assert runs == [] and forwarded == []
    now[0] = 61.0  # no request comes: the consumer's idle wake-up closes it
    deadline = time.monotonic() + 5
    while not forwarded and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [(r.closed_by, len(r.tool_calls)) for r in runs] == [("ttl", 1)]
    assert [s.name for s in forwarded] == ["execute_tool web_search"]
    assert intake.stop()


def test_an_agent_span_still_open_when_its_root_ends_is_no_completed_run():
    """Its own span never ended: the run has no status of its own to call it done (was: completed, "root span OK")."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import set_span_in_context
    from prometheus_client import CollectorRegistry

    from otel_agent_eval import AgentEvalSpanProcessor

    runs, provider = [], TracerProvider()
    provider.add_span_processor(AgentEvalSpanProcessor(registry=CollectorRegistry(), on_run=runs.append, background=False))
    tracer = provider.get_tracer("t")
    root = tracer.start_span("invoke_agent support_agent", attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
    inner = tracer.start_span("invoke_agent math_agent", context=set_span_in_context(root), attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "math_agent"})
    tracer.start_span("execute_tool calculator", context=set_span_in_context(inner), attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculator"}).end()
    root.end()  # the inner agent span never ends
    (run,) = [r for r in runs if r.agent == "math_agent"]
    assert (run.closed_by, run.evaluation.completed) == ("trace_end", False)
    assert run.evaluation.completion_reason == "closed by trace_end before its root span ended"

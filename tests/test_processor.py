"""AgentEvalSpanProcessor on real SDK spans: scoring, agents, forwarding, and never breaking the app."""
from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor

AGENT = {"gen_ai.operation.name": "invoke_agent"}


def tool(name: str, **extra):
    return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **extra}


class App:
    """A TracerProvider with the processor forwarding to an in-memory exporter, as an app would wire it."""

    def __init__(self, **options):
        self.registry = CollectorRegistry()
        self.exported = InMemorySpanExporter()
        options.setdefault("forward_to", SimpleSpanProcessor(self.exported))
        self.processor = AgentEvalSpanProcessor(registry=self.registry, **options)
        self.provider = TracerProvider()
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("app")

    def run(self, agent: str | None, *tools: str, error: str | None = None):
        def calls():
            for name in tools:
                with self.tracer.start_as_current_span(f"execute_tool {name}", attributes=tool(name)) as span:
                    if error:
                        span.set_status(Status(StatusCode.ERROR, error))
        if agent is None:
            calls()
        else:
            with self.tracer.start_as_current_span(f"invoke_agent {agent}", attributes={**AGENT, "gen_ai.agent.name": agent}):
                calls()

    def sample(self, name: str, **labels) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def exported_by_name(self):
        self.processor.force_flush()
        return {s.name: s for s in self.exported.get_finished_spans()}


def test_calls_are_routed_by_the_enclosing_agent_and_scored():
    app = App()
    app.run("support_agent", "local_index", "web_search")
    calls = "agent_eval_tool_calls_total"
    assert app.sample(calls, gen_ai_tool_name="local_index", gen_ai_agent_name="support_agent", task="faq",
                      outcome="optimal", verdict="pass", optimal_tool="local_index") == 1
    assert app.sample(calls, gen_ai_tool_name="web_search", gen_ai_agent_name="support_agent", task="faq",
                      outcome="suboptimal", verdict="fail", optimal_tool="local_index") == 1
    assert app.sample("agent_eval_tool_excess_cost_usd_total", gen_ai_tool_name="web_search",
                      gen_ai_agent_name="support_agent", optimal_tool="local_index") == pytest.approx(0.003)
    assert app.sample("agent_eval_processor_spans_seen_total") == 3
    assert app.sample("agent_eval_processor_spans_scored_total") == 2
    assert app.sample("agent_eval_processor_spans_ignored_total") == 1


def test_unrouted_calls_are_scored_generously_over_their_capabilities():
    app = App()
    app.run(None, "code_interpreter", "wolfram_alpha")
    # code_interpreter is the best tool for data_analysis, its other capability
    assert app.sample("agent_eval_tool_calls_total", gen_ai_tool_name="code_interpreter", gen_ai_agent_name="", task="",
                      outcome="optimal", verdict="pass", optimal_tool="code_interpreter") == 1
    assert app.sample("agent_eval_tool_calls_total", gen_ai_tool_name="wolfram_alpha", gen_ai_agent_name="", task="",
                      outcome="optimal", verdict="pass", optimal_tool="wolfram_alpha") == 1


def test_complexity_mismatch_lowers_the_score_of_a_routed_call():
    app = App()
    app.run("forecast_agent", "simple_filter")
    span = app.exported_by_name()["execute_tool simple_filter"]
    assert span.attributes["agent_eval.complexity_score"] == 0.0
    assert span.attributes["agent_eval.efficiency_score"] == 0.0
    assert "Complexity mismatch: advanced task using simple tool." in span.attributes["agent_eval.reason"]


def test_tool_spans_are_forwarded_enriched_and_others_untouched():
    app = App()
    app.run("support_agent", "web_search")
    spans = app.exported_by_name()
    enriched = spans["execute_tool web_search"]
    assert enriched.attributes["gen_ai.tool.name"] == "web_search"  # the original attributes stay
    expected = {"agent_eval.outcome": "suboptimal", "agent_eval.optimal_tool": "local_index", "agent_eval.passed": False,
                "agent_eval.profile": "latency_critical", "agent_eval.task": "faq", "agent_eval.cost_usd": 0.003,
                "agent_eval.excess_cost_usd": 0.003, "agent_eval.verdict": "fail", "agent_eval.agent": "support_agent"}
    assert {k: enriched.attributes[k] for k in expected} == expected
    assert enriched.attributes["agent_eval.efficiency_score"] == pytest.approx(0.03)
    (event,) = enriched.events
    assert event.name == "gen_ai.evaluation.result"
    assert dict(event.attributes) == {
        "gen_ai.evaluation.name": "agent_eval.tool_efficiency",
        "gen_ai.evaluation.score.value": pytest.approx(0.03),
        "gen_ai.evaluation.score.label": "fail",
        "gen_ai.evaluation.explanation": enriched.attributes["agent_eval.reason"],
    }
    assert enriched.context == spans["execute_tool web_search"].context
    agent_span = spans["invoke_agent support_agent"]  # the run's root carries run scores only
    assert not any(k.startswith("agent_eval.") and not k.startswith("agent_eval.run.") for k in agent_span.attributes)
    assert agent_span.attributes["agent_eval.run.outcome"] == "completed"
    assert enriched.parent.span_id == agent_span.context.span_id


def test_errors_and_unknown_tools_are_counted_not_crashed():
    app = App()
    app.run("support_agent", "local_index", error="timeout")
    app.run("support_agent", "teleporter")
    assert app.sample("agent_eval_tool_calls_total", gen_ai_tool_name="local_index", gen_ai_agent_name="support_agent",
                      task="faq", outcome="error", verdict="pass", optimal_tool="local_index") == 1
    assert app.sample("gen_ai_execute_tool_duration_seconds_count", gen_ai_tool_name="local_index", gen_ai_tool_type="", error_type="_OTHER") == 1
    assert app.sample("agent_eval_tool_calls_total", gen_ai_tool_name="teleporter", gen_ai_agent_name="support_agent",
                      task="faq", outcome="unknown_tool", verdict="fail", optimal_tool="local_index") == 1
    spans = app.exported_by_name()
    assert spans["execute_tool local_index"].attributes["agent_eval.outcome"] == "error"
    assert spans["execute_tool teleporter"].attributes["agent_eval.efficiency_score"] == 0.0


def test_on_call_sees_record_and_score():
    seen = []
    app = App(on_call=lambda record, score: seen.append((record.name, record.agent, score.outcome)))
    app.run("math_agent", "wolfram_alpha")
    app.processor.force_flush()
    assert seen == [("wolfram_alpha", "math_agent", "suboptimal")]


class Exploding(SpanProcessor):
    def on_start(self, span, parent_context=None):
        raise RuntimeError("start")

    def on_end(self, span):
        raise RuntimeError("end")

    def force_flush(self, timeout_millis=30000):
        raise RuntimeError("flush")

    def shutdown(self):
        raise RuntimeError("shutdown")


def test_a_failing_forward_processor_never_reaches_the_app(caplog):
    app = App(forward_to=Exploding())
    own = InMemorySpanExporter()
    app.provider.add_span_processor(SimpleSpanProcessor(own))  # the app's own exporter keeps working
    with caplog.at_level(logging.ERROR):
        app.run("support_agent", "web_search", "web_search")
    assert len(own.get_finished_spans()) == 3
    assert app.sample("agent_eval_processor_forward_errors_total") == 6  # 3 on_start + 3 on_end
    assert app.sample("agent_eval_processor_spans_scored_total") == 2
    assert len([r for r in caplog.records if "forward on_end failed" in r.getMessage()]) == 1  # logged once
    assert app.processor.force_flush() is False
    app.processor.shutdown()
    app.processor.shutdown()


def test_scorer_and_metric_failures_forward_the_original_span(monkeypatch):
    app = App()
    monkeypatch.setattr(app.processor.scorer, "score", lambda *a: 1 / 0)
    app.run("support_agent", "web_search")
    span = app.exported_by_name()["execute_tool web_search"]
    assert not any(k.startswith("agent_eval.") for k in span.attributes)
    assert app.sample("agent_eval_processor_internal_errors_total") == 1


def test_enrichment_failure_is_counted_and_the_span_still_exported(monkeypatch):
    app = App()
    monkeypatch.setattr(app.processor.pipeline.enricher, "enrich", lambda *a: 1 / 0)
    app.run("support_agent", "web_search")
    assert "execute_tool web_search" in app.exported_by_name()
    assert app.sample("agent_eval_processor_enrichments_dropped_total") == 1
    assert app.sample("agent_eval_processor_spans_scored_total") == 1


def test_shutdown_and_flush_follow_the_sdk_contract():
    app = App()
    assert app.processor.force_flush(100) is True
    app.provider.shutdown()
    app.provider.shutdown()
    assert AgentEvalSpanProcessor(registry=None).force_flush() is True


def test_bad_constructor_arguments_raise_at_once_and_a_broken_catalog_falls_back(tmp_path, caplog):
    bad = tmp_path / "c.yaml"
    bad.write_text("tools: {}\n")
    with caplog.at_level(logging.ERROR):  # a file a deployment can break: logged, the packaged catalog scores, as install()
        assert AgentEvalSpanProcessor(bad, registry=None).catalog.source.startswith("<packaged")
    assert "c.yaml" in caplog.text and "packaged default catalog" in caplog.text
    with pytest.raises(ValueError, match="unknown profile 'thrifty'"):
        AgentEvalSpanProcessor(registry=None, profile="thrifty")


def test_open_runs_are_bounded_and_evictions_counted():
    app = App(max_open_traces=3)
    spans = [app.tracer.start_span("invoke_agent a", attributes={**AGENT, "gen_ai.agent.name": f"a{i}"}) for i in range(10)]
    app.processor.force_flush()
    assert len(app.processor.runs) == 3
    assert app.sample("agent_eval_processor_runs_closed_early_total", reason="capacity") == 7
    for span in spans:
        span.end()
    app.processor.force_flush()
    assert len(app.processor.runs) == 0


def test_a_tool_that_cannot_do_the_task_is_never_acceptable():
    app = App()
    app.run("math_agent", "local_index")  # free and fast, but it cannot calculate
    span = app.exported_by_name()["execute_tool local_index"]
    assert (span.attributes["agent_eval.outcome"], span.attributes["agent_eval.efficiency_score"]) == ("suboptimal", 0.0)
    assert span.attributes["agent_eval.reason"].startswith("Capability mismatch: 'local_index' lacks 'arithmetic' for task 'arithmetic'.")


def test_traces_marked_for_hand_off_stay_bounded_when_roots_never_end():
    app = App(max_open_traces=10)
    for _ in range(500):  # chain spans inside roots that never end: nothing opens a run
        root = app.tracer.start_span("request")
        from opentelemetry.trace import set_span_in_context
        app.tracer.start_span("step", context=set_span_in_context(root), attributes={"openinference.span.kind": "CHAIN"}).end()
    app.processor.force_flush()
    assert len(app.processor._active) <= 4 * 10 + 1


def test_a_span_evaluated_upstream_carries_one_evaluation_the_last():
    """Two processors in series, as the zero-code exporter in an app in front of `serve`: the second replaces the
    first's evaluation (its attributes and its `gen_ai.evaluation.result` events), counts each call once, and leaves
    what is not ours alone: the span's own attributes, another evaluator's evaluation event."""
    exported = InMemorySpanExporter()
    last = AgentEvalSpanProcessor(registry=(registry := CollectorRegistry()), forward_to=SimpleSpanProcessor(exported),
                                  environment="development", background=False)
    first = AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=last, environment="staging", background=False)
    provider = TracerProvider()
    provider.add_span_processor(first)
    tracer = provider.get_tracer("app")
    # what an earlier evaluation wrote and this one does not (this call's arguments are captured; this run has no loop)
    stale_tool, stale_run = "agent_eval.arguments_captured", "agent_eval.run.loops"
    with tracer.start_as_current_span("invoke_agent support_agent", attributes={
            **AGENT, "gen_ai.agent.name": "support_agent", stale_run: 3}):
        with tracer.start_as_current_span("execute_tool web_search", attributes=tool(
                "web_search", **{"gen_ai.tool.call.arguments": '{"query": "q"}', stale_tool: False})) as span:
            span.add_event("gen_ai.evaluation.result", {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 1.0})
    spans = {s.name: s for s in exported.get_finished_spans()}

    call, root = spans["execute_tool web_search"], spans["invoke_agent support_agent"]
    assert call.attributes["agent_eval.threshold"] == 0.6  # development's fail threshold: the last evaluation's
    assert stale_tool not in call.attributes and call.attributes["gen_ai.tool.name"] == "web_search"
    names = [e.attributes["gen_ai.evaluation.name"] for e in call.events]
    assert sorted(names) == ["agent_eval.tool_efficiency", "relevance"]
    assert stale_run not in root.attributes and root.attributes["agent_eval.run.outcome"] == "completed"
    run_names = [e.attributes["gen_ai.evaluation.name"] for e in root.events]
    assert len(run_names) == len(set(run_names)) >= 2 and "agent_eval.run_health" in run_names
    assert not any(k.startswith("agent_eval.") and not k.startswith("agent_eval.run.") for k in root.attributes)
    assert registry.get_sample_value("agent_eval_tool_calls_total", {
        "gen_ai_agent_name": "support_agent", "gen_ai_tool_name": "web_search", "optimal_tool": "local_index",
        "outcome": "suboptimal", "task": "faq", "verdict": "fail"}) == 1


def test_enrichment_recognises_exactly_the_attributes_it_writes():
    """The names a previous evaluation is recognised by (core/enrich.py) are those enrichment writes: a new
    attribute must join them, or a span evaluated twice would carry a stale value of it."""
    from otel_agent_eval.core.enrich import RUN_ATTRIBUTES, TOOL_ATTRIBUTES

    app = App(environment="production")
    app.run("math_agent", "calculator", "wolfram_alpha")
    app.run("support_agent", "web_search", error="timeout")
    app.run(None, "unknown_tool_xyz")
    spans = app.exported_by_name().values()
    written = {k for s in spans for k in s.attributes if k.startswith("agent_eval.")}
    assert written and written <= TOOL_ATTRIBUTES | RUN_ATTRIBUTES
    assert {k for k in written if k.startswith("agent_eval.run.")} <= RUN_ATTRIBUTES

"""Agent runs on real SDK spans: assembly, run-level metrics, bounds, and the exported run scores."""
from __future__ import annotations

import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor

QUERY = json.dumps({"query": "return policy"})


class App:
    def __init__(self, **options):
        self.registry = CollectorRegistry()
        self.exported = InMemorySpanExporter()
        self._runs = []
        options.setdefault("on_run", self._runs.append)
        self.processor = AgentEvalSpanProcessor(registry=self.registry, forward_to=SimpleSpanProcessor(self.exported), **options)
        provider = TracerProvider()
        provider.add_span_processor(self.processor)
        self.tracer = provider.get_tracer("app")
        self.clock = 10**18

    def span(self, name, attrs=None, *, ms=10, error=None):
        """A child span of the current span, lasting `ms` on a fake clock."""
        span = self.tracer.start_span(name, attributes=attrs, start_time=self.clock)
        self.clock += ms * 10**6
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self.clock)
        return span

    def tool(self, name, arguments=QUERY, *, ms=10, error=None):
        return self.span(f"execute_tool {name}", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                                  "gen_ai.tool.call.arguments": arguments}, ms=ms, error=error)

    def chat(self, model="gpt-4o-mini", tokens_in=1000, tokens_out=500):
        return self.span(f"chat {model}", {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                           "gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out})

    def agent(self, name, body, *, error=None, kind="invoke_agent"):
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
        span = self.tracer.start_span(f"invoke_agent {name}", attributes=attrs, start_time=self.clock)
        from opentelemetry.trace import use_span
        with use_span(span, end_on_exit=False):
            body()
        self.clock += 10**6
        if error:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=self.clock)
        return span

    def sample(self, name, **labels):
        return self.registry.get_sample_value(name, labels)

    @property
    def runs(self):
        """The runs finished so far (after the hand-off to the processor's thread)."""
        self.processor.force_flush()
        return self._runs

    def exported_names(self):
        self.processor.force_flush()
        return [s.name for s in self.exported.get_finished_spans()]


def support_run(app):
    app.chat()
    app.tool("local_index")
    app.tool("local_index")  # same tool, same arguments: redundant
    app.tool("web_search")   # outside the faq route's expected tools: spurious
    app.chat()


def test_a_multi_step_run_is_assembled_and_evaluated():
    app = App()
    root = app.agent("support_agent", lambda: support_run(app))
    (run,) = app.runs
    assert (run.agent, run.kind, run.task, run.status) == ("support_agent", "agent", "faq", "ok")
    assert [r.name for r in run.tool_calls] == ["local_index", "local_index", "web_search"]
    assert [(c.model, c.input_tokens, c.output_tokens) for c in run.llm_calls] == [("gpt-4o-mini", 1000, 500)] * 2
    assert run.root_span_id == root.context.span_id and run.duration_s == pytest.approx(0.051)
    e = run.evaluation
    assert e.completed and e.outcome == "completed"
    assert e.redundant_calls == ("local_index",) and e.spurious_calls == ("web_search",)
    assert e.over_budget  # faq allows 2 calls
    assert e.tool_correctness == 1.0 and e.argument_validity == 1.0
    assert e.order_accuracy == 1.0 and e.call_precision == pytest.approx(1 / 3)  # 1 spurious + 1 redundant of 3
    assert e.tool_accuracy == pytest.approx((1.0 + 1.0 + 1 / 3) / 3)
    assert e.tool_cost_usd == pytest.approx(0.003)
    assert e.llm_cost_usd == pytest.approx(2 * (1.0 * 0.00015 + 0.5 * 0.0006))
    cost = e.tool_cost_usd + e.llm_cost_usd
    expected_health = 100 * (0.30 + 0.25 * e.tool_accuracy + 0.10 * (1 - 0.051 / 10) + 0.10 * (1 - cost / 0.10)) / 0.75
    assert e.health == pytest.approx(expected_health)
    labels = dict(gen_ai_agent_name="support_agent", task="faq")
    assert app.sample("agent_eval_runs_total", **labels, outcome="completed") == 1
    assert app.sample("agent_eval_redundant_tool_calls_total", **labels, gen_ai_tool_name="local_index") == 1
    assert app.sample("agent_eval_spurious_tool_calls_total", **labels, gen_ai_tool_name="web_search") == 1
    assert app.sample("agent_eval_runs_over_budget_total", **labels) == 1
    assert app.sample("agent_eval_run_tool_calls_sum", **labels) == 3
    assert app.sample("agent_eval_run_cost_usd_sum", **labels) == pytest.approx(cost)
    assert app.sample("agent_eval_run_duration_seconds_bucket", **labels, le="0.05256") == 1
    assert app.sample("agent_eval_run_duration_seconds_bucket", **labels, le="0.04819") == 0
    assert app.sample("agent_eval_tool_correctness_score_sum", **labels) == 1.0
    assert app.sample("agent_eval_run_health_score_sum", **labels) == pytest.approx(expected_health)


def test_the_exported_root_carries_the_run_scores():
    app = App()
    app.agent("support_agent", lambda: support_run(app))
    app.processor.force_flush()
    root = {s.name: s for s in app.exported.get_finished_spans()}["invoke_agent support_agent"]
    attrs = root.attributes
    assert attrs["agent_eval.run.outcome"] == "completed" and attrs["agent_eval.run.task"] == "faq"
    assert (attrs["agent_eval.run.tool_calls"], attrs["agent_eval.run.llm_calls"]) == (3, 2)
    assert (attrs["agent_eval.run.redundant_calls"], attrs["agent_eval.run.spurious_calls"]) == (1, 1)
    assert attrs["agent_eval.run.over_budget"] is True
    assert attrs["agent_eval.run.health_score"] == app.runs[0].evaluation.health
    events = {e.attributes["gen_ai.evaluation.name"]: e.attributes for e in root.events}
    assert events["agent_eval.task_completion"]["gen_ai.evaluation.score.label"] == "pass"
    assert events["agent_eval.tool_correctness"]["gen_ai.evaluation.score.value"] == 1.0
    assert "agent_eval.run_health" in events


def test_llm_prices_dated_snapshots_and_counts_unknown_models():
    app = App()
    app.agent("support_agent", lambda: (app.chat("gpt-4o-mini-2024-07-18"), app.chat("mystery-llm"), app.tool("local_index")))
    e = app.runs[0].evaluation
    assert e.llm_cost_usd == pytest.approx(1.0 * 0.00015 + 0.5 * 0.0006)
    assert e.unpriced_models == ("mystery-llm",)
    assert app.sample("agent_eval_processor_unpriced_llm_calls_total") == 1


@pytest.mark.parametrize("body,error,completed,why", [
    (lambda app: app.tool("local_index"), "crashed", False, "the run ended with an error: crashed"),
    (lambda app: (app.tool("local_index", error="timeout"), app.tool("local_index")), None, True, "every tool error recovered"),
    (lambda app: (app.tool("local_index"), app.tool("web_search", error="503")), None, False, "not recovered by a later successful call: web_search"),
])
def test_task_completion(body, error, completed, why):
    app = App()
    app.agent("support_agent", lambda: body(app), error=error)
    e = app.runs[0].evaluation
    assert e.completed is completed and why in e.completion_reason
    assert app.sample("agent_eval_runs_total", gen_ai_agent_name="support_agent", task="faq",
                      outcome="completed" if completed else "failed") == 1


def test_completion_validator_hook(caplog):
    app = App(run_validator=lambda run: len(run.tool_calls) == 1)
    app.agent("support_agent", lambda: app.tool("local_index"))
    app.agent("support_agent", lambda: (app.tool("local_index"), app.tool("local_index", '{"query": "x"}')))
    assert [r.evaluation.completed for r in app.runs] == [True, False]
    broken = App(run_validator=lambda run: 1 / 0)
    with caplog.at_level(logging.WARNING):
        broken.agent("support_agent", lambda: broken.tool("local_index"))
    assert not broken.runs[0].evaluation.completed and "ZeroDivisionError" in caplog.text


def test_arguments_are_checked_against_the_catalog_schema_and_span_schemas():
    app = App()
    def body():
        app.tool("web_search", "{}")                              # query is required
        app.tool("web_search", '{"query": "x", "max_results": 0}')  # minimum 1
        app.tool("local_index")
        app.span("lookup", {"openinference.span.kind": "TOOL", "tool.name": "crm_lookup", "input.value": '{"id": "7"}',
                            "tool.parameters": json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}})})
    app.agent("support_agent", body)
    e = app.runs[0].evaluation
    assert e.argument_validity == pytest.approx(1 / 4)
    assert e.invalid_calls == ("web_search: 'query' is a required property",
                               "web_search: max_results: 0 is less than the minimum of 1",
                               "crm_lookup: id: '7' is not of type 'integer'")


def test_invalid_arguments_give_their_own_reasons_run_after_run():
    """Refusals are remembered per (schema, arguments): the same call gets the same reason, another call its own."""
    app = App()
    for _ in range(3):
        for arguments in ('{"query": "x", "max_results": 0}', '{"query": "x", "max_results": "5"}', '{"max_results": 3}'):
            app.agent("support_agent", lambda arguments=arguments: app.tool("web_search", arguments))
    reasons = [run.evaluation.invalid_calls for run in app.runs]
    assert reasons == [("web_search: max_results: 0 is less than the minimum of 1",),
                       ("web_search: max_results: '5' is not of type 'integer'",),
                       ("web_search: 'query' is a required property",)] * 3


def test_order_accuracy_against_expected_tools(tmp_path):
    catalog = tmp_path / "c.yaml"
    catalog.write_text("""
tools:
  search: {cost_usd: 0, latency_ms: 10, capabilities: [s], complexity: simple}
  summarise: {cost_usd: 0, latency_ms: 10, capabilities: [s], complexity: simple}
tasks:
  research: {match: {gen_ai.agent.name: researcher}, capability: s, expected_tools: [search, summarise]}
""")
    app = App(catalog=catalog)
    app.agent("researcher", lambda: (app.tool("summarise"), app.tool("search")))
    e = app.runs[0].evaluation
    assert e.order_accuracy == 0.5 and e.tool_correctness == 1.0 and e.spurious_calls == ()


def test_nested_agents_are_separate_runs_and_wrappers_are_dropped():
    app = App()
    app.agent("workflow", lambda: app.agent("support_agent", lambda: app.tool("local_index")))
    assert [r.agent for r in app.runs] == ["support_agent"]
    app._runs.clear()
    app.agent("math_agent", lambda: (app.tool("basic_calculator"), app.agent("support_agent", lambda: app.tool("local_index"))))
    assert sorted((r.agent, len(r.tool_calls)) for r in app.runs) == [("math_agent", 1), ("support_agent", 1)]


def test_calls_without_an_agent_form_a_trace_run():
    app = App()
    root = app.tracer.start_span("POST /ask", start_time=app.clock)
    from opentelemetry.trace import use_span
    with use_span(root, end_on_exit=False):
        app.tool("web_search")
        app.chat()
    root.end(end_time=app.clock + 10**6)
    (run,) = app.runs
    assert (run.kind, run.agent, run.task, run.root_name) == ("trace", None, "", "POST /ask")
    assert [r.name for r in run.tool_calls] == ["web_search"] and len(run.llm_calls) == 1
    exported = app.exported_names()
    assert exported.count("execute_tool web_search") == 1  # held until the root ended, then exported once


def test_runs_whose_root_never_ends_close_after_the_ttl_and_nothing_is_lost():
    app = App(run_ttl_s=60)
    now = [0.0]
    app.processor.runs._clock = lambda: now[0]
    stuck = app.tracer.start_span("POST /stuck", start_time=app.clock)
    from opentelemetry.trace import use_span
    with use_span(stuck, end_on_exit=False):
        app.tool("web_search")  # agent unknown: held back
    assert "execute_tool web_search" not in app.exported_names()
    now[0] = 120.0
    app.agent("support_agent", lambda: app.tool("local_index"))
    assert app.sample("agent_eval_processor_runs_closed_early_total", reason="ttl") == 1
    assert sorted(r.closed_by for r in app.runs) == ["end", "ttl"]
    assert "execute_tool web_search" in app.exported_names()


def test_calls_past_the_per_run_cap_are_counted_not_kept():
    app = App(max_calls_per_run=2)
    app.agent("support_agent", lambda: [app.tool("local_index", json.dumps({"query": str(i)})) for i in range(5)])
    (run,) = app.runs
    assert len(run.tool_calls) == 2 and run.calls_dropped == 3
    assert app.sample("agent_eval_processor_runs_calls_dropped_total") == 3
    assert app.sample("agent_eval_run_tool_calls_sum", gen_ai_agent_name="support_agent", task="faq") == 5


def test_shutdown_closes_open_runs_and_forwards_held_spans():
    app = App()
    root = app.tracer.start_span("POST /ask", start_time=app.clock)
    from opentelemetry.trace import use_span
    with use_span(root, end_on_exit=False):
        app.tool("web_search")
    app.processor.shutdown()
    assert [r.closed_by for r in app.runs] == ["shutdown"]
    assert "execute_tool web_search" in app.exported_names()


def test_a_failing_on_run_callback_is_counted():
    app = App(on_run=lambda run: 1 / 0)
    app.agent("support_agent", lambda: app.tool("local_index"))
    assert app.sample("agent_eval_processor_internal_errors_total") == 1
    assert app.sample("agent_eval_runs_total", gen_ai_agent_name="support_agent", task="faq", outcome="completed") == 1


def test_a_retry_after_an_error_is_not_redundant():
    app = App()
    app.agent("support_agent", lambda: (app.tool("local_index", error="timeout"), app.tool("local_index"), app.tool("local_index")))
    assert app.runs[0].evaluation.redundant_calls == ("local_index",)  # only the third call repeats a success


def test_a_wrapper_agent_seen_only_at_its_end_is_no_run_of_its_own():
    """The zero-code exporter and `score` get no start hints: a workflow span that only wraps an agent
    (OpenInference's "Agent workflow", OpenLLMetry's `workflow`) became an extra empty run."""
    from otel_agent_eval import AgentEvalSpanExporter

    runs: list = []
    exporter = AgentEvalSpanExporter(InMemorySpanExporter(), registry=CollectorRegistry(), on_run=runs.append)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    agent = {"gen_ai.operation.name": "invoke_agent"}
    with tracer.start_as_current_span("invoke_agent workflow", attributes={**agent, "gen_ai.agent.name": "workflow"}):
        with tracer.start_as_current_span("invoke_agent support_agent", attributes={**agent, "gen_ai.agent.name": "support_agent"}):
            tracer.start_span("execute_tool local_index", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "local_index"}).end()
    provider.shutdown()
    assert [(r.agent, len(r.tool_calls)) for r in runs] == [("support_agent", 1)]


def test_agent_runs_also_feed_the_genai_agent_metrics():
    """gen_ai.invoke_agent.duration / .tool_calls / .inference_calls, with the conventions' buckets, for runs
    rooted at an agent span; a trace without one is no agent invocation."""
    app = App()
    app.agent("support_agent", lambda: (app.chat(), app.tool("local_index"), app.chat(), app.tool("web_search")))
    with app.tracer.start_as_current_span("handle_request"):
        app.tool("local_index")
    labels = {"gen_ai_agent_name": "support_agent", "task": "faq"}
    assert app.sample("gen_ai_invoke_agent_tool_calls_sum", **labels) == 2
    assert app.sample("gen_ai_invoke_agent_inference_calls_sum", **labels) == 2
    assert app.sample("gen_ai_invoke_agent_inference_calls_bucket", **labels, le="2.0") == 1
    assert app.sample("gen_ai_invoke_agent_duration_seconds_count", **labels) == 1
    assert app.sample("gen_ai_invoke_agent_duration_seconds_bucket", **labels, le="409.6") == 1
    assert app.sample("agent_eval_run_tool_calls_count", gen_ai_agent_name="", task="") == 1  # the trace run
    assert app.sample("gen_ai_invoke_agent_tool_calls_count", gen_ai_agent_name="", task="") is None


def test_health_is_the_weighted_mean_of_the_known_parts():
    """The seed tutorial's weights renormalised over the parts that are known, to the last bit."""
    from functools import reduce
    from itertools import product
    from operator import add

    from otel_agent_eval.core.run_eval import HEALTH_WEIGHTS, _health

    for completed, accuracy, hallucination_free, duration, cost in product(
            [True, False], [None, 0.0, 1 / 3, 1.0], [None, 0.7], [None, 0.051, 12.0], [0.0, 0.0307, 0.2]):
        parts = {"completion": 1.0 if completed else 0.0, "tool_accuracy": accuracy, "hallucination_free": hallucination_free,
                 "latency": None if duration is None else max(0.0, 1 - duration / 10), "cost": max(0.0, 1 - cost / 0.10)}
        known = [(HEALTH_WEIGHTS[k], v) for k, v in parts.items() if v is not None]
        # added left to right, as the figure is on every Python: sum() compensates its rounding from Python 3.12 on
        expected = 100 * reduce(add, (w * v for w, v in known)) / reduce(add, (w for w, _ in known))
        assert _health(completed, accuracy, hallucination_free, duration, cost) == expected, parts

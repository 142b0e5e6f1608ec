"""One sample budget bounds a scrape whatever the traffic; what does not fit is counted under `_other_`."""
from __future__ import annotations

import random

import pytest
from opentelemetry.trace import Status, StatusCode, set_span_in_context
from prometheus_client import generate_latest
from reliability_helpers import CATALOG_AGENTS, CATALOG_TOOLS, App, agent_attrs, tool_attrs

from otel_agent_eval.metrics import budget

SCORED = ("agent_eval_tool_", "gen_ai_execute_tool_duration", "agent_eval_run", "agent_eval_redundant", "agent_eval_spurious",
          "agent_eval_runs")
CATALOG_GAUGES = ("agent_eval_tool_expected_latency", "agent_eval_tool_latency_slo", "agent_eval_tool_cost_per_call")


def _flood(app: App, *, runs: int, agents: int, tools: int, error_types: int, seed: int = 7) -> int:
    """`runs` agent runs of 3 tool calls each over many agent, tool and error names; returns the calls made."""
    rng = random.Random(seed)
    names = list(CATALOG_TOOLS) + [f"tool-{i}" for i in range(tools)]
    calls = 0
    for i in range(runs):
        agent = rng.choice(CATALOG_AGENTS) if i % 4 == 0 else f"agent-{rng.randrange(agents)}"
        root = app.tracer.start_span("invoke_agent", attributes=agent_attrs(agent))
        context = set_span_in_context(root)
        for _ in range(3):
            extra = {"error.type": f"E{rng.randrange(error_types)}"} if rng.random() < 0.3 else {}
            span = app.tracer.start_span("execute_tool", context=context, attributes=tool_attrs(rng.choice(names), **extra))
            if extra:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
            calls += 1
        root.end()
    return calls


def _scored_samples(app: App) -> int:
    return sum(len(f.samples) for f in app.registry.collect()
               if f.name.startswith(SCORED) and not f.name.startswith(CATALOG_GAUGES))


def _total(app: App, name: str) -> float:
    return sum(app.series(name).values())


@pytest.mark.parametrize("caps", [{}, {"max_agents": 100_000, "max_unknown_tools": 100_000}], ids=["defaults", "caps-lifted"])
def test_a_flood_of_names_stays_within_the_budget_and_every_call_is_counted(caps):
    app = App(background=False, **caps)
    calls = _flood(app, runs=4_000, agents=2_000, tools=500, error_types=200)
    app.provider.force_flush()

    samples = sum(len(f.samples) for f in app.registry.collect())
    size = len(generate_latest(app.registry))
    print(f"\n{calls:,} calls over 2,000 agents x 500 tools x 200 error types: {samples:,} samples, {size / 2**20:.1f} MiB; "
          f"budget charged {app.processor.metrics.budget.used:,}")
    assert samples <= budget.DEFAULT_MAX_SAMPLES  # the whole scrape, self-metrics and catalog gauges included
    assert _scored_samples(app) <= app.processor.metrics.budget.used  # the accounting is an upper bound
    assert app.self_metric("labels_folded") > 0

    # Nothing lost: every call and run is in some series, many of them under _other_.
    assert _total(app, "agent_eval_tool_calls_total") == calls
    assert _total(app, "gen_ai_execute_tool_duration_seconds_count") == calls
    assert _total(app, "agent_eval_tool_latency_seconds_count") == calls
    assert _total(app, "agent_eval_runs_total") == 4_000
    assert any(dict(k).get("gen_ai_agent_name") == "_other_" for k in app.series("agent_eval_tool_calls_total"))
    app.provider.shutdown()


def test_label_sets_are_admitted_in_arrival_order_and_folded_stably_past_the_budget():
    app = App(background=False, max_samples=4_000)
    for round_ in range(2):  # the same traffic twice: every call lands where it landed the first time
        for i in range(40):
            root = app.tracer.start_span("invoke_agent", attributes=agent_attrs(f"agent-{i}"))
            app.tracer.start_span("execute_tool", context=set_span_in_context(root), attributes=tool_attrs("local_index")).end()
            root.end()
        calls = app.series("agent_eval_tool_calls_total")
        by_agent = {}
        for key, value in calls.items():
            agent = dict(key)["gen_ai_agent_name"]
            by_agent[agent] = by_agent.get(agent, 0) + value
        admitted = sorted((a for a in by_agent if a != "_other_"), key=lambda a: int(a.split("-")[1]))
        assert admitted == [f"agent-{i}" for i in range(len(admitted))]  # the first ones keep their names
        assert 0 < len(admitted) < 40
        assert all(by_agent[a] == round_ + 1 for a in admitted)
        assert by_agent["_other_"] == (40 - len(admitted)) * (round_ + 1)
    assert _scored_samples(app) <= app.processor.metrics.budget.used <= 4_000
    # The fleet's latency histogram is per tool, not per agent: it kept its label.
    assert app.series("gen_ai_execute_tool_duration_seconds_count") == {
        (("error_type", ""), ("gen_ai_tool_name", "local_index"), ("gen_ai_tool_type", "")): 80}
    app.provider.shutdown()


def test_the_budget_is_a_setting():
    from otel_agent_eval.config.settings import Settings

    assert Settings.from_env({"OTEL_AGENT_EVAL_MAX_SAMPLES": "1000"}).max_samples == 1000
    assert Settings().max_samples == budget.DEFAULT_MAX_SAMPLES


def test_a_call_that_folds_is_counted_as_folded_each_time_it_comes():
    """A call's key is remembered only where it was counted under its own labels: one folded into `_other_` takes
    the whole way again each time, so the folded count grows by the same for the same traffic, round after round."""
    app = App(background=False, max_samples=4_000)
    folded = [app.self_metric("labels_folded") or 0]
    for _ in range(3):
        for i in range(40):
            root = app.tracer.start_span("invoke_agent", attributes=agent_attrs(f"agent-{i}"))
            context = set_span_in_context(root)
            for tool in ("local_index", "web_search"):
                app.tracer.start_span("execute_tool", context=context, attributes=tool_attrs(tool)).end()
            root.end()
        folded.append(app.self_metric("labels_folded"))
    steps = [b - a for a, b in zip(folded, folded[1:])]
    assert steps[0] > 0 and steps == [steps[0]] * 3
    calls = app.series("agent_eval_tool_calls_total")
    assert sum(calls.values()) == 240
    assert sum(v for k, v in calls.items() if dict(k)["gen_ai_agent_name"] == "_other_") > 0
    app.provider.shutdown()


@pytest.mark.parametrize("max_samples", [0, 1_000])
def test_a_call_folded_past_the_budget_keeps_its_error_state(max_samples):
    """With the budget used up, a call's tool folds to `_other_` in the duration histogram, but a call that did not fail
    keeps `error_type=""` (an `error_type!=""` query must not count it as failed); a failed one is `_OTHER`."""
    app = App(background=False, max_samples=max_samples)
    for tool in CATALOG_TOOLS:
        app.tracer.start_span("execute_tool", attributes=tool_attrs(tool)).end()
    failed = app.tracer.start_span("execute_tool", attributes=tool_attrs("ml_pipeline", **{"error.type": "TimeoutError"}))
    failed.set_status(Status(StatusCode.ERROR))
    failed.end()
    app.provider.force_flush()
    durations = app.series("gen_ai_execute_tool_duration_seconds_count")
    assert sum(durations.values()) == len(CATALOG_TOOLS) + 1
    assert any(dict(k)["gen_ai_tool_name"] == "_other_" for k in durations)  # the budget did fold some
    assert sum(v for k, v in durations.items() if dict(k)["error_type"] != "") == 1
    assert all(dict(k)["error_type"] in ("", "_OTHER") for k in durations if dict(k)["gen_ai_tool_name"] == "_other_")
    app.provider.shutdown()

"""The context cost of tool calls (core/context_cost.py): hand-worked examples per shape, conservation on real traces.

The examples are those of docs/true-cost.md; each figure there is asserted here to the token.
"""
from __future__ import annotations

import random
from typing import Any

import pytest

from otel_agent_eval.config.catalog import ModelPrice
from otel_agent_eval.core.context_cost import ContextCost, context_cost, input_rates, result_size, split
from conftest import real_traces
from otel_agent_eval.core.prices import TABLE
from otel_agent_eval.core.recognize import GENAI, VERCEL_AI, LLMCall, ToolCallRecord

MS = 1_000_000
MISTRAL = "mistral/mistral-small-latest"
HAIKU = "global.anthropic.claude-haiku-4-5-20251001-v1:0"


def llm(start_ms: float, tokens_in: int, tokens_out: int, *, cached: int = 0, model: str = "m",
        cost: float | None = None) -> LLMCall:
    return LLMCall(model, tokens_in, tokens_out, int(start_ms * 10), None, None, int(start_ms * MS), cached, None, cost)


def tool(start_ms: float, end_ms: float, name: str = "t", result: str | None = None, *, error: str | None = None,
         convention: Any = GENAI) -> ToolCallRecord:
    attrs = {} if result is None else {convention.result[0]: result}
    return ToolCallRecord(name, attrs, convention, (end_ms - start_ms) / 1e3, int(start_ms * MS), int(end_ms * MS),
                          "ToolError" if error is not None else None, error)


def per_token(fresh: float, cached: float | None = None) -> Any:
    return lambda call: (fresh, fresh if cached is None else cached)


def conserved(cost: ContextCost, calls: list[LLMCall]) -> None:
    assert cost.input_tokens == sum(c.input_tokens for c in calls)
    assert cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens
    assert sum(t.tokens or 0 for t in cost.calls) == cost.attributed_tokens
    assert round(cost.attributed_usd + cost.unattributed_usd, 2) == round(cost.input_usd, 2)
    assert cost.attributed_usd + cost.unattributed_usd == pytest.approx(cost.input_usd, rel=1e-9, abs=1e-15)


def test_split_adds_up_exactly_by_largest_remainder():
    assert split(10, [1, 1, 1]) == [4, 3, 3]
    assert split(7, [3, None]) == [4, 3]  # a size unknown: evenly
    assert split(5, [0, 4]) == [0, 5]
    assert split(1324, [583798, 604778, 601338]) == [432, 447, 445]
    for _ in range(200):
        weights = [random.randint(0, 10**6) for _ in range(random.randint(1, 9))]
        total = random.randint(0, 10**7)
        assert sum(split(total, weights)) == total


def test_agno_hand_worked():
    """any-agent AGNO: 395 in/16 out, get_current_time (97 chars), 483 in/14 out (72 added), write_file, 518 in (21)."""
    calls = [llm(0, 395, 16), llm(400, 483, 14), llm(800, 518, 44)]
    tools = [tool(300, 303, "get_current_time", "x" * 97), tool(700, 701, "write_file", "{}")]
    cost = context_cost(calls, tools, per_token(1e-7))
    assert [(t.share, t.held_by, t.tokens) for t in cost.calls] == [(72, 2, 144), (21, 1, 21)]
    assert (cost.input_tokens, cost.attributed_tokens, cost.unattributed_tokens) == (1396, 165, 1231)
    assert cost.calls[0].usd == pytest.approx(144e-7)
    conserved(cost, calls)


def test_parallel_tool_calls_split_by_result_size():
    """Vercel AI SDK: 760 in/241 out, three image_reader results at once, then 2,325 in: 1,324 added."""
    calls = [llm(0, 760, 241, model=HAIKU), llm(2000, 2325, 330, model=HAIKU)]
    sizes = [583798, 604778, 601338]
    tools = [tool(1900, 1905, "image_reader", "a" * n, convention=VERCEL_AI) for n in sizes]
    cost = context_cost(calls, tools, per_token(1e-6))
    assert [t.tokens for t in cost.calls] == [432, 447, 445]
    assert cost.unattributed_tokens == 760 + 2325 - 1324
    conserved(cost, calls)


def test_parallel_calls_without_results_split_evenly():
    calls = [llm(0, 100, 10), llm(500, 141, 5)]
    cost = context_cost(calls, [tool(100, 110, "a"), tool(100, 120, "b"), tool(101, 130, "c", "only this one says")],
                        per_token(1e-6))
    assert [t.tokens for t in cost.calls] == [11, 10, 10]  # 31 added, one size unknown: evenly


def test_a_failed_tool_calls_error_text_is_context():
    calls = [llm(0, 100, 10), llm(500, 150, 5)]
    failed = tool(100, 110, "search", error="TimeoutError: the index did not answer within 30 s")
    ok = tool(100, 120, "clock", "12:00")
    assert result_size(failed) == len(failed.error_message)
    cost = context_cost(calls, [failed, ok], per_token(1e-6))
    assert cost.calls[0].tokens > cost.calls[1].tokens > 0  # 40 added, split 51:5
    assert [t.tokens for t in cost.calls] == [36, 4]
    conserved(cost, calls)


def test_a_tool_that_starts_while_the_model_streams_feeds_the_next_call():
    """streamText: the tool runs inside the doStream span that asked for it, and feeds the next doStream."""
    calls = [llm(0, 300, 40), llm(900, 400, 20)]
    cost = context_cost(calls, [tool(200, 850, "weather", "sunny")], per_token(1e-6))
    assert cost.calls[0].tokens == 60 and cost.inner_llm_calls == 0
    conserved(cost, calls)


def test_a_tie_at_the_millisecond_feeds_the_call_that_starts_with_the_tool():
    """Vercel's start times are cut to the millisecond: a tool and the call it fed can share one."""
    calls = [llm(0, 1865, 174), llm(1825, 2275, 263)]
    tools = [tool(1825, 1825.03, "precipitation_forecast", "p" * 93), tool(1825, 1825.136, "temperature_forecast", "t" * 424)]
    cost = context_cost(calls, tools, per_token(1e-6))
    assert sum(t.tokens for t in cost.calls) == 2275 - 1865 - 174
    assert cost.inner_llm_calls == 0


def test_cached_input_is_no_shrinking_context_and_costs_the_cache_price():
    """Call 2 reads 1,000 of its 1,200 input tokens from the cache: the old part (1,000) is all cached, the 150 added
    by the tool are fresh. The tool pays 150 fresh at call 2, then 150 at the old part's rate of call 3."""
    calls = [llm(0, 1000, 50), llm(500, 1200, 20, cached=1000), llm(900, 1300, 10, cached=1200)]
    cost = context_cost(calls, [tool(100, 200, "search", "r" * 600)], per_token(3e-6, 0.3e-6))
    assert cost.shrinks == 0
    (search,) = cost.calls
    assert (search.share, search.held_by, search.tokens) == (150, 2, 300)
    assert search.usd == pytest.approx(150 * 3e-6 + 150 * 0.3e-6)  # call 3's old part (1,200) is all cached
    inputs = 1000 * 3e-6 + (200 * 3e-6 + 1000 * 0.3e-6) + (100 * 3e-6 + 1200 * 0.3e-6)
    assert cost.input_usd == pytest.approx(inputs)
    conserved(cost, calls)


def test_a_context_that_shrank_ends_the_carry():
    """any-agent LANGCHAIN: 245/16, tool, 331/14 (70 added), tool, 366/33 (21 added), then 320 < 366: the carry ends."""
    calls = [llm(0, 245, 16), llm(400, 331, 14), llm(800, 366, 33), llm(1500, 320, 62)]
    tools = [tool(300, 303, "get_current_time", "now"), tool(700, 701, "write_file", "{}")]
    cost = context_cost(calls, tools, per_token(1e-7))
    assert cost.shrinks == 1
    assert [(t.share, t.held_by, t.tokens) for t in cost.calls] == [(70, 2, 140), (21, 1, 21)]
    assert cost.unattributed_tokens == 1262 - 161  # the last call's 320 are all unattributed
    conserved(cost, calls)


def test_a_tool_that_fed_a_shrunk_call_adds_nothing_measurable():
    calls = [llm(0, 900, 10), llm(500, 400, 10), llm(900, 480, 10)]
    tools = [tool(100, 200, "summarize", "short"), tool(600, 700, "lookup", "x")]
    cost = context_cost(calls, tools, per_token(1e-6))
    assert [t.tokens for t in cost.calls] == [0, 70]
    assert cost.calls[0].model == "m"  # it fed a call: measured, and measured to add nothing that can be told apart


def test_a_call_without_usage_leaves_the_chain_and_its_results_feed_the_next():
    calls = [llm(0, 500, 20), llm(400, 0, 0), llm(900, 700, 30)]
    tools = [tool(100, 200, "a", "aa"), tool(500, 600, "b", "bb")]
    cost = context_cost(calls, tools, per_token(1e-6))
    assert cost.llm_calls_without_usage == 1
    assert [t.tokens for t in cost.calls] == [90, 90]  # 700 - 520 = 180, split evenly by equal sizes
    conserved(cost, calls)


def test_a_run_without_token_counts_is_unmeasured_never_zero():
    cost = context_cost([llm(0, 0, 0)], [tool(100, 200, "a", "x")], per_token(1e-6))
    assert not cost.measured
    assert cost.calls[0].tokens is None and cost.calls[0].usd is None
    assert not context_cost([], [tool(100, 200, "a", "x")], per_token(1e-6)).measured


def test_spans_arriving_out_of_order_give_the_same_attribution():
    calls = [llm(0, 395, 16), llm(400, 483, 14), llm(800, 518, 44), llm(1200, 600, 10)]
    tools = [tool(300, 303, "a", "x" * 97), tool(700, 701, "b", "{}"), tool(1000, 1100, "c", "ccc"), tool(1001, 1090, "d", "d")]
    expected = context_cost(calls, tools, per_token(1e-7))
    for seed in range(10):
        shuffled_calls, order = calls[:], list(range(len(tools)))
        random.Random(seed).shuffle(shuffled_calls)
        random.Random(seed + 1).shuffle(order)
        cost = context_cost(shuffled_calls, [tools[i] for i in order], per_token(1e-7))
        assert [cost.calls[order.index(i)] for i in range(len(tools))] == list(expected.calls)
        assert cost[:7] == expected[:7]


def test_a_model_call_made_inside_a_tool_is_the_tools_own_and_breaks_no_carry():
    """A tool that asks a model itself (a summariser): its small call is no shrink of the agent's context."""
    calls = [llm(0, 1000, 20), llm(150, 80, 30), llm(500, 1100, 10)]
    cost = context_cost(calls, [tool(100, 300, "summarize", "s")], per_token(1e-6))
    assert cost.inner_llm_calls == 1 and cost.shrinks == 0
    assert cost.calls[0].tokens == 80
    assert cost.unattributed_tokens == 1000 + 80 + 1100 - 80
    conserved(cost, calls)


def test_unpriced_calls_leave_the_cost_unknown_not_zero():
    calls = [llm(0, 100, 10), llm(500, 150, 5)]
    cost = context_cost(calls, [tool(100, 110, "a", "x")], lambda call: None)
    assert cost.calls[0].tokens == 40 and cost.calls[0].usd is None
    assert cost.unpriced_llm_calls == 2 and cost.input_usd == 0.0


def test_a_tool_after_the_last_model_call_induces_nothing():
    cost = context_cost([llm(0, 100, 10)], [tool(100, 110, "final_answer", "done")], per_token(1e-6))
    assert cost.calls[0].tokens == 0 and cost.calls[0].usd == 0.0


def test_input_rates_follow_the_price_sources_in_order():
    catalog = {"m": ModelPrice(input_per_1k=0.003, output_per_1k=0.015, cached_input_per_1k=0.0003)}
    assert input_rates(llm(0, 100, 10), catalog.get, TABLE) == pytest.approx((3e-6, 3e-7))
    reported = llm(0, 395, 16, model=MISTRAL, cost=4.43e-05)  # any-agent reports input 3.95e-05 + output 4.8e-06
    fresh, cached = input_rates(reported, lambda model: None, TABLE)
    # the input's share of the reported cost is the table's (mistral-small: $0.15 and $0.60 per million)
    assert fresh == cached and fresh * 395 == pytest.approx(4.43e-05 * 395 * 0.15 / (395 * 0.15 + 16 * 0.6))
    unknown = llm(0, 300, 100, model="no-such-model-xyz", cost=4e-05)
    assert input_rates(unknown, lambda model: None, TABLE)[0] * 300 == pytest.approx(3e-05)  # else the tokens' share
    table_only = llm(0, 1000, 10, model=HAIKU)
    fresh, cached = input_rates(table_only, lambda model: None, TABLE)
    assert fresh == pytest.approx(1e-6) and cached == pytest.approx(1e-7)
    assert input_rates(llm(0, 1000, 10, model="no-such-model-xyz"), lambda model: None, TABLE) is None


# -- on real recorded traces, through `score`'s pipeline ------------------------------------------------------------

def real_runs(*paths: str) -> list[Any]:
    from otel_agent_eval.offline.score import score_traces

    runs: list[Any] = []
    score_traces([real_traces() / p for p in paths], on_run=runs.append)
    return runs


def test_every_real_run_is_conserved_exactly():
    runs = real_runs("any-agent", "sideseat-vercel-ai", "sideseat-crewai")
    measured = [r for r in runs if r.evaluation.context is not None and r.evaluation.context.measured]
    assert len(measured) >= 20
    for run in runs:
        cost = run.evaluation.context
        if not run.llm_calls:  # no model call: nothing to measure, nothing on its root
            assert cost is None
            continue
        assert cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens == sum(
            c.input_tokens for c in run.llm_calls)
        assert round(cost.attributed_usd + cost.unattributed_usd, 2) == round(cost.input_usd, 2)
        assert len(cost.calls) == len(run.tool_calls)
    crew = [r for r in runs if r.tool_calls and r.tool_calls[0].convention == "openinference"]
    assert crew and all(r.evaluation.context is None for r in crew)  # CrewAI's set has no model-call spans at all


def test_the_real_agno_run_matches_the_hand_worked_example():
    (run,) = real_runs("any-agent/AGNO_trace.otlp.jsonl")
    cost = run.evaluation.context
    assert [(r.name, t.share, t.tokens) for r, t in zip(run.tool_calls, cost.calls)] == [
        ("get_current_time", 72, 144), ("write_file", 21, 21)]
    assert (cost.input_tokens, cost.unattributed_tokens) == (1396, 1231)
    # priced by the cost any-agent reports, its input part as genai-prices splits mistral-small's on the day of the run
    # ($0.10 and $0.30 per million in September 2025): exactly the `gen_ai.usage.input_cost` it reports, $0.0000001 a token
    assert cost.calls[0].usd == pytest.approx(144e-7) and cost.input_usd == pytest.approx(1396e-7)


def test_the_real_vercel_image_run_matches_the_hand_worked_example():
    runs = real_runs("sideseat-vercel-ai")
    (run,) = [r for r in runs if [t.name for t in r.tool_calls] == ["image_reader"] * 3]
    cost = run.evaluation.context
    assert [t.tokens for t in cost.calls] == [432, 447, 445]
    assert cost.input_tokens == 760 + 2325
    assert cost.calls[1].usd == pytest.approx(447e-6)  # Claude Haiku 4.5: $1 per million input tokens (genai-prices)


def test_a_draft_of_the_vercel_set_writes_measured_costs_that_rank_tools_sharing_a_capability(tmp_path):
    """docs/first-catalog.md: the draft's context_usd, then the two forecasts given one capability."""
    from otel_agent_eval.config.catalog import load_catalog
    from otel_agent_eval.offline.draft import observe_traces, render_draft
    from otel_agent_eval.offline.score import score_traces

    traces = real_traces() / "sideseat-vercel-ai"
    text = render_draft(observe_traces([traces]))
    catalog_path = tmp_path / "vercel.yaml"
    catalog_path.write_text(text)
    drafted = load_catalog(catalog_path)
    assert drafted.tools["temperature_forecast"].context_usd == pytest.approx(0.000169)  # (118 + 194 + 194) / 3 tokens at $1/M
    assert drafted.tools["image_reader"].context_usd == pytest.approx(0.0479)
    assert all(tool.cost_usd == 0 and tool.context_usd > 0 for tool in drafted.tools.values())
    before = score_traces([traces], drafted)
    assert before.wasted_usd == 0  # each tool its own capability: its own best choice
    tools = {t.tool: t for g in before.groups for t in g.tools}
    assert tools["image_reader"].true_cost_per_call_usd == pytest.approx(191777e-6 / 4)
    catalog_path.write_text(text.replace('capabilities: ["temperature_forecast"]', 'capabilities: ["forecast"]')
                            .replace('capabilities: ["precipitation_forecast"]', 'capabilities: ["forecast"]'))
    after = score_traces([traces], load_catalog(catalog_path))
    (poor,) = after.poor_choices
    assert (poor.tool, poor.optimal_tool, poor.calls) == ("temperature_forecast", "precipitation_forecast", 3)
    assert poor.wasted_usd == pytest.approx(3 * (0.000169 - 0.0000453))
    assert after.groups[0].cost_per_run_usd == before.groups[0].cost_per_run_usd  # the tokens were in the LLM cost already


def test_a_catalog_without_context_usd_scores_as_before():
    from otel_agent_eval.config.catalog import parse_catalog

    text = """tools:
  a: {cost_usd: 0.002, latency_ms: 10, capabilities: [x], complexity: simple}
  b: {cost_usd: 0.001, latency_ms: 10, capabilities: [x], complexity: simple}
"""
    plain = parse_catalog(text)
    assert [t.true_cost_usd for t in plain.tools.values()] == [0.002, 0.001]
    measured = parse_catalog(text.replace("complexity: simple}\n  b", "complexity: simple, context_usd: 0}\n  b")
                             .replace("cost_usd: 0.001,", "cost_usd: 0.001, context_usd: 0.003,"))
    assert [t.true_cost_usd for t in measured.tools.values()] == [0.002, 0.004]


def test_compare_flags_a_tool_whose_true_cost_per_call_regressed_beyond_noise(tmp_path):
    from otel_agent_eval.offline.compare import TRUE_COST, compare_traces
    from true_cost_traces import noisy_runs, write_runs

    base = write_runs(tmp_path / "base.jsonl", noisy_runs(30, {"search": 400, "clock": 20}, seed=1))
    head = write_runs(tmp_path / "head.jsonl", noisy_runs(30, {"search": 1200, "clock": 20}, seed=2))  # search returns 3x more
    comparison = compare_traces(base, head, resamples=500)
    tools = {c.tool: c for c in comparison.changes if c.metric == TRUE_COST}
    assert tools["search"].regression and tools["search"].head > 2.5 * tools["search"].base
    assert tools["clock"].tested and not tools["clock"].regression
    assert [(c.tool, c.metric) for c in comparison.regressions] == [("", "cost_per_run_usd"), ("search", TRUE_COST)]
    assert "search: true_cost_per_call_usd" in str(tools["search"])
    same = compare_traces(base, write_runs(tmp_path / "same.jsonl", noisy_runs(30, {"search": 400, "clock": 20}, seed=3)),
                          resamples=500)
    assert not same.regressions


def test_recorded_true_cost_runs_are_worked_to_the_token():
    """The runs `true_cost_traces` records: 1,000/50, tools, then the growth, then 30 + 7 more (unattributed)."""
    from otel_agent_eval.config.catalog import load_catalog
    from otel_agent_eval.core.pipeline import Pipeline
    from true_cost_traces import record_runs

    runs: list[Any] = []
    pipeline = Pipeline(load_catalog(), on_run=runs.append)
    for span in record_runs([[("search", 300), ("clock", 20)]]):
        pipeline.ended(span)
    (run,) = runs
    cost = run.evaluation.context
    # the call after the tools: 1,050 + 320 = 1,370 in; search 300 and clock 20 by result size (1,200 : 80 chars)
    assert [(t.share, t.held_by, t.tokens) for t in cost.calls] == [(300, 2, 600), (20, 2, 40)]
    assert cost.input_tokens == 1000 + 1370 + 1407 and cost.unattributed_tokens == cost.input_tokens - 640
    assert cost.calls[0].usd == pytest.approx(600 * 1e-6)  # claude-haiku-4-5 at the catalog's $0.001 per 1k


def test_the_html_report_charts_where_the_runs_input_tokens_came_from():
    import re

    from otel_agent_eval.offline.score import score_traces
    from otel_agent_eval.tools.html_report import render_html

    report = score_traces([real_traces() / "sideseat-vercel-ai"])
    assert report.input_tokens == report.context_tokens + report.unattributed_tokens
    assert report.context_tokens == sum(t.induced_tokens for t in report.tool_context) == 193_621
    assert report.unmeasured_runs == 1  # the error scenario's run: its one model call has no token counts
    page = render_html(report)
    figure = page[page.index('<figure aria-labelledby="context-chart-caption">'):]
    figure = figure[:figure.index("</figure>")]
    cells = re.findall(r"<tr><td>([^<]*)</td><td class=n>([\d,]+)</td>", figure)
    assert cells[0] == ("image_reader", "191,777")
    assert cells[-1] == ("no tool (prompt, user, model&#x27;s own text)", f"{report.unattributed_tokens:,}")
    assert sum(int(n.replace(",", "")) for _, n in cells) == report.input_tokens
    assert "1 run without token counts left out" in figure
    empty = render_html(score_traces([real_traces() / "sideseat-crewai"]))
    assert "where its input came from is unmeasured" in empty


@pytest.mark.parametrize("recording", ["strands.SPANS", "google_adk.SPANS", "google_adk.SPANS_LEGACY",
                                       "semantic_kernel.SPANS_WITH_DIAGNOSTICS"])
def test_runs_recorded_from_real_frameworks_are_conserved_exactly(recording):
    """The support runs each framework recorded itself (record_frameworks.py: its real model class over canned
    completions that report 50 input and 10 output tokens a call), replayed through a real SDK provider. (autogen's
    and CrewAI's recordings have no model-call spans, semantic-kernel's default none in its run: no context cost.)"""
    import importlib

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_agent_eval.config.catalog import load_catalog
    from otel_agent_eval.core.pipeline import Pipeline
    from recorded_spans import replay

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    module, name = recording.split(".")
    replay(getattr(importlib.import_module(f"recorded_{module}"), name), provider)
    runs: list[Any] = []
    pipeline = Pipeline(load_catalog(), on_run=runs.append, sees_starts=False)
    for span in exporter.get_finished_spans():
        pipeline.ended(span)
    pipeline.close_all()
    measured = [r for r in runs if r.evaluation.context is not None and r.evaluation.context.measured]
    assert measured, [(r.agent, len(r.llm_calls)) for r in runs]
    for run in measured:
        cost = run.evaluation.context
        assert cost.input_tokens == sum(c.input_tokens for c in run.llm_calls) > 0
        assert cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens
        assert round(cost.attributed_usd + cost.unattributed_usd, 2) == round(cost.input_usd, 2)
        # every call reports the same 50 input tokens: no context grew, so no result is charged (and none shrank)
        assert cost.attributed_tokens == 0 and cost.shrinks == 0 and all(t.tokens == 0 for t in cost.calls)


def test_a_price_that_breaks_leaves_the_run_evaluated_without_its_context_cost(caplog):
    from otel_agent_eval.config.catalog import load_catalog
    from otel_agent_eval.core.pipeline import Pipeline
    from true_cost_traces import record_runs

    runs: list[Any] = []
    pipeline = Pipeline(load_catalog(), on_run=runs.append)

    def broken(call: Any) -> Any:
        raise ZeroDivisionError("a price table gone wrong")

    pipeline.state.evaluator._input_rates = broken
    for span in record_runs([[("search", 300)], [("search", 10)]]):
        pipeline.ended(span)
    assert [r.evaluation.context for r in runs] == [None, None] and all(r.evaluation.health > 0 for r in runs)
    assert sum("could not be measured" in m for m in caplog.messages) == 1


@pytest.mark.parametrize("source", ["pydantic_ai_spans", "openai_agents_openinference_spans",
                                    "openai_agents_openllmetry_spans", "langchain_openinference_spans",
                                    "smolagents_spans", "llama_index_spans"])
def test_runs_of_real_frameworks_driven_offline_are_conserved_exactly(source):
    """The support run of each framework the tests drive live with its own offline test model (instrumented.py):
    every run with token counts conserves its input tokens and cost."""
    import instrumented
    import instrumented_openinference

    from otel_agent_eval.config.catalog import load_catalog
    from otel_agent_eval.core.pipeline import Pipeline

    spans = getattr(instrumented if hasattr(instrumented, source) else instrumented_openinference, source)()
    runs: list[Any] = []
    pipeline = Pipeline(load_catalog(), on_run=runs.append, sees_starts=False)
    for span in spans:
        pipeline.ended(span)
    pipeline.close_all()
    measured = [r.evaluation.context for r in runs if r.evaluation.context is not None and r.evaluation.context.measured]
    assert measured, [(r.agent, len(r.llm_calls)) for r in runs]
    for run in runs:
        cost = run.evaluation.context
        if cost is None:
            continue
        assert cost.input_tokens == sum(c.input_tokens for c in run.llm_calls)
        assert cost.attributed_tokens + cost.unattributed_tokens == cost.input_tokens
        assert sum(t.tokens or 0 for t in cost.calls) == cost.attributed_tokens
        assert round(cost.attributed_usd + cost.unattributed_usd, 2) == round(cost.input_usd, 2)

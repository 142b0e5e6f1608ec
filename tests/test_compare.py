"""Comparing two sets of recorded traces: `compare_traces` and `otel-agent-eval compare` on real OTLP files.

The traces come from the real SDK (GenAI `invoke_agent` roots, `execute_tool` children, LLM
calls with token usage, failed runs) and are written as the Collector's file exporter writes
them (tests/test_score.py's encoder). A support agent answers FAQs with the packaged
catalog's optimal `local_index`; in the seeded regression the same agent calls the paid
`web_search` instead on 10 % of its calls. A math agent beside it does not change.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from otel_agent_eval.offline import compare as compare_module
from otel_agent_eval.offline.compare import METRICS, compare_traces
from otel_agent_eval.offline.recorded import TraceInputError
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.tools.cli import main
from test_score import CLEAN_ENV, T0, collector_lines, write

RUNS = 300  # per trace set: enough for p95 (200 runs), not for p99 (1,000)


def agent_traces(seed: int, *, switched: float, runs: int = RUNS, math_runs: int = 60) -> str:
    """`runs` support-agent runs (1-3 FAQ lookups each, `switched` of them with web_search), math-agent runs, as Collector JSON lines."""
    rng = random.Random(seed)
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "agents"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app", "1.0")
    clock = T0 + seed * 10**15

    def tick(ms: float) -> int:
        nonlocal clock
        clock += int(ms * 1_000_000)
        return clock

    def run(agent: str, tools: list[tuple[str, float]]) -> None:
        root = tracer.start_span(f"invoke_agent {agent}", start_time=tick(1), attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
        inside = set_span_in_context(root)
        llm = tracer.start_span("chat gpt-4o-mini", context=inside, start_time=tick(1), attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": rng.randint(100, 2_000), "gen_ai.usage.output_tokens": rng.randint(10, 400)})
        llm.end(end_time=tick(rng.uniform(200, 900)))
        for tool, ms in tools:
            span = tracer.start_span(f"execute_tool {tool}", context=inside, start_time=tick(1), attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"call_{rng.randrange(10**9)}", "gen_ai.tool.call.arguments": json.dumps({"query": "refunds"})})
            span.end(end_time=tick(ms))
        if rng.random() < 0.05:
            root.set_status(Status(StatusCode.ERROR, "gave up"))
        root.end(end_time=tick(2))

    for _ in range(runs):
        calls = []
        for _ in range(rng.randint(1, 3)):
            paid = rng.random() < switched
            calls.append(("web_search" if paid else "local_index", rng.lognormvariate(5.9 if paid else 3.3, 0.3)))
        run("support_agent", calls)
    for _ in range(math_runs):
        run("math_agent", [("basic_calculator", rng.lognormvariate(3.5, 0.3))])
    provider.shutdown()
    return collector_lines(list(memory.get_finished_spans()))


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traces")
    write(root / "main" / "traces.json", agent_traces(1, switched=0.0))
    write(root / "branch" / "traces.json", agent_traces(2, switched=0.10))  # the regression: 10 % of calls on web_search
    write(root / "again" / "traces.json", agent_traces(3, switched=0.0))  # the same agent, another sample
    write(root / "noisy_a" / "a.json", agent_traces(4, switched=0.05))  # an agent that already wastes some, two samples
    write(root / "noisy_b" / "b.json", agent_traces(5, switched=0.05))
    return root


def test_a_costlier_tool_on_10_percent_of_calls_is_a_regression(traces):
    comparison = compare_traces(traces / "main", traces / "branch")
    faq = comparison.group("support_agent", "faq")
    assert (faq.base_runs, faq.head_runs) == (RUNS, RUNS)
    regressions = {(c.group, c.metric) for c in comparison.regressions}
    assert {("support_agent/faq", "efficiency"), ("support_agent/faq", "wasted_per_run_usd")} <= regressions
    assert not any(group.startswith("math_agent/") for group, _ in regressions)  # the agent that did not change

    wasted = faq.change("wasted_per_run_usd")
    assert wasted.base == 0 and 0 < wasted.low < wasted.delta < wasted.high  # every web_search call wastes its $0.003
    efficiency = faq.change("efficiency")
    assert efficiency.worse and efficiency.high < 0 and efficiency.base == 1.0
    assert "interval" in str(efficiency) and str(efficiency).startswith("support_agent/faq: efficiency 1 -> 0.")
    # the group's figures are `score`'s, from the same core
    base, head = score_traces(traces / "main"), score_traces(traces / "branch")
    assert efficiency.base == base.group("support_agent", "faq").efficiency
    assert efficiency.head == pytest.approx(head.group("support_agent", "faq").efficiency, rel=1e-12)
    assert faq.change("cost_per_run_usd").head == pytest.approx(head.group("support_agent", "faq").cost_per_run_usd, rel=1e-12)
    assert faq.change("completion").head == head.group("support_agent", "faq").completion
    # the intervals hold together: Bonferroni over every tested comparison
    assert comparison.tests == sum(c.tested for c in comparison.changes) >= 8
    assert all(c.confidence == pytest.approx(1 - 0.05 / comparison.tests) for c in comparison.changes if c.tested)
    # per tool: what moved
    tools = {t.tool: t for t in faq.tools}
    assert tools["web_search"].base_calls_per_run == 0 < tools["web_search"].head_calls_per_run
    assert tools["web_search"].optimal_tool == "local_index" and tools["local_index"].base_efficiency == 1.0


@pytest.mark.parametrize("base, head", [("main", "again"), ("noisy_a", "noisy_b")])
def test_two_samples_of_the_same_agent_stay_within_noise(traces, base, head):
    comparison = compare_traces(traces / base, traces / head)
    assert comparison.regressions == [] and comparison.improvements == []
    tested = [c for c in comparison.changes if c.tested]
    assert len(tested) >= 8  # efficiency, money wasted, cost, completion, p95 of both groups (p99 needs 1,000 runs)
    assert all(c.low <= 0 <= c.high for c in tested)
    assert any(c.delta for c in tested)  # the samples do differ: only not beyond noise


def test_the_same_seed_gives_the_same_intervals(traces):
    first = compare_traces(traces / "noisy_a", traces / "noisy_b", seed=7)
    again = compare_traces(traces / "noisy_a", traces / "noisy_b", seed=7)
    other = compare_traces(traces / "noisy_a", traces / "noisy_b", seed=8)
    assert first.to_dict() == again.to_dict()
    intervals = lambda c: [(x.low, x.high) for x in c.changes if x.tested]  # noqa: E731
    assert intervals(first) != intervals(other)
    assert [(x.base, x.head) for x in first.changes] == [(x.base, x.head) for x in other.changes]  # the figures do not move


def test_metrics_without_enough_runs_are_shown_untested_with_the_reason(traces, tmp_path):
    small = write(tmp_path / "small.json", agent_traces(9, switched=0.5, runs=12, math_runs=0))
    comparison = compare_traces(traces / "main", small)
    faq = comparison.group("support_agent", "faq")
    assert {c.metric: c.untested for c in faq.changes} == {
        "efficiency": "12 runs, 20 needed", "wasted_per_run_usd": "12 runs, 20 needed", "cost_per_run_usd": "12 runs, 20 needed",
        "completion": "12 runs, 20 needed", "p95_s": "12 runs with a duration, 200 needed",
        "p99_s": "12 runs with a duration, 1000 needed"}
    assert faq.change("wasted_per_run_usd").head > 0 and not faq.change("wasted_per_run_usd").regression  # seen, not judged
    math = comparison.group("math_agent", "arithmetic")
    assert math.head_runs == 0 and {c.untested for c in math.changes} == {"no runs in head"}
    assert comparison.regressions == []


def test_memory_is_a_bounded_sample_of_runs_with_exact_sums(traces, monkeypatch):
    exact = compare_traces(traces / "main", traces / "branch")
    monkeypatch.setattr(compare_module, "MAX_RUNS_PER_GROUP", 50)
    samples = compare_module.RunSamples(seed="x")
    score_traces(traces / "branch", on_run=samples.run)
    group = samples.groups[("support_agent", "faq")]
    assert (group.runs, len(group.sample), len(group.durations)) == (RUNS, 50, 50)
    sampled = compare_traces(traces / "main", traces / "branch")
    faq, exact_faq = sampled.group("support_agent", "faq"), exact.group("support_agent", "faq")
    for metric in ("efficiency", "wasted_per_run_usd", "cost_per_run_usd", "completion"):  # exact over all runs
        assert faq.change(metric).head == exact_faq.change(metric).head
    assert faq.change("p95_s").untested == "50 runs with a duration, 200 needed"
    # fewer runs in the sample, a wider interval (the regression is still plain)
    wide, narrow = faq.change("wasted_per_run_usd"), exact_faq.change("wasted_per_run_usd")
    assert wide.high - wide.low > narrow.high - narrow.low and wide.regression


def test_bad_options_raise_one_line():
    with pytest.raises(ValueError, match="confidence must be between 0 and 1"):
        compare_traces("a", "b", confidence=1.5)
    with pytest.raises(ValueError, match="resamples must be at least 100"):
        compare_traces("a", "b", resamples=10)
    with pytest.raises(TraceInputError, match="^base: a: no such file or directory$"):
        compare_traces("a", "b")
    import otel_agent_eval

    assert otel_agent_eval.compare_traces is compare_traces  # the public API, as score_traces
    assert set(METRICS) == {"efficiency", "wasted_per_run_usd", "cost_per_run_usd", "completion", "p95_s", "p99_s",
                            "judge_score"}  # judge_score: only with --judge (tests/test_judge_score.py)


# -- the command ----------------------------------------------------------------------------------------------

def compare_cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    """`otel-agent-eval compare ARGS` in this process (fast), from `cwd`; argparse's exit is an exit code too."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["compare", *args])
            except SystemExit as exc:
                code = int(exc.code)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def test_cli_table_and_exit_codes(traces):
    code, out, err = compare_cli("main", "branch", cwd=traces)
    assert (code, err) == (0, "")  # a regression, but no --fail-on-regression
    assert "bootstrap: percentile interval of head - base over 2,000 resamples of runs (seed 0)" in out
    assert "95% family-wise" in out and "Bonferroni" in out
    rows = {label: line for line in out.splitlines() if line.startswith("support_agent  faq  ")
            for label in ("efficiency", "wasted/run", "cost/run", "completion", "run p95", "run p99") if f" {label} " in line}
    assert rows["efficiency"].endswith("REGRESSION") and rows["wasted/run"].endswith("REGRESSION")
    wasted = compare_traces(traces / "main", traces / "branch").group("support_agent", "faq").change("wasted_per_run_usd")
    cells = rows["wasted/run"].split()
    assert cells[cells.index("wasted/run") + 1:] == [  # base, head, change, interval, verdict
        "$0.00000", f"${wasted.head:.5f}", f"+${wasted.delta:.5f}", f"+${wasted.low:.5f}", "..", f"+${wasted.high:.5f}", "REGRESSION"]
    assert rows["completion"].endswith("within noise")
    assert not any(line.endswith("REGRESSION") for line in out.splitlines() if line.startswith("math_agent"))
    assert "not tested: 300 runs with a duration, 1000 needed" in out
    assert "web_search" in out and "Result: " in out and "regression" in out.splitlines()[-1]

    code, out, err = compare_cli("main", "branch", "--fail-on-regression", cwd=traces)
    regressions = compare_traces(traces / "main", traces / "branch").regressions
    assert code == 1 and err.splitlines() == [f"otel-agent-eval: regression: {c}" for c in regressions]

    code, out, err = compare_cli("main", "again", "--fail-on-regression", cwd=traces)
    assert (code, err) == (0, "") and out.splitlines()[-1] == "Result: 0 regressions, 0 improvements beyond noise."


def test_cli_json_is_parsed_and_matches_the_library(traces):
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "compare", "main", "branch", "--json",
                          "--fail-on-regression", "--seed", "3"], cwd=traces, env=CLEAN_ENV, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr
    data = json.loads(run.stdout)
    comparison = compare_traces(traces / "main", traces / "branch", seed=3)
    assert data == json.loads(json.dumps(comparison.to_dict()))
    assert data["method"]["name"] == "bootstrap" and data["method"]["seed"] == 3 and data["method"]["correction"] == "bonferroni"
    faq = next(g for g in data["groups"] if (g["agent"], g["task"]) == ("support_agent", "faq"))
    assert faq["changes"]["wasted_per_run_usd"]["regression"] is True and faq["changes"]["wasted_per_run_usd"]["low"] > 0
    assert {(r["group"], r["metric"]) for r in data["regressions"]} == {(c.group, c.metric) for c in comparison.regressions}
    assert len(run.stderr.splitlines()) == len(data["regressions"])


def test_cli_bad_input_exits_2_with_one_line(traces, tmp_path):
    (tmp_path / "empty").mkdir()
    write(tmp_path / "garbage.txt", "not a trace at all\n")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("t").start_span("GET /health").end()
    write(tmp_path / "plain.json", collector_lines(list(memory.get_finished_spans())))
    main = str(traces / "main")
    cases: list[tuple[list[str], str]] = [
        (["missing", main], "otel-agent-eval: base: missing: no such file or directory\n"),
        ([main, "empty"], "otel-agent-eval: head: empty: no files in this directory\n"),
        ([main, "plain.json"], "otel-agent-eval: head: plain.json: no tool calls or agent runs in 1 span\n"),
        ([main, main, "--catalog", "nope.yaml"], "otel-agent-eval: nope.yaml: cannot read the file: No such file or directory\n"),
        ([main, main, "--environment", "moon"], "unknown environment 'moon'"),
        ([main, main, "--resamples", "5"], "otel-agent-eval: resamples must be at least 100 (got 5)\n"),
        ([main, main, "--seed", "x"], "argument --seed: invalid int value: 'x'"),
        ([main], "the following arguments are required: HEAD"),
    ]
    for args, message in cases:
        code, out, err = compare_cli(*args, cwd=tmp_path)
        assert code == 2, (args, err)
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, (args, err)
        assert out == ""
    code, out, err = compare_cli("garbage.txt", main, cwd=tmp_path)  # the file's own line, then the verdict
    assert code == 2 and out == ""
    assert err.splitlines()[-1] == "otel-agent-eval: base: garbage.txt: no spans could be read from 1 file"
    assert err.splitlines()[0].startswith("otel-agent-eval: base: garbage.txt") and len(err.splitlines()) == 2


def test_nothing_testable_says_so_and_exits_0_with_a_note_under_fail_on_regression(tmp_path):
    """One run a side: every metric untested; the result line says nothing could be tested (not "0 regressions"), and
    --fail-on-regression exits 0 (nothing regressed) with the same words on stderr for the CI log."""
    write(tmp_path / "a" / "t.json", agent_traces(6, switched=0.0, runs=1, math_runs=0))
    write(tmp_path / "b" / "t.json", agent_traces(7, switched=1.0, runs=1, math_runs=0))
    code, out, err = compare_cli("a", "b", "--fail-on-regression", cwd=tmp_path)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("Base a: 1 run, ") and ". Head b: 1 run, " in lines[0]
    assert "no comparison tested" in lines[2] and "0 tested comparisons" not in out
    assert "not tested: 1 run, 20 needed" in out and "1 runs" not in out
    assert lines[-1] == ("Result: nothing could be tested (20 runs needed per side for an agent/task group; the reasons are "
                         "in the verdicts), so no regression could be found.")
    assert err == f"otel-agent-eval: --fail-on-regression: {lines[-1][len('Result: '):-1]}\n"
    code, out, err = compare_cli("a", "b", cwd=tmp_path)
    assert (code, err) == (0, "") and out.splitlines()[-1].startswith("Result: nothing could be tested")

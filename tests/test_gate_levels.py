"""Per-metric CI gate levels declared in the catalog, per environment: the tutorial's CI/CD gate.

The tutorial gates a run of the evaluation suite on a minimum task completion rate and on
maxima for the rate of bad answers and the mean latency ("Maximum allowed"), exiting 1 with
one `FAILED:` line per broken threshold. Here a catalog declares such levels per environment
(`thresholds.<env>.gates`), `score` checks them per agent and task, `--fail-under` and
`--fail-over` override them, and the exit code is 0 pass, 1 gate failed, 2 bad input.

The traces are real SDK spans written as the Collector's file exporter writes them, with
figures chosen so every expected value can be worked out by hand.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, set_span_in_context

from otel_agent_eval import load_catalog, score_traces
from otel_agent_eval.config.catalog import CatalogError, GateLevel
from otel_agent_eval.offline.gate import evaluate_gate, parse_fail_over, parse_fail_under
from test_score import CLEAN_ENV, collector_lines, main_in_process, write

T0 = 1_750_000_000_000_000_000
MS = 1_000_000

CATALOG = """\
default_environment: ci
tools:
  local_index: {cost_usd: 0.0, latency_ms: 30, capabilities: [faq_lookup], complexity: simple}
  web_search: {cost_usd: 0.003, latency_ms: 400, capabilities: [faq_lookup, search], complexity: simple}
tasks:
  faq: {match: {gen_ai.agent.name: support_agent}, capability: faq_lookup, optimal_tool: local_index}
thresholds:
  ci:
    warn: 0.5
    fail: 0.1
    gates:
      completion: {fail: 0.85, warn: 0.9}
      p95_latency_ms: 8000
      wasted_per_run_usd: {fail: 0.001, warn: 0.0005}
  strict:
    warn: 0.5
    fail: 0.1
    gates:
      p95_latency_ms: 900
      mean_latency_ms: {fail: 600}
      cost_per_run_usd: 0.0005
      health: 10
"""


def support_runs() -> list:
    """10 runs of support_agent: run i lasts (i + 1) * 100 ms; runs 3 and 7 fail; runs 0, 4 and 8 call the paid
    web_search instead of local_index. By hand: completion 8/10 = 0.8; mean duration 550 ms; p95 (nearest rank of
    10) 1000 ms; money wasted 3 x $0.003 over 10 runs = $0.0009 per run, which is also the cost per run."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("support")
    for i in range(10):
        start = T0 + i * 10_000 * MS
        root = tracer.start_span("invoke_agent support_agent", start_time=start, attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support_agent"})
        tool = "web_search" if i % 4 == 0 else "local_index"
        call = tracer.start_span(f"execute_tool {tool}", context=set_span_in_context(root), start_time=start + MS,
                                 attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                                             "gen_ai.tool.call.id": f"call_{i}",
                                             "gen_ai.tool.call.arguments": json.dumps({"query": f"question {i}"})})
        call.end(end_time=start + 20 * MS)
        if i in (3, 7):
            root.set_status(Status(StatusCode.ERROR, "gave up"))
        root.end(end_time=start + (i + 1) * 100 * MS)
    provider.shutdown()
    return list(memory.get_finished_spans())


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gate")
    write(root / "catalog.yaml", CATALOG)
    write(root / "traces.json", collector_lines(support_runs()))
    return root


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch):
    for name in [k for k in os.environ if k.startswith("OTEL_AGENT_EVAL_")]:
        monkeypatch.delenv(name)


def test_the_catalog_declares_levels_per_environment_and_metric(files):
    catalog = load_catalog(files / "catalog.yaml")
    assert catalog.gates_for() == catalog.gates_for("ci") == {
        "completion": GateLevel("completion", 0.85, 0.9, True),
        "p95_latency_ms": GateLevel("p95_latency_ms", 8000.0, None, False),
        "wasted_per_run_usd": GateLevel("wasted_per_run_usd", 0.001, 0.0005, False),
    }
    assert set(catalog.gates_for("strict")) == {"p95_latency_ms", "mean_latency_ms", "cost_per_run_usd", "health"}
    assert catalog.gates_for("production") == {}  # a built-in environment the catalog leaves alone: efficiency only
    assert load_catalog().gates == {}  # the packaged catalog declares none: its gate is unchanged


def test_report_figures_are_the_ones_worked_out_by_hand(files):
    report = score_traces(files / "traces.json", files / "catalog.yaml")
    (group,) = report.groups
    assert (group.name, group.runs, group.completion) == ("support_agent/faq", 10, 0.8)
    assert group.duration_s == pytest.approx(0.55)
    assert group.p95_s == pytest.approx(1.0, rel=0.005)  # the latency sketch: within 0.5 % of the nearest rank
    assert group.wasted_per_run_usd == pytest.approx(0.0009) and group.cost_per_run_usd == pytest.approx(0.0009)


def test_catalog_levels_are_checked_in_their_direction(files):
    catalog = load_catalog(files / "catalog.yaml")
    ci = evaluate_gate(score_traces(files / "traces.json", catalog))
    assert [str(c) for c in ci.failed] == ["support_agent/faq: completion 0.8 < 0.85 (ci fail level)"]
    assert [str(c) for c in ci.warnings] == ["support_agent/faq: wasted_per_run_usd 0.0009 > 0.0005 (ci warn level)"]
    passed = {c.metric: c.reason for c in ci.checks if c.passed}
    assert passed["p95_latency_ms"].startswith("p95_latency_ms 100") and passed["p95_latency_ms"].endswith(
        " <= 8000.0 (ci fail level)")
    assert passed["wasted_per_run_usd"] == "wasted_per_run_usd 0.0009 <= 0.001 (ci fail level)"

    strict = evaluate_gate(score_traces(files / "traces.json", catalog, environment="strict"))
    assert [(c.metric, c.level) for c in strict.failed] == [("cost_per_run_usd", "fail"), ("p95_latency_ms", "fail")]
    assert [c.reason.split(" (")[0].split(" ")[1:] for c in strict.failed][0] == ["0.0009", ">", "0.0005"]
    assert {c.metric for c in strict.checks if c.passed} >= {"mean_latency_ms", "health", "efficiency"}
    # --fail-under / --fail-over replace a fail level, whatever the catalog says, in their direction only
    overridden = evaluate_gate(score_traces(files / "traces.json", catalog, environment="strict"),
                               {**parse_fail_over(["p95_latency_ms=2000", "cost_per_run_usd=0.01"])})
    assert overridden.passed and {c.source for c in overridden.checks if c.metric == "p95_latency_ms"} == {
        "--fail-over p95_latency_ms"}


@pytest.mark.parametrize("option, item, message", [
    (parse_fail_under, "p95_latency_ms=8000", "--fail-under 'p95_latency_ms=8000': lower is better for p95_latency_ms "
                                               "(95th percentile run duration, ms): use --fail-over p95_latency_ms=8000"),
    (parse_fail_over, "completion=0.9", "--fail-over 'completion=0.9': higher is better for completion"),
    (parse_fail_over, "wasted_per_run_usd=-1", "--fail-over 'wasted_per_run_usd=-1': wasted_per_run_usd is money spent"),
    (parse_fail_over, "mean_latency_ms=inf", "out of range"),
    (parse_fail_over, "latency=3", "expected METRIC=VALUE with METRIC one of wasted_per_run_usd, cost_per_run_usd, "
                                   "mean_latency_ms, p95_latency_ms"),
])
def test_overrides_in_the_wrong_direction_are_refused_with_the_right_option(option, item, message):
    with pytest.raises(ValueError) as caught:
        option([item])
    assert message in str(caught.value) and "\n" not in str(caught.value)


# -- the command: exit codes and one line per failing gate -------------------------------------------------------

def test_cli_exit_1_with_one_line_per_failing_gate(files):
    code, out, err = main_in_process(["traces.json", "--catalog", "catalog.yaml"], files)
    assert code == 1
    assert err == "otel-agent-eval: gate failed: support_agent/faq: completion 0.8 < 0.85 (ci fail level)\n"
    assert ("environment ci: efficiency warns below 0.5, fails below 0.1; completion fails below 0.85 (warns below 0.9); "
            "p95_latency_ms fails above 8000; wasted_per_run_usd fails above 0.001 (warns above 0.0005).") in out
    assert "Gate: FAILED for 1 of 1 agent/task group." in out

    code, _, err = main_in_process(["traces.json", "--catalog", "catalog.yaml", "--env", "strict"], files)
    assert code == 1 and err.splitlines() == [
        "otel-agent-eval: gate failed: support_agent/faq: cost_per_run_usd 0.0009 > 0.0005 (strict fail level)",
        f"otel-agent-eval: gate failed: support_agent/faq: {err.split('faq: ')[2].rstrip()}"]
    assert err.splitlines()[1].split("faq: ")[1].startswith("p95_latency_ms 100")
    assert err.splitlines()[1].endswith("> 900.0 (strict fail level)")


def test_cli_overrides_pass_the_gate_and_json_tells_the_direction(files):
    code, out, err = main_in_process(["traces.json", "--catalog", "catalog.yaml", "--fail-under", "completion=0.8", "--json"],
                                     files)
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert data["gate_levels"]["completion"] == {"fail": 0.85, "warn": 0.9, "higher_is_better": True}
    checks = {(c["metric"], c["level"]): c for c in data["gate"]["checks"]}
    assert checks[("completion", "fail")]["source"] == "--fail-under completion" and checks[("completion", "fail")]["passed"]
    assert checks[("wasted_per_run_usd", "warn")]["higher_is_better"] is False and not checks[("wasted_per_run_usd", "warn")]["passed"]
    code, _, err = main_in_process(["traces.json", "--catalog", "catalog.yaml", "--environment", "strict",
                                    "--fail-over", "p95_latency_ms=2000", "--fail-over", "cost_per_run_usd=0.001"], files)
    assert (code, err) == (0, "")


def test_the_environment_comes_from_the_variable_too(files):
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "score", "traces.json", "--catalog", "catalog.yaml"],
                         cwd=files, env={**CLEAN_ENV, "OTEL_AGENT_EVAL_ENVIRONMENT": "strict"}, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1 and len(run.stderr.splitlines()) == 2 and "(strict fail level)" in run.stderr


@pytest.mark.parametrize("args, message", [
    (["--env", "moon"], "unknown environment 'moon'"),
    (["--fail-under", "p95_latency_ms=8000"], "use --fail-over p95_latency_ms=8000"),
    (["--fail-over", "completion=2"], "higher is better for completion"),
])
def test_cli_bad_gate_input_exits_2_with_one_line(files, args, message):
    code, out, err = main_in_process(["traces.json", "--catalog", "catalog.yaml", *args], files)
    assert (code, out) == (2, "") and message in err and err.count("\n") == 1 and "Traceback" not in err


# -- broken gate levels: one line naming the file, the line, the path and the problem ------------------------------

BROKEN = [
    ("      completion: {fail: 0.85, warn: 0.8}\n",
     "bad.yaml:8: thresholds.ci.gates.completion: warn (0.8) must be at least fail (0.85): higher is better for completion"),
    ("      p95_latency_ms: {fail: 8000, warn: 9000}\n",
     "bad.yaml:8: thresholds.ci.gates.p95_latency_ms: warn (9000) must be at most fail (8000): lower is better for "
     "p95_latency_ms"),
    ("      efficiency: 0.9\n",
     "bad.yaml:8: thresholds.ci.gates.efficiency: efficiency is gated at thresholds.ci.warn and .fail (which live scoring "
     "uses too): set them there"),
    ("      health: 170\n", "bad.yaml:8: thresholds.ci.gates.health: must be <= 100 (got 170)"),
    ("      completion: {fail: 1.5}\n", "bad.yaml:8: thresholds.ci.gates.completion.fail: must be <= 1 (got 1.5)"),
    ("      mean_latency_ms: -5\n", "bad.yaml:8: thresholds.ci.gates.mean_latency_ms: must be >= 0 (got -5)"),
    ("      cost_per_run_usd: cheap\n",
     "bad.yaml:8: thresholds.ci.gates.cost_per_run_usd: must be of type number or object (got 'cheap')"),
    ("      completion: {warn: 0.9}\n", "bad.yaml:8: thresholds.ci.gates.completion: 'fail' is required"),
    ("      completion: {fail: 0.9, max: 1}\n",
     "bad.yaml:8: thresholds.ci.gates.completion.max: unknown key; expected one of: fail, warn"),
    ("      latency: 3\n", "bad.yaml:8: thresholds.ci.gates.latency: unknown key; expected one of: efficiency, completion, "
                           "correctness, health, wasted_per_run_usd, cost_per_run_usd, mean_latency_ms, p95_latency_ms"),
]


@pytest.mark.parametrize("line, message", BROKEN, ids=[str(i) for i in range(len(BROKEN))])
def test_broken_gate_levels_give_one_clear_line(tmp_path, line, message):
    text = ("tools:\n  local_index: {cost_usd: 0, latency_ms: 30, capabilities: [faq_lookup], complexity: simple}\n"
            "thresholds:\n  ci:\n    warn: 0.5\n    fail: 0.1\n    gates:\n" + line)  # the level on line 8
    path = write(tmp_path / "bad.yaml", text)
    with pytest.raises(CatalogError) as caught:
        load_catalog(path)
    assert str(caught.value).replace(str(tmp_path) + "/", "") == message


def test_catalog_check_prints_a_gate_problem_in_the_same_style(tmp_path):
    text = ("tools:\n  local_index: {cost_usd: 0, latency_ms: 30, capabilities: [faq_lookup], complexity: simple}\n"
            "thresholds:\n  ci:\n    warn: 0.5\n    fail: 0.1\n    gates:\n" + BROKEN[0][0] + BROKEN[3][0])
    write(tmp_path / "bad.yaml", text)
    check = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", "catalog", "check", "bad.yaml"], cwd=tmp_path,
                           env=CLEAN_ENV, capture_output=True, text=True, timeout=60)
    assert check.returncode == 2 and check.stdout == ""
    assert check.stderr.splitlines() == [f"otel-agent-eval: {BROKEN[0][1]}", f"otel-agent-eval: {BROKEN[3][1].replace(':8:', ':9:')}"]

"""The demo: simulated agents emit real GenAI spans, the processor's metrics read back sensibly."""
from __future__ import annotations

import argparse
import io
import json
import math
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import jsonschema
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

from otel_agent_eval.core import conventions as c
from otel_agent_eval.config.catalog import load_catalog, parse_catalog
from otel_agent_eval.tools.cli import main
from otel_agent_eval.tools.demo import (
    COLUMNS,
    DemoError,
    Workload,
    _drive,
    add_demo_arguments,
    demo_agents,
    format_table,
    read_metrics,
    run_demo,
    run_workload,
    start_metrics_server,
)
from otel_agent_eval.otel.processor import AgentEvalSpanProcessor

AGENT_TASKS = {"math_agent": "arithmetic", "support_agent": "faq", "analytics_agent": "analytics", "forecast_agent": "forecasting"}
FIXED_NS = 1_700_000_000_000_000_000
RUNS = 1500
SHARE = 0.2


def fixed_clock() -> int:
    return FIXED_NS


@pytest.fixture(scope="module")
def workload():
    """One seeded workload through a real processor and a fresh registry, shared by the metric checks."""
    registry = CollectorRegistry()
    # The workload ends spans as fast as it can: with the default hand-off queue (2,048 spans), a
    # slow machine's scoring thread falls behind and spans pass unscored (counted), as designed.
    # These checks are about the readback, so the queue holds the whole workload.
    processor = AgentEvalSpanProcessor(registry=registry, queue_limit=RUNS * 10)
    summary = run_workload(processor, runs=RUNS, suboptimal_share=SHARE, seed=11)
    return summary, read_metrics(registry)


def test_every_span_is_seen_and_every_tool_call_scored(workload):
    summary, metrics = workload
    p = metrics.processor
    assert p["spans_seen"] == summary.spans and p["spans_unscored"] == 0
    assert p["spans_scored"] == summary.tool_calls == metrics.calls
    assert p["spans_ignored"] == summary.spans - summary.tool_calls  # agent and chat spans
    assert p["malformed_tool_spans"] == p["internal_errors"] == 0
    assert {(r.agent, r.tool): r.calls for r in metrics.rows} == dict(summary.calls)


def test_agents_are_routed_to_their_tasks(workload):
    _, metrics = workload
    assert {(r.agent, r.task) for r in metrics.rows} == set(AGENT_TASKS.items())


def test_suboptimal_share_is_near_the_requested_one(workload):
    summary, metrics = workload
    tolerance = 4 * math.sqrt(SHARE * (1 - SHARE) / RUNS)  # four standard deviations of a binomial share
    assert metrics.non_optimal_share == summary.non_optimal_share
    assert abs(metrics.non_optimal_share - SHARE) < tolerance


def test_money_is_wasted_only_on_non_optimal_tools(workload):
    _, metrics = workload
    assert metrics.wasted_usd > 0
    for row in metrics.rows:
        if row.wasted_usd > 0:
            assert row.non_optimal, row
        if not row.non_optimal:
            assert row.wasted_usd == 0 and row.pick == "optimal"
    worst = metrics.worst_pairs()
    assert (worst[0].tool, worst[0].optimal_tool) == ("ml_pipeline", "simple_filter")


def test_optimal_calls_score_one_and_worse_ones_less(workload):
    _, metrics = workload
    for row in metrics.rows:
        if row.non_optimal:
            assert row.mean_efficiency < 1.0, row
        else:
            assert row.mean_efficiency == pytest.approx(1.0), row


def test_latency_quantiles_follow_the_catalog(workload):
    _, metrics = workload
    catalog = load_catalog()
    for row in metrics.rows:
        expected_s = catalog.tools[row.tool].latency_ms / 1000
        assert expected_s < row.p95_s <= row.p99_s < 30 * expected_s, row  # lognormal around the catalog figure


def test_some_calls_fail(workload):
    summary, metrics = workload
    assert 0 < summary.errors == sum(r.errors for r in metrics.rows) < summary.tool_calls * 0.1


def test_spans_follow_the_genai_conventions():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    catalog = load_catalog()
    summary = run_workload(provider, runs=60, suboptimal_share=0.5, seed=3, clock=fixed_clock)
    spans = exporter.get_finished_spans()
    assert len(spans) == summary.spans
    by_id = {s.context.span_id: s for s in spans}
    ops = {s.attributes[c.GEN_AI_OPERATION_NAME] for s in spans}
    assert ops == {"invoke_agent", "chat", c.OP_EXECUTE_TOOL}
    for span in spans:
        attrs = span.attributes
        op = attrs[c.GEN_AI_OPERATION_NAME]
        assert span.start_time < span.end_time <= FIXED_NS
        if op == "invoke_agent":
            assert span.parent is None and span.name == f"invoke_agent {attrs[c.GEN_AI_AGENT_NAME]}"
            continue
        parent = by_id[span.parent.span_id]
        assert parent.attributes[c.GEN_AI_OPERATION_NAME] == "invoke_agent"
        assert parent.start_time <= span.start_time and span.end_time <= parent.end_time
        if op == "chat":
            assert span.name == f"chat {attrs[c.GEN_AI_REQUEST_MODEL]}"
            assert attrs[c.GEN_AI_USAGE_INPUT_TOKENS] > 0 and attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] > 0
            continue
        tool = catalog.tools[attrs[c.GEN_AI_TOOL_NAME]]
        assert span.name == f"execute_tool {tool.name}" and attrs[c.GEN_AI_TOOL_CALL_ID].startswith("call_")
        jsonschema.validate(json.loads(attrs[c.GEN_AI_TOOL_CALL_ARGUMENTS]), tool.parameters)
        if c.ERROR_TYPE in attrs:
            assert span.status.status_code is StatusCode.ERROR and c.GEN_AI_TOOL_CALL_RESULT not in attrs
        else:
            assert span.status.status_code is StatusCode.UNSET and attrs[c.GEN_AI_TOOL_CALL_RESULT]


def test_a_seed_reproduces_the_workload():
    def spans(seed):
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        run_workload(provider, runs=50, seed=seed, clock=fixed_clock)
        return [(s.name, s.start_time, s.end_time, dict(s.attributes)) for s in exporter.get_finished_spans()]

    assert spans(5) == spans(5)
    assert spans(5) != spans(6)


@pytest.mark.parametrize(("share", "expected"), [(0.0, 0.0), (1.0, 1.0)])
def test_share_extremes(share, expected):
    summary = run_workload(AgentEvalSpanProcessor(registry=None), runs=100, suboptimal_share=share, seed=1)
    assert summary.non_optimal_share == expected


def test_bad_workload_arguments_raise():
    processor = AgentEvalSpanProcessor(registry=None)
    with pytest.raises(DemoError, match="suboptimal-share"):
        run_workload(processor, runs=1, suboptimal_share=1.5)
    with pytest.raises(DemoError, match="runs"):
        run_workload(processor, runs=-1)


def test_agents_come_from_any_catalog_with_agent_routes():
    catalog = parse_catalog("""
tools:
  grep: {cost_usd: 0, latency_ms: 5, capabilities: [search], complexity: simple}
  vector_db: {cost_usd: 0.001, latency_ms: 90, capabilities: [search], complexity: moderate}
tasks:
  lookup: {match: {gen_ai.agent.name: "research*"}, capability: search}
""")
    [agent] = demo_agents(catalog)
    assert (agent.name, agent.task, agent.optimal_tool, agent.worse_tools) == ("research_agent", "lookup", "grep", ("vector_db",))
    with pytest.raises(DemoError, match="no task route"):
        demo_agents(parse_catalog("tools:\n  grep: {cost_usd: 0, latency_ms: 5, capabilities: [s], complexity: simple}\n"))


def test_pacing_follows_the_rate_on_a_fake_clock():
    now = [0.0]
    shown = []

    class Display:
        interval, first_after = 0.5, 0.0

        def update(self, metrics, runs, elapsed_s):
            shown.append((elapsed_s, runs))

    def sleep(seconds):
        now[0] += seconds

    provider = TracerProvider()
    workload = Workload(provider, load_catalog(), seed=1)
    elapsed = _drive(workload, CollectorRegistry(), Display(), duration_s=2.0, rate=10.0, clock=lambda: now[0], sleep=sleep)
    assert elapsed == pytest.approx(2.0)
    assert workload.summary.runs == 20
    assert [t for t, _ in shown] == pytest.approx([0.0, 0.5, 1.0, 1.5])


def test_table_fits_an_80_column_terminal(workload):
    _, metrics = workload
    lines = format_table(metrics, agents=list(AGENT_TASKS))
    assert max(map(len, lines)) < 80 and sum(w for _, w, _ in COLUMNS) < 80
    assert lines[1] == "math_agent (arithmetic)" and lines[2].split()[:2] == ["basic_calculator", "optimal"]


def test_metrics_server_on_port_zero_reports_the_bound_port():
    server, url = start_metrics_server(CollectorRegistry(), port=0)
    try:
        assert not url.endswith(":0/metrics")
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_demo_command_serves_metrics_and_prints_a_summary(capsys):
    port = free_port()
    result = []
    # Seed 2: the first run already picks a worse tool, so "worst picks" shows however many runs fit in.
    thread = threading.Thread(target=lambda: result.append(
        main(["demo", "--duration", "1", "--rate", "50", "--no-live", "--port", str(port), "--seed", "2"])))
    thread.start()
    body = ""
    for _ in range(200):  # poll until the endpoint answers with scored calls (bounded, no timing assertion)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                body = response.read().decode()
            if "agent_eval_tool_calls_total{" in body:
                break
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.02)
    thread.join(timeout=30)
    assert result == [0]
    assert 'agent_eval_tool_latency_seconds{gen_ai_agent_name="' in body
    out, err = capsys.readouterr()
    assert err == ""
    assert f"curl http://127.0.0.1:{port}/metrics" in out
    assert re.search(r"Summary: [1-9][0-9,]* agent runs", out) and "0 malformed, 0 internal errors" in out
    assert "non-optimal tool picks:" in out and "worst picks (tool -> optimal tool):" in out
    assert "math_agent (arithmetic)" in out and "\x1b[" not in out  # the plain table, no ANSI
    with pytest.raises(urllib.error.URLError):  # the endpoint is gone afterwards
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_live_view_redraws_in_place_on_a_terminal():
    parser = argparse.ArgumentParser()
    add_demo_arguments(parser)
    out = FakeTerminal()
    assert run_demo(parser.parse_args(["--duration", "0.6", "--rate", "50", "--port", "0", "--seed", "1"]), out=out) == 0
    text = out.getvalue()
    assert text.count("\x1b[?25l") == 1 and text.count("\x1b[?25h") == 1  # cursor hidden, then restored
    assert "\x1b[J" in text and "runs/s" in text and "Summary:" in text


def occupied_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


@pytest.mark.parametrize("flags", [
    ["--rate", "-1"], ["--rate", "0"], ["--suboptimal-share", "1.5"], ["--duration", "-1"], ["--port", "70000"],
    ["--catalog", "missing.yaml"], ["--otlp-endpoint", "localhost:4318"], ["--port", "BUSY"],
])
def test_bad_options_give_one_line_and_exit_2(flags, capsys):
    with occupied_port() as busy:
        flags = [str(busy.getsockname()[1]) if f == "BUSY" else f for f in flags]
        assert main(["demo", "--duration", "0.1", *flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("otel-agent-eval: "), err


def test_unparsable_option_gives_one_line_too(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--rate", "fast"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == "otel-agent-eval demo: argument --rate: invalid float value: 'fast' (see otel-agent-eval demo --help)\n"


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("started_with", [None, _ignore_sigint], ids=["foreground", "background-job-sigint-ignored"])
def test_ctrl_c_ends_cleanly_with_the_summary(tmp_path, started_with):
    """Also when started as a shell's background job, which inherits SIGINT ignored."""
    proc = subprocess.Popen([sys.executable, "-m", "otel_agent_eval.tools.cli", "demo", "--duration", "0", "--port", "0", "--no-live"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=started_with)
    try:
        for line in proc.stdout:  # wait until it serves, then interrupt
            if "Ctrl-C stops early" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Summary:" in out and "interrupted" in out


def test_worst_picks_say_1_call_in_the_singular():
    import dataclasses

    from otel_agent_eval.tools.demo.display import _worst_lines
    from otel_agent_eval.tools.demo.readback import ToolRow

    fields = {f.name: 0 for f in dataclasses.fields(ToolRow)}
    one = ToolRow(**{**fields, "agent": "support", "task": "faq", "tool": "web_search", "optimal_tool": "local_index",
                     "pick": "suboptimal", "calls": 1, "mean_efficiency": 0.5, "wasted_usd": 0.001})
    lines = _worst_lines([one, dataclasses.replace(one, tool="x", calls=2)])
    assert "      1 call   efficiency 0.50" in lines[1] and "      2 calls  efficiency 0.50" in lines[2]


def test_the_calm_demo_keeps_every_tool_p99_below_its_slo():
    """The compose demo (`--rate 2 --suboptimal-share 0.02`) raises no AgentEvalToolLatencyOverSLO: on the packaged
    catalog, each tool's p99 over 5-minute windows (~170 calls of a tool at 2 runs/s), read as the histogram's bucket
    bound (scale 3: up to 9 % above), stays below the tool's `latency_slo_ms` in all but a rare window, and the p99
    over many calls well below it; a slow call crosses the SLO only rarely."""
    catalog = load_catalog()
    workload = Workload(TracerProvider(), catalog, seed=11)
    window, windows, bucket = 170, 300, 2 ** (1 / 8)
    tools = {agent.optimal_tool for agent in demo_agents(catalog)} | {t for a in demo_agents(catalog) for t in a.worse_tools}
    assert {"ml_pipeline", "basic_calculator", "simple_filter"} <= tools
    for name in sorted(tools):
        tool = catalog.tools[name]
        slo_s = tool.latency_slo_ms / 1000
        durations = [workload._call(tool, "q").duration_ns / 1e9 for _ in range(window * windows)]
        p99s = [sorted(durations[i:i + window])[math.ceil(0.99 * window) - 1] * bucket
                for i in range(0, len(durations), window)]
        over = sum(p99 > slo_s for p99 in p99s)
        assert over <= 0.01 * windows, f"{name}: p99 over its {slo_s} s SLO in {over} of {windows} windows"
        overall = sorted(durations)[math.ceil(0.99 * len(durations)) - 1] * bucket
        assert overall < 0.75 * slo_s, f"{name}: p99 {overall:.3f} s vs SLO {slo_s} s"
        assert sum(d > slo_s for d in durations) < 0.002 * len(durations), name

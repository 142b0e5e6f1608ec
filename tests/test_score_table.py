"""The terminal table of `otel-agent-eval score`: counts in the singular when there is one, the unknown-tools note only
with unknown tools, and one name for a group without an agent or task (`(no agent)`, `(unrouted)`) in the table, the
gate lines, JUnit and HTML alike."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from otel_agent_eval.offline.gate import evaluate_gate
from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.tools.html_report import render_html
from otel_agent_eval.tools.junit import junit_xml
from otel_agent_eval.tools.score_table import plural, render_summary
from test_score import collector_lines, write

T0 = 1_750_000_000_000_000_000


def spans(tools: tuple[str, ...], *, agent: str | None = "planner", model: str | None = None) -> list[Any]:
    """One trace: an agent run (or, with `agent=None`, no agent span at all) calling `tools`, and `model` once."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("table")
    root = tracer.start_span(f"invoke_agent {agent}" if agent else "handle request", start_time=T0, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent} if agent else {})
    t = T0
    for tool in tools:
        tracer.start_span(f"execute_tool {tool}", context=set_span_in_context(root), start_time=t, attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}).end(end_time=t + 10**6)
        t += 10**6
    if model:
        tracer.start_span(f"chat {model}", context=set_span_in_context(root), start_time=t, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": model, "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 10}).end(end_time=t + 10**6)
    root.end(end_time=t + 10**7)
    return list(memory.get_finished_spans())


def table(tmp_path: Path, found: list[Any]) -> tuple[str, Any]:
    report = score_traces(write(tmp_path / "t.json", collector_lines(found)))
    return render_summary(report, evaluate_gate(report)), report


def test_plural():
    assert [plural(n, "tool call") for n in (0, 1, 2, 1234)] == ["0 tool calls", "1 tool call", "2 tool calls", "1,234 tool calls"]
    assert plural(1, "record or span", "records or spans") == "1 record or span"
    assert plural(3, "record or span", "records or spans") == "3 records or spans"


def test_one_of_each_reads_in_the_singular(tmp_path):
    out, report = table(tmp_path, spans(("web_search",)))
    assert out.splitlines()[0] == f"Scored 1 tool call and 1 agent run from {report.inputs.spans} spans in 1 file."
    assert out.splitlines()[-1] == "Gate: passed (1 agent/task group)."
    early = dataclasses.replace(report, groups=tuple(dataclasses.replace(g, runs_closed_early=1) for g in report.groups))
    assert "\n1 run was closed without their root span" in render_summary(early, evaluate_gate(early))
    failing = render_summary(report, evaluate_gate(report, {"efficiency": 1.1}))
    assert failing.splitlines()[-1] == "Gate: FAILED for 1 of 1 agent/task group."
    two, _ = table(tmp_path, spans(("web_search", "web_search")))
    assert two.splitlines()[0].startswith("Scored 2 tool calls and 1 agent run from ")


def test_unknown_tools_score_0_is_said_only_when_a_tool_is_unknown(tmp_path):
    out, _ = table(tmp_path, spans(("web_search",), model="no-such-model-1"))
    assert "Coverage: the catalog lacks 1 model price (no-such-model-1: 1 call).\n" in out + "\n"
    assert "Unknown tools score 0." not in out
    out, _ = table(tmp_path, spans(("not_in_the_catalog",)))
    assert "Coverage: the catalog lacks 1 tool (not_in_the_catalog: 1 call). Unknown tools score 0." in out


def test_a_group_without_agent_or_task_has_one_name_everywhere(tmp_path):
    out, report = table(tmp_path, spans(("web_search",), agent=None))
    [group] = report.groups
    assert not group.agent and not group.task and group.name == "(no agent)/(unrouted)"
    rows = out.splitlines()
    header = next(i for i, line in enumerate(rows) if line.startswith("agent "))
    assert rows[header + 1].split()[:4] == ["(no", "agent)", "(unrouted)", "1"]
    tool_header = next(i for i, line in enumerate(rows) if line.startswith("agent ") and " tool " in line)
    assert rows[tool_header + 1].split()[:3] == ["(no", "agent)", "(unrouted)"]
    gate = evaluate_gate(report, {"efficiency": 1.1})
    assert all(c.group == "(no agent)/(unrouted)" for c in gate.checks)  # the gate lines
    assert 'classname="otel-agent-eval.(no agent)" name="(unrouted)"' in junit_xml(report, gate)
    html = render_html(report, gate)
    assert "<td>(no agent)</td><td>(unrouted)</td>" in html and "<td>-</td><td>-</td>" not in html

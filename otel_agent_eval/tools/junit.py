"""JUnit XML for CI from a scored `Report`: one test case per agent and task, failing with the gate's
reasons (`junit_xml`), or one per agent run (`RunCases`, `score --junit-cases run`).

CI systems (GitHub Actions reporters, GitLab, Jenkins) show JUnit test cases natively, so a
merge request lists which agent on which task fell below which threshold. A run fails when it
did not complete (its root span ended in error, a tool error was not recovered by a later
successful call of the same tool, or your run validator said no); the failure's message is the
reason, followed by what else was wrong with the run (spurious, redundant or invalid calls, the
call budget). Each run's test case is serialised when the run ends and kept in a temporary
file, so a million runs cost disk, not memory:

    >>> cases = RunCases()
    >>> report = score_traces(paths, on_run=cases.add)
    >>> write_chunks(path, cases.document(report))
"""
from __future__ import annotations

import math
import re
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

from ..core.enrich import health_text
from ..core.runs import AgentRun
from ..offline.gate import GateResult
from ..offline.report import GroupSummary, Report, printable
from .score_table import agent_label, task_label

__all__ = ["RunCases", "junit_xml", "run_case_name", "run_failure"]

SUITE = "otel-agent-eval score"
# characters XML 1.0 forbids (ElementTree writes them as they are, and the document would not parse)
_NOT_XML = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def junit_xml(report: Report, gate: GateResult) -> str:
    failures = sum(1 for g in report.groups if any(not c.passed for c in gate.for_group(g.name) if c.level == "fail"))
    root = ET.Element("testsuites", name="otel-agent-eval", tests=str(len(report.groups)), failures=str(failures), errors="0")
    suite = ET.SubElement(root, "testsuite", name=SUITE, tests=str(len(report.groups)), failures=str(failures), errors="0",
                          skipped="0")
    judge = report.judge
    if judge is not None:
        from .judge_table import judge_group_out, judge_properties
    _properties(ET.SubElement(suite, "properties"), report, **dict(judge_properties(judge) if judge is not None else ()))
    for group in report.groups:
        case = ET.SubElement(suite, "testcase", classname=f"otel-agent-eval.{agent_label(group.agent)}",
                             name=task_label(group.task))
        checks = gate.for_group(group.name)
        failed = [c for c in checks if c.level == "fail" and not c.passed]
        if failed:
            failure = ET.SubElement(case, "failure", type="gate", message="; ".join(c.reason for c in failed))
            failure.text = "\n".join(str(c) for c in failed)
        out = [_summary(group)] + [f"warning: {c}" for c in checks if c.level == "warn" and not c.passed and not failed]
        if judge is not None:
            out += judge_group_out(judge, group.agent, group.task)
        ET.SubElement(case, "system-out").text = "\n".join(out)
    if report.inputs.problems:
        ET.SubElement(suite, "system-err").text = "\n".join(str(p) for p in report.inputs.problems)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _tostring(root) + "\n"


def _summary(group: GroupSummary) -> str:
    parts = [f"calls={group.calls}", f"wasted_usd={group.wasted_usd:.6f}", f"runs={group.runs}"]
    for name in ("efficiency", "completion", "health", "correctness", "cost_per_run_usd", "judge_score"):
        value = getattr(group, name)
        if value is not None:
            parts.append(f"{name}={value:.4g}")
    return " ".join(parts)


def _properties(properties: ET.Element, report: Report, **more: Any) -> ET.Element:
    for name, value in (("catalog", report.catalog), ("environment", report.environment),
                        ("spans_read", report.inputs.spans), ("records_skipped", report.inputs.records_skipped),
                        ("spans_skipped", report.inputs.spans_skipped), *more.items()):
        ET.SubElement(properties, "property", name=name, value=str(value))
    return properties


# -- one test case per run -----------------------------------------------------------------

RUN_SUITE = "otel-agent-eval score: runs"


def run_failure(run: AgentRun) -> str | None:
    """Why a run fails as a test case (it did not complete), or None."""
    evaluation = run.evaluation
    if evaluation is None or evaluation.completed:
        return None
    return f"not completed: {evaluation.completion_reason}"


def run_case_name(run: AgentRun) -> str:
    """A run's test case name, unique per run (CI test views key on classname and name): what the run's record calls
    its root (the agent's name for a run rooted at an agent span, the span's name for a trace's local root), its trace
    id and its root span's id: `support_agent trace 4bf9…4736 span 00f067aa0ba902b7`."""
    return f"{run.root_name or agent_label(run.agent)} trace {run.trace_id:032x} span {run.root_span_id:016x}"


def _problems(run: AgentRun) -> list[str]:
    evaluation = run.evaluation
    assert evaluation is not None
    problems = [*(f"spurious call: {t}" for t in evaluation.spurious_calls),
                *(f"redundant call: {t}" for t in evaluation.redundant_calls),
                *(f"invalid call: {t}" for t in evaluation.invalid_calls)]
    if evaluation.over_budget:
        problems.append("over the route's call budget")
    return problems


class RunCases:
    """Test cases of evaluated runs, serialised as they come (`add` is an `on_run` callback)."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115 - closed by document()
        self.tests = self.failures = 0
        self.seconds = 0.0

    def add(self, run: AgentRun) -> None:
        evaluation = run.evaluation
        if evaluation is None:
            return
        self.tests += 1
        duration = evaluation.duration_s if evaluation.duration_s is not None and math.isfinite(evaluation.duration_s) else 0.0
        self.seconds += duration
        case = ET.Element("testcase", classname=f"otel-agent-eval.{agent_label(run.agent)}.{task_label(run.task)}",
                          name=run_case_name(run), time=f"{duration:.6f}")
        failure, problems = run_failure(run), _problems(run)
        if failure is not None:
            self.failures += 1
            element = ET.SubElement(case, "failure", type="run", message="; ".join([failure, *problems]))
            element.text = "\n".join([failure, *problems])
        tools = " ".join(f"{s.static.tool}:{s.outcome}" for s in run.scores)
        out = [f"health={health_text(evaluation.health)} cost_usd={evaluation.cost_usd:.6f} calls={len(run.scores)} status={run.status}"
               f" closed_by={run.closed_by}", f"tools: {tools or '-'}"]
        if evaluation.tool_correctness is not None:
            out.append(f"tool_correctness={evaluation.tool_correctness:.4g}")
        if failure is None:
            out += [f"warning: {p}" for p in problems]
        ET.SubElement(case, "system-out").text = "\n".join(out)
        ET.indent(case, space="  ", level=2)
        self._file.write("    " + _tostring(case).rstrip() + "\n")

    def document(self, report: Report) -> Iterator[str]:
        """The whole XML document, in pieces; closes the temporary file when done."""
        try:
            counts = dict(tests=str(self.tests), failures=str(self.failures), errors="0")
            yield '<?xml version="1.0" encoding="UTF-8"?>\n'
            yield _open_tag("testsuites", name="otel-agent-eval", **counts, time=f"{self.seconds:.6f}") + "\n"
            yield "  " + _open_tag("testsuite", name=RUN_SUITE, **counts, skipped="0", time=f"{self.seconds:.6f}") + "\n"
            properties = _properties(ET.Element("properties"), report, runs=report.runs)
            ET.indent(properties, space="  ", level=2)
            yield "    " + _tostring(properties).rstrip() + "\n"
            self._file.seek(0)
            while True:
                chunk = self._file.read(1 << 20)
                if not chunk:
                    break
                yield chunk
            if report.inputs.problems:
                err = ET.Element("system-err")
                err.text = "\n".join(str(p) for p in report.inputs.problems)
                yield "    " + _tostring(err) + "\n"
            yield "  </testsuite>\n</testsuites>\n"
        finally:
            self._file.close()


def _tostring(element: ET.Element) -> str:
    """`ET.tostring` as text, with what XML forbids (a span name's ESC, say) as a visible escape (`\\x1b`)."""
    return printable(ET.tostring(element, encoding="unicode"), _NOT_XML)


def _open_tag(tag: str, **attributes: str) -> str:
    text = _tostring(ET.Element(tag, **attributes))  # <tag a="1" />
    return text[:-3] + ">"

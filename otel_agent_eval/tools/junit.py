"""JUnit XML for CI from a scored `Report`: one test case per agent and task, failing with the gate's reasons.

CI systems (GitHub Actions reporters, GitLab, Jenkins) show JUnit test cases natively, so a
merge request lists which agent on which task fell below which threshold.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from ..offline.gate import GateResult
from ..offline.report import GroupSummary, Report

__all__ = ["junit_xml"]

SUITE = "otel-agent-eval score"


def junit_xml(report: Report, gate: GateResult) -> str:
    failures = sum(1 for g in report.groups if any(not c.passed for c in gate.for_group(g.name) if c.level == "fail"))
    root = ET.Element("testsuites", name="otel-agent-eval", tests=str(len(report.groups)), failures=str(failures), errors="0")
    suite = ET.SubElement(root, "testsuite", name=SUITE, tests=str(len(report.groups)), failures=str(failures), errors="0",
                          skipped="0")
    properties = ET.SubElement(suite, "properties")
    for name, value in (("catalog", report.catalog), ("environment", report.environment),
                        ("spans_read", report.inputs.spans), ("records_skipped", report.inputs.records_skipped),
                        ("spans_skipped", report.inputs.spans_skipped)):
        ET.SubElement(properties, "property", name=name, value=str(value))
    for group in report.groups:
        case = ET.SubElement(suite, "testcase", classname=f"otel-agent-eval.{group.agent or '(no agent)'}",
                             name=group.task or "(unrouted)")
        checks = gate.for_group(group.name)
        failed = [c for c in checks if c.level == "fail" and not c.passed]
        if failed:
            failure = ET.SubElement(case, "failure", type="gate", message="; ".join(c.reason for c in failed))
            failure.text = "\n".join(str(c) for c in failed)
        out = [_summary(group)] + [f"warning: {c}" for c in checks if c.level == "warn" and not c.passed and not failed]
        ET.SubElement(case, "system-out").text = "\n".join(out)
    if report.inputs.problems:
        ET.SubElement(suite, "system-err").text = "\n".join(str(p) for p in report.inputs.problems)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _summary(group: GroupSummary) -> str:
    parts = [f"calls={group.calls}", f"wasted_usd={group.wasted_usd:.6f}", f"runs={group.runs}"]
    for name in ("efficiency", "completion", "health", "correctness", "cost_per_run_usd"):
        value = getattr(group, name)
        if value is not None:
            parts.append(f"{name}={value:.4g}")
    return " ".join(parts)

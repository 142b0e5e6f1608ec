"""The terminal summary of `otel-agent-eval score`: per agent and task, per tool, the poorest tool choices, the gate."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..config.catalog import GateLevel
from ..offline.gate import GateResult
from ..offline.report import Report, llm_prices_note, printable

__all__ = ["NO_AGENT", "UNROUTED", "agent_label", "context_cell", "health_cell", "plural", "render_summary", "task_label"]

TOP_CHOICES = 10
NO_AGENT, UNROUTED = "(no agent)", "(unrouted)"  # as the gate, JUnit and HTML name a group without an agent or task


def render_summary(report: Report, gate: GateResult, next_step: str | None = None, judged: Sequence[str] = ()) -> str:
    """The summary; `next_step` is the command that drafts what the catalog lacks (named under the tables), `judged`
    the judge's lines (`judge_table.judge_lines`) above the gate."""
    inputs, t = report.inputs, report.thresholds
    skipped = inputs.spans_skipped + inputs.records_skipped
    notes = [f"{plural(skipped, 'unreadable record or span', 'unreadable records or spans')} skipped"] if skipped else []
    if inputs.spans_duplicate:
        notes.append(f"{plural(inputs.spans_duplicate, 'repeated span')} scored once")
    lines = [
        f"Scored {plural(report.calls, 'tool call')} and {plural(report.runs, 'agent run')} from {plural(inputs.spans, 'span')} "
        f"in {plural(inputs.files, 'file')}" + (f" ({'; '.join(notes)})" if notes else "") + ".",
        f"Catalog {report.catalog}; environment {report.environment}: efficiency warns below {t.warn:g}, fails below {t.fail:g}"
        + "".join(f"; {_level(level)}" for level in report.gate_levels.values()) + ".",
        "",
    ]
    verdicts = {}
    for group in report.groups:
        checks = gate.for_group(group.name)
        verdicts[group.name] = ("FAIL" if any(c.level == "fail" and not c.passed for c in checks)
                                else "warn" if any(not c.passed for c in checks) else "pass" if checks else "-")
    lines += _table(
        ["agent", "task", "runs", "completed", "cost/run", "LLM priced by", "health", "calls", "efficiency", "wasted", "gate"],
        [[agent_label(g.agent), task_label(g.task), _int(g.runs), _ratio(g.completion), _usd(g.cost_per_run_usd), priced_by(g.llm_priced_by),
          health_cell(g.health), _int(g.calls), _float(g.efficiency, 2), _usd(g.wasted_usd), verdicts[g.name]] for g in report.groups],
        right=(2, 3, 4, 6, 7, 8, 9))
    tools = [t for g in report.groups for t in g.tools]
    if tools:
        lines += [""] + _table(
            ["agent", "task", "tool", "calls", "errors", "efficiency", "wasted", "context/call", "true cost/call", "p50", "p95",
             "p99", "over SLO", "optimal tool"],
            [[agent_label(t.agent), task_label(t.task), t.tool + ("" if t.known else " (unknown)"), _int(t.calls), _int(t.errors),
              _float(t.efficiency, 2), _usd(t.wasted_usd), context_cell(t.induced_tokens, t.induced_calls),
              _usd(t.true_cost_per_call_usd, 6), _seconds(t.p50_s), _seconds(t.p95_s), _seconds(t.p99_s),
              _int(t.slo_violations), t.optimal_tool or "-"] for t in tools],
            right=range(3, 13))
    if report.poor_choices:
        lines += ["", "Poorest tool choices (suboptimal tool -> the catalog's optimal tool):"]
        lines += _table(["task", "tool", "", "optimal tool", "calls", "wasted"],
                        [[task_label(p.task), p.tool, "->", p.optimal_tool, _int(p.calls), _usd(p.wasted_usd)]
                         for p in report.poor_choices[:TOP_CHOICES]], right=(4, 5), indent="  ")
    prices = llm_prices_note(report)
    if prices:
        lines += ["", prices]
    early = sum(g.runs_closed_early for g in report.groups)
    if early:
        lines += ["", f"{plural(early, 'run')} {'was' if early == 1 else 'were'} closed without their root span "
                      "(it was not in the input, or came too late)."]
    if not report.coverage.complete:
        lines += ["", f"Coverage: {coverage_line(report)}"]
        if next_step:
            lines.append(f"Draft what it lacks: {next_step}")
    if judged:
        lines += ["", *judged]
    lines += ["", _gate_line(gate)]
    return "\n".join(lines)


def plural(n: int, word: str, many: str | None = None) -> str:
    """`1 tool call`, `2 tool calls` (`many`: the plural when it is not `word` + s)."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {many or word + 's'}"


def agent_label(agent: str | None) -> str:
    return agent or NO_AGENT


def task_label(task: str | None) -> str:
    return task or UNROUTED


def coverage_line(report: Report) -> str:
    """What the catalog lacks, in a sentence; that unknown tools score 0 only when some tool is unknown; when all it
    lacks is prices its file already names in commented lines, that they are to be set there (a draft adds nothing)."""
    coverage = report.coverage
    line = f"{coverage.describe()}." + (" Unknown tools score 0." if coverage.unknown_tools else "")
    if coverage.prices_to_set:
        names = ", ".join(printable(model) for model, _ in coverage.unpriced_models)
        line += (f" Set their prices under models: in {printable(report.catalog)}: the lines for {names} are "
                 "there, commented; uncomment them and fill in input_per_1k and output_per_1k.")
    return line


def priced_by(sources: Sequence[str]) -> str:
    """`reported`, `catalog+genai_prices`: the sources that priced a group's or run's LLM calls; `-` without any."""
    return "+".join(sources) or "-"


def context_cell(tokens: int, calls: int) -> str:
    """Input tokens a call's result added to the later model calls of its run, per call measured
    (docs/true-cost.md); `unmeasured` when no run of its calls had token counts."""
    return f"{tokens / calls:,.0f} tok" if calls else "unmeasured"


def _level(level: GateLevel) -> str:
    """A catalog gate level in words: `completion fails below 0.85 (warns below 0.9)`."""
    side = "below" if level.higher_is_better else "above"
    warn = f" (warns {side} {level.warn:g})" if level.warn is not None else ""
    return f"{level.metric} fails {side} {level.fail:g}{warn}"


def _gate_line(gate: GateResult) -> str:
    groups = {c.group for c in gate.checks}
    if not gate.checks:
        return "Gate: nothing to check (no group has tool calls or a metric given to --fail-under)."
    failed = {c.group for c in gate.failed}
    if failed:
        return f"Gate: FAILED for {len(failed):,} of {plural(len(groups), 'agent/task group')}."
    warned = {c.group for c in gate.warnings}
    return f"Gate: passed ({plural(len(groups), 'agent/task group')}" + (f", {len(warned):,} with warnings)." if warned else ").")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = (), indent: str = "") -> list[str]:
    """Aligned columns. Cells are shown `printable`: a name from a span cannot colour the terminal or forge a line."""
    cells = [[printable(str(c)) for c in row] for row in [headers, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    right = set(right)

    def line(row: Sequence[str]) -> str:
        return indent + "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()

    return [line(row) for row in cells]


def _int(value: int) -> str:
    return f"{value:,}"


def health_cell(value: float | None) -> str:
    """A health score as a whole number rounded down: 99.6 is "99", never a perfect "100" it does not have."""
    return "-" if value is None else str(math.floor(value + 1e-9))


def _float(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _usd(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"${value:,.{digits}f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f}ms" if value < 1 else f"{value:.2f}s"

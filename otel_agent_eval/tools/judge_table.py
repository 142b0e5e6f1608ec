"""The judge's part of `score`'s outputs: the terminal lines, JUnit properties, HTML section (from a `JudgeSummary`)."""
from __future__ import annotations

from html import escape

from ..offline.judging import JudgedRun, JudgeSummary
from ..offline.report import printable
from .score_table import _float, _table, agent_label, plural, task_label

__all__ = ["judge_html", "judge_lines", "judge_properties", "provenance", "spend_line"]

MAX_REASON_CHARS = 240  # of a judge's reason, in the table and the HTML


def provenance(summary: JudgeSummary) -> str:
    """`gpt-4o-mini, ToolCorrectnessMetric (deepeval 4.3.1, prompt sha256:…), sample rate 0.1`."""
    version = ", ".join(v for v in (summary.metric_version, f"prompt {summary.prompt_version}" if summary.prompt_version else "") if v)
    return (f"{summary.judge_model}, {summary.metric}" + (f" ({version})" if version else "")
            + f", sample rate {summary.sample_rate:g}")


def spend_line(summary: JudgeSummary) -> str:
    """What was judged and what it cost, in one sentence."""
    cost = "cost unknown (the judge's model has no price)" if summary.cost_usd is None else f"${summary.cost_usd:,.4f}"
    if summary.cost_usd is not None and summary.unpriced:
        cost += f" (+{plural(summary.unpriced, 'judgement')} without a price)"
    caps = ([f"${summary.max_usd:g}"] if summary.max_usd is not None else []) + (
        [plural(summary.max_judgements, "judgement")] if summary.max_judgements is not None else [])
    line = (f"Judged {summary.judged:,} of {plural(summary.sampled, 'sampled run')} ({summary.runs:,} runs in all): "
            f"{summary.input_tokens:,} input and {summary.output_tokens:,} output tokens, {cost}")
    if summary.failed:
        line += f"; {summary.failed:,} failed"
    if summary.over_budget:
        line += f"; {summary.over_budget:,} not judged, over the budget ({' and '.join(caps)})"
    elif caps:
        line += f"; budget {' and '.join(caps)}"
    return line + "."


def judge_lines(summary: JudgeSummary) -> list[str]:
    """The judge's table for the terminal: per agent and task, then the lowest-scored runs with the judge's reasons."""
    lines = [f"Tool selection judged by {provenance(summary)}.", spend_line(summary)]
    if summary.groups:
        lines += _table(
            ["agent", "task", "judged", "failed", "score", "selection", "arguments", "judge part", "cost"],
            [[agent_label(g.agent), task_label(g.task), f"{g.judged:,}", f"{g.failed:,}", _float(g.score, 2),
              _float(g.selection_score, 2), _float(g.argument_score, 2), f"{g.judge_part:,}",
              "-" if g.cost_usd is None else f"${g.cost_usd:,.4f}"] for g in summary.groups],
            right=range(2, 9))
    lowest = [r for g in summary.groups for r in g.lowest if r.result is not None and r.result.score < 1]
    if lowest:
        lines += ["", "Lowest judged runs (the judge's reason):"]
        for run in sorted(lowest, key=lambda r: (r.result.score, r.trace_id))[:10]:
            lines.append(f"  {run.result.score:.2f}  {agent_label(run.agent)}/{task_label(run.task)}  trace {run.trace_id} "
                         f"({_parts(run)}): {printable(_reason(run))}")
    for error in summary.errors:
        lines.append(f"Judge error: {printable(error)}")
    return lines


def judge_properties(summary: JudgeSummary) -> list[tuple[str, str]]:
    """JUnit suite properties: the provenance and the spend."""
    return [("judge_model", summary.judge_model), ("judge_metric", summary.metric),
            ("judge_metric_version", summary.metric_version), ("judge_prompt_version", summary.prompt_version),
            ("judge_sample_rate", f"{summary.sample_rate:g}"), ("judge_judged", str(summary.judged)),
            ("judge_failed", str(summary.failed)), ("judge_over_budget", str(summary.over_budget)),
            ("judge_input_tokens", str(summary.input_tokens)), ("judge_output_tokens", str(summary.output_tokens)),
            ("judge_cost_usd", "unknown" if summary.cost_usd is None else f"{summary.cost_usd:.6f}")]


def judge_group_out(summary: JudgeSummary, agent: str, task: str) -> list[str]:
    """A JUnit group case's lines about its judged runs: the lowest scores with the judge's reasons."""
    group = summary.group(agent, task)
    if group is None:
        return []
    return [f"judged {run.trace_id}: score {run.result.score:.3g} ({_parts(run)}): {_reason(run)}"
            for run in group.lowest if run.result is not None]


def judge_html(summary: JudgeSummary) -> str:
    """The HTML report's section body."""
    e = lambda value: escape(printable(str(value)), quote=True)  # noqa: E731 - the page's escaping
    head = f'<p class="meta">{e(provenance(summary))}. {e(spend_line(summary))}</p>'
    headers = ["agent", "task", "judged", "failed", "score", "selection", "arguments", "cost", "lowest runs (the judge's reason)"]
    rows = []
    for g in summary.groups:
        lowest = "".join(f"<li><code>{e(r.trace_id[:16])}</code> {r.result.score:.2f} ({e(_parts(r))}): {e(_reason(r))}</li>"
                         for r in g.lowest if r.result is not None)
        rows.append([e(agent_label(g.agent)), e(task_label(g.task)), f"{g.judged:,}", f"{g.failed:,}", _float(g.score, 2),
                     _float(g.selection_score, 2), _float(g.argument_score, 2),
                     "-" if g.cost_usd is None else e(f"${g.cost_usd:,.4f}"), f"<ul>{lowest}</ul>" if lowest else "-"])
    th = "".join(f'<th scope="col">{e(h)}</th>' for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    errors = "".join(f'<p class="problems">{e(error)}</p>' for error in summary.errors)
    return head + f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>" + errors


def _parts(run: JudgedRun) -> str:
    """`expected tools 0.00, judge 0.25`: the two parts whose minimum the score is."""
    assert run.result is not None
    result = run.result
    parts = [f"expected tools {result.deterministic_score:.2f}" if result.deterministic_score is not None else "no expected tools"]
    if result.selection_score is not None:
        parts.append(f"judge {result.selection_score:.2f}")
    return ", ".join(parts)


def _reason(run: JudgedRun) -> str:
    """The judge's reason (deepeval's combined one when the judge gave none); one line, clipped."""
    assert run.result is not None
    text = run.result.selection_reason or run.result.reason
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON_CHARS else text[:MAX_REASON_CHARS - 1] + "…"

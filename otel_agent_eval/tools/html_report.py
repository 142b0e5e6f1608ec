"""The `--html` page of `otel-agent-eval score`: one self-contained file, charts drawn as inline SVG.

Nothing is fetched to view it: the CSS is inline, the charts are SVG written here (no JS,
no fonts, no images), and a Content-Security-Policy of `default-src 'none'` keeps it that
way even if a name were to slip through. Every name in it (agents, tasks, tools, span
names) comes from span content and is HTML-escaped. Each chart is a `<figure>` with an
SVG `<title>`/`<desc>` (its text alternative) and, under it, the same numbers as a table.

    >>> report = score_traces("traces.json")
    >>> Path("report.html").write_text(render_html(report, evaluate_gate(report)), encoding="utf-8")
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

from ..offline.gate import GateResult
from ..offline.report import EFFICIENCY_BINS, HEALTH_BINS, Report, RunCall, RunSummary, llm_prices_note, printable
from .score_table import agent_label, coverage_line, health_cell, plural, priced_by, task_label

__all__ = ["format_seconds", "format_usd", "render_html"]

TITLE = "otel-agent-eval score report"
TOP_POOR_CHOICES = 12
TOP_LATENCY_TOOLS = 20
MAX_PROBLEMS = 4  # per worst run
WIDTH = 760  # the charts' viewBox width; they scale to the page
HALF_WIDTH = 500  # the histograms', two side by side
LABEL_CHAR_W = 7.2  # a generous width of one character of 12-unit chart text (DejaVu Sans, the widest common default)
MAX_LABEL_W = 300  # the latency chart's label column at most (longer names clipped, whole in their <title>)

PASS, WARN, FAIL, INK, MUTED, GRID = "#2a9d8f", "#e9a23b", "#d1495b", "#1f2933", "#5f6b7a", "#e4e7eb"
OUTCOME_CLASSES = {"optimal": "ok", "acceptable": "ok", "suboptimal": "warn", "unknown_tool": "unknown", "error": "bad"}

CSS = """
:root{--ink:#1f2933;--muted:#5f6b7a;--line:#e4e7eb;--bg:#f6f7f9;--card:#fff;--ok:#2a9d8f;--warn:#e9a23b;--bad:#d1495b}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif}
main{max-width:1100px;margin:0 auto;padding:24px 20px 48px}
h1{font-size:1.6rem;margin:0 0 4px}h2{font-size:1.2rem;margin:0 0 8px}
.meta{color:var(--muted);margin:0 0 16px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(150px,1fr));gap:12px;margin:16px 0}
.card,section{background:var(--card);border:1px solid var(--line);border-radius:10px}
.card{padding:12px 14px}.card b{display:block;font-size:1.45rem}.card span{color:var(--muted);font-size:.85rem}
section{padding:16px 18px;margin:16px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(470px,1fr));gap:16px}
.grid section{margin:0}
figure{margin:0}figcaption{color:var(--muted);font-size:.88rem;margin-top:4px}
svg{width:100%;height:auto;display:block}
svg text{font-family:inherit;fill:var(--ink)}
.gate{padding:10px 14px;border-radius:8px;font-weight:600;margin:12px 0}
.gate.passed{background:#e3f4f1;color:#14594f}.gate.failed{background:#fbe5e8;color:#8a1c2b}.gate.none{background:var(--line)}
.gate ul{font-weight:400;margin:6px 0 0;padding-left:20px}
table{border-collapse:collapse;width:100%;font-size:.88rem}
th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{color:var(--muted);font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
details{margin-top:8px}summary{cursor:pointer;color:var(--muted);font-size:.85rem}
.empty{color:var(--muted);font-style:italic}
ol.seq{list-style:none;margin:0;padding:0;display:flex;flex-wrap:wrap;gap:4px}
ol.seq li{padding:1px 7px;border-radius:10px;font-size:.8rem;border:1px solid var(--line);background:#f0f2f4}
ol.seq li.ok{background:#e3f4f1;border-color:#b5e0d8}ol.seq li.warn{background:#fdf1dc;border-color:#f3d29a}
ol.seq li.bad{background:#fbe5e8;border-color:#f0b5be}ol.seq li.unknown{background:#ececf4;border-color:#c9c9de}
.legend span{display:inline-block;margin-right:12px;font-size:.82rem;color:var(--muted)}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.problems{color:var(--muted);font-size:.8rem}
code{font-size:.8rem;color:var(--muted)}
"""


def render_html(report: Report, gate: GateResult | None = None, *, title: str = TITLE, next_step: str | None = None) -> str:
    """The whole page for `report` (and the gate's verdict, when given; `next_step`, the command that drafts what
    the catalog lacks)."""
    inputs, t = report.inputs, report.thresholds
    efficiency = _mean_efficiency(report)
    runs = sum(g.runs for g in report.groups)
    completed = sum(g.completed for g in report.groups)
    skipped = inputs.spans_skipped + inputs.records_skipped
    cards = [
        (f"{report.calls:,}", "tool calls"),
        (f"{report.runs:,}", "agent runs"),
        ("-" if efficiency is None else f"{efficiency:.2f}", "mean efficiency"),
        (format_usd(report.wasted_usd), "money wasted"),
        ("-" if not runs else f"{100 * completed / runs:.0f}%", "runs completed"),
    ]
    meta = (f"{plural(inputs.spans, 'span')} from {plural(inputs.files, 'file')}"
            + (f", {plural(skipped, 'unreadable record or span', 'unreadable records or spans')} skipped" if skipped else "")
            + f" · catalog {report.catalog} · environment {report.environment}: efficiency warns below {t.warn:g}, "
              f"fails below {t.fail:g}")
    body = [
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{_e(meta)}</p>',
        _gate_html(gate),
        _coverage_html(report, next_step),
        '<div class="cards">' + "".join(f"<div class=\"card\"><b>{_e(v)}</b><span>{_e(k)}</span></div>" for v, k in cards) + "</div>",
        '<div class="grid">',
        _section("Efficiency distribution", _efficiency_chart(report)),
        _section("Run health distribution", _health_chart(report)),
        "</div>",
        _section("Money wasted by tool → optimal tool", _waste_chart(report)),
        _section("Latency percentiles per tool against the SLO", _latency_chart(report)),
        _section("Agents and tasks", _groups_table(report)),
        _section(f"Worst runs (the {len(report.worst_runs)} least healthy)", _worst_runs(report.worst_runs)),
    ]
    if report.judge is not None:
        from .judge_table import judge_html

        body.append(_section("Tool selection, judged (deepeval's ToolCorrectnessMetric with an LLM)", judge_html(report.judge)))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(body) + "\n</main>\n</body>\n</html>\n"
    )


# -- formatting -------------------------------------------------------------------------------------------

def format_usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if abs(value) >= 100 else f"${value:,.4f}"


def format_seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _e(value: object) -> str:
    """HTML-escaped text (also safe inside a double- or single-quoted attribute); control and bidi characters as
    visible escapes (`\\x1b`, `\\u202e`), as HTML forbids the first and the second could reorder what is shown."""
    return escape(printable(str(value)), quote=True)


def _n(value: float) -> str:
    """An SVG coordinate."""
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _mean_efficiency(report: Report) -> float | None:
    calls = sum(g.calls for g in report.groups if g.efficiency is not None)
    if not calls:
        return None
    return math.fsum(g.efficiency * g.calls for g in report.groups if g.efficiency is not None) / calls


# -- page parts -------------------------------------------------------------------------------------------

def _section(heading: str, content: str) -> str:
    return f"<section>\n<h2>{_e(heading)}</h2>\n{content}\n</section>"


def _gate_html(gate: GateResult | None) -> str:
    if gate is None:
        return ""
    if not gate.checks:
        return '<div class="gate none">Gate: nothing to check.</div>'
    if gate.passed:
        warned = len({c.group for c in gate.warnings})
        note = f" ({plural(warned, 'group')} with warnings)" if warned else ""
        return f'<div class="gate passed">Gate: passed{_e(note)}</div>'
    items = "".join(f"<li>{_e(c)}</li>" for c in gate.failed)
    failed = plural(len({c.group for c in gate.failed}), "agent/task group")
    return f'<div class="gate failed">Gate: FAILED for {failed}<ul>{items}</ul></div>'


def _coverage_html(report: Report, next_step: str | None) -> str:
    """What the catalog lacks (unknown tools score 0), every name, and the command that drafts it."""
    coverage = report.coverage
    if coverage.complete:
        return ""
    rows = [*(["tool", _e(name), f"{calls:,}"] for name, calls in coverage.unknown_tools),
            *(["model price", _e(name), f"{calls:,}"] for name, calls in coverage.unpriced_models)]
    command = f"<p>Draft what it lacks: <code>{_e(next_step)}</code></p>" if next_step else ""
    return _section("Coverage: what the catalog lacks", f"<p>{_e(coverage_line(report))}</p>{command}"
                    + _table(["missing", "name", "calls"], rows, numeric=(2,)))


def _figure(chart_id: str, title: str, desc: str, svg_body: str, height: float, caption: str, table: str, legend: str = "",
            width: float = WIDTH) -> str:
    return (
        f'<figure aria-labelledby="{chart_id}-caption">\n'
        f'<svg id="{chart_id}" viewBox="0 0 {_n(width)} {_n(height)}" role="img" aria-labelledby="{chart_id}-title {chart_id}-desc">'
        f'<title id="{chart_id}-title">{_e(title)}</title><desc id="{chart_id}-desc">{_e(desc)}</desc>\n{svg_body}</svg>\n'
        + (f'<div class="legend">{legend}</div>' if legend else "")
        + f'<figcaption id="{chart_id}-caption">{_e(caption)}</figcaption>\n'
        f"<details><summary>The numbers as a table</summary>{table}</details>\n</figure>"
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """A table of already-escaped cells; `numeric` columns are right-aligned."""
    right = set(numeric)
    head = "".join(f'<th scope="col"{" class=n" if i in right else ""}>{_e(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td{" class=n" if i in right else ""}>{c}</td>' for i, c in enumerate(row)) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return "".join(f'<span><i style="background:{color}"></i>{_e(label)}</span>' for color, label in items)


# -- charts -----------------------------------------------------------------------------------------------

def _nice_max(value: float) -> float:
    """A round axis maximum at or above `value` (1, 2, 2.5, 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= value)


def _histogram(chart_id: str, *, counts: Sequence[int], low: float, high: float, x_label: str, y_label: str,
               color: Callable[[float], str], markers: Sequence[tuple[float, str, str]] = (), x_format: str = "{:g}") -> tuple[str, float]:
    """Vertical bars over equal bins of [low, high]; `markers` are (x, label, color) reference lines."""
    left, right, top, bottom, height = 52, 14, 40, 48, 300
    plot_w, plot_h = HALF_WIDTH - left - right, height - top - bottom
    y_max = _nice_max(max(counts, default=0))
    bins = len(counts)
    out = [f'<g class="grid" stroke="{GRID}">']
    for i in range(5):
        value = y_max * i / 4
        y = top + plot_h - plot_h * i / 4
        out.append(f'<line x1="{left}" x2="{HALF_WIDTH - right}" y1="{_n(y)}" y2="{_n(y)}"/>')
        out.append(f'<text x="{left - 6}" y="{_n(y + 4)}" text-anchor="end" font-size="11" stroke="none">{value:g}</text>')
    out.append("</g>")
    step = plot_w / bins
    for i, count in enumerate(counts):
        lo, hi = low + (high - low) * i / bins, low + (high - low) * (i + 1) / bins
        h = plot_h * count / y_max
        x = left + i * step
        label = f"{x_format.format(lo)}–{x_format.format(hi)}: {count:,}"
        out.append(f'<rect x="{_n(x + 1)}" y="{_n(top + plot_h - h)}" width="{_n(step - 2)}" height="{_n(h)}" rx="2" '
                   f'fill="{color((lo + hi) / 2)}"><title>{_e(label)}</title></rect>')
        if count:
            out.append(f'<text x="{_n(x + step / 2)}" y="{_n(top + plot_h - h - 4)}" text-anchor="middle" font-size="10">{count:,}</text>')
    ticks = 5 if bins % 5 == 0 else bins
    for i in range(ticks + 1):
        x = left + plot_w * i / ticks
        out.append(f'<text x="{_n(x)}" y="{top + plot_h + 16}" text-anchor="middle" font-size="11">'
                   f'{_e(x_format.format(low + (high - low) * i / ticks))}</text>')
    for i, (value, label, stroke) in enumerate(markers):  # labels stacked, anchored to stay inside the plot
        x = left + plot_w * (value - low) / (high - low)
        anchor = "end" if x > left + plot_w * 0.8 else "start" if x < left + plot_w * 0.2 else "middle"
        out.append(f'<line x1="{_n(x)}" x2="{_n(x)}" y1="{top - 6 - 13 * i}" y2="{top + plot_h}" stroke="{stroke}" stroke-width="2" '
                   f'stroke-dasharray="5 3"/><text x="{_n(x)}" y="{top - 9 - 13 * i}" text-anchor="{anchor}" font-size="12" '
                   f'fill="{stroke}">{_e(label)}</text>')
    out.append(f'<line x1="{left}" x2="{HALF_WIDTH - right}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="{MUTED}"/>')
    out.append(f'<text class="x-label" x="{left + plot_w / 2}" y="{height - 10}" text-anchor="middle" font-size="12">{_e(x_label)}</text>')
    out.append(f'<text class="y-label" transform="translate(16 {_n(top + plot_h / 2)}) rotate(-90)" text-anchor="middle" '
               f'font-size="12">{_e(y_label)}</text>')
    return "\n".join(out), height


def _efficiency_chart(report: Report) -> str:
    counts, t = report.efficiency_histogram, report.thresholds
    total = sum(counts)
    if not total:
        return '<p class="empty">No tool calls were scored.</p>'
    below_fail = sum(c for i, c in enumerate(counts) if (i + 1) / EFFICIENCY_BINS <= t.fail)
    mean = _mean_efficiency(report)
    svg, height = _histogram(
        "efficiency-chart", counts=counts, low=0.0, high=1.0, x_label="Per-call efficiency (0–1)", y_label="Tool calls",
        color=lambda x: FAIL if x < t.fail else WARN if x < t.warn else PASS, x_format="{:.2f}",
        markers=[(t.fail, f"fail {t.fail:g}", FAIL), (t.warn, f"warn {t.warn:g}", "#b7791f")])
    desc = (f"Histogram of the efficiency of {plural(total, 'tool call')} in {EFFICIENCY_BINS} bins from 0 to 1; mean "
            f"{mean:.2f}; {plural(below_fail, 'call')} in bins below the fail level {t.fail:g}, warn level {t.warn:g}.")
    rows = [[f"{i / EFFICIENCY_BINS:.2f}–{(i + 1) / EFFICIENCY_BINS:.2f}", f"{c:,}"] for i, c in enumerate(counts)]
    legend = _legend([(PASS, f"≥ warn {t.warn:g}"), (WARN, f"below warn {t.warn:g}"), (FAIL, f"below fail {t.fail:g}")])
    return _figure("efficiency-chart", "Efficiency distribution", desc, svg, height,
                   f"{plural(total, 'tool call')}; mean efficiency {mean:.2f} (1 is the catalog's optimal tool at its price and latency).",
                   _table(["efficiency", "calls"], rows, numeric=(1,)), legend, HALF_WIDTH)


def _health_chart(report: Report) -> str:
    counts = report.health_histogram
    total = sum(counts)
    if not total:
        return '<p class="empty">No agent runs were evaluated.</p>'
    mean = math.fsum(g.health * g.runs for g in report.groups if g.health is not None) / total
    svg, height = _histogram(
        "health-chart", counts=counts, low=0.0, high=100.0, x_label="Run health (0–100)", y_label="Agent runs",
        color=lambda x: FAIL if x < 50 else WARN if x < 80 else PASS, x_format="{:.0f}",
        markers=[(mean, f"mean {mean:.0f}", INK)])
    width = 100 // HEALTH_BINS
    desc = (f"Histogram of the health of {plural(total, 'agent run')} in {HEALTH_BINS} bins from 0 to 100; mean {mean:.1f}; "
            f"{plural(sum(counts[:50 // width]), 'run')} below 50.")
    rows = [[f"{i * width}–{(i + 1) * width}", f"{c:,}"] for i, c in enumerate(counts)]
    legend = _legend([(PASS, "80 and above"), (WARN, "50–80"), (FAIL, "below 50")])
    return _figure("health-chart", "Run health distribution", desc, svg, height,
                   f"{plural(total, 'agent run')}; mean health {mean:.1f} (completion, tool accuracy, cost and latency).",
                   _table(["health", "runs"], rows, numeric=(1,)), legend, HALF_WIDTH)


def _waste_chart(report: Report) -> str:
    choices = report.poor_choices[:TOP_POOR_CHOICES]
    if not choices:
        return '<p class="empty">No suboptimal tool choices: nothing was wasted.</p>'
    label_w, value_w, row_h, top = 300, 150, 30, 12
    plot_w = WIDTH - label_w - value_w
    height = top + row_h * len(choices) + 36
    x_max = max(p.wasted_usd for p in choices) or 1.0
    out = []
    for i, p in enumerate(choices):
        y = top + i * row_h
        w = max(1.0, plot_w * p.wasted_usd / x_max)
        name = f"{p.tool} → {p.optimal_tool}"
        out.append(f'<text x="{label_w - 8}" y="{y + 13}" text-anchor="end" font-size="12">{_e(_clip(name, 44))}</text>')
        out.append(f'<text x="{label_w - 8}" y="{y + 25}" text-anchor="end" font-size="10" fill="{MUTED}">'
                   f'{_e(_clip("task " + task_label(p.task), 50))}</text>')
        tip = f"{name} (task {task_label(p.task)}): {plural(p.calls, 'call')}, {format_usd(p.wasted_usd)} wasted"
        out.append(f'<rect x="{label_w}" y="{y + 5}" width="{_n(w)}" height="{row_h - 12}" rx="3" fill="{FAIL}">'
                   f'<title>{_e(tip)}</title></rect>')
        out.append(f'<text x="{_n(label_w + w + 6)}" y="{y + 19}" font-size="11">{_e(format_usd(p.wasted_usd))} · {plural(p.calls, "call")}</text>')
    axis_y = top + row_h * len(choices) + 4
    out.append(f'<line x1="{label_w}" x2="{label_w + plot_w}" y1="{axis_y}" y2="{axis_y}" stroke="{MUTED}"/>')
    out.append(f'<text class="x-label" x="{label_w + plot_w / 2}" y="{axis_y + 24}" text-anchor="middle" font-size="12">'
               f'Money wasted (USD over the optimal tool\'s price)</text>')
    total = math.fsum(p.wasted_usd for p in report.poor_choices)
    desc = (f"Bars of the money wasted by the {len(choices)} costliest suboptimal tool choices, each a tool and the catalog's "
            f"optimal tool for its task; largest: {choices[0].tool} → {choices[0].optimal_tool}, "
            f"{format_usd(choices[0].wasted_usd)} over {choices[0].calls:,} calls.")
    rows = [[_e(task_label(p.task)), _e(p.tool), _e(p.optimal_tool), f"{p.calls:,}", _e(format_usd(p.wasted_usd))]
            for p in report.poor_choices]
    return _figure("waste-chart", "Money wasted by tool → optimal tool", desc, "\n".join(out), height,
                   f"{format_usd(total)} wasted by {plural(len(report.poor_choices), 'suboptimal tool choice')}"
                   + (f" (the {len(choices)} costliest shown)" if len(choices) < len(report.poor_choices) else "")
                   + f", of {format_usd(report.wasted_usd)} wasted in all (acceptable tools may cost more than the optimal one too).",
                   _table(["task", "tool", "optimal tool", "calls", "wasted"], rows, numeric=(3, 4)))


def _latency_chart(report: Report) -> str:
    tools = [t for t in report.tool_latency[:TOP_LATENCY_TOOLS] if t.p50_s is not None]
    if not tools:
        return '<p class="empty">No tool call had a duration.</p>'
    values = [v for t in tools for v in (t.p50_s, t.p95_s, t.p99_s, t.latency_slo_s) if v is not None and v > 0]
    lo = 10 ** math.floor(math.log10(min(values, default=1e-3)))
    hi = 10 ** math.ceil(math.log10(max(values, default=1.0)))
    if hi <= lo:
        hi = lo * 10
    labels = [t.tool + ("" if t.known else " (unknown)") for t in tools]
    label_w = min(MAX_LABEL_W, max(160, math.ceil(max(map(len, labels)) * LABEL_CHAR_W) + 16))
    fits = int((label_w - 16) / LABEL_CHAR_W)  # characters of a label that fit its column; the rest clipped, whole in <title>
    value_w, row_h, top = 230, 34, 14
    plot_w = WIDTH - label_w - value_w
    height = top + row_h * len(tools) + 40

    def x(seconds: float) -> float:
        clamped = min(max(seconds, lo), hi)
        return label_w + plot_w * (math.log10(clamped) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    out = [f'<g stroke="{GRID}">']
    decade = lo
    while decade <= hi * 1.0001:
        out.append(f'<line x1="{_n(x(decade))}" x2="{_n(x(decade))}" y1="{top - 4}" y2="{top + row_h * len(tools)}"/>')
        out.append(f'<text x="{_n(x(decade))}" y="{top + row_h * len(tools) + 14}" text-anchor="middle" font-size="11" '
                   f'stroke="none">{_e(_tick_seconds(decade))}</text>')
        decade *= 10
    out.append("</g>")
    over = 0
    for i, (t, label) in enumerate(zip(tools, labels)):
        y = top + i * row_h + row_h / 2
        breach = t.latency_slo_s is not None and t.p99_s is not None and t.p99_s > t.latency_slo_s
        over += breach
        color = FAIL if breach else PASS
        out.append(f'<text x="{label_w - 8}" y="{_n(y + 4)}" text-anchor="end" font-size="12"><title>{_e(label)}</title>'
                   f'{_e(_clip(label, fits))}</text>')
        out.append(f'<line x1="{_n(x(t.p50_s))}" x2="{_n(x(t.p99_s))}" y1="{_n(y)}" y2="{_n(y)}" stroke="{color}" stroke-width="3"/>')
        for value, shape in ((t.p50_s, "p50"), (t.p95_s, "p95"), (t.p99_s, "p99")):
            r = {"p50": 4, "p95": 5, "p99": 6}[shape]
            fill = "#fff" if shape == "p50" else color
            out.append(f'<circle cx="{_n(x(value))}" cy="{_n(y)}" r="{r}" fill="{fill}" stroke="{color}" stroke-width="2">'
                       f'<title>{_e(f"{t.tool} {shape}: {format_seconds(value)}")}</title></circle>')
        if t.latency_slo_s is not None:
            sx = x(t.latency_slo_s)
            out.append(f'<line x1="{_n(sx)}" x2="{_n(sx)}" y1="{_n(y - 10)}" y2="{_n(y + 10)}" stroke="{INK}" stroke-width="2.5">'
                       f'<title>{_e(f"{t.tool} SLO: {format_seconds(t.latency_slo_s)}")}</title></line>')
        text = f"p50 {format_seconds(t.p50_s)} · p95 {format_seconds(t.p95_s)} · p99 {format_seconds(t.p99_s)}"
        slo = (f"SLO {format_seconds(t.latency_slo_s)}" + (f", p99 over it; {plural(t.slo_violations, 'call')} over" if breach else "")
               if t.latency_slo_s is not None else "no SLO in the catalog")
        out.append(f'<text x="{label_w + plot_w + 12}" y="{_n(y - 2)}" font-size="11">{_e(text)}</text>')
        out.append(f'<text x="{label_w + plot_w + 12}" y="{_n(y + 11)}" font-size="10" fill="{FAIL if breach else MUTED}">'
                   f'{_e(slo)}</text>')
    out.append(f'<text class="x-label" x="{label_w + plot_w / 2}" y="{height - 6}" text-anchor="middle" font-size="12">'
               f'Call duration (log scale)</text>')
    desc = (f"Latency percentiles p50, p95 and p99 of {plural(len(tools), 'tool')} on a log scale, each against its catalog latency "
            f"SLO where it has one; {over} {'tool has' if over == 1 else 'tools have'} a p99 above their SLO.")
    rows = [[_e(t.tool), f"{t.calls:,}", _e(format_seconds(t.p50_s)), _e(format_seconds(t.p95_s)), _e(format_seconds(t.p99_s)),
             _e(format_seconds(t.latency_slo_s)), f"{t.slo_violations:,}"] for t in report.tool_latency]
    legend = _legend([(PASS, "p99 within the SLO (or no SLO)"), (FAIL, "p99 over the SLO"), (INK, "| the SLO")]) + \
        '<span>○ p50 · ● p95 · ⬤ p99</span>'
    return _figure("latency-chart", "Latency percentiles per tool against the SLO", desc, "\n".join(out), height,
                   f"{over} of {plural(len(tools), 'tool')} shown {'has' if over == 1 else 'have'} a p99 above the catalog's latency SLO.",
                   _table(["tool", "calls", "p50", "p95", "p99", "SLO", "calls over SLO"], rows, numeric=range(1, 7)), legend)


def _groups_table(report: Report) -> str:
    rows = [[_e(agent_label(g.agent)), _e(task_label(g.task)), f"{g.runs:,}",
             "-" if g.completion is None else f"{100 * g.completion:.0f}%", _e(format_usd(g.cost_per_run_usd)),
             health_cell(g.health), f"{g.calls:,}",
             "-" if g.efficiency is None else f"{g.efficiency:.2f}", _e(format_usd(g.wasted_usd)),
             _e(priced_by(g.llm_priced_by))] for g in report.groups]
    note = llm_prices_note(report)
    return _table(["agent", "task", "runs", "completed", "cost/run", "health", "calls", "efficiency", "wasted", "LLM priced by"],
                  rows, numeric=range(2, 9)) + (f'<p class="meta">{_e(note)}</p>' if note else "")


def _worst_runs(runs: Sequence[RunSummary]) -> str:
    if not runs:
        return '<p class="empty">No agent runs were evaluated.</p>'
    rows = []
    for r in runs:
        calls = "".join(
            f'<li class="{OUTCOME_CLASSES.get(c.outcome, "unknown")}" title="{_e(_call_title(c))}">{_e(c.tool)}</li>'
            for c in r.calls)
        if r.calls_not_shown:
            calls += f"<li>+{r.calls_not_shown:,} more</li>"
        sequence = f'<ol class="seq" aria-label="tool calls in order">{calls}</ol>' if calls else '<span class="empty">no tool calls</span>'
        if r.problems:
            shown = "; ".join(r.problems[:MAX_PROBLEMS]) + (f"; +{len(r.problems) - MAX_PROBLEMS} more" if len(r.problems) > MAX_PROBLEMS else "")
            sequence += f'<div class="problems">{_e(shown)}</div>'
        outcome = ("completed" if r.completed else "failed") + (f" ({r.completion_reason})" if r.completion_reason else "")
        rows.append([health_cell(r.health), _e(agent_label(r.agent)) + f"<br><code>{_e(r.trace_id[:16])}</code>",
                     _e(task_label(r.task)), _e(outcome), _e(format_usd(r.cost_usd)), _e(format_usd(r.wasted_usd)),
                     _e(format_seconds(r.duration_s)), sequence])
    return ('<p class="meta">Tool calls in the order they ended: green optimal or acceptable, amber suboptimal, '
            'red failed, grey not in the catalog; hover a call for its outcome.</p>'
            + _table(["health", "agent / trace", "task", "outcome", "cost", "wasted", "duration", "tool sequence"], rows,
                     numeric=(0, 4, 5, 6)))


def _call_title(call: RunCall) -> str:
    text = f"{call.tool}: {call.outcome.replace('_', ' ')}, efficiency {call.efficiency:.2f}"
    if call.outcome == "suboptimal" or call.wasted_usd:
        text += f", optimal {call.optimal_tool}, {format_usd(call.wasted_usd)} wasted"
    if call.duration_s is not None:
        text += f", {format_seconds(call.duration_s)}"
    return text


def _tick_seconds(seconds: float) -> str:
    """A log axis tick: `0.1 ms`, `10 ms`, `1 s`, `100 s` (below 1 ms as such, never `0 ms`)."""
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"

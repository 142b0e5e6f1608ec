"""What the demo prints: the terminal table (redrawn in place), the plain progress lines, the summary.

It exists to keep the text layout apart from the workload and the command: it only
formats a `DemoMetrics` read (and the workload's ground truth for the summary).
"""
from __future__ import annotations

import math
import os
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TextIO

from ...core.scoring import ACCEPTABLE, SUBOPTIMAL
from .readback import DemoMetrics, ToolRow

if TYPE_CHECKING:
    from .workload import WorkloadSummary

LIVE_REFRESH_S = 0.5  # the TTY table
PLAIN_REFRESH_S = 5.0  # one progress line when stdout is no terminal
MIN_RATE_ELAPSED_S = 0.25  # a rate measured over less time is noise
TABLE_INDENT = "  "  # tool rows under their agent
COLUMNS = (("tool", 19, "<"), ("pick", 10, "<"), ("calls", 7, ">"), ("eff", 5, ">"),  # (title, width, alignment)
           ("p99", 7, ">"), ("cost $", 8, ">"), ("wasted $", 9, ">"), ("true $/call", 12, ">"))
ANSI_UP_AND_CLEAR = "\x1b[{n}A\r\x1b[J"
ANSI_HIDE_CURSOR, ANSI_SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
ANSI_BOLD, ANSI_RED, ANSI_YELLOW, ANSI_RESET = "\x1b[1m", "\x1b[31m", "\x1b[33m", "\x1b[0m"


def format_table(metrics: DemoMetrics, *, agents: Sequence[str] = (), color: bool = False,
                 width: int | None = None) -> list[str]:
    """The table grouped by agent (in the given order), optimal pick first, and a total line.

    78 columns wide, so it fits an 80-column terminal without wrapping (wrapping would
    break the in-place redraw); longer lines are clipped to `width`.
    """
    rank = {name: i for i, name in enumerate(agents)}
    rows = sorted(metrics.rows, key=lambda r: (rank.get(r.agent, len(rank)), r.agent, r.non_optimal, r.tool))
    lines = [_paint(_clip(_cells([title for title, _, _ in COLUMNS]), width), ANSI_BOLD, color)]
    group = None
    for r in rows:
        if r.agent != group:
            group = r.agent
            lines.append(_clip(f"{r.agent} ({r.task or 'no task'})", width))
        cells = [f"{TABLE_INDENT}{r.tool}", r.pick, f"{r.calls:,}", _score(r.mean_efficiency), _duration(r.p99_s),
                 f"{r.cost_usd:.4f}", f"{r.wasted_usd:.4f}", _per_call(r.true_cost_per_call_usd)]
        tint = ANSI_RED if r.wasted_usd > 0 else ANSI_YELLOW if r.non_optimal else ""
        lines.append(_paint(_clip(_cells(cells), width), tint, color))
    total = ["total", "", f"{metrics.calls:,}", "", "", f"{metrics.cost_usd:.4f}", f"{metrics.wasted_usd:.4f}", ""]
    lines.append(_clip(_cells(total), width))
    return lines


def _cells(values: Sequence[str]) -> str:
    return "".join(f"{value:{align}{w}}" for value, (_, w, align) in zip(values, COLUMNS)).rstrip()


def format_progress(runs: int, elapsed_s: float, duration_s: float, *, bar: bool = False) -> str:
    """Elapsed over planned time, runs done and the achieved rate."""
    rate = f"{runs / elapsed_s:.1f}" if elapsed_s >= MIN_RATE_ELAPSED_S else "-"
    planned = f"{duration_s:g}s" if duration_s else "until Ctrl-C"
    text = f"{elapsed_s:5.1f}s / {planned}  {runs:,} runs  {rate} runs/s"
    if bar and duration_s:
        done = min(1.0, elapsed_s / duration_s)
        width = 24
        text = f"[{'#' * round(done * width):<{width}}] {text}"
    return text


def format_plain_line(metrics: DemoMetrics, runs: int, elapsed_s: float, duration_s: float) -> str:
    """The periodic line when stdout is no terminal: progress and the headline numbers."""
    return (f"{format_progress(runs, elapsed_s, duration_s)}  {metrics.calls:,} tool calls  "
            f"{metrics.non_optimal_share:.1%} non-optimal  ${metrics.wasted_usd:.4f} wasted")


def format_summary(metrics: DemoMetrics, workload: WorkloadSummary, elapsed_s: float) -> str:
    """The closing report: totals, non-optimal share, money wasted, worst tool -> optimal tool pairs."""
    p = metrics.processor
    rate = workload.runs / elapsed_s if elapsed_s > 0 else 0.0
    calls = metrics.calls
    lines = [
        f"Summary: {workload.runs:,} agent runs in {elapsed_s:.1f} s ({rate:.1f} runs/s), {workload.spans:,} spans emitted",
        f"  processor: {p.get('spans_seen', 0):,.0f} spans seen, {p.get('spans_scored', 0):,.0f} tool calls scored, "
        f"{p.get('spans_ignored', 0):,.0f} agent/chat spans passed through, "
        f"{p.get('malformed_tool_spans', 0):,.0f} malformed, {p.get('internal_errors', 0):,.0f} internal errors",
        f"  non-optimal tool picks: {metrics.non_optimal_calls:,} of {calls:,} calls ({metrics.non_optimal_share:.1%}, "
        f"requested {workload.requested_share:.0%}): {metrics.calls_with_pick(ACCEPTABLE):,} acceptable, "
        f"{metrics.calls_with_pick(SUBOPTIMAL):,} suboptimal; {sum(r.errors for r in metrics.rows):,} calls failed",
        _cost_line(metrics),
        *_worst_lines(metrics.worst_pairs()),
    ]
    return "\n".join(lines)


def _cost_line(metrics: DemoMetrics) -> str:
    context = (f"; their results cost the later model calls ${metrics.context_usd:.4f} more (true cost "
               f"${metrics.cost_usd + metrics.context_usd:.4f})")
    if not metrics.cost_usd:
        return f"  tool cost $0.0000, nothing wasted{context}"
    return (f"  tool cost ${metrics.cost_usd:.4f}, of which wasted ${metrics.wasted_usd:.4f} "
            f"({metrics.wasted_usd / metrics.cost_usd:.0%} spent beyond the optimal tools){context}")


def _worst_lines(worst: list[ToolRow]) -> list[str]:
    if not worst:
        return []
    pairs = [f"{r.tool} -> {r.optimal_tool}" for r in worst]
    pad, agent_pad = max(map(len, pairs)), max(len(r.agent) for r in worst)
    return ["  worst picks (tool -> optimal tool):"] + [
        f"    {pair:<{pad}}  {r.agent:<{agent_pad}} {r.calls:>7,} {'call ' if r.calls == 1 else 'calls'}  efficiency {_score(r.mean_efficiency)}"
        f"  wasted ${r.wasted_usd:.4f}" for pair, r in zip(pairs, worst)]


def _per_call(value: float) -> str:
    """A true cost per call: `-` until a call was measured."""
    return "-" if math.isnan(value) else f"{value:.6f}"


def _score(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.2f}s"


def _clip(text: str, width: int | None) -> str:
    return text if width is None or len(text) <= width else text[: max(0, width - 1)] + "~"  # ASCII: any encoding


def _paint(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{ANSI_RESET}" if color and code else text


class Display(Protocol):
    """What the command drives: refreshed every `interval` s (first after `first_after`), finished once."""

    interval: float
    first_after: float

    def start(self) -> None: ...
    def update(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None: ...
    def interrupted(self) -> None: ...
    def close(self) -> None: ...
    def finish(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None: ...


class PlainDisplay:
    """For pipes and logs: one progress line every few seconds, the table once at the end."""

    interval = PLAIN_REFRESH_S
    first_after = PLAIN_REFRESH_S

    def __init__(self, out: TextIO, duration_s: float, agents: Sequence[str]) -> None:
        self._out = out
        self._duration_s = duration_s
        self._agents = agents

    def start(self) -> None:
        pass

    def update(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        print(format_plain_line(metrics, runs, elapsed_s, self._duration_s), file=self._out, flush=True)

    def interrupted(self) -> None:
        print("interrupted", file=self._out, flush=True)

    def close(self) -> None:
        pass

    def finish(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        print("\n".join(["", *format_table(metrics, agents=self._agents), ""]), file=self._out, flush=True)


class LiveDisplay:
    """For a terminal: the table redrawn in place with ANSI escapes about twice a second."""

    interval = LIVE_REFRESH_S
    first_after = 0.0

    def __init__(self, out: TextIO, duration_s: float, agents: Sequence[str]) -> None:
        self._out = out
        self._duration_s = duration_s
        self._agents = agents
        self._drawn = 0
        self._color = "NO_COLOR" not in os.environ

    def start(self) -> None:
        self._out.write(ANSI_HIDE_CURSOR)

    def update(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        width = shutil.get_terminal_size().columns - 1
        headline = (f"{metrics.calls:,} tool calls, {metrics.non_optimal_share:.1%} on a non-optimal tool, "
                    f"${metrics.wasted_usd:.4f} wasted")
        lines = ["", _clip(format_progress(runs, elapsed_s, self._duration_s, bar=True), width), _clip(headline, width), "",
                 *format_table(metrics, agents=self._agents, color=self._color, width=width)]
        erase = ANSI_UP_AND_CLEAR.format(n=self._drawn) if self._drawn else ""
        self._out.write(erase + "\n".join(lines) + "\n")
        self._out.flush()
        self._drawn = len(lines)

    def interrupted(self) -> None:
        pass

    def close(self) -> None:
        self._out.write(ANSI_SHOW_CURSOR)
        self._out.flush()

    def finish(self, metrics: DemoMetrics, runs: int, elapsed_s: float) -> None:
        self.update(metrics, runs, elapsed_s)
        self._out.write("\n")

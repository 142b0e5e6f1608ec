"""`otel-agent-eval compare BASE HEAD`: two sets of recorded traces side by side per agent and task; gate on regressions.

Exit codes: 0 no regression (or regressions without --fail-on-regression; also when nothing could be tested,
which the result line says, and stderr too under --fail-on-regression), 1 a regression
with --fail-on-regression (one line per regression on stderr), 2 bad input (a missing path,
an empty directory, a broken catalog, a side with nothing readable or nothing to score).
"""
from __future__ import annotations

import argparse
import json
import sys

from ..offline.compare import DEFAULT_RESAMPLES, MAX_RESAMPLES, MIN_RUNS, Change, Comparison, compare_traces
from ..offline.report import Report, printable
from .judge_options import add_judge_arguments, judging_from
from .options import add_catalog_arguments, choose_catalog, given
from .score_table import _ratio, _seconds, _table, agent_label, plural, task_label

__all__ = ["add_compare_arguments", "render_comparison", "run_compare"]

EXIT_REGRESSION, EXIT_BAD_INPUT = 1, 2
PREFIX = "otel-agent-eval"
LABELS = {"efficiency": "efficiency", "wasted_per_run_usd": "wasted/run", "cost_per_run_usd": "cost/run",
          "completion": "completion", "p95_s": "run p95", "p99_s": "run p99", "judge_score": "judged score"}


def add_compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("base", type=given, metavar="BASE", help="the traces to compare against: a file or a directory of OTLP trace files")
    parser.add_argument("head", type=given, metavar="HEAD", help="the traces of the change: a file or a directory of OTLP trace files")
    add_catalog_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a metric got worse beyond noise (one line per regression on stderr)")
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the bootstrap (default 0): same input, same result")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, metavar="N",
                        help=f"bootstrap resamples (default {DEFAULT_RESAMPLES:,}, at most {MAX_RESAMPLES:,}); more for many groups")
    add_judge_arguments(parser)


def run_compare(args: argparse.Namespace) -> int:
    """The command; raises ValueError (one line) for bad arguments, which `main` turns into exit code 2."""
    chosen = choose_catalog(args)
    comparison = compare_traces(args.base, args.head, chosen.catalog, profile=chosen.profile,
                                environment=chosen.environment, seed=args.seed,
                                resamples=args.resamples, on_problem=lambda side, problem: _error(f"{side}: {problem}"),
                                judging=judging_from(args, chosen.catalog))
    for side, path, report in (("base", args.base, comparison.base), ("head", args.head, comparison.head)):
        problem = _nothing_to_compare(report)
        if problem:
            _error(f"{side}: {path}: {problem}")
            return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(comparison.to_dict(), indent=2, allow_nan=False))
    else:
        print(render_comparison(comparison, base=args.base, head=args.head))
    if args.fail_on_regression and not tested(comparison):  # exit 0: nothing regressed, but the log says why
        _error(f"--fail-on-regression: {nothing_tested()}")
    if args.fail_on_regression and comparison.regressions:
        for change in comparison.regressions:
            _error(f"regression: {change}")
        return EXIT_REGRESSION
    return 0


def _nothing_to_compare(report: Report) -> str:
    inputs = report.inputs
    if inputs.spans == 0:
        return f"no spans could be read from {plural(inputs.files, 'file')}"
    if report.calls == 0 and report.runs == 0:
        return f"no tool calls or agent runs in {plural(inputs.spans, 'span')}"
    return ""


def render_comparison(comparison: Comparison, *, base: str = "base", head: str = "head") -> str:
    b, h = comparison.base, comparison.head
    lines = [
        f"Base {base}: {plural(b.runs, 'run')}, {plural(b.calls, 'tool call')}. "
        f"Head {head}: {plural(h.runs, 'run')}, {plural(h.calls, 'tool call')}.",
        f"Catalog {h.catalog}; environment {h.environment}.",
        f"Beyond noise: {comparison.describe_method()}; a regression is worse with its interval excluding zero.",
        "",
    ]
    rows = []
    for group in comparison.groups:
        first = True
        for change in group.changes:
            rows.append([agent_label(group.agent), task_label(group.task),
                         f"{group.base_runs:,}" if first else "", f"{group.head_runs:,}" if first else "",
                         LABELS[change.metric], _value(change.metric, change.base), _value(change.metric, change.head),
                         _value(change.metric, change.delta, signed=True), _interval(change), _verdict(change)])
            first = False
    lines += _table(["agent", "task", "base runs", "head runs", "metric", "base", "head", "change", "interval", "verdict"],
                    rows, right=range(2, 8))
    tools = [t for g in comparison.groups for t in g.tools]
    if tools:
        lines += ["", "Per tool (side by side, not tested; calls and money wasted per run of the group):"]
        lines += _table(
            ["agent", "task", "tool", "calls/run", "efficiency", "wasted/run", "call p95", "call p99", "optimal tool"],
            [[agent_label(t.agent), task_label(t.task), t.tool, _pair(t.base_calls_per_run, t.head_calls_per_run, "{:.2f}"),
              _pair(t.base_efficiency, t.head_efficiency, "{:.2f}"),
              _pair(t.base_wasted_per_run_usd, t.head_wasted_per_run_usd, "${:.5f}"),
              f"{_seconds(t.base_p95_s)} -> {_seconds(t.head_p95_s)}", f"{_seconds(t.base_p99_s)} -> {_seconds(t.head_p99_s)}",
              t.optimal_tool or "-"] for t in tools], right=range(3, 8))
    regressions, improvements = comparison.regressions, comparison.improvements
    if not tested(comparison):
        lines += ["", f"Result: {nothing_tested()}."]
        return "\n".join(lines)
    lines += ["", f"Result: {_count(len(regressions), 'regression')}"
              + (f" ({', '.join(f'{printable(c.group)} {LABELS[c.metric]}' for c in regressions)})" if regressions else "")
              + f", {_count(len(improvements), 'improvement')} beyond noise."]
    return "\n".join(lines)


def tested(comparison: Comparison) -> bool:
    """Whether any metric of any group was tested (had enough runs on both sides)."""
    return any(c.tested for c in comparison.changes)


def nothing_tested() -> str:
    return (f"nothing could be tested ({MIN_RUNS} runs needed per side for an agent/task group; the reasons are in the "
            "verdicts), so no regression could be found")


def _value(metric: str, value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return "-"
    sign = "+" if signed and value > 0 else "-" if signed and value < 0 else ""
    magnitude = abs(value) if signed else value
    if metric == "completion":
        return f"{sign}{100 * magnitude:.1f}%" if signed else _ratio(value)
    if metric.endswith("_usd"):
        return f"{sign}${magnitude:,.5f}"
    if metric.endswith("_s"):
        return sign + _seconds(magnitude)
    return f"{sign}{magnitude:.3f}"


def _interval(change: Change) -> str:
    if not change.tested:
        return "-"
    return f"{_value(change.metric, change.low, signed=True)} .. {_value(change.metric, change.high, signed=True)}"


def _verdict(change: Change) -> str:
    if not change.tested:
        return f"not tested: {change.untested}"
    if change.regression:
        return "REGRESSION"
    if change.improvement:
        return "improved"
    return "within noise"


def _pair(base: float | None, head: float | None, spec: str) -> str:
    return f"{'-' if base is None else spec.format(base)} -> {'-' if head is None else spec.format(head)}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def _error(message: str) -> None:
    print(f"{PREFIX}: {printable(message)}", file=sys.stderr, flush=True)  # one line, whatever a span's names hold

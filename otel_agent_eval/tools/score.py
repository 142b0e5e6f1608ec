"""`otel-agent-eval score FILES...`: score recorded traces, print a summary, gate CI on it.

Exit codes: 0 the gate passed, 1 it failed (one line per failing check on stderr), 2 bad
input (a missing path, a broken catalog, nothing readable; with --strict also any skipped
record). Unreadable parts of a file are skipped with one line per file on stderr. Output
files are written whole or not at all (a temporary file, then a rename); a FIFO, a device
or /dev/stdout is written to directly. Names from spans are printed with control
characters escaped.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import TextIO

from ..core.runs import AgentRun
from ..offline.gate import GATE_METRICS, evaluate_gate, higher_is_better, parse_fail_over, parse_fail_under
from ..offline.report import printable
from ..offline.score import score_traces
from .draft import draft_command
from .judge_options import add_judge_arguments, judging_from
from .options import add_catalog_arguments, choose_catalog, given
from .output_file import output_path, write_atomically

__all__ = ["add_score_arguments", "run_score"]

EXIT_GATE_FAILED, EXIT_BAD_INPUT = 1, 2
PREFIX = "otel-agent-eval"


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=given, metavar="FILE",
                        help="OTLP trace files (JSON lines as the Collector's file exporter writes, protobuf, .gz), directories, or - for stdin")
    add_catalog_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the report as JSON instead of the table")
    parser.add_argument("--junit", type=given, metavar="FILE", help="write JUnit XML: one test case per agent and task (see --junit-cases)")
    parser.add_argument("--junit-cases", choices=("group", "run"), default="group",
                        help="--junit test cases: one per agent and task, failing with the gate's reasons (group, the "
                             "default), or one per agent run, failing when the run did not complete, with the reason (run)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr, by bytes of input read (default: when stderr is a terminal "
                             "and --json is not given)")
    parser.add_argument("--html", type=given, metavar="FILE", help="write a self-contained HTML report with charts (no network needed to view it)")
    parser.add_argument("--fail-under", action="append", default=[], metavar="METRIC=VALUE",
                        help="fail the gate when a group's METRIC is below VALUE; METRIC: "
                             f"{', '.join(m for m in GATE_METRICS if higher_is_better(m))} (default: the catalog's "
                             "thresholds for efficiency, its gates for the others); repeat for several")
    parser.add_argument("--fail-over", action="append", default=[], metavar="METRIC=VALUE",
                        help="fail the gate when a group's METRIC is above VALUE; METRIC: "
                             f"{', '.join(m for m in GATE_METRICS if not higher_is_better(m))} (default: the catalog's "
                             "gates); repeat for several")
    parser.add_argument("--strict", action="store_true", help="exit 2 when any record or span had to be skipped")
    add_judge_arguments(parser)


def run_score(args: argparse.Namespace) -> int:
    """The command; raises ValueError (one line) for bad arguments, which `main` turns into exit code 2."""
    fail_under = {**parse_fail_under(args.fail_under), **parse_fail_over(args.fail_over)}
    junit = output_path("--junit", args.junit, args.files) if args.junit is not None else None
    html = output_path("--html", args.html, args.files) if args.html is not None else None
    if args.junit_cases == "run" and junit is None:
        raise ValueError("--junit-cases run: give --junit FILE too")
    chosen = choose_catalog(args)
    show = args.progress if args.progress is not None else (not args.json and _is_terminal(sys.stderr))
    bar = ProgressBar(sys.stderr) if show else None
    run_cases = None
    if junit is not None and args.junit_cases == "run":
        from .junit import RunCases

        run_cases = RunCases()

    def problem_line(problem: object) -> None:
        if bar is not None:
            bar.clear()
        _error(str(problem))

    judging = judging_from(args, chosen.catalog)
    on_run = run_cases.add if run_cases is not None else None
    if judging is not None:
        on_run = judging.on_run if on_run is None else _both(judging.on_run, on_run)
    try:
        report = score_traces(args.files, chosen.catalog, profile=chosen.profile,
                              environment=chosen.environment, on_problem=problem_line,
                              on_progress=bar, on_run=on_run, on_span=judging.on_span if judging is not None else None)
    finally:
        if bar is not None:
            bar.clear()
    if judging is not None:
        report = judging.attach(report)
    inputs = report.inputs
    if inputs.spans == 0:
        _error(f"no spans could be read from {inputs.files} file{'s' if inputs.files != 1 else ''}")
        return EXIT_BAD_INPUT
    if report.calls == 0 and report.runs == 0:
        _error(f"no tool calls or agent runs in {inputs.spans:,} span{'s' if inputs.spans != 1 else ''}: none follows the GenAI, OpenInference or OpenLLMetry "
               "conventions or the Vercel AI SDK's ai.* spans (or the catalog's attribute_mapping)")
        return EXIT_BAD_INPUT

    gate = evaluate_gate(report, fail_under)
    # What a draft adds; nothing when all the catalog lacks is prices it names in comments (the coverage line says so)
    coverage = report.coverage
    next_step = None if coverage.complete or coverage.prices_to_set else draft_command(args.files, chosen.path)
    if args.json:
        data = report.to_dict()
        data["coverage"]["draft_command"] = next_step
        print(json.dumps({**data, "gate": gate.to_dict()}, indent=2, allow_nan=False))
    else:
        from .judge_table import judge_lines
        from .score_table import render_summary

        print(render_summary(report, gate, next_step, judge_lines(report.judge) if report.judge is not None else ()))
    if junit is not None:
        from .junit import junit_xml

        try:
            if run_cases is not None:
                write_atomically(junit, run_cases.document(report))
            else:
                write_atomically(junit, junit_xml(report, gate))
        except OSError as exc:
            _error(f"--junit {args.junit}: cannot write: {exc.strerror or exc}")
            return EXIT_BAD_INPUT
    if html is not None:
        from .html_report import render_html

        try:
            write_atomically(html, render_html(report, gate, next_step=next_step))
        except OSError as exc:
            _error(f"--html {args.html}: cannot write: {exc.strerror or exc}")
            return EXIT_BAD_INPUT
    for check in gate.failed:
        _error(f"gate failed: {check}")
    if gate.failed and not coverage.complete:
        from .score_table import coverage_line

        _error(coverage_line(report) + (f" Draft what it lacks: {next_step}" if next_step else ""))
    skipped = inputs.records_skipped + inputs.spans_skipped
    if args.strict and (skipped or inputs.files_without_spans):
        from .score_table import plural

        _error(f"--strict: {plural(skipped, 'record or span', 'records or spans')} skipped, "
               f"{plural(inputs.files_without_spans, 'file')} without spans")
        return EXIT_BAD_INPUT
    return 0 if gate.passed else EXIT_GATE_FAILED


def _both(first: Callable[[AgentRun], None], second: Callable[[AgentRun], None]) -> Callable[[AgentRun], None]:
    def both(run: AgentRun) -> None:
        first(run)
        second(run)
    return both


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return False


class ProgressBar:
    """`[#######.............]  35%  12.0 of 34.3 MiB` on one line of stderr, redrawn at most 10 times a second."""

    WIDTH = 30

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.shown, self.last = stream, False, -1.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 0.1:
            return
        self.last = now
        if total > 0:
            filled = min(self.WIDTH, self.WIDTH * done // total)
            line = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * done // total:3d}%  {_mib(done)} of {_mib(total)}"
        else:  # the standard input: no size known
            line = f"read {_mib(done)}"
        self.stream.write(f"\r{PREFIX}: scoring {line}\x1b[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Take the bar off its line (before a problem is printed, and at the end)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
            self.last = -1.0


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _error(message: str) -> None:
    print(f"{PREFIX}: {printable(message)}", file=sys.stderr, flush=True)  # one line, whatever a span's names hold

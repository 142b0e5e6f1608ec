"""`otel-agent-eval catalog draft TRACES...`: a first catalog from recorded traces, or `--merge` what a catalog lacks.

The draft goes to stdout (or `-o FILE`); with `--merge FILE` the lines it adds are inserted into
FILE, which is rewritten whole or not at all, its own text untouched (or written to `-o`).
Bad input ends with one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config.catalog import check_catalog_file, read_catalog_text
from ..offline.draft import DraftError, merge_draft, observe_traces, render_draft
from ..offline.report import printable
from .output_file import write_atomically

__all__ = ["add_draft_arguments", "draft_command", "run_draft"]

PREFIX = "otel-agent-eval"


def add_draft_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="TRACES",
                        help="OTLP trace files (JSON lines, protobuf, .gz), directories, or - for stdin: what `score` reads")
    parser.add_argument("--merge", metavar="CATALOG",
                        help="add only what CATALOG lacks, inserting lines into it (its own text, comments included, is kept)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write the catalog to FILE (default: stdout, or CATALOG with --merge)")


def draft_command(files: Sequence[str], catalog: str | None) -> str:
    """The exact command that drafts what `catalog` (None: the packaged one) lacks from `files` (printable: it is shown)."""
    traces = " ".join(shlex.quote(printable(f)) for f in files)
    if catalog is None:
        return f"{PREFIX} catalog draft {traces} -o catalog.yaml"
    return f"{PREFIX} catalog draft {traces} --merge {shlex.quote(printable(catalog))}"


def run_draft(args: argparse.Namespace) -> int:
    """The command; raises ValueError (one line) for bad input, which `main` turns into exit code 2."""

    output = Path(args.output) if args.output else None
    if output is not None and not output.parent.is_dir():
        raise ValueError(f"--output {args.output}: the directory {output.parent} does not exist")
    catalog = text = None
    if args.merge is not None:
        text = read_catalog_text(args.merge)
        catalog, problems = check_catalog_file(args.merge)
        if catalog is None:
            raise ValueError(f"--merge: {problems[0]} (fix it first: {PREFIX} catalog check {args.merge})")

    def problem_line(problem: object) -> None:
        print(f"{PREFIX}: {printable(str(problem))}", file=sys.stderr, flush=True)

    try:
        draft = observe_traces(args.files, catalog, on_problem=problem_line)
        if text is None:
            result, added = render_draft(draft), []
        else:
            result, added = merge_draft(text, draft, source=args.merge)
    except DraftError as exc:
        raise ValueError(f"catalog draft: {exc}") from None
    target = output if output is not None else Path(args.merge) if args.merge is not None else None
    if args.merge is not None:
        if not added:
            print(f"{PREFIX}: {args.merge}: nothing to add: it knows every tool and agent in the traces", file=sys.stderr)
            if output is None:
                return 0
        else:
            print(f"{PREFIX}: {target}: added {'; '.join(printable(a) for a in added)}", file=sys.stderr)
    if target is None:
        sys.stdout.write(result)
        return 0
    try:
        write_atomically(target, result)
    except OSError as exc:
        raise ValueError(f"{target}: cannot write: {exc.strerror or exc}") from None
    if args.merge is None:
        tools, tasks = len(draft.tools), len(draft.routes)
        print(f"{PREFIX}: wrote {target}: {tools} tool{'s' if tools != 1 else ''}, {tasks} task{'s' if tasks != 1 else ''}; fill in what is marked "
              f"FILL IN, then: {PREFIX} score {' '.join(args.files)} --catalog {target}", file=sys.stderr)
    return 0

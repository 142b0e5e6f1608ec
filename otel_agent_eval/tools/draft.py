"""`otel-agent-eval catalog draft TRACES...`: a first catalog from recorded traces, or `--merge` what a catalog lacks.

The draft goes to stdout (or `-o FILE`, which replaces a file that exists only with `--force`); with
`--merge FILE` the lines it adds are inserted into FILE, which is rewritten whole or not at all, its own
text untouched (or written to `-o`).
Bad input ends with one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config.catalog import check_catalog_file, read_catalog_text
from ..offline.draft import DraftError, merge_draft, observe_traces, render_draft
from ..offline.report import printable
from .options import given
from .output_file import existing_file, output_path, write_atomically

__all__ = ["add_draft_arguments", "draft_command", "run_draft"]

PREFIX = "otel-agent-eval"
DEFAULT_OUTPUT = "catalog.yaml"


def add_draft_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=given, metavar="TRACES",
                        help="OTLP trace files (JSON lines, protobuf, .gz), directories, or - for stdin: what `score` reads")
    parser.add_argument("--merge", type=given, metavar="CATALOG",
                        help="add only what CATALOG lacks, inserting lines into it (its own text, comments included, is kept)")
    parser.add_argument("-o", "--output", type=given, metavar="FILE",
                        help="write the catalog to FILE (default: stdout, or CATALOG with --merge); a FILE that exists is "
                             "refused unless --force")
    parser.add_argument("--force", action="store_true", help="let -o replace a file that exists (its text is lost)")


def draft_command(files: Sequence[str], catalog: str | None) -> str:
    """The exact command that drafts what `catalog` (None: the packaged one) lacks from `files` (printable: it is shown).

    A catalog.yaml in the current directory, not given with --catalog, is merged into rather than drafted over:
    following the advice must not lose what the user wrote there.
    """
    traces = " ".join(shlex.quote(printable(f)) for f in files)
    if catalog is None and not os.path.lexists(DEFAULT_OUTPUT):
        return f"{PREFIX} catalog draft {traces} -o {DEFAULT_OUTPUT}"
    if catalog is None:
        catalog = DEFAULT_OUTPUT
    return f"{PREFIX} catalog draft {traces} --merge {shlex.quote(printable(catalog))}"


def run_draft(args: argparse.Namespace) -> int:
    """The command; raises ValueError (one line) for bad input, which `main` turns into exit code 2."""

    output = output_path("--output", args.output, args.files) if args.output is not None else None
    if output is not None and not args.force and existing_file(output) and not _same_file(output, args.merge):
        merge = "" if args.merge is not None else f"add to it with --merge {shlex.quote(args.output)}, or "
        raise ValueError(f"--output {args.output}: the file exists; {merge}replace it with --force")
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
        flag = f"--output {args.output}" if output is not None else f"--merge {args.merge}"
        raise ValueError(f"{flag}: cannot write: {exc.strerror or exc}") from None
    if args.merge is None:
        tools, tasks = len(draft.tools), len(draft.routes)
        print(f"{PREFIX}: wrote {target}: {tools} tool{'s' if tools != 1 else ''}, {tasks} task{'s' if tasks != 1 else ''}; fill in what is marked "
              f"FILL IN, then: {PREFIX} score {' '.join(args.files)} --catalog {target}", file=sys.stderr)
    return 0


def _same_file(output: Path, merge: str | None) -> bool:
    """Whether -o names the --merge catalog itself: merging in place, as without -o."""
    try:
        return merge is not None and os.path.samefile(output, merge)
    except OSError:
        return False

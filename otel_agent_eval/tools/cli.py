"""The `otel-agent-eval` command: inspect and check catalogs, score and compare recorded traces, run the demo.

Bad input ends with one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, NoReturn

from ..config.catalog import CATALOG_SCHEMA, Catalog, load_catalog
from .options import given

EXIT_USAGE = 2


def quiet_deepeval() -> None:
    """Opt out of deepeval's telemetry and keep its `.deepeval/` folder out of the working directory.

    Must run before deepeval is imported: it reads these variables at import time.
    """
    os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
    if "DEEPEVAL_CACHE_FOLDER" not in os.environ:
        os.environ["DEEPEVAL_CACHE_FOLDER"] = os.path.join(tempfile.gettempdir(), f"otel-agent-eval-{os.getuid() if hasattr(os, 'getuid') else 'user'}", ".deepeval")


def package_version() -> str:
    """The installed distribution's version (from its metadata), or "unknown" when run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("otel-agent-eval")
    except PackageNotFoundError:
        return "unknown"


class OneLineErrors(argparse.ArgumentParser):
    """argparse's errors in one line, like every other bad input (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="otel-agent-eval", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineErrors)

    catalog = commands.add_parser("catalog", help="show or check tool catalogs, print their JSON Schema")
    catalog_commands = catalog.add_subparsers(dest="catalog_command", required=True, metavar="ACTION", parser_class=OneLineErrors)
    show = catalog_commands.add_parser("show", help="print a catalog's tools, tasks and thresholds")
    show.add_argument("file", nargs="?", type=given, help="catalog YAML (default: the packaged catalog)")
    check = catalog_commands.add_parser("check", help="validate catalog files; list every problem with its line, exit 2 if any",
                                        description="Validate catalog files: every problem of every file, one line each "
                                                    "(file:line: path: problem) on stderr; exit code 2 if there is any.")
    check.add_argument("files", nargs="+", type=given, metavar="FILE")
    catalog_commands.add_parser("schema", help="print the catalog JSON Schema, for editors")
    from .draft import add_draft_arguments

    draft = catalog_commands.add_parser("draft", help="draft a catalog from recorded traces, or --merge what a catalog lacks",
                                        description="Draft a tool catalog from recorded traces: every tool, agent and model "
                                                    "seen, with what the spans tell (descriptions, parameters, latencies) and "
                                                    "what they cannot (prices, capabilities, tiers) marked FILL IN, set so that "
                                                    "no call scores as wasteful. With --merge, add only what a catalog lacks.")
    add_draft_arguments(draft)

    from .score import add_score_arguments

    score = commands.add_parser("score", help="score recorded OTLP traces; summary, --json, --junit, --html; a CI gate (exit 0/1/2)",
                                description="Score recorded OpenTelemetry traces (the Collector's file exporter output, "
                                            "OTLP protobuf, .gz; files or directories) with the live processor's core. "
                                            "Exit 0 if the gate passes, 1 if it fails, 2 on bad input.")
    add_score_arguments(score)

    from .compare import add_compare_arguments

    compare = commands.add_parser("compare", help="compare two trace sets per agent and task; flag regressions beyond noise",
                                  description="Score two sets of recorded traces (BASE, e.g. main, and HEAD, the change) with "
                                              "the same core and compare them per agent and task, with a seeded bootstrap "
                                              "interval per change. Exit 0, 1 on a regression with --fail-on-regression, "
                                              "2 on bad input.")
    add_compare_arguments(compare)

    from .serve import add_serve_arguments

    serve = commands.add_parser("serve", help="the evaluation as an OTLP hop: traces in (gRPC 4317, HTTP 4318), enriched "
                                              "traces out, /metrics", description="Receive OTLP traces from any language, "
                                "score them with the processor's core, forward them enriched; stop with SIGTERM (drains).")
    add_serve_arguments(serve)

    from .demo import DEFAULT_PORT, add_demo_arguments

    demo = commands.add_parser("demo", help=f"simulated agents emit real spans, scored live; /metrics on port {DEFAULT_PORT}",
                               description="Simulated agents (no API key, no network) emit OpenTelemetry GenAI spans "
                                           "that the span processor scores live; watch the table or scrape /metrics.")
    add_demo_arguments(demo)
    return parser


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool whose reader went away (`| head`)


class OutputError(Exception):
    """Writing stdout failed (a full disk, an I/O error): bad output, told apart from an input's OSError."""


class _CheckedStdout:
    """sys.stdout whose write errors raise OutputError, so `main` can say so in one line wherever the print was."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._checked(self._stream.write, text)

    def flush(self) -> None:
        self._checked(self._stream.flush)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    @staticmethod
    def _checked(call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.strerror or str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    stdout = sys.stdout
    if stdout is not None:  # None: started with stdout closed, where print() writes nothing
        sys.stdout = _CheckedStdout(stdout)  # type: ignore[assignment]
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit: a reader that went away is seen while it can still be handled
        return code
    except BrokenPipeError:
        _drop_stdout(stdout)
        return EXIT_BROKEN_PIPE
    except OutputError as exc:  # a CI job's `--json > report.json` on a full disk: not "the gate failed"
        print(f"otel-agent-eval: cannot write the output: {exc}", file=sys.stderr)
        _drop_stdout(stdout)
        return EXIT_USAGE
    finally:
        if isinstance(sys.stdout, _CheckedStdout):
            sys.stdout = stdout


def _drop_stdout(stdout: Any) -> None:
    """Point stdout at /dev/null: the interpreter flushes what could not be written again at exit, which would fail again."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stdout.fileno())
    except (OSError, ValueError):  # not a real file (a test's capture)
        pass


def _run(argv: Sequence[str] | None) -> int:
    quiet_deepeval()
    args = build_parser().parse_args(argv)
    try:
        if args.command == "catalog":
            return _catalog(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "serve":
            from .serve import run_serve

            return run_serve(args)
        if args.command == "score":
            from .score import run_score

            return run_score(args)
        if args.command == "compare":
            from .compare import run_compare

            return run_compare(args)
    except ValueError as exc:  # CatalogError and other bad values: one line, no traceback
        print(f"otel-agent-eval: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return 0


def _catalog(args: argparse.Namespace) -> int:
    if args.catalog_command == "schema":
        print(json.dumps(CATALOG_SCHEMA, indent=2))
    elif args.catalog_command == "draft":
        from .draft import run_draft

        return run_draft(args)
    elif args.catalog_command == "check":
        from ..config.catalog import check_catalog_file

        failed = False
        for path in args.files:  # every file, every problem: one line each on stderr
            catalog, problems = check_catalog_file(path)
            for problem in problems:
                print(f"otel-agent-eval: {problem}", file=sys.stderr)
            if catalog is not None:
                for warning in catalog.warnings():  # valid, so the check still passes
                    print(f"otel-agent-eval: warning: {path}: {warning}", file=sys.stderr)
                print(f"{path}: ok ({check_summary(catalog)})")
            failed = failed or bool(problems)
        return EXIT_USAGE if failed else 0
    else:
        print(describe(load_catalog(args.file)))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import DemoError, run_demo

    try:
        return run_demo(args)
    except DemoError as exc:
        print(f"otel-agent-eval: demo: {exc}", file=sys.stderr)
        return EXIT_USAGE


def check_summary(catalog: Catalog) -> str:
    """What `catalog check` counts in a valid catalog: `2 tools, 1 task`."""
    from .score_table import plural

    return f"{plural(len(catalog.tools), 'tool')}, {plural(len(catalog.tasks), 'task')}"


def describe(catalog: Catalog) -> str:
    """A plain-text overview of a catalog (`catalog show`): tools, tasks, model prices, profiles, thresholds; each
    column as wide as its longest cell."""
    lines = [f"Catalog {catalog.source}", ""]
    lines += _columns(
        ["tool", "cost $", "latency", "slo", "tier", "capabilities"],
        [[t.name, f"{t.cost_usd:.4f}", f"{t.latency_ms:g}ms", f"{t.latency_slo_ms:g}ms" if t.latency_slo_ms else "-",
          t.complexity, ", ".join(t.capabilities)] for t in catalog.tools.values()], right=(1, 2, 3))
    if catalog.tasks:
        lines += [""] + _columns(
            ["task", "capability", "profile", "optimal tool", "match"],
            [[r.name, r.capability, r.profile or catalog.default_profile, r.optimal_tool or "(best by profile)",
              ", ".join(f"{k}={'|'.join(v)}" for k, v in r.match.items()) or "-"] for r in catalog.tasks])
    if catalog.models:
        lines += [""] + _columns(
            ["model", "input $/1k", "cached input $/1k", "output $/1k"],
            [[name, f"{m.input_per_1k:g}", "-" if m.cached_input_per_1k is None else f"{m.cached_input_per_1k:g}",
              f"{m.output_per_1k:g}"] for name, m in catalog.models.items()], right=(1, 2, 3))
    lines += ["", "profiles: " + ", ".join(f"{p.name} (cost {p.cost_weight:g} / latency {p.latency_weight:g})"
                                           for p in catalog.profiles.values())]
    lines.append("thresholds: " + ", ".join(f"{t.environment} (warn < {t.warn:g}, fail < {t.fail:g})"
                                            for t in catalog.thresholds.values()))
    lines.append(f"defaults: profile {catalog.default_profile}, environment {catalog.default_environment}")
    return "\n".join(lines)


def _columns(headers: list[str], rows: list[list[str]], right: tuple[int, ...] = ()) -> list[str]:
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]
    return ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))).rstrip()
            for row in [headers, *rows]]

if __name__ == "__main__":
    sys.exit(main())

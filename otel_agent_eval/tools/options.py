"""Command-line options shared by the commands that score (score, compare, serve): one spelling each."""
from __future__ import annotations

import argparse
from typing import NamedTuple

from ..config.catalog import Catalog, load_catalog
from ..config.settings import PREFIX, Settings


def given(value: str) -> str:
    """The `type` of every path and name argument: an empty one (`score "$TRACES"` with the variable unset) is bad
    input, not "not given", and not `.` (which would score the current directory)."""
    if not value:
        raise argparse.ArgumentTypeError("an empty value (an unset variable?)")
    return value


def add_catalog_arguments(parser: argparse.ArgumentParser) -> None:
    """--catalog, --environment and --profile, which mean what their OTEL_AGENT_EVAL_* settings mean."""
    parser.add_argument("--catalog", type=given, metavar="FILE",
                        help="tool catalog YAML (default: $OTEL_AGENT_EVAL_CATALOG, else the packaged one)")
    parser.add_argument("--environment", "--env", type=given, metavar="ENV",
                        help="threshold and gate levels of the catalog (default: $OTEL_AGENT_EVAL_ENVIRONMENT, else the catalog's default)")
    parser.add_argument("--profile", type=given, metavar="NAME", help="weight profile for calls no task route names")


class CatalogChoice(NamedTuple):
    catalog: Catalog
    path: str | None  # the catalog file, None for the packaged one
    profile: str | None
    environment: str | None


def choose_catalog(args: argparse.Namespace) -> CatalogChoice:
    """The catalog, profile and environment of `score` and `compare`: the flags, else the OTEL_AGENT_EVAL_* variables.

    A bad value from a variable is refused naming the variable: the user gave no flag to look for.
    """
    settings = Settings.from_env()
    path = args.catalog or settings.catalog
    try:
        catalog = load_catalog(path)
    except ValueError as exc:
        if args.catalog is None:
            raise ValueError(f"${PREFIX}CATALOG: {exc}") from None
        raise
    for flag, variable, known, what in ((args.profile, settings.profile, catalog.profiles, "profile"),
                                        (args.environment, settings.environment, catalog.thresholds, "environment")):
        if flag is None and variable is not None and variable not in known:
            raise ValueError(f"${PREFIX}{what.upper()}: unknown {what} {variable!r}; {catalog.source} has: {', '.join(known)}")
    return CatalogChoice(catalog, path, args.profile or settings.profile, args.environment or settings.environment)

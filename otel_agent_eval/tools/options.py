"""Command-line options shared by the commands that score (score, compare, serve): one spelling each."""
from __future__ import annotations

import argparse


def add_catalog_arguments(parser: argparse.ArgumentParser) -> None:
    """--catalog, --environment and --profile, which mean what their OTEL_AGENT_EVAL_* settings mean."""
    parser.add_argument("--catalog", metavar="FILE", help="tool catalog YAML (default: $OTEL_AGENT_EVAL_CATALOG, else the packaged one)")
    parser.add_argument("--environment", "--env", metavar="ENV",
                        help="threshold and gate levels of the catalog (default: $OTEL_AGENT_EVAL_ENVIRONMENT, else the catalog's default)")
    parser.add_argument("--profile", metavar="NAME", help="weight profile for calls no task route names")

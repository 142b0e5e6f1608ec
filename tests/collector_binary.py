"""The kit's OpenTelemetry Collector, as `.ci/collector` builds it from collector-config/builder-config.yaml.

The binary lives in a cache directory keyed by the manifest's hash (the same rule as the script's, kept in
otel_agent_eval/tools/bench/serve.py, whose serve section runs it too), so a
changed manifest means a new build. Missing: the test fails in one line naming the command that builds it.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from otel_agent_eval.tools.bench.serve import BUILD_COMMAND, collector_path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "collector-config" / "builder-config.yaml"


def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def otelcol_path() -> Path:
    return collector_path(MANIFEST)


def otelcol() -> str:
    """The built Collector; fails the test (never skips) when it is not built for this manifest."""
    path = otelcol_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"the kit's Collector is not built for this manifest ({path}): run `{BUILD_COMMAND}`",
                    pytrace=False)
    return str(path)

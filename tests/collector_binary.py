"""The kit's OpenTelemetry Collector, as `.ci/collector` builds it from collector-config/builder-config.yaml.

The binary lives in a cache directory keyed by the manifest's hash (the same rule as the script's), so a
changed manifest means a new build. Missing: the test fails in one line naming the command that builds it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "collector-config" / "builder-config.yaml"
BUILD_COMMAND = "bash .ci/collector"


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otel-agent-eval"


def manifest() -> dict:
    return yaml.safe_load(MANIFEST.read_text())


def otelcol_path() -> Path:
    key = hashlib.sha256(MANIFEST.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"otelcol-{key}" / manifest()["dist"]["name"]


def otelcol() -> str:
    """The built Collector; fails the test (never skips) when it is not built for this manifest."""
    path = otelcol_path()
    if not os.access(path, os.X_OK):
        pytest.fail(f"the kit's Collector is not built for this manifest ({path}): run `{BUILD_COMMAND}`",
                    pytrace=False)
    return str(path)

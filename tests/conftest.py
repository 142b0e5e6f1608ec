"""Test-wide environment: no deepeval telemetry, no files in the working directory, no network keys."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# No per-example time limit: on a loaded 2-core machine Hypothesis's default 200 ms deadline fails tests that are only
# slow (a flaky test), never wrong; a test that needs its own settings still sets them.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

_DEEPEVAL_HOME = tempfile.mkdtemp(prefix="otel-agent-eval-deepeval-")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_CACHE_FOLDER", os.path.join(_DEEPEVAL_HOME, ".deepeval"))
os.environ.setdefault("DEEPEVAL_HOME", _DEEPEVAL_HOME)
# deepeval builds an OpenAI client when ToolCorrectnessMetric() is constructed, even though
# it calls no LLM without `available_tools`. A placeholder key satisfies the constructor.
os.environ.setdefault("OPENAI_API_KEY", "sk-placeholder-never-used")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "early(workload): start the test's child-process workload with the session "
                                       "(tests/early.py)")


def pytest_collection_modifyitems(items) -> None:
    """Tests whose workloads start early go last: their workloads have the whole session to run in."""
    items.sort(key=lambda item: item.get_closest_marker("early") is not None)


def pytest_collection_finish(session) -> None:
    if not session.config.option.collectonly:
        import early

        early.start(session.items)


def real_traces() -> Path:
    """`../shared/real-traces/`: traces other projects recorded, read where they are (their SOURCES.md: never copied
    into the project), found beside this checkout or a folder above it. A checkout without them cannot run the tests
    that read them: those tests say so and are skipped, the rest of the suite runs."""
    for parent in Path(__file__).resolve().parents:
        found = parent / "shared" / "real-traces"
        if found.is_dir():
            return found
    pytest.skip("../shared/real-traces/ (traces other projects recorded, read in place) is not beside this checkout")

"""Test-wide environment: no deepeval telemetry, no files in the working directory, no network keys."""
from __future__ import annotations

import os
import tempfile

_DEEPEVAL_HOME = tempfile.mkdtemp(prefix="otel-agent-eval-deepeval-")
os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "YES")
os.environ.setdefault("DEEPEVAL_CACHE_FOLDER", os.path.join(_DEEPEVAL_HOME, ".deepeval"))
os.environ.setdefault("DEEPEVAL_HOME", _DEEPEVAL_HOME)
# deepeval builds an OpenAI client when ToolCorrectnessMetric() is constructed, even though
# it calls no LLM without `available_tools`. A placeholder key satisfies the constructor.
os.environ.setdefault("OPENAI_API_KEY", "sk-placeholder-never-used")

"""Agent runs in pytest: the public home of `capture_runs` and `run_to_test_case` (see offline/testing.py)."""
from __future__ import annotations

from .offline.testing import capture_runs, run_input, run_output, run_to_test_case

__all__ = ["capture_runs", "run_input", "run_output", "run_to_test_case"]

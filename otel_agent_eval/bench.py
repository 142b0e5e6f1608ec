"""`python -m otel_agent_eval.bench`: the overhead benchmark (see tools/bench.py)."""
from __future__ import annotations

import sys

from .tools.bench import main

if __name__ == "__main__":
    sys.exit(main())

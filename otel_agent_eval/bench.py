"""`python -m otel_agent_eval.bench`: the benchmark (see tools/bench/: the processor's overhead, serve, score)."""
from __future__ import annotations

import sys

from .tools.bench import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m otel_agent_eval`: the `otel-agent-eval` command, where the console script is not on PATH."""
from __future__ import annotations

import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""`python -m otel_agent_eval.bench`: what the kit costs, each figure beside its anchor, in one run.

One module per concern: `processor` (the span processor's overhead beside the bare SDK and its peers), `scale`
(scrapes, catalog size, routing), `instructions` (cachegrind counts, on request), `serve` (the `serve` process
beside the OpenTelemetry Collector doing the same hop), `score` (`score` beside a plain orjson read), `report`
(the text a person reads) and `cli` (the sections, their sizes, the command line).
"""
from __future__ import annotations

from .cli import main, run
from .report import format_report

__all__ = ["format_report", "main", "run"]

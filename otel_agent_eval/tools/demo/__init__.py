"""`otel-agent-eval demo`: simulated agents emit real GenAI spans, scored live, no API key needed.

The package exists to keep the demo's four jobs apart, each in its own module:

- `workload`: the simulated agent fleet emitting real OpenTelemetry spans (the ground truth);
- `readback`: the processor's metrics read back from a registry, as a scrape sees them;
- `display`: the terminal table, the plain progress lines and the closing summary;
- `command`: the CLI options, the paced run, /metrics and the OTLP export.

    >>> from prometheus_client import CollectorRegistry
    >>> from otel_agent_eval.otel.processor import AgentEvalSpanProcessor
    >>> registry = CollectorRegistry()
    >>> summary = run_workload(AgentEvalSpanProcessor(registry=registry), runs=1000, seed=7)
    >>> summary.non_optimal_share                       # about the requested 0.2
    0.2032...
    >>> [(r.tool, r.optimal_tool, round(r.wasted_usd, 2)) for r in read_metrics(registry).worst_pairs(2)]
    [('ml_pipeline', 'simple_filter', 5.8), ('wolfram_alpha', 'basic_calculator', 0.25)]
"""
from __future__ import annotations

from .command import DEFAULT_PORT, add_demo_arguments, run_demo, start_metrics_server
from .command import _drive as _drive  # the pacing loop, which the tests drive with a fake clock
from .display import COLUMNS, format_summary, format_table
from .readback import DemoMetrics, ToolRow, read_metrics
from .workload import DemoAgent, DemoError, TaskScript, Workload, WorkloadSummary, demo_agents, run_workload

__all__ = [
    "COLUMNS",
    "DEFAULT_PORT",
    "DemoError",
    "DemoAgent",
    "DemoMetrics",
    "TaskScript",
    "ToolRow",
    "Workload",
    "WorkloadSummary",
    "add_demo_arguments",
    "demo_agents",
    "format_summary",
    "format_table",
    "read_metrics",
    "run_demo",
    "run_workload",
    "start_metrics_server",
]

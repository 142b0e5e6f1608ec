"""Live tool-efficiency scoring for LLM agents, on the OpenTelemetry spans they already emit.

The deepeval metrics are imported on first use: importing deepeval takes about a
second, which an app that only registers the span processor should not pay.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .config.catalog import Catalog, CatalogError, load_catalog
from .otel.exporter import AgentEvalSpanExporter
from .otel.install import install
from .otel.processor import AgentEvalSpanProcessor
from .core.recognize import LLMCall, ToolCallRecord, tool_call_from_span
from .core.runs import AgentRun, RunEvaluation
from .core.scoring import CallScore

if TYPE_CHECKING:
    from .offline.correctness_metric import DeterministicToolCorrectnessMetric
    from .offline.judged_metric import JudgedToolCorrectnessMetric
    from .offline.deepeval_metrics import ContextualComplexityMetric, ToolEfficiencyMetric
    from .offline.compare import Comparison, compare_traces
    from .offline.score import Report, score_traces

_LAZY = {
    "DeterministicToolCorrectnessMetric": ".offline.correctness_metric",
    "JudgedToolCorrectnessMetric": ".offline.judged_metric",
    "ToolEfficiencyMetric": ".offline.deepeval_metrics",
    "ContextualComplexityMetric": ".offline.deepeval_metrics",
    "score_traces": ".offline.score",
    "Report": ".offline.score",
    "compare_traces": ".offline.compare",
    "Comparison": ".offline.compare",
}

__all__ = [
    "AgentEvalSpanExporter",
    "AgentEvalSpanProcessor",
    "AgentRun",
    "CallScore",
    "Catalog",
    "CatalogError",
    "Comparison",
    "ContextualComplexityMetric",
    "DeterministicToolCorrectnessMetric",
    "JudgedToolCorrectnessMetric",
    "LLMCall",
    "Report",
    "RunEvaluation",
    "ToolCallRecord",
    "ToolEfficiencyMetric",
    "compare_traces",
    "install",
    "load_catalog",
    "score_traces",
    "tool_call_from_span",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

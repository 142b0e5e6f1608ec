"""`otel-agent-eval serve`: the evaluation core as an OTLP trace hop (gRPC 4317, HTTP 4318) for any language."""
from __future__ import annotations

from .service import ServeConfig, Service

__all__ = ["ServeConfig", "Service"]

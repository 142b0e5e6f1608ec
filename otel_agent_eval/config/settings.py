"""Settings from `OTEL_AGENT_EVAL_*` environment variables, as OpenTelemetry SDKs read theirs.

A bad value never stops the app: it is logged once, clearly, and the default is used.
`ENV_VARS` is the single list of variables; the README's table mirrors it (a test checks).
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)

PREFIX = "OTEL_AGENT_EVAL_"


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError("expected a port number 0-65535 (0 picks a free port)")
    return port


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError("expected a positive number")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not 0 <= value < float("inf"):
        raise ValueError("expected a number >= 0")
    return value


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"not a regular expression: {exc}") from None
    return text


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("expected a whole number >= 0")
    return value


def _evaluation_events(text: str) -> str:
    value = text.strip().lower()
    if value not in ("span", "log", "both"):
        raise ValueError("expected span, log or both")
    return value


def _text(text: str) -> str:
    if not text.strip():
        raise ValueError("expected a non-empty value")
    return text.strip()


@dataclass(frozen=True)
class Settings:
    catalog: str | None = None
    profile: str | None = None
    environment: str | None = None
    metrics_enabled: bool = True
    metrics_port: int = 9464
    metrics_addr: str = "127.0.0.1"
    enrich: bool = True
    window_seconds: float = 300.0
    max_unknown_tools: int = 20
    max_agents: int = 100
    max_samples: int = 50_000
    catalog_poll_seconds: float = 0.0
    reload_on_sighup: bool = False
    redact_keys: str | None = None
    drop_tool_io: bool = False
    evaluation_events: str = "span"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every `OTEL_AGENT_EVAL_*` variable; bad values are logged and replaced by defaults."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        defaults = cls()
        for var in ENV_VARS:
            raw = environ.get(var.name)
            if raw is None or raw == "":
                continue
            try:
                values[var.field] = var.parse(raw)
            except ValueError as exc:
                logger.warning("otel-agent-eval: ignoring %s=%r (%s); using the default %r",
                               var.name, raw, exc, getattr(defaults, var.field))
        return cls(**values)

    def override(self, **explicit: Any) -> Settings:
        """These settings with the explicitly given (non-None) arguments taking precedence."""
        known = {f.name for f in fields(self)}
        return replace(self, **{k: v for k, v in explicit.items() if v is not None and k in known})


class EnvVar(NamedTuple):
    name: str
    field: str
    parse: Callable[[str], Any]
    doc: str


ENV_VARS = (
    EnvVar(PREFIX + "CATALOG", "catalog", _text, "Path of the tool catalog YAML (default: the packaged catalog)."),
    EnvVar(PREFIX + "PROFILE", "profile", _text, "Weight profile for calls no task route names (default: the catalog's `default_profile`)."),
    EnvVar(PREFIX + "ENVIRONMENT", "environment", _text, "Threshold set: development, staging or production (default: the catalog's `default_environment`)."),
    EnvVar(PREFIX + "METRICS_ENABLED", "metrics_enabled", _bool, "Serve Prometheus `/metrics` (default true)."),
    EnvVar(PREFIX + "METRICS_PORT", "metrics_port", _port, "Port of the metrics endpoint (default 9464)."),
    EnvVar(PREFIX + "METRICS_ADDR", "metrics_addr", _text, "Address the metrics endpoint binds to (default 127.0.0.1: local only)."),
    EnvVar(PREFIX + "ENRICH", "enrich", _bool, "Add `agent_eval.*` attributes and evaluation events to exported tool spans (default true)."),
    EnvVar(PREFIX + "WINDOW_SECONDS", "window_seconds", _positive_float, "Sliding window of the latency summary quantiles (default 300)."),
    EnvVar(PREFIX + "MAX_UNKNOWN_TOOLS", "max_unknown_tools", _count, "Distinct tool names outside the catalog kept as labels; more fold into `_other_` (default 20)."),
    EnvVar(PREFIX + "MAX_AGENTS", "max_agents", _count, "Distinct agent names kept as labels; more fold into `_other_` (default 100)."),
    EnvVar(PREFIX + "MAX_SAMPLES", "max_samples", _count, "Samples the scored series may expose in one scrape; label sets past it are counted under `_other_` (default 50000)."),
    EnvVar(PREFIX + "CATALOG_POLL_SECONDS", "catalog_poll_seconds", _non_negative_float, "Reload the catalog when its file changes, looking every N seconds (default 0: off)."),
    EnvVar(PREFIX + "RELOAD_ON_SIGHUP", "reload_on_sighup", _bool, "Reload the catalog on SIGHUP (default false)."),
    EnvVar(PREFIX + "REDACT_KEYS", "redact_keys", _regex, "Regular expression of keys whose values are replaced by `[REDACTED]` in exported tool spans, also inside JSON arguments and results (e.g. `password|token|secret|api_key`)."),
    EnvVar(PREFIX + "DROP_TOOL_IO", "drop_tool_io", _bool, "Drop tool arguments and results from exported tool spans (default false)."),
    EnvVar(PREFIX + "EVALUATION_EVENTS", "evaluation_events", _evaluation_events, "Where `gen_ai.evaluation.result` events go: `span` (span events on exported spans, default), `log` (log records through the global LoggerProvider, parented to the evaluated span) or `both`."),
)

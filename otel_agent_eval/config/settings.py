"""Settings from `OTEL_AGENT_EVAL_*` environment variables, as OpenTelemetry SDKs read theirs.

A bad value never stops the app: it is logged once, clearly, and the default is used.
`ENV_VARS` is the single list of variables; the table in docs/configuration.md mirrors it (a test checks).
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
    except Exception as exc:  # noqa: BLE001 - re.error, but also OverflowError (`a{99999999999}`), RecursionError, ...
        raise ValueError(f"not a usable regular expression: {type(exc).__name__}: {exc}") from None
    return text


class FailClosed(str):
    """The redaction pattern used when the one asked for cannot be used: common secret keys, with tool I/O dropped too.

    Redaction that was asked for never falls open: a span then leaves with fewer values, never with more.
    """


FAIL_CLOSED = FailClosed(r"passw(?:or)?d|pwd|secret|token(?!s|_count)|api[-_]?key|access[-_]?key|private[-_]?key|credential|auth"
                         r"|cookie|session|bearer|signature")
FAIL_CLOSED_NOTE = (f"failing closed: masking keys that match {str(FAIL_CLOSED)!r} and dropping tool arguments and results "
                    "(as OTEL_AGENT_EVAL_DROP_TOOL_IO=true does)")


def usable_redaction(pattern: Any, name: str = "redact_keys") -> Any:
    """`pattern` if it can redact (None, a usable regular expression or compiled pattern), else `FAIL_CLOSED`, logged
    under `name` (the argument or the environment variable that gave it)."""
    if pattern is None or isinstance(pattern, re.Pattern):
        return pattern
    try:
        if not isinstance(pattern, str):
            raise ValueError(f"expected a regular expression string, got {type(pattern).__name__}")
        return _regex(pattern)
    except ValueError as exc:
        logger.error("otel-agent-eval: %s=%r cannot be used (%s); %s", name, pattern, exc, FAIL_CLOSED_NOTE)
        return FAIL_CLOSED


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("expected a whole number >= 0")
    return value


def _rate(text: str) -> float:
    return _share(float(text))


def _share(value: Any) -> float:
    value = _number(value, whole=False)
    if not 0 <= value <= 1:
        raise ValueError("expected a number from 0 to 1")
    return float(value)


def _url(value: Any) -> str:
    if not isinstance(value, str) or not value.strip().lower().startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    return value.strip()


def _whole_at_least_one(text: str) -> int:
    return _at_least(1)(int(text))


EVALUATION_EVENTS = ("span", "log", "both")
EXPONENTIAL, EXPLICIT = "exponential", "explicit"  # otlp_histograms: how histograms go over OTLP
HISTOGRAMS = (EXPONENTIAL, EXPLICIT)


def _evaluation_events(text: str) -> str:
    return _choice(text.strip().lower())


def _number(value: Any, *, whole: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {type(value).__name__}")
    if whole and not (isinstance(value, int) or value.is_integer()):
        raise ValueError("expected a whole number")
    return int(value) if whole else value


def _positive(value: Any) -> float:
    value = _number(value, whole=False)
    if not 0 < value < float("inf"):
        raise ValueError("expected a positive number")
    return value


def _not_negative(value: Any) -> float:
    value = _number(value, whole=False)
    if not 0 <= value < float("inf"):
        raise ValueError("expected a number >= 0")
    return value


def _at_least(minimum: int) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        value = _number(value, whole=True)
        if value < minimum:
            raise ValueError(f"expected a whole number >= {minimum}")
        return value
    return check


def _port_number(value: Any) -> int:
    return _port(str(_number(value, whole=True)))


def _choice(value: Any) -> str:
    if value not in EVALUATION_EVENTS:
        raise ValueError("expected one of span, log, both")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {type(value).__name__}")
    return _text(value)


def _flag(value: Any) -> bool:
    """True or False; a string as the environment variables' booleans read it, never as truthy ("false" is False)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _bool(value)
    raise ValueError(f"expected True or False, got {type(value).__name__}")


def _judge(value: Any) -> Any:
    if not callable(getattr(value, "judge", None)):
        raise ValueError(f"expected a judge (an object with judge(request) -> JudgeResult), got {type(value).__name__}")
    return value


def _histograms(value: Any) -> str:
    if value not in HISTOGRAMS:
        raise ValueError(f"expected one of {', '.join(HISTOGRAMS)}")
    return value


def _catalog(value: Any) -> Any:
    from .catalog import Catalog

    if not isinstance(value, (str, os.PathLike, Catalog)):
        raise ValueError(f"expected a Catalog or a path, got {type(value).__name__}")
    return value


# Arguments of `install()` and `AgentEvalSpanProcessor` that can be wrong, and their checks (a ValueError says why).
ARGUMENTS: dict[str, Callable[[Any], Any]] = {
    "catalog": _catalog, "port": _port_number, "addr": _name, "profile": _name, "environment": _name,
    "window_s": _positive, "run_ttl_s": _not_negative, "max_unknown_tools": _at_least(0), "max_agents": _at_least(0),
    "max_samples": _at_least(0), "max_calls_per_run": _at_least(0), "max_open_traces": _at_least(1),
    "queue_limit": _at_least(1), "evaluation_events": _choice,
    "serve_metrics": _flag, "enrich": _flag, "drop_tool_io": _flag, "background": _flag, "otlp_histograms": _histograms,
    "judge": _judge, "judge_model": _name, "judge_base_url": _url, "judge_sample_rate": _share, "judge_max_per_minute": _at_least(1),
    "judge_max_usd_per_hour": _positive, "judge_timeout_s": _positive, "judge_queue_limit": _at_least(1),
    "judge_arguments": _flag,
}


def known_name(name: str | None, known: Any, variable: str, where: str = "the catalog") -> str | None:
    """`name` (a profile or an environment) if the catalog defines it, else None: logged, the catalog's default used."""
    if name is None or name in known:
        return name
    logger.warning("otel-agent-eval: %s=%r is not in %s (known: %s); using the catalog's default",
                   variable, name, where, ", ".join(known))
    return None


def check_arguments(**given: Any) -> None:
    """Raise a ValueError naming the first argument in `given` that cannot be used."""
    for name, value in given.items():
        check = ARGUMENTS.get(name)
        if check is not None:
            try:
                check(value)
            except ValueError as exc:
                raise ValueError(f"otel-agent-eval: {name}={value!r}: {exc}") from None


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
    judge_model: str | None = None  # the online tool-selection judge: off until a model is named
    judge_base_url: str | None = None
    judge_sample_rate: float = 0.1
    judge_max_per_minute: int = 60
    judge_max_usd_per_hour: float = 1.0
    judge_timeout_seconds: float = 30.0
    judge_queue: int = 100
    judge_arguments: bool = True

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
            except Exception as exc:  # noqa: BLE001 - a setting never stops the app
                if var.field == "redact_keys":  # redaction was asked for: never fall open
                    values[var.field] = usable_redaction(raw, var.name)
                    continue
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
    EnvVar(PREFIX + "REDACT_KEYS", "redact_keys", _regex, "Regular expression of keys whose values are replaced by `[REDACTED]` in exported tool spans, also inside JSON arguments and results (e.g. `password|token|secret|api_key`); one that cannot be used fails closed (FAIL_CLOSED)."),
    EnvVar(PREFIX + "DROP_TOOL_IO", "drop_tool_io", _bool, "Drop tool arguments and results from exported tool spans (default false)."),
    EnvVar(PREFIX + "EVALUATION_EVENTS", "evaluation_events", _evaluation_events, "Where `gen_ai.evaluation.result` events go: `span` (span events on exported spans, default), `log` (log records through the global LoggerProvider, parented to the evaluated span) or `both`."),
    EnvVar(PREFIX + "JUDGE_MODEL", "judge_model", _text, "The tool-selection judge's model (deepeval's; e.g. `gpt-4.1-mini`): set, completed runs are judged online, sampled and budgeted; unset (default), nothing is judged."),
    EnvVar(PREFIX + "JUDGE_BASE_URL", "judge_base_url", _url, "An OpenAI-compatible endpoint for the judge's model (vLLM, Ollama, llama.cpp server), e.g. `http://127.0.0.1:11434/v1` (default: the model's hosted API)."),
    EnvVar(PREFIX + "JUDGE_SAMPLE_RATE", "judge_sample_rate", _rate, "Share of completed runs judged, chosen by a hash of the trace id: the same runs in every process, replica and re-run (default 0.1)."),
    EnvVar(PREFIX + "JUDGE_MAX_PER_MINUTE", "judge_max_per_minute", _whole_at_least_one, "At most this many judgements in any 60 seconds; more are counted `over_budget` (default 60)."),
    EnvVar(PREFIX + "JUDGE_MAX_USD_PER_HOUR", "judge_max_usd_per_hour", _positive_float, "Judging stops while the judge's tokens of the last hour cost this many USD or more, priced as every LLM call (default 1.0)."),
    EnvVar(PREFIX + "JUDGE_TIMEOUT_SECONDS", "judge_timeout_seconds", _positive_float, "A judgement that takes longer is abandoned and counted `timed_out` (default 30)."),
    EnvVar(PREFIX + "JUDGE_ARGUMENTS", "judge_arguments", _bool, "Also judge the calls' arguments where recorded (deepeval's ArgumentCorrectnessMetric: two more model calls a run; default true)."),
    EnvVar(PREFIX + "JUDGE_QUEUE", "judge_queue", _whole_at_least_one, "Runs waiting for the judge; past it a sampled run is dropped and counted (default 100)."),
)

"""Shared helpers of the reliability tests: an app wired as production wires it, exporters that
count, hang or raise, metric readers, resident memory, and bounded waits for liveness checks."""
from __future__ import annotations

import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.core.scoring import Scorer

# Tools and agents of the packaged catalog (otel_agent_eval/default_catalog.yaml).
CATALOG_TOOLS = ("basic_calculator", "code_interpreter", "wolfram_alpha", "local_index", "web_search",
                 "simple_filter", "ml_pipeline")
CATALOG_AGENTS = ("support_agent", "math_agent", "analytics_agent", "forecast_agent", "calculator_bot")

EXECUTE_TOOL = {"gen_ai.operation.name": "execute_tool"}
INVOKE_AGENT = {"gen_ai.operation.name": "invoke_agent"}
# Generous: only a deadlock or a hang takes this long (longer in a child at the lowest priority: tests/early.py).
LIVENESS_TIMEOUT_S = float(os.environ.get("AGENT_EVAL_TESTS_LIVENESS_S", "120"))


def tool_attrs(tool: str, **extra: Any) -> dict[str, Any]:
    return {**EXECUTE_TOOL, "gen_ai.tool.name": tool, **extra}


def agent_attrs(agent: str) -> dict[str, Any]:
    return {**INVOKE_AGENT, "gen_ai.agent.name": agent}


class App:
    """A TracerProvider with `AgentEvalSpanProcessor` on it, wired as an app wires it.

    `app_processors` are the app's own processors, added to the provider before ours;
    `forward_to` is given to ours. `shutdown_on_exit=False`: a test that leaves a hanging
    exporter behind must not make the interpreter's exit wait for it.
    """

    def __init__(self, *, app_processors: Sequence[SpanProcessor] = (), **options: Any) -> None:
        self.registry = CollectorRegistry()
        self.processor = AgentEvalSpanProcessor(registry=self.registry, **options)
        self.provider = TracerProvider(shutdown_on_exit=False)
        for processor in app_processors:
            self.provider.add_span_processor(processor)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("reliability")

    def sample(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def self_metric(self, name: str) -> float:
        return self.sample(f"agent_eval_processor_{name}_total")

    def self_metrics(self) -> dict[str, float]:
        return {name: self.self_metric(name) for name in (
            "spans_seen", "spans_scored", "spans_ignored", "malformed_tool_spans", "internal_errors",
            "forward_errors", "enrichments_dropped", "deferred_calls_released")}

    def series(self, sample_name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of this name: sorted label pairs -> value."""
        return samples(self.registry, sample_name)

    def drain(self, what: str) -> None:
        """Hand every span ended so far to `forward_to` now (liveness-bounded).

        `span.end()` only queues a span; our hand-off thread forwards it on its own schedule, so
        a test that counts what the forwarded processor received drains first.
        """
        thread, out = in_thread(self.processor.drain, "processor.drain")
        join_or_fail([thread], LIVENESS_TIMEOUT_S, f"processor.drain() ({what})")
        assert "error" not in out, f"processor.drain() raised: {out.get('error')!r}"


def samples(registry: CollectorRegistry, sample_name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == sample_name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def labels(**kv: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kv.items()))


def expected_call_series(scorer: Scorer, sent: Mapping[tuple[str, str, str | None], int]) -> Counter:
    """`agent_eval_tool_calls_total` series expected for calls sent as (tool, agent, error type or None) -> n.

    The labels come from a `Scorer` of the same catalog (routing and static scores are the
    product's; what the tests check is that every call sent is counted once, in its series).
    """
    expected: Counter = Counter()
    for (tool, agent, error), n in sent.items():
        static = scorer.static_score(tool, scorer.route(agent or None))
        expected[labels(gen_ai_tool_name=static.tool, gen_ai_agent_name=agent, task=static.task,
                        outcome="error" if error else static.outcome, verdict=static.verdict,
                        optimal_tool=static.optimal_tool)] += n
    return expected


def expected_duration_counts(sent: Mapping[tuple[str, str, str | None], int]) -> Counter:
    """`gen_ai_execute_tool_duration_seconds_count` series expected (every span has a valid duration): per tool."""
    expected: Counter = Counter()
    for (tool, _agent, error), n in sent.items():
        expected[labels(gen_ai_tool_name=tool, gen_ai_tool_type="", error_type=error or "")] += n
    return expected


def expected_latency_counts(sent: Mapping[tuple[str, str, str | None], int]) -> Counter:
    """`agent_eval_tool_latency_seconds_count` series expected (every span has a valid duration): per tool and agent."""
    expected: Counter = Counter()
    for (tool, agent, _error), n in sent.items():
        expected[labels(gen_ai_tool_name=tool, gen_ai_agent_name=agent)] += n
    return expected


class CountingExporter(SpanExporter):
    """A null exporter that counts what it is given (thread-safe), and how many carry scores."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.spans = 0
        self.enriched = 0
        self.batches = 0
        self.ids: Counter = Counter()
        self.keep_ids = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        enriched = sum(1 for s in spans if "agent_eval.outcome" in (s.attributes or {}))
        with self._lock:
            self.batches += 1
            self.spans += len(spans)
            self.enriched += enriched
            if self.keep_ids:
                self.ids.update((s.context.trace_id, s.context.span_id) for s in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class HangingExporter(SpanExporter):
    """An exporter whose `export` blocks until `release()` (a collector that stopped answering).

    `entered` is set once a caller is inside `export`, after `calls` and `spans` (spans given
    to `export`, in all) count it.
    """

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self.calls = 0
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.calls += 1
            self.spans += len(spans)
        self.entered.set()
        self._release.wait()
        return SpanExportResult.FAILURE

    def release(self) -> None:
        self._release.set()

    def shutdown(self) -> None:  # like a real exporter: shutdown does not abort an export in flight
        pass


class RaisingExporter(SpanExporter):
    """An exporter whose `export` raises every time."""

    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionError("collector unreachable (test)")

    def shutdown(self) -> None:
        pass


def closed_port() -> int:
    """A localhost TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb() -> float:
    """Resident set size of this process, MB (VmRSS)."""
    return _status_kb("VmRSS") / 1024


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MB (VmHWM)."""
    return _status_kb("VmHWM") / 1024


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def in_thread(target: Callable[[], Any], name: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Start `target` in a daemon thread; the dict gets its 'result' or 'error'."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = target()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread, out


def join_or_fail(threads: Iterable[threading.Thread], timeout_s: float, what: str) -> None:
    """Liveness check: every thread ends within `timeout_s` in total, else the test fails naming them."""
    import time

    import pytest

    deadline = time.monotonic() + timeout_s
    alive = []
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            alive.append(thread.name)
    if alive:
        pytest.fail(f"{what}: {len(alive)} thread(s) still running after {timeout_s:g} s (deadlock or hang?): {alive}")

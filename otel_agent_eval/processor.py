"""The span processor: scores tool calls as their spans end and forwards enriched copies.

    >>> provider.add_span_processor(AgentEvalSpanProcessor(
    ...     "catalog.yaml", registry=registry,
    ...     forward_to=BatchSpanProcessor(OTLPSpanExporter())))

It runs inside `span.end()` of someone else's app, so it never raises, never blocks
on I/O, and keeps its per-span work to a few dict look-ups for spans that are not
tool calls. Failures are logged once per kind and counted in self-metrics.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from prometheus_client import REGISTRY, CollectorRegistry

from .catalog import AttributeMapping, Catalog, PathLike, load_catalog
from .enrich import Enricher
from .prometheus import ToolMetrics
from .recognize import ToolCallRecord, agent_name_of, attribute_dict, convention_of, custom_convention, read_tool_call
from .scoring import CallScore, Scorer

logger = logging.getLogger(__name__)


class OpenAgents:
    """Agent spans still open, per trace: tells a tool span which agent it runs under.

    The innermost (most recently started) open agent of the trace wins, which is right
    for nested and sequential agents. Bounded: past `limit` traces the oldest is dropped.
    """

    def __init__(self, limit: int = 10_000) -> None:
        self._by_trace: dict[int, list[tuple[int, str]]] = {}
        self._open: dict[int, int] = {}  # agent span id -> trace id
        self._limit = limit
        self._lock = threading.Lock()
        self.evicted = 0

    def started(self, trace_id: int, span_id: int, name: str) -> None:
        with self._lock:
            stack = self._by_trace.get(trace_id)
            if stack is None:
                if len(self._by_trace) >= self._limit:
                    oldest = next(iter(self._by_trace))
                    for sid, _ in self._by_trace.pop(oldest):
                        self._open.pop(sid, None)
                    self.evicted += 1
                stack = self._by_trace[trace_id] = []
            stack.append((span_id, name))
            self._open[span_id] = trace_id

    def ended(self, span_id: int) -> None:
        if span_id not in self._open:
            return
        with self._lock:
            trace_id = self._open.pop(span_id, None)
            stack = self._by_trace.get(trace_id) if trace_id is not None else None
            if stack is not None:
                stack[:] = [entry for entry in stack if entry[0] != span_id]
                if not stack:
                    del self._by_trace[trace_id]

    def current(self, trace_id: int) -> str | None:
        stack = self._by_trace.get(trace_id)
        try:
            return stack[-1][1] if stack else None
        except IndexError:  # emptied by another thread meanwhile
            return None

    def __len__(self) -> int:
        return len(self._by_trace)


class AgentEvalSpanProcessor(SpanProcessor):
    """Scores every tool-call span against a catalog; exports Prometheus metrics and enriched spans.

    `catalog` is a `Catalog`, a path to a catalog file, or None for the packaged default
    (a broken file raises `CatalogError` here, before the app runs). `forward_to` is the
    processor that should export spans (e.g. `BatchSpanProcessor(OTLPSpanExporter())`):
    it receives every span, tool spans as enriched copies with `agent_eval.*` attributes
    and a `gen_ai.evaluation.result` event. `on_call(record, score)` is called for each
    scored call (on the ending thread: keep it quick; its exceptions are caught and counted).
    """

    def __init__(
        self,
        catalog: Catalog | PathLike | None = None,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        forward_to: SpanProcessor | None = None,
        profile: str | None = None,
        environment: str | None = None,
        enrich: bool = True,
        attribute_mapping: AttributeMapping | None = None,
        window_s: float = 300.0,
        max_unknown_tools: int = 20,
        max_agents: int = 100,
        max_open_traces: int = 10_000,
        on_call: Callable[[ToolCallRecord, CallScore], None] | None = None,
    ) -> None:
        self.catalog = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
        self.scorer = Scorer(self.catalog, profile=profile, environment=environment)
        self.metrics = ToolMetrics(registry=registry, catalog=self.catalog, window_s=window_s,
                                   max_unknown_tools=max_unknown_tools, max_agents=max_agents)
        self.forward_to = forward_to
        self._enricher = Enricher() if enrich and forward_to is not None else None
        mapping = attribute_mapping or self.catalog.attribute_mapping
        self._custom = custom_convention(mapping) if mapping else None
        self.agents = OpenAgents(max_open_traces)
        self._seen = self.metrics.seen.bump
        self._ignored = self.metrics.ignored.bump
        self._logged: set[tuple[str, type]] = set()
        self._shutdown = False
        self.on_call = on_call
        self._closers: list[Callable[[], Any]] = []  # resources this processor owns, e.g. the metrics server

    # -- SpanProcessor ----------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            name = agent_name_of(attribute_dict(span), span.name)
            if name is not None:
                context = span.context
                self.agents.started(context.trace_id, context.span_id, name)
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self._failed("on_start", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.on_start(span, parent_context=parent_context)
            except Exception as exc:  # noqa: BLE001
                self._failed("forward on_start", exc, "forward_errors")

    def on_end(self, span: ReadableSpan) -> None:
        forward = span
        try:
            self._seen()
            attrs = attribute_dict(span)
            convention = convention_of(attrs, self._custom)
            if convention is None:
                self._ignored()
                if self.agents._open:
                    self.agents.ended(span.context.span_id)
            else:
                forward = self._score(span, attrs, convention)
        except Exception as exc:  # noqa: BLE001 - never break the host app
            self._failed("on_end", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.on_end(forward)
            except Exception as exc:  # noqa: BLE001
                self._failed("forward on_end", exc, "forward_errors")

    def _score(self, span: ReadableSpan, attrs: Mapping[str, Any], convention: Any) -> ReadableSpan:
        record, score = self.score_tool_span(span, attrs, convention)
        if self._enricher is None:
            return span
        try:
            return self._enricher.enrich(span, attrs, score, record.agent)
        except Exception as exc:  # noqa: BLE001
            self._failed("enrich", exc, "enrichments_dropped")
            return span

    def score_tool_span(self, span: ReadableSpan, attrs: Mapping[str, Any], convention: Any) -> tuple[ToolCallRecord, CallScore]:
        """Read, route and score one tool span, account it in the metrics and tell `on_call`."""
        record = read_tool_call(span, attrs, convention)
        if record.problems:
            self.metrics.count("malformed_tool_spans")
            self._log_problem(record.name, record.problems)
        if record.agent is None:
            record.agent = self.agents.current(record.trace_id)
        resource = getattr(span.resource, "attributes", None) if self.scorer.uses_resource else None
        score = self.scorer.score(record, self.scorer.route(record.agent, attrs, resource))
        self.metrics.record(score, record.agent, record.trace_id)
        if self.on_call is not None:
            try:
                self.on_call(record, score)
            except Exception as exc:  # noqa: BLE001
                self._failed("on_call callback", exc)
        return record, score

    def close_on_shutdown(self, close: Callable[[], Any]) -> None:
        """Have `shutdown()` also release a resource tied to this processor (e.g. its metrics server)."""
        self._closers.append(close)

    def shutdown(self) -> None:
        if self._shutdown:
            return
        self._shutdown = True
        for close in self._closers:
            try:
                close()
            except Exception as exc:  # noqa: BLE001
                self._failed("shutdown", exc)
        if self.forward_to is not None:
            try:
                self.forward_to.shutdown()
            except Exception as exc:  # noqa: BLE001
                self._failed("forward shutdown", exc, "forward_errors")

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self.forward_to is None:
            return True
        try:
            return self.forward_to.force_flush(timeout_millis)
        except Exception as exc:  # noqa: BLE001
            self._failed("forward force_flush", exc, "forward_errors")
            return False

    # -- self-observation -------------------------------------------------------------

    def _failed(self, stage: str, exc: Exception, counter: str = "internal_errors") -> None:
        try:
            self.metrics.count(counter)
            key = (stage, type(exc))
            if key not in self._logged:
                self._logged.add(key)
                logger.error("otel-agent-eval: %s failed (%s: %s); the app goes on, further %s errors are only counted",
                             stage, type(exc).__name__, exc, type(exc).__name__, exc_info=exc)
        except Exception:  # noqa: BLE001 - the error path itself must not raise
            pass

    def _log_problem(self, tool: str, problems: list[str]) -> None:
        key = ("malformed", type(None))
        if key not in self._logged:
            self._logged.add(key)
            logger.warning("otel-agent-eval: tool span %r has unreadable values: %s (logged once; see "
                           "agent_eval_processor_malformed_tool_spans_total)", tool, "; ".join(problems))

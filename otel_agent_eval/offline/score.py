"""Score recorded traces with the live evaluation core: `score_traces(paths) -> Report`.

The spans go through the very `Pipeline` the span processor runs, built by the same
`build_pipeline` with `sees_starts=False`, as the zero-code exporter builds it: a tool span
whose agent is not known yet waits for its agent span or its trace's root.

A file is replayed as the live app ran: spans are put back in time order within a window
of `reorder_spans` spans (the Collector groups a batch by resource and scope, so a root can
be written before its children), and each agent span's start is replayed too, at its start
time, as the processor's `on_start` hint. The hints matter: without them an agent span that
only wraps other agent runs (OpenInference's and OpenLLMetry's "Agent workflow" roots)
counts as a run of its own, which live it does not. The run tracker's clock is the
recorded time, so a trace whose root never ended closes after the same TTL as live.

    >>> report = score_traces("traces.json", environment="staging")
    >>> [(g.name, round(g.efficiency, 2)) for g in report.groups]
"""
from __future__ import annotations

import gc
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from operator import itemgetter
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext
from prometheus_client import CollectorRegistry

from ..config.catalog import Catalog, PathLike, load_catalog
from ..core import noise as noise_rule
from ..core.noise import Noise, json_noise, noise_ended, typed_keys
from ..core.pipeline import NoSink, Pipeline
from ..core.recognize import SpanFacts, ToolCallRecord, agent_at_start, attribute_dict, span_facts
from ..core.runs import AgentRun
from ..core.scoring import CallScore
from ..otel.wiring import build_pipeline
from .recorded import FileProblem, PathArg, ReadStats, RecordedSpans
from .report import Report, ReportBuilder

__all__ = ["CLOCK_SKEW_NS", "DEFAULT_REORDER_SPANS", "Deduplicator", "RecordedClock", "agent_start_reader", "fewer_collections",
           "first_copies", "in_replay_order", "replay_events", "score_traces"]

DEFAULT_REORDER_SPANS = 10_000
DEDUPLICATE_SPANS = 200_000  # span ids remembered to drop repeats (~25 MB)
_END, _START = 0, 1  # at the same instant, spans end before others start
YOUNG_COLLECTION_EVERY = 100_000  # net container allocations between two young-generation collections while scoring
CLOCK_SKEW_NS = 1_000_000  # how much later than its parent a child may be recorded to end (millisecond start times)
_NO_ATTRIBUTES: Mapping[str, Any] = {}  # a Noise's: it announces no agent
# (time, _END/_START, other time, file order, span, agent, span_facts(span), attribute_dict(span))
_Event = tuple[int, int, int, int, ReadableSpan, "str | None", SpanFacts, Mapping[str, Any]]


def score_traces(
    paths: PathArg | Iterable[PathArg],
    catalog: Catalog | PathLike | None = None,
    *,
    profile: str | None = None,
    environment: str | None = None,
    registry: CollectorRegistry | None = None,
    on_call: Callable[[ToolCallRecord, CallScore], None] | None = None,
    on_run: Callable[[AgentRun], None] | None = None,
    on_problem: Callable[[FileProblem], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_span: Callable[[ReadableSpan], None] | None = None,
    reorder_spans: int = DEFAULT_REORDER_SPANS,
    **options: Any,
) -> Report:
    """Score the spans of recorded OTLP files (or directories of them) against `catalog`.

    `registry` receives the same Prometheus series the live processor exposes; `on_call`
    and `on_run` see every scored call and evaluated run; `on_problem` gets one line per
    file with unreadable input (also in `report.inputs`); `on_progress(bytes_read, total_bytes)` is
    called now and then while the files are read (sizes on disk, compressed as they are); `on_span` sees each span
    once, repeats dropped, before it is scored (what `catalog draft` reads tool definitions from). Other options are those of
    `build_pipeline` (e.g. `run_validator`, `max_open_traces`, `run_ttl_s`).

    Raises `TraceInputError` for paths that do not exist, `CatalogError` for a broken
    catalog and `ValueError` for an unknown profile or environment; bad trace data is
    skipped and counted, never raised.
    """
    loaded = catalog if isinstance(catalog, Catalog) else load_catalog(catalog)
    builder = ReportBuilder(loaded, environment)
    clock = RecordedClock()
    pipeline, metrics = build_pipeline(
        loaded, registry=registry, profile=profile, environment=environment, enrich=False,
        on_call=_both(builder.call, on_call), on_run=_both(builder.run, on_run), sees_starts=False, clock=clock, **options)
    # spans that cannot matter are read only as far as their place in the replay (core/noise.py); `on_span` sees all
    custom = pipeline.state.custom
    noise = (json_noise(typed_keys(custom.tool_name[0] if custom is not None else None))
             if on_span is None and noise_rule.FAST_PATH else None)
    spans = RecordedSpans(paths, on_problem=on_problem, on_progress=on_progress, noise=noise)
    if registry is None:  # no one reads the Prometheus series: the report is built from the callbacks alone
        pipeline.sink = NoSink()
    ended, started, seen = pipeline.ended, pipeline.agent_started, metrics.seen.bump
    is_typed, advance = pipeline.is_typed, clock.advance

    def agent_at(attrs: Mapping[str, Any], span: ReadableSpan) -> str | None:
        return agent_at_start(attrs, span._name, is_typed(attrs))  # (the `name` property is a Python call)

    # Hot: one pass per span and per agent start
    with fewer_collections():
        for event in replay_events(first_copies(spans), agent_at, reorder_spans):
            span, agent, facts = event[4], event[5], event[6]
            if agent is None:
                advance(facts.end_ns)
                seen()
                if type(span) is Noise:
                    noise_ended(pipeline, facts)
                    continue
                if on_span is not None:
                    on_span(span)
                ended(span, event[7], facts)
            else:
                advance(facts.start_ns)
                started(span, agent, facts)
    pipeline.close_all()
    metrics.close()  # its series stay readable in `registry` until another scorer takes it over
    return builder.build(spans.stats)


def first_copies(spans: RecordedSpans) -> Iterator[ReadableSpan]:
    """The recorded spans in file order, repeats dropped (counted in `spans.stats`): what a replay reads."""
    return chain.from_iterable(map(Deduplicator(spans.stats), spans.batches()))


@contextmanager
def fewer_collections(every: int = YOUNG_COLLECTION_EVERY) -> Iterator[None]:
    """The garbage collector's young generation collected every `every` allocations instead of every 700, meanwhile.

    A decoded Collector line is a tree of some 25,000 dicts and lists that lives until its spans are built:
    at the default threshold each line sets off dozens of collections, which move it to the older
    generations and make the full collections walk it, a quarter of the CPU `score` spent. Cycles are
    still collected, only later; the thresholds are put back after (unless someone changed them meanwhile).
    """
    before = gc.get_threshold()
    if not 0 < before[0] < every:  # 0: collection is off
        yield
        return
    gc.set_threshold(every, *before[1:])
    try:
        yield
    finally:
        if gc.get_threshold()[0] == every:
            gc.set_threshold(*before)


def in_replay_order(spans: Iterable[ReadableSpan], agent_of: Callable[[ReadableSpan], str | None],
                    window: int = DEFAULT_REORDER_SPANS) -> Iterator[tuple[ReadableSpan, str | None]]:
    """What a live processor saw, in time order: `(span, None)` when a span ended, `(span, agent)` when an
    agent span (`agent_of(span)` is its name) started. Sorted within a window of `window` such events.

    At one instant, spans end before others start; of spans ending together, the one that
    started later (a child) ends first; of agents starting together, the one that ends later
    (the parent) starts first; of spans that started and ended together (a coarse clock, or
    times cut to microseconds by `ReadableSpan.to_json`), a span starts after its parent and
    ends before it. A span also ends after its children recorded to end up to `CLOCK_SKEW_NS`
    after it: a child ends before its parent in the app, but a clock that cuts start times to
    the millisecond (the OTel JS SDK's, under the Vercel AI SDK) can write it ending just after.
    `window=0` keeps file order (and replays no starts).
    """
    if window <= 0:
        return ((span, None) for span in spans)
    # an AgentStartReader is handed the attributes replay_events has read already
    at = agent_of.at if type(agent_of) is AgentStartReader else lambda attrs, span: agent_of(span)
    return map(_SPAN_AND_AGENT, replay_events(spans, at, window))


_SPAN_AND_AGENT = itemgetter(4, 5)


def replay_events(spans: Iterable[ReadableSpan], agent_at: Callable[[Mapping[str, Any], ReadableSpan], str | None],
                  window: int = DEFAULT_REORDER_SPANS) -> Iterator[_Event]:
    """`in_replay_order`'s events as they are kept: `(time, _END or _START, other time, file order, span, agent,
    its SpanFacts, its attribute_dict)`, what `score` hands on to the pipeline without reading them again;
    `agent_at(attrs, span)` names the agent a span announces at its start."""
    heap: list[_Event] = []
    push, pop = heapq.heappush, heapq.heappop
    # (trace id, span id) -> (end, -start) of its children whose end is still to replay: a span ending
    # within CLOCK_SKEW_NS before one of them is put back after it
    waiting: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def done(event: _Event) -> None:
        facts = event[6]
        if facts[2] is not None:
            siblings = waiting.get(below := (facts[0], facts[2]))
            if siblings is not None:
                siblings.remove((event[0], event[2]))
                if not siblings:
                    del waiting[below]

    def put_back(event: _Event) -> bool:
        """Whether a span's end waits for a child recorded to end up to CLOCK_SKEW_NS later (then it is pushed
        back to end together with that child, and `_nested_order` ends the child first)."""
        time, _, other, seq, span, _, facts, attrs = event
        trace_id, span_id, parent_id = facts[0], facts[1], facts[2]
        children = waiting.get((trace_id, span_id))
        if not children:
            return False
        last = max((key for key in children if key[0] <= time + CLOCK_SKEW_NS), default=None)
        if last is None or last <= (time, other):
            return False
        done(event)
        if parent_id is not None:
            waiting.setdefault((trace_id, parent_id), []).append(last)
        push(heap, (last[0], _END, last[1], seq, span, None, facts, attrs))
        return True

    def tied(event: _Event) -> Iterator[_Event]:
        """`event` and the events held of spans that started and ended at the same instants."""
        together = [event]
        while heap and heap[0][0] == event[0] and heap[0][1] == event[1] and heap[0][2] == event[2]:
            together.append(pop(heap))
        for event in _nested_order(together, parents_first=event[1] == _START):
            if event[1] == _END:
                if waiting and put_back(event):
                    continue
                done(event)
            yield event

    # Hot: one pass of this loop per span, so the ids, times and attributes are read once and carried in the
    # events, and the common event (no other at its instant, no child still to end) is released inline.
    items, exhausted = enumerate(spans), window <= 0
    while True:
        for seq, span in items:
            if type(span) is Noise:  # a span that cannot matter (core/noise.py): its own SpanFacts, no attributes
                facts, attrs = span, _NO_ATTRIBUTES
            else:
                facts = span_facts(span)
                attrs = getattr(span, "_attributes", None)
                if type(attrs) is not dict:
                    attrs = attribute_dict(span)
            end, start = facts[5], facts[4]
            end = end if type(end) is int else 0
            start = start if type(start) is int else 0
            if exhausted:  # file order
                yield (end, _END, -start, seq, span, None, facts, attrs)
                continue
            push(heap, (end, _END, -start, seq, span, None, facts, attrs))
            if facts[2] is not None:
                key = (facts[0], facts[2])
                siblings = waiting.get(key)
                if siblings is None:
                    waiting[key] = [(end, -start)]
                else:
                    siblings.append((end, -start))
            agent = agent_at(attrs, span) if attrs is not _NO_ATTRIBUTES else None
            if agent is not None:
                push(heap, (start, _START, -end, seq, span, agent, facts, attrs))
            if len(heap) > window:
                break
        else:
            if exhausted:
                return
            exhausted, window = True, 0  # the input is read: release everything
        while len(heap) > window:
            event = pop(heap)
            if heap and heap[0][0] == event[0] and heap[0][1] == event[1] and heap[0][2] == event[2]:
                yield from tied(event)
                continue
            if event[1] == _END:
                if waiting and put_back(event):
                    continue
                done(event)
            yield event
        if exhausted:
            return


def _nested_order(tied: list[_Event], parents_first: bool) -> list[_Event]:
    """Events of spans that started and ended at the same instants, in file order except that a span ends before
    its parent and starts after it: an agent span written first must not close its run before its calls, nor
    its parent's start make the parent look like the innermost agent."""
    by_id = {(event[6][0], event[6][1]): event[6][2] for event in tied}  # (trace id, span id) -> parent id, of SpanFacts

    def depth(event: _Event) -> int:
        found, trace_id, parent = 0, event[6][0], event[6][2]
        while parent is not None and (trace_id, parent) in by_id and found < len(tied):  # ids may loop
            found += 1
            parent = by_id[(trace_id, parent)]
        return found

    return sorted(tied, key=depth, reverse=not parents_first)  # stable: file order among equals


class Deduplicator:
    """Batches of spans less repeats of a (trace id, span id) among the last `memory` spans (counted in `stats`).

    The same file given twice, or overlapping exports, would otherwise count calls twice,
    and the second copy of a run's root would find its run already closed.
    """

    def __init__(self, stats: ReadStats, memory: int = DEDUPLICATE_SPANS) -> None:
        self.stats, self.memory = stats, memory
        self.seen: set[int] = set()
        self.order: deque[int] = deque()  # not a dict popped from the front: its iteration would crawl over the holes

    def __call__(self, spans: list[ReadableSpan]) -> list[ReadableSpan]:
        seen, order, memory, fresh = self.seen, self.order, self.memory, []
        for span in spans:
            if type(span) is Noise:
                key = span[0] << 64 | span[1]
            else:
                # the SDK's fields, not its properties (Python calls): a SpanContext is a tuple (trace id, span id, ...)
                context = span._context if type(span) is ReadableSpan else span.context
                key = (context[0] << 64 | context[1]) if type(context) is SpanContext else (context.trace_id << 64 | context.span_id)
            if key in seen:
                self.stats.spans_duplicate += 1
                continue
            seen.add(key)
            order.append(key)
            if len(order) > memory:
                seen.discard(order.popleft())
            fresh.append(span)
        return fresh


class RecordedClock:
    """The run tracker's clock during a replay: the latest recorded time seen, in seconds (never goes back)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, time_ns: int | None) -> None:
        if type(time_ns) is int and time_ns / 1e9 > self.now:
            self.now = time_ns / 1e9

    def __call__(self) -> float:
        return self.now


def agent_start_reader(pipeline: Pipeline) -> AgentStartReader:
    """The agent name an agent span announces when it starts, by the processor's `on_start` rule (`agent_at_start`)."""
    return AgentStartReader(pipeline.is_typed)


class AgentStartReader:
    """`agent_start_reader`'s reader: called with a span, or (`at`) with the attributes already read from it."""

    __slots__ = ("_is_typed",)

    def __init__(self, is_typed: Callable[[Mapping[str, Any]], bool]) -> None:
        self._is_typed = is_typed

    def __call__(self, span: ReadableSpan) -> str | None:
        return self.at(attribute_dict(span), span)

    def at(self, attrs: Mapping[str, Any], span: ReadableSpan) -> str | None:
        return agent_at_start(attrs, span.name, self._is_typed(attrs))


def _both(first: Callable[..., None], second: Callable[..., None] | None) -> Callable[..., None]:
    """The report's callback, then the caller's (whose exceptions the pipeline counts, as live)."""
    if second is None:
        return first

    def both(*args: Any) -> None:
        first(*args)
        second(*args)

    return both

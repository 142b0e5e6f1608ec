"""Agent runs assembled from spans as they end: the subtree of an agent span, or of a trace's local root.

A run opens when its agent span starts (GenAI `invoke_agent`, OpenInference `AGENT`,
OpenLLMetry `agent`/`workflow`) or, for traces without one, when its first tool or LLM call
ends; it closes when its root span ends. A call belongs to the innermost agent run open in
its trace when it ends. Some libraries (OpenInference for LangChain) only mark the agent
span when it *ends*: calls that cannot be routed before then wait in their trace and are
given to that agent by time containment when it ends.

Memory is bounded: at most `max_open_traces` traces (oldest closed early), at most
`max_calls_per_run` calls kept per run (the rest only counted), and traces whose root never
ends close `ttl_s` after their last span (checked as new traces open and by `expire()`, which
the adapters call periodically). Every early close is counted by reason. A call that ends after
its trace's root did (inside the root's time) is *late*: `late()` gives the agent of that root's
run, remembered for the last `RECENT_TRACES` traces (also a root that ended before any call of its
trace), and the call joins no run. A child *recorded* to end just after its root (a clock that cuts
start times to the millisecond) is put back before it by the replay order (`offline.score`).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry.trace import StatusCode

from .prices import PRICE_SOURCES
from .recognize import MAX_DURATION_NS, LLMCall, SpanFacts, ToolCallRecord, attribute_dict, name_from_span_name

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from .context_cost import ContextCost
    from .scoring import CallScore

AGENT_RUN, TRACE_RUN = "agent", "trace"
RECENT_TRACES = 4_096  # traces whose root ended, remembered for the calls that end after it


@dataclass(slots=True)  # built once per run: a frozen dataclass costs 3x as much to build
class RunEvaluation:
    completed: bool
    completion_reason: str
    tool_accuracy: float | None  # mean of argument validity, order accuracy and call precision, where known
    argument_validity: float | None  # share of calls whose arguments pass the tool's JSON Schema
    order_accuracy: float | None  # expected tools called in order (deepeval's ordered correctness)
    call_precision: float | None  # share of calls neither spurious nor redundant
    invalid_calls: tuple[str, ...]  # "tool: why" for calls with invalid arguments
    spurious_calls: tuple[str, ...]  # tools outside the route's expected/acceptable/optimal set
    redundant_calls: tuple[str, ...]  # repeats of the same tool with the same arguments
    over_budget: bool  # more calls than the route's max_calls
    tool_correctness: float | None  # against the route's expected_tools, deepeval's default semantics
    tool_cost_usd: float
    llm_cost_usd: float
    unpriced_models: tuple[str, ...]  # models of the LLM calls no source prices (catalog, span, genai-prices): not guessed
    duration_s: float | None
    hallucination_free: float | None
    health: float  # 0-100
    arguments_not_captured: tuple[str, ...] = ()  # calls whose spans carry no arguments: left out of argument validity
    loops: tuple[str, ...] = ()  # one tool name per loop: LOOP_CALLS+ consecutive calls of it with the same captured arguments
    llm_price_sources: tuple[str, ...] = ()  # per LLM call, where its price came from (core.prices.PRICE_SOURCES)
    context: ContextCost | None = None  # what each tool call's result cost the later model calls (core.context_cost);
    # None: the run made no model call

    @property
    def outcome(self) -> str:
        return "completed" if self.completed else "failed"

    @property
    def cost_usd(self) -> float:
        return self.tool_cost_usd + self.llm_cost_usd

    @property
    def llm_priced_by(self) -> tuple[str, ...]:
        """The sources that priced the run's LLM calls, each once, in the order they are tried (`unpriced` last)."""
        return tuple(s for s in PRICE_SOURCES if s in self.llm_price_sources)


@dataclass
class AgentRun:
    """A finished agent run: its root, tool calls with their scores, LLM calls, status and timing.

    >>> processor = AgentEvalSpanProcessor(on_run=lambda run: print(run.agent, run.evaluation.outcome))
    """

    trace_id: int
    root_span_id: int
    root_name: str
    agent: str | None
    kind: str  # "agent" (rooted at an agent span) or "trace" (at a local root span)
    start_ns: int | None
    end_ns: int | None
    status: str  # "ok" or "error"
    error: str | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    scores: list[CallScore] = field(default_factory=list)
    llm_calls: list[LLMCall] = field(default_factory=list)
    root_attributes: Mapping[str, Any] = field(default_factory=dict)
    calls_dropped: int = 0  # calls past max_calls_per_run: counted, not kept
    closed_by: str = "end"  # "end", or why it was closed early: "ttl", "capacity", "shutdown", "trace_end" (its
    # agent span had not ended when the trace's root did)
    task: str = ""
    expected_tools: tuple[str, ...] = ()  # from the task route, for tool correctness and test cases
    evaluation: RunEvaluation | None = None

    @property
    def duration_s(self) -> float | None:
        start, end = self.start_ns, self.end_ns
        if type(start) is not int or type(end) is not int or not 0 <= end - start < MAX_DURATION_NS:
            return None
        return (end - start) / 1e9


class Pending(NamedTuple):
    """A tool span held back until its agent is known."""

    span: ReadableSpan
    attrs: Mapping[str, Any]
    record: ToolCallRecord


class ClosedRun(NamedTuple):
    """What the processor gets when a run closes: the run, calls still to score, and the root span."""

    run: AgentRun
    pending: list[Pending]
    root: ReadableSpan | None


class _OpenRun:
    __slots__ = ("span_id", "name", "agent", "start_ns", "calls", "scores", "llm", "dropped", "nested")

    def __init__(self, span_id: int, name: str, agent: str | None, start_ns: int | None) -> None:
        self.span_id, self.name, self.agent, self.start_ns = span_id, name, agent, start_ns
        self.calls: list[ToolCallRecord] = []
        self.scores: list[CallScore] = []
        self.llm: list[LLMCall] = []
        self.dropped = 0
        self.nested = 0  # agent runs that closed inside this one


class _OpenTrace:
    __slots__ = ("agents", "root_run", "pending", "opened", "last", "closed_agents", "tool_parents", "llm_parents",
                 "llm_tokenless", "failed_children", "workflow_agent")

    def __init__(self, opened: float) -> None:
        self.agents: list[_OpenRun] = []  # open agent runs, outermost first
        self.root_run: _OpenRun | None = None  # calls outside any agent run
        self.pending: list[Pending] = []
        self.opened = opened  # when it opened, or was last found active by _expire: the order of RunTracker._traces
        self.last = opened  # when it last got a span: the TTL counts from here
        self.closed_agents: list[tuple[int, int]] = []  # (start, end) of agent spans ended: an agent seen only
        # at its end (no start hint) wraps those inside its time range
        self.tool_parents: dict[int, list[str]] = {}  # parent span id -> calls under it that are not under their agent
        self.llm_parents: set[int] = set()  # spans holding a model call counted with its tokens: not counted again
        self.llm_tokenless: dict[int, tuple[_OpenRun, int]] = {}  # span id -> (run, index in run.llm) of a model call
        # under it counted without tokens: the span, if it is the same call with tokens, fills them in
        self.failed_children: dict[int, str] = {}  # span id -> error type of a child span that ended with status ERROR
        self.workflow_agent: str | None = None  # the agent a workflow step named last (llama-index), outside agent spans

    def innermost(self) -> _OpenRun:
        if self.agents:
            return self.agents[-1]
        if self.root_run is None:
            self.root_run = _OpenRun(0, "", None, None)
        return self.root_run


class RunTracker:
    """Open runs per trace; thread-safe, bounded, and free of scoring (the processor scores)."""

    def __init__(self, *, max_open_traces: int = 10_000, max_calls_per_run: int = 1_000, ttl_s: float = 600.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._traces: dict[int, _OpenTrace] = {}
        self._agent_spans: dict[int, int] = {}  # open agent span id -> trace id
        self.recent_roots: dict[int, tuple[int, int, str | None]] = {}  # trace id -> (root start, root end, agent of
        # the root's run) of the last RECENT_TRACES traces whose root ended (read-only outside: see `late`)
        self._max_traces = max_open_traces
        self._max_calls = max_calls_per_run
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self.early_closed: list[ClosedRun] = []  # runs the bounds closed, waiting for drain_closed_early()
        self.closed_early = Counter()  # reason -> runs closed before their root ended

    def __len__(self) -> int:
        return len(self._traces)

    def reset_after_fork(self) -> None:
        """In a forked child: the parent's open runs are the parent's; start empty with a fresh lock."""
        self._lock = threading.Lock()
        self._traces, self._agent_spans, self.early_closed, self.recent_roots = {}, {}, [], {}

    # -- as spans start and end -----------------------------------------------------

    def agent_started(self, trace_id: int, span_id: int, name: str, start_ns: int | None) -> None:
        with self._lock:
            self._trace(trace_id).agents.append(_OpenRun(span_id, name, name, start_ns))
            self._agent_spans[span_id] = trace_id

    def agent_of(self, trace_id: int) -> str | None:
        """The innermost open agent of the trace, else the agent its workflow named last (lock-free read)."""
        trace = self._traces.get(trace_id)
        if trace is None:
            return None
        try:
            return trace.agents[-1].agent if trace.agents else trace.workflow_agent
        except IndexError:  # emptied by another thread meanwhile
            return None

    def workflow_agent(self, trace_id: int, name: str) -> None:
        """A workflow step named the agent it runs (llama-index's `setup_agent`): the calls after it outside any agent
        span are that agent's, and the trace's run is named after the first such agent."""
        with self._lock:
            trace = self._trace(trace_id)
            trace.workflow_agent = name
            loose = trace.innermost() if not trace.agents else None
            if loose is not None and loose.agent is None:
                loose.agent = name

    def late(self, trace_id: int, start_ns: int | None) -> tuple[int, int, str | None] | None:
        """For a call that started inside a root that has ended (its trace no longer open): (root start, root end,
        agent of the root's run), else None. Its run was evaluated: the call joins none (lock-free read)."""
        if trace_id in self._traces:
            return None
        root = self.recent_roots.get(trace_id)
        return root if root is not None and type(start_ns) is int and root[0] <= start_ns <= root[1] else None

    def add_call(self, trace_id: int, record: ToolCallRecord, score: CallScore) -> None:
        with self._lock:
            trace = self._trace(trace_id)
            run = trace.innermost()
            if len(run.calls) < self._max_calls:
                run.calls.append(record)
                run.scores.append(score)
            else:
                run.dropped += 1
            self._note_parent(trace, run, record)

    def add_llm(self, trace_id: int, call: LLMCall, parent_id: int | None = None) -> bool:
        """Count a model call in its run; False when it is no new call: its span holds a model call already counted
        (one call on nested spans: google-adk `call_llm` > `generate_content` > `openai.chat`). The usage is counted
        once, at the innermost span that carries readable counts: a call counted without tokens takes them from the
        first span above it that has them (`_with_tokens_of`). A call that ended after its root (`late`) is the
        caller's: that run was evaluated, and a new one would hold it for the TTL."""
        counted = bool(call.input_tokens or call.output_tokens)
        with self._lock:
            trace = self._trace(trace_id)
            if call.span_id in trace.llm_parents:
                trace.llm_parents.discard(call.span_id)
                if parent_id is not None:
                    trace.llm_parents.add(parent_id)  # and the span above it, when that is the same call too
                return False
            held = trace.llm_tokenless.pop(call.span_id, None) if trace.llm_tokenless else None
            if held is not None:  # a span below this one counted this call without tokens
                run, index = held
                if counted:
                    run.llm[index] = _with_tokens_of(run.llm[index], call)
                    if parent_id is not None:
                        trace.llm_parents.add(parent_id)
                elif parent_id is not None:
                    trace.llm_tokenless[parent_id] = held
                return False
            run = trace.innermost()
            index = len(run.llm)
            if index < self._max_calls:
                run.llm.append(call)
            else:
                run.dropped += 1
            if parent_id is not None:
                if counted:
                    if len(trace.llm_parents) < self._max_calls:
                        trace.llm_parents.add(parent_id)
                elif index < self._max_calls and len(trace.llm_tokenless) < self._max_calls:
                    trace.llm_tokenless[parent_id] = (run, index)
            return True

    def llm_inside(self, trace_id: int, span_id: int, parent_id: int | None) -> None:
        """A span that is no model call ended: if it holds one already counted, so does its parent (a model call's
        spans may nest through others: google-adk `call_llm` > `generate_content` > an instrumented client's span)."""
        trace = self._traces.get(trace_id)
        if trace is None or (span_id not in trace.llm_parents and span_id not in trace.llm_tokenless):  # lock-free
            return
        with self._lock:
            if span_id in trace.llm_parents:
                trace.llm_parents.discard(span_id)
                if parent_id is not None:
                    trace.llm_parents.add(parent_id)
            held = trace.llm_tokenless.pop(span_id, None)
            if held is not None and parent_id is not None:
                trace.llm_tokenless[parent_id] = held

    def child_failed(self, trace_id: int, parent_id: int, error_type: str, start_ns: int | None) -> None:
        """A span ended with status ERROR under span `parent_id`: a tool span left UNSET above it failed (`child_error`)."""
        if trace_id in self.recent_roots and self.late(trace_id, start_ns) is not None:
            return  # it started inside a root that has ended: no tool span above it is still to come in a run
        with self._lock:
            trace = self._trace(trace_id)
            if len(trace.failed_children) < self._max_calls:
                trace.failed_children.setdefault(parent_id, error_type)

    def child_error(self, trace_id: int, span_id: int) -> str | None:
        """The error type of a child of span `span_id` that ended with status ERROR, or None (asked once, as it ends)."""
        trace = self._traces.get(trace_id)
        if trace is None or not trace.failed_children:
            return None
        with self._lock:
            return trace.failed_children.pop(span_id, None)

    def calls_under(self, trace_id: int, span_id: int) -> list[str]:
        """Tool names of the calls recorded under span `span_id` that do not sit right under their
        agent (asked once, when that span ends: an MCP `tools/call` span inside the framework's own
        tool span is one call)."""
        trace = self._traces.get(trace_id)
        if trace is None or not trace.tool_parents:  # every call so far sat right under its agent
            return []
        with self._lock:
            return trace.tool_parents.pop(span_id, [])

    def defer(self, trace_id: int, pending: Pending) -> bool:
        """Hold a tool span until its agent is known; False when the trace holds too many already."""
        with self._lock:
            trace = self._trace(trace_id)
            if len(trace.pending) >= self._max_calls:
                return False
            trace.pending.append(pending)
            self._note_parent(trace, trace.innermost(), pending.record)
            return True

    def span_ended(self, span: ReadableSpan, facts: SpanFacts, agent_at_end: str | None) -> list[ClosedRun]:
        """Close the runs this span's end completes: its agent run, and its trace's if it is the local root."""
        trace_id, span_id, is_root = facts.trace_id, facts.span_id, facts.is_root
        if trace_id not in self._traces:
            if is_root:  # no call of its trace has ended yet: one that ends after it is late, not a run of its own
                with self._lock:
                    self._remember(trace_id, facts, agent_at_end)
            return []
        if span_id not in self._agent_spans and agent_at_end is None and not is_root:
            return []
        closed: list[ClosedRun] = []
        with self._lock:
            trace = self._traces.get(trace_id)
            if trace is None:
                return []
            if self._agent_spans.pop(span_id, None) is not None:
                for run in reversed(trace.agents):  # the innermost, as a rule
                    if run.span_id == span_id:
                        trace.agents.remove(run)
                        closed.append(self._close_agent(trace, run, span, facts, agent_at_end))
                        break
            elif agent_at_end is not None:  # an agent only recognisable at its end
                run = self._adopt(trace, span, facts, agent_at_end)
                closed.append(self._close_agent(trace, run, span, facts, agent_at_end))
            if is_root:
                del self._traces[trace_id]
                closed.extend(self._close_trace(trace, span, facts, "end"))
                agent = agent_at_end
                for item in closed:  # the root's own run: its agent run, else its trace run
                    if item is not None and item.run.root_span_id == span_id:
                        agent = item.run.agent
                        break
                self._remember(trace_id, facts, agent)
        return [c for c in closed if c is not None]

    @property
    def tracked(self) -> dict[int, Any]:
        """The traces with open runs (read-only view for the processor's bookkeeping)."""
        return self._traces

    def drain_closed_early(self) -> list[ClosedRun]:
        """Runs closed by the bounds (TTL, capacity) since the last call; their pending calls need scoring."""
        if not self.early_closed:
            return []
        with self._lock:
            out, self.early_closed = self.early_closed, []
        return out

    def expire(self) -> bool:
        """Close the traces idle for `ttl_s` (a periodic hook: in a quiet process no new trace comes to do it);
        True when runs were closed (`drain_closed_early()` has them). Cheap when none is due."""
        if not self._traces:
            return False
        with self._lock:
            now = self._clock()
            oldest = next(iter(self._traces.values()), None)
            if oldest is not None and now - oldest.opened >= self._ttl_s:
                self._expire(now)
        return bool(self.early_closed)

    def close_all(self, reason: str = "shutdown") -> list[ClosedRun]:
        with self._lock:
            traces, self._traces = list(self._traces.values()), {}
            self._agent_spans.clear()
            out = [c for t in traces for c in self._close_trace(t, None, None, reason)]
            if out:
                self.closed_early[reason] += len(out)
            out, self.early_closed = self.early_closed + out, []
        return out

    @property
    def held_back(self) -> int:
        """Tool spans waiting for their agent, over all open traces."""
        return sum(len(t.pending) for t in list(self._traces.values()))

    # -- internals (lock held) -------------------------------------------------------

    def _note_parent(self, trace: _OpenTrace, run: _OpenRun, record: ToolCallRecord) -> None:
        """Remember a call whose parent is not its agent span: the parent may be a tool span of the same call."""
        parent = record.parent_span_id
        if parent is not None and parent != run.span_id and len(trace.tool_parents) < self._max_calls:
            trace.tool_parents.setdefault(parent, []).append(record.name)

    def _trace(self, trace_id: int) -> _OpenTrace:
        trace = self._traces.get(trace_id)
        now = self._clock()
        if trace is None:
            self._expire(now)
            if len(self._traces) >= self._max_traces:
                oldest_id = next(iter(self._traces))
                self._evict(oldest_id, "capacity")
            trace = self._traces[trace_id] = _OpenTrace(now)
        else:
            trace.last = now
        return trace

    def _expire(self, now: float) -> None:
        """Close traces with no span for `ttl_s`. Those opened (or last checked) that long ago but active since
        move to the end, as if opened at their last span: each is looked at once per TTL, not per call."""
        traces, ttl, due = self._traces, self._ttl_s, []
        for trace_id, trace in traces.items():  # insertion order: oldest first
            if now - trace.opened < ttl:
                break
            due.append(trace_id)
        for trace_id in due:
            trace = traces[trace_id]
            if now - trace.last < ttl:  # still active: checked again a TTL after its last span
                del traces[trace_id]
                trace.opened = trace.last
                traces[trace_id] = trace
            else:
                self._evict(trace_id, "ttl")

    def _remember(self, trace_id: int, facts: SpanFacts, agent: str | None) -> None:
        """A trace's root ended: what a call ending after it needs (`late`), for the last RECENT_TRACES traces."""
        recent, start, end = self.recent_roots, facts.start_ns, facts.end_ns
        if type(start) is int and type(end) is int:
            recent[trace_id] = (start, end, agent)
            if len(recent) > RECENT_TRACES:  # forget the older half
                self.recent_roots = dict(list(recent.items())[RECENT_TRACES // 2:])

    def _evict(self, trace_id: int, reason: str) -> None:
        trace = self._traces.pop(trace_id)
        for run in trace.agents:
            self._agent_spans.pop(run.span_id, None)
        closed = self._close_trace(trace, None, None, reason)
        self.closed_early[reason] += len(closed) or 1
        self.early_closed.extend(closed)

    def _adopt(self, trace: _OpenTrace, span: ReadableSpan, facts: SpanFacts, agent: str) -> _OpenRun:
        """A run for an agent seen only at its end: the trace's loose calls inside its time range."""
        start, end = _ns(facts.start_ns), _ns(facts.end_ns)
        run = _OpenRun(facts.span_id, span.name, agent, facts.start_ns)
        run.nested = sum(1 for s, e in trace.closed_agents if start <= s and e <= end)
        self._take_loose(trace, run, start, end)
        return run

    @staticmethod
    def _take_loose(trace: _OpenTrace, run: _OpenRun, start: int, end: int) -> None:
        """Move the trace's loose calls inside [start, end] into `run`: they ended before the agent was known
        (an agent seen only at its end, or announced after them: a batch that held a trace's children and not its root)."""
        loose = trace.root_run
        if loose is None or not (loose.calls or loose.llm):
            return
        inside = lambda rec: rec.start_ns is not None and start <= rec.start_ns and (rec.end_ns or 0) <= end  # noqa: E731
        pairs = list(zip(loose.calls, loose.scores))
        run.calls += [rec for rec, _ in pairs if inside(rec)]
        run.scores += [score for rec, score in pairs if inside(rec)]
        loose.calls = [rec for rec, _ in pairs if not inside(rec)]
        loose.scores = [score for rec, score in pairs if not inside(rec)]
        run.llm += [call for call in loose.llm if type(call.start_ns) is int and start <= call.start_ns <= end]
        loose.llm = [call for call in loose.llm if not (type(call.start_ns) is int and start <= call.start_ns <= end)]

    def _close_agent(self, trace: _OpenTrace, run: _OpenRun, span: ReadableSpan, facts: SpanFacts,
                     agent_at_end: str | None) -> ClosedRun | None:
        if trace.agents:
            trace.agents[-1].nested += 1
        elif trace.root_run is not None:
            trace.root_run.nested += 1
        start, end = _ns(facts.start_ns), _ns(facts.end_ns)
        if len(trace.closed_agents) < self._max_calls:
            trace.closed_agents.append((start, end))
        self._take_loose(trace, run, start, end)
        mine = ([p for p in trace.pending if p.record.start_ns is not None and start <= p.record.start_ns
                 and (p.record.end_ns or 0) <= end] if trace.pending else [])
        if mine:
            taken = {id(p) for p in mine}
            trace.pending = [p for p in trace.pending if id(p) not in taken]
        if agent_at_end and run.agent is None:
            run.agent = agent_at_end
        if not run.calls and not run.llm and not mine and run.nested:  # a wrapper around other agent runs
            return None
        return ClosedRun(_finish(run, span, facts, AGENT_RUN, "end"), mine, span)

    def _close_trace(self, trace: _OpenTrace, root: ReadableSpan | None, facts: SpanFacts | None,
                     reason: str) -> list[ClosedRun]:
        closed = []
        unended = "trace_end" if reason == "end" else reason
        for run in reversed(trace.agents):  # agents whose spans never ended
            closed.append(ClosedRun(_finish(run, None, None, AGENT_RUN, unended), [], None))
        trace.agents = []
        loose, pending = trace.root_run, trace.pending
        if loose is not None or pending:
            loose = loose or _OpenRun(0, "", None, None)
            if root is not None and facts is not None:
                loose.span_id, loose.name, loose.start_ns = facts.span_id, root.name, facts.start_ns
            if loose.calls or loose.llm or pending:
                closed.append(ClosedRun(_finish(loose, root, facts, TRACE_RUN, reason), pending, root))
        return closed


def _ns(value: Any) -> int:
    """A span time as an int for comparisons (0 when the span holds something else)."""
    return value if type(value) is int else 0


def _finish(run: _OpenRun, span: ReadableSpan | None, facts: SpanFacts | None, kind: str, closed_by: str) -> AgentRun:
    status, error, end_ns, trace_id, attrs = "ok", None, None, 0, {}
    if span is not None and facts is not None:
        trace_id, end_ns = facts.trace_id, facts.end_ns
        attrs = MappingProxyType(attribute_dict(span))  # read-only, like span.attributes, at a dict's speed
        if span.status.status_code is StatusCode.ERROR:
            status, error = "error", span.status.description or "error"
    elif run.calls:
        trace_id = run.calls[0].trace_id
    agent = run.agent or next((rec.agent for rec in run.calls if rec.agent), None)
    if agent is None and kind == TRACE_RUN:  # a root that names no agent: llama-index's `FunctionAgent.run` CHAIN
        agent = name_from_span_name(run.name, suffixed=True)
    return AgentRun(  # positional, in field order: keywords cost twice as much, once per run
        trace_id, run.span_id, run.name, agent, kind, run.start_ns, end_ns, status, error, run.calls, run.scores, run.llm,
        attrs, run.dropped, closed_by,
    )


def _with_tokens_of(inner: LLMCall, outer: LLMCall) -> LLMCall:
    """One model call seen on two nested spans: the tokens of the outer one (the inner span had none), the rest of the
    inner one where it has it (its model and provider name the client's call more closely than a framework's span)."""
    return outer._replace(
        model=inner.model or outer.model, span_id=inner.span_id or outer.span_id,
        input_messages=inner.input_messages if inner.input_messages is not None else outer.input_messages,
        output_messages=inner.output_messages if inner.output_messages is not None else outer.output_messages,
        start_ns=inner.start_ns if inner.start_ns is not None else outer.start_ns, provider=inner.provider or outer.provider,
        reported_cost_usd=inner.reported_cost_usd if inner.reported_cost_usd is not None else outer.reported_cost_usd)

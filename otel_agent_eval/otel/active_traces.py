"""The processor's side of core/noise.py's rule 5, kept on the app's threads: which traces have spans handed off to
the processor's thread, and which spans matter because a span that mattered ended under them.

A noise span asks one question of it, with no lock and no look-up of its trace: is my span id `held`? `held` is
the marks of every trace at once (a span id is 64 random bits: a mark of another trace errs only towards
"matters"), so only a span the rule cannot rule out by itself looks its trace up (`__contains__`). Spans that
matter are rare beside noise; they pay the bookkeeping.

Threads: marks are added on any app thread, traces are dropped on the processor's thread, all without a lock.
Every step is one C-level operation on a dict or a set of ints (atomic under the GIL), and their order keeps the
marks right: a trace's set is made with `setdefault` (two threads marking a new trace share one set), a mark goes
into its trace's set before it goes into `held`, and `held` only loses a mark that no kept trace's set holds once
it was seen in `held` (`sweep`, amortised over the marks made since the last one). A mark of a trace dropped
meanwhile stays in `held` until then: it errs towards "matters", and the span's trace, looked up next, is gone.
`tests/test_active_traces.py` runs it on many threads.
"""
from __future__ import annotations

from collections.abc import Collection

SWEEP_AT = 4_096  # marks in `held` beyond those of the kept traces that start a sweep (and at least twice the last size)


class ActiveTraces:
    """Traces with spans handed off -> the ids of their spans that matter by rule 5; `held`: all those ids."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # traces kept beyond this: the oldest half the core no longer tracks is forgotten
        self.reset()

    def reset(self) -> None:
        self.traces: dict[int, set[int]] = {}
        self.held: set[int] = set()
        self._sweep_at = SWEEP_AT

    def __len__(self) -> int:
        return len(self.traces)

    def __contains__(self, trace_id: int) -> bool:
        return trace_id in self.traces

    def mark(self, trace_id: int, span_id: int) -> None:
        """A span that matters by rule 5 (the parent of a span handed off, or one that announced a run)."""
        marks = self.traces.get(trace_id)
        if marks is None:
            marks = self.traces.setdefault(trace_id, set())
        marks.add(span_id)
        self.held.add(span_id)

    def enter(self, trace_id: int) -> None:
        """A trace that has a span handed off (a root that matters: no parent to mark)."""
        if trace_id not in self.traces:
            self.traces.setdefault(trace_id, set())

    def done(self, trace_id: int) -> None:
        """On the processor's thread: the trace's local root was processed; its spans pass on at once from now (its
        marks leave `held` at the next sweep: a span id of another trace may be among them)."""
        self.traces.pop(trace_id, None)

    def bound(self, tracked: Collection[int]) -> None:
        """On the processor's thread, after each item: past `limit` traces (roots that never ended here), forget the
        oldest half of those the core no longer tracks; past the sweep size, drop the marks no trace holds."""
        traces = self.traces
        if len(traces) > self.limit:
            for trace_id in [t for t in list(traces)[: len(traces) // 2] if t not in tracked]:
                self.done(trace_id)
        if len(self.held) > self._sweep_at:
            self.sweep()

    def sweep(self) -> None:
        """Drop the marks of `held` that no kept trace holds: those of traces dropped while a mark was landing."""
        found = set(self.held)  # first: a mark added after this copy is not dropped
        kept = set().union(*list(self.traces.values()))
        self.held.difference_update(found - kept)
        self._sweep_at = max(SWEEP_AT + len(kept), 2 * len(self.held))

"""`serve --wal-dir DIR`: each request written to a write-ahead log (`wal.py`) before it is acknowledged, and
replayed by the next process on the same directory, the open runs' state and the metrics' counts included.

The simplest state that rebuilds everything is the requests themselves: the log holds the request bytes as they
came (compressed or not), and a restarted process runs them through the same pipeline again. Three marks say what
a replay needs, each a request number:

- `forwarded`: every request up to it was evaluated and its spans settled with the next hop (the intake and the
  forwarder are first in, first out: a batch is settled once the forwarder has settled every span handed on by the
  end of it). A small progress record says so after each export the forwarder settles (written, not synced: a
  SIGKILL keeps it, the kernel has it; a power cut may lose it, which makes duplicates at the next replay, never
  losses), and each checkpoint again;
- `runs_from`: the first request that a run still open needs (the oldest request of each trace the pipeline
  still tracks);
- `counted`: the metric state in the checkpoint counts every request up to it (and a few after it, admitted out of
  order, listed), and none other. A checkpoint, every CHECKPOINT_EVERY_S, takes that state between two batches
  (`Intake.evaluation`): the counters and histograms (`metrics/carried.py`).

At start the metrics begin from the last checkpoint's state, and the requests from
`min(runs_from, forwarded + 1, counted + 1)` are evaluated again in order. A request up to `forwarded` is not
forwarded again (what it hands on is dropped); a request that the state counts is not counted again (`_CountGate`);
every other is forwarded, or counted, as new. The receivers and /metrics start once the replay is evaluated. So a
crash loses no acknowledged span, the runs open at the crash are evaluated when they close, and every tool call
and run evaluation is counted once: the restarted process's counters are at least what the killed one showed (it
evaluated only logged requests), and a sender's resend of a request the killed process had taken is dropped by the
span-id window. Duplicates at the next hop: the spans of an export the crash interrupted (sent, not known settled),
counted by `agent_eval_serve_wal_replayed_spans_total{forwarded="again"}`, which bounds them. Segments whose
requests are all before the three marks are deleted (`WriteAheadLog.release`), so the log holds what is in flight
plus the open runs' requests, never more than `--wal-max-mib`.

Not replayed exactly: a run the killed process closed by its TTL or the open-run cap, if it closes differently in
the replay (it is then forwarded, and counted, twice, never lost); what cannot be carried in a metric state
(gauges, the sliding-window quantiles, the judge's series) starts again with the process.

    >>> durable = DurableLog(WriteAheadLog(directory), service)
    >>> durable.replay()   # before listening: returns once the replay is evaluated
    >>> seq, why = durable.log(body, content_type, encoding)   # why: None, or the log's refusal
"""
from __future__ import annotations

import logging
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import Any, NamedTuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .payload import PayloadError, read_request
from .wal import DISK_FULL, FAILED, FULL, SLOW, WriteAheadLog

__all__ = ["CHECKPOINT", "PROGRESS", "REQUEST", "Checkpoint", "DurableLog", "WalTotals"]

logger = logging.getLogger(__name__)

REQUEST, CHECKPOINT, PROGRESS = b"R", b"C", b"P"
_REQUEST_HEAD = struct.Struct(">QBB")  # sequence number, content type's length, encoding's length
_CHECKPOINT_V1 = struct.Struct(">QQ")  # forwarded, runs_from (a log of the release before: no metric state)
_CHECKPOINT = struct.Struct(">QQQI")  # forwarded, runs_from, counted, how many requests after it are counted too
_SEQ = struct.Struct(">Q")  # one request number: those counted after `counted`, and a progress record's `forwarded`
CHECKPOINT_EVERY_S = 0.2
STATE_WAIT_S = 0.05  # a checkpoint waits this long for the batch being evaluated (else it keeps the metric state it has)
UNPIN_AT = 0.75  # past this share of --wal-max-mib, forwarded requests of open runs are let go (`_unpin`)
DEDUP_WINDOW_SPANS = 65_536  # span ids remembered to drop a sender's resend of what the log replayed (about 10 MiB)
REPLAY_LIMIT_BYTES = 1 << 31  # a logged request was within --max-request-mib when taken
REPLAY_NOTICE_S = 10.0  # a replay still evaluating says so this often
PREFIX = "agent_eval_serve_wal_"


def request_payload(seq: int, body: bytes, content_type: str, encoding: str) -> bytes:
    ct, enc = content_type.encode()[:255], encoding.encode()[:255]
    return _REQUEST_HEAD.pack(seq, len(ct), len(enc)) + ct + enc + body


def read_request_payload(payload: bytes) -> tuple[int, bytes, str, str]:
    seq, ct_len, enc_len = _REQUEST_HEAD.unpack_from(payload)
    at = _REQUEST_HEAD.size
    content_type = payload[at:at + ct_len].decode(errors="replace")
    encoding = payload[at + ct_len:at + ct_len + enc_len].decode(errors="replace")
    return seq, payload[at + ct_len + enc_len:], content_type, encoding


class Checkpoint(NamedTuple):
    """What a checkpoint record says (module docstring): how far forwarding and counting got, what open runs need,
    and the metric state that counting reached (`metrics/carried.py`; empty in a log of the release before)."""

    forwarded: int
    runs_from: int
    counted: int
    counted_after: frozenset[int]
    state: bytes

    def payload(self) -> bytes:
        after = sorted(self.counted_after)
        return (_CHECKPOINT.pack(self.forwarded, self.runs_from, self.counted, len(after))
                + b"".join(_SEQ.pack(seq) for seq in after) + self.state)

    @classmethod
    def read(cls, payload: bytes) -> Checkpoint | None:
        """None for a payload of no known layout."""
        if len(payload) == _CHECKPOINT_V1.size:  # its process did not count the requests up to `forwarded` again
            forwarded, runs_from = _CHECKPOINT_V1.unpack(payload)
            return cls(forwarded, runs_from, forwarded, frozenset(), b"")
        if len(payload) < _CHECKPOINT.size:
            return None
        forwarded, runs_from, counted, n = _CHECKPOINT.unpack_from(payload)
        at = _CHECKPOINT.size + n * _SEQ.size
        if len(payload) < at:
            return None
        after = frozenset(_SEQ.unpack_from(payload, _CHECKPOINT.size + i * _SEQ.size)[0] for i in range(n))
        return cls(forwarded, runs_from, counted, after, payload[at:])


class DurableLog:
    """The log of one `Service` (one per `--workers` worker): log before the answer, checkpoints, replay."""

    def __init__(self, wal: WriteAheadLog, service: Any, *, dedup_spans: int = DEDUP_WINDOW_SPANS) -> None:
        self.wal = wal
        self.dedup_spans = dedup_spans  # 0: no span-id window (a resend is evaluated again)
        self.intake = service.intake
        self.forwarder = service.forwarder
        self.pipeline = service.pipeline
        self.metrics = service.metrics
        self.keep_messages = service.keep_messages
        self._lock = threading.Lock()
        self._next = 1  # the next request's number
        # request number -> its intake batch (None: logged, not admitted; 0: nothing admitted), until both
        # `forwarded` and `counted` passed it
        self._batch_of: dict[int, int | None] = {}
        self._first_of_trace: dict[int, tuple[int, int, int]] = {}  # trace id -> (first request, its batch, last request)
        self._segment_last: dict[int, int] = {}  # segment -> the highest request number in it
        self._handed_by: deque[tuple[int, int]] = deque()  # (batch, spans handed on once it was): batches not yet settled
        self._settled_batch = 0
        self.forwarded = 0
        self.runs_from = 1
        self.counted = 0  # every request up to it is in `_state` ...
        self._counted_after: set[int] = set()  # ... and these after it (admitted out of order)
        self._state, self._state_batch = b"", -1  # the metric state, and the intake batches it counts
        self._written: Checkpoint | None = None  # the last checkpoint written
        self._progress = 0  # the last `forwarded` written
        self._open = False  # the log was read back and a segment of this process started (`replay`)
        self._floor = 0  # what the last process had forwarded (`replay`)
        self._suppress_upto = 0  # replayed batches up to this one: forwarded before the crash
        self.replayed_batches = 0  # the intake's batches up to this one are replays
        self.replayed_at = 0.0  # Unix time of this process's replay, 0 for none
        self.counts = {"replays": 0, "replayed_requests": 0, "forwarded_again": 0, "not_forwarded_again": 0,
                       "truncated": 0, "corrupt": 0, "other_version": 0, "duplicates_dropped": 0, "runs_unpinned": 0}
        self._unpinned_logged = False
        self._seen: set[tuple[int, int]] = set()
        self._window: deque[tuple[int, int]] = deque()
        self._closed_by: dict[int, int] = {}  # trace id -> the batches evaluated when its runs were seen closed
        self._spans_logged = 0
        self._segment_spans: dict[int, int] = {}  # segment -> spans logged up to its end: kept while in the window
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if self.forwarder is not None:
            self.forwarder.on_settled = self.progress

    # -- the request path ---------------------------------------------------------------------------

    def has_room(self) -> bool:
        return self.wal.has_room()

    def log(self, body: bytes, content_type: str, encoding: str, spans: int = 0) -> tuple[int, str | None]:
        """Write a request (of `spans` spans) before it is admitted; (its number, None), or (0, why the log refused it)."""
        with self._lock:
            seq = self._next
            self._next += 1
            self._batch_of[seq] = None
        why, segment = self.wal.append_at(REQUEST, request_payload(seq, body, content_type, encoding))
        with self._lock:
            if why is not None:
                self._batch_of[seq] = 0  # not written: nothing to forward (a gap would hold `forwarded` for good)
                return 0, why
            self._segment_last[segment] = max(self._segment_last.get(segment, 0), seq)
            self._spans_logged += spans
            self._segment_spans[segment] = self._spans_logged
        return seq, None

    def fresh(self, spans: list[Any]) -> list[Any]:
        """The spans not taken among the last DEDUP_WINDOW_SPANS (those replayed included): a request the killed process
        had logged but not answered comes again from its sender, and is evaluated once (the others counted)."""
        seen = self._seen
        if not self.dedup_spans:
            return spans
        with self._lock:
            out = [span for span in spans if (span.context.trace_id, span.context.span_id) not in seen]
            self.counts["duplicates_dropped"] += len(spans) - len(out)
        return out

    def admit(self, seq: int, spans: list[Any], reserved: int) -> int:
        """Admit the logged request `seq` into the intake (`Intake.admit`, room for `reserved` spans held) and note its
        batch in one step, so that a checkpoint never sees a batch evaluated whose request it cannot name (it must know
        exactly which requests the metric state it took counts); the batch's number, 0 for none."""
        keys = self._keys(spans)
        with self._lock:
            batch = self.intake.admit(spans, reserved)
            self._remember_keys(keys)
            self._batch_of[seq] = batch
            first = self._first_of_trace
            for trace_id, _ in keys:
                known = first.get(trace_id)
                first[trace_id] = (seq, batch, seq) if known is None else (known[0], known[1], max(known[2], seq))
        return batch

    @staticmethod
    def _keys(spans: list[Any]) -> list[tuple[int, int]]:
        return [(span.context.trace_id, span.context.span_id) for span in spans]

    def _remember_keys(self, keys: list[tuple[int, int]]) -> None:
        """Taken: a resend of these spans is a duplicate from now on (lock held)."""
        if self.dedup_spans:
            seen, window = self._seen, self._window
            seen.update(keys)
            window.extend(keys)
            while len(window) > self.dedup_spans:
                seen.discard(window.popleft())

    def forwards(self, spans: list[Any]) -> bool:
        """Whether what the intake hands on now goes to the next hop (not a replay of what was forwarded); what a
        replayed request hands on that is forwarded is counted: the next hop may have it (`forwarded="again"`)."""
        batch = self.intake.evaluating
        if batch and batch <= self._suppress_upto:
            return False
        if batch and batch <= self.replayed_batches:
            self.counts["forwarded_again"] += len(spans)
        if batch and self.forwarder is not None:  # the forwarder settles spans in the order they are handed
            with self._lock:
                self._handed_by.append((batch, self.forwarder.handed + len(spans)))
        return True

    # -- how far forwarding got ---------------------------------------------------------------------

    def progress(self) -> None:
        """After the forwarder settled an export (on its thread): when that moves `forwarded`, a record saying so,
        written but not synced. A SIGKILL keeps it (the kernel has it); a power cut may lose it, which makes
        duplicates at the next replay, never losses. So a replay forwards again about one export, not 0.2 s of them."""
        if not self._open:
            return
        settled = self._settle()
        with self._lock:
            self._advance_forwarded(settled)
            forwarded = max(self.forwarded, self._floor)
        if forwarded > self._progress and self.wal.append(PROGRESS, _SEQ.pack(forwarded), bounded=False, sync=False) is None:
            self._progress = forwarded

    def _settle(self) -> int:
        """The last batch such that it and every one before it is evaluated and what they handed on is settled."""
        taken = self.intake.evaluated_batches  # first: a batch up to it has put its spans, and its mark, already
        settled = self.forwarder.settled if self.forwarder is not None else 0
        with self._lock:
            handed_by = self._handed_by
            while handed_by and handed_by[0][1] <= settled:
                handed_by.popleft()
            self._settled_batch = max(self._settled_batch, min(taken, handed_by[0][0] - 1) if handed_by else taken)
            return self._settled_batch

    def _advance_forwarded(self, settled: int) -> None:
        """Every request up to `forwarded` evaluated and settled (lock held)."""
        forwarded, batch_of = self.forwarded, self._batch_of
        while (batch := batch_of.get(forwarded + 1, -1)) is not None and 0 <= batch <= settled:
            forwarded += 1
        self.forwarded = forwarded

    # -- checkpoints ----------------------------------------------------------------------------------

    def _unpin(self, done: int) -> int:
        """The open runs' requests fill the log (runs open for long under heavy traffic): let the forwarded ones go,
        so that the log keeps taking requests; a crash then loses those runs' evaluations (lock held)."""
        old = [trace_id for trace_id, (seq, _, _) in self._first_of_trace.items() if seq <= done]
        for trace_id in old:
            del self._first_of_trace[trace_id]
            self._closed_by.pop(trace_id, None)
        self.counts["runs_unpinned"] += len(old)
        if not self._unpinned_logged:
            self._unpinned_logged = True
            logger.warning("otel-agent-eval serve: the write-ahead log in %s is %d%% full of the requests of runs still "
                           "open; %d such traces are no longer kept for a replay (a crash would lose their run "
                           "evaluations; agent_eval_serve_wal_runs_unpinned_total). Raise --wal-max-mib, or lower the "
                           "run TTL", self.wal.directory, int(UNPIN_AT * 100), len(old))
        return min((seq for seq, _, _ in self._first_of_trace.values()), default=done + 1)

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Checkpoints every CHECKPOINT_EVERY_S, on a thread of their own."""
        self._thread = threading.Thread(target=self._every, name="otel-agent-eval-serve-wal", daemon=True)
        self._thread.start()

    def _every(self) -> None:
        while not self._stopping.wait(CHECKPOINT_EVERY_S):
            try:
                self.checkpoint()
            except Exception:  # noqa: BLE001 - the next tick tries again; the log only grows meanwhile
                logger.exception("otel-agent-eval serve: a write-ahead log checkpoint failed")

    def _take_state(self, *, final: bool = False) -> int:
        """The metrics as they stand between two batches (`Intake.evaluation`), when batches were evaluated since the
        last time (`final`: whatever happened); the batches they count (the last state's when the batch being evaluated
        takes longer than STATE_WAIT_S: a forward waiting for room, and the next tick takes it)."""
        intake = self.intake
        if intake.evaluated_batches == self._state_batch and not final:
            return self._state_batch
        if not intake.evaluation.acquire(timeout=5.0 if final else STATE_WAIT_S):
            return self._state_batch
        try:
            batch, made = intake.evaluated_batches, self.metrics.monotonic_state()  # copied between two batches
        finally:
            intake.evaluation.release()
        self._state, self._state_batch = made(), batch  # made into bytes while the intake goes on
        return batch

    def _advance_counted(self, batch: int) -> None:
        """Every request up to `counted`, and those in `_counted_after`, in the metric state that counts the intake's
        batches up to `batch` (lock held)."""
        counted, after, batch_of = self.counted, self._counted_after, self._batch_of
        after.update(seq for seq, b in batch_of.items() if seq > counted and b is not None and 0 <= b <= batch)
        while counted + 1 in after:
            counted += 1
            after.discard(counted)
        self.counted = counted
        for seq in range(min(self.forwarded, counted), 0, -1):  # what neither mark needs any more (pruned down to here)
            if batch_of.pop(seq, -1) == -1:
                break

    def checkpoint(self, *, final: bool = False) -> None:
        """Advance `forwarded`, `runs_from` and `counted`, write them with the metric state, and delete the segments no
        longer needed. `final`: at a stop, the state taken whatever it takes (the runs closed by the stop in it)."""
        settled = self._settle()
        state_batch = self._take_state(final=final)
        taken = self.intake.evaluated_batches
        tracked = self.pipeline.runs.tracked
        with self._lock:
            self._advance_forwarded(settled)
            self._advance_counted(state_batch)
            forwarded, counted = self.forwarded, self.counted
            closed_by = self._closed_by
            for trace_id, (seq, batch, last) in list(self._first_of_trace.items()):
                if batch > taken:
                    continue
                if trace_id in tracked:  # a run of it is open (again)
                    closed_by.pop(trace_id, None)
                elif trace_id not in closed_by:
                    closed_by[trace_id] = taken  # its runs closed by this batch: needed until that one is forwarded
                elif closed_by[trace_id] <= settled and last <= max(forwarded, self._floor) and last <= counted:
                    # closed, what closed them forwarded and counted, and none of its requests is replayed again: not
                    # needed (were one replayed, a run root would be evaluated again without its calls)
                    del self._first_of_trace[trace_id], closed_by[trace_id]
            done = max(forwarded, self._floor)
            runs_from = min((seq for seq, _, _ in self._first_of_trace.values()), default=done + 1)
            if runs_from <= done and self.wal.size > self.wal.max_bytes * UNPIN_AT:
                runs_from = self._unpin(done)
            self.runs_from = min(runs_from, done + 1)
            point = Checkpoint(done, self.runs_from, counted, frozenset(self._counted_after), self._state)
            if point == self._written:
                return
            needed_from = min(self.runs_from, counted + 1)
            below = min((s for s, last in self._segment_last.items() if last >= needed_from), default=self.wal.segment)
            if self.dedup_spans and self.wal.size <= self.wal.max_bytes * UNPIN_AT:
                # a segment whose spans are still in the span-id window is kept, for a replay to rebuild the window
                # (a sender may resend a request the killed process had forwarded, after another crash)
                window_from = self._spans_logged - self.dedup_spans
                below = min([below, *(s for s, end in self._segment_spans.items() if end > window_from)])
        # past the bound too: the checkpoint is what lets the log shrink
        if self.wal.append(CHECKPOINT, point.payload(), bounded=False) is not None:
            return
        self._written, self._progress = point, max(self._progress, done)
        if self.wal.release(below):
            with self._lock:
                for segment in [s for s in self._segment_last if s < below]:
                    del self._segment_last[segment]
                for segment in [s for s in self._segment_spans if s < below]:
                    del self._segment_spans[segment]

    def stop(self) -> None:
        """After the service's drain: a last checkpoint (all forwarded, no run open: the log can go), then close."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
        abandoned = self.forwarder is not None and self.forwarder.metrics.forward_count("abandoned")
        try:
            if not abandoned:  # else what was abandoned stays in the log, for the next start to forward
                self.checkpoint(final=True)
        except Exception:  # noqa: BLE001
            logger.exception("otel-agent-eval serve: the last write-ahead log checkpoint failed")
        self.wal.close()

    # -- replay -----------------------------------------------------------------------------------------

    def replay(self) -> int:
        """Read what the last process left and evaluate it again (module docstring); the requests replayed. Returns once
        they are evaluated: the metrics then count everything logged, each request once."""
        records, recovery = self.wal.open()
        for problem in ("truncated", "corrupt", "other_version"):
            self.counts[problem] += getattr(recovery, problem)
        point, forwarded, last = Checkpoint(0, 1, 0, frozenset(), b""), 0, 0
        requests: list[tuple[int, bytes, str, str, int]] = []
        for record in records:
            if record.kind == CHECKPOINT and (read := Checkpoint.read(record.payload)) is not None:
                point, forwarded = read, max(forwarded, read.forwarded)
            elif record.kind == PROGRESS and len(record.payload) == _SEQ.size:
                forwarded = max(forwarded, _SEQ.unpack(record.payload)[0])
            elif record.kind == REQUEST and len(record.payload) >= _REQUEST_HEAD.size:
                seq, body, content_type, encoding = read_request_payload(record.payload)
                requests.append((seq, body, content_type, encoding, record.segment))
                last = max(last, seq)
        counted = self._restore(point)
        start = min(point.runs_from, forwarded + 1, counted + 1)
        todo = sorted((r for r in requests if r[0] >= start), key=lambda r: r[0])
        with self._lock:
            self._next = max(last, forwarded, counted) + 1
            self.forwarded, self.runs_from = start - 1, start
            self.counted, self._counted_after = counted, {seq for seq in point.counted_after if seq > counted}
            # forwarded by the last process, whatever this one has re-evaluated yet: a checkpoint never goes below it
            # (else a crash before the replay caught up would forward again a run root whose calls are gone)
            self._floor = self._progress = forwarded
            self._batch_of.update(dict.fromkeys(range(start, self._next), 0))  # a request the log lost: nothing to do
            for seq, *_, segment in todo:
                self._segment_last[segment] = max(self._segment_last.get(segment, 0), seq)
                self._batch_of[seq] = None
        self._open = True
        self._remember([r for r in requests if r[0] < start])
        if not todo:
            return 0
        self.replayed_batches = 1 << 62  # until the replay has admitted everything: every batch is one of it
        again = [r for r in todo if r[0] > forwarded]
        before = [r for r in todo if r[0] <= forwarded]
        gate = _CountGate(self.intake, self.pipeline)
        self._suppress_upto = 1 << 62  # every batch until the last of these is admitted (they are evaluated meanwhile)
        spans_not = sum(self._replay_one(*r, gate=gate, uncounted=self._was_counted(r[0])) for r in before)
        self._suppress_upto = self.intake.admitted
        spans_again = sum(self._replay_one(*r, gate=gate, uncounted=self._was_counted(r[0])) for r in again)
        self.replayed_batches = self.intake.admitted
        self._wait_evaluated(len(todo))
        gate.remove()
        self.replayed_at = time.time()
        self.counts["replays"] += 1
        self.counts["replayed_requests"] += len(todo)
        self.counts["not_forwarded_again"] += spans_not
        recounted = sum(not self._was_counted(r[0]) for r in todo)
        logger.warning("otel-agent-eval serve: replayed %d requests from the write-ahead log in %s: %d spans forwarded "
                       "before the crash (evaluated again for the runs open then, not forwarded again), %d spans not "
                       "known to be forwarded (forwarded now: those the crash interrupted may reach the next hop twice); "
                       "the metrics go on from its last checkpoint, %d requests evaluated after it counted now",
                       len(todo), self.wal.directory, spans_not, spans_again, recounted)
        return len(todo)

    def _restore(self, point: Checkpoint) -> int:
        """The metrics start from the checkpoint's state, which is then this process's until it takes one (no batch
        counted by it yet: the first checkpoint may come before that); the request up to which they count."""
        if point.state:
            try:
                self.metrics.restore(point.state)
                self._state, self._state_batch = point.state, 0
            except ValueError as exc:
                logger.error("otel-agent-eval serve: the metric state in the write-ahead log in %s cannot be read (%s); "
                             "the metrics start from zero", self.wal.directory, exc)
        return point.counted

    def _was_counted(self, seq: int) -> bool:
        """Whether a logged request is in the metric state restored (counted before the crash)."""
        return seq <= self.counted or seq in self._counted_after

    def _wait_evaluated(self, requests: int) -> None:
        """Until every replayed request is evaluated (the metrics, and the receivers, wait for it), saying why at times."""
        while not self.intake.wait_evaluated(self.replayed_batches, REPLAY_NOTICE_S):
            logger.warning("otel-agent-eval serve: still evaluating the %d requests replayed from the write-ahead log "
                           "(%d of %d batches; a slow next hop?); receiving starts once they are", requests,
                           self.intake.evaluated_batches, self.replayed_batches)

    def _remember(self, requests: list[tuple[int, bytes, str, str, int]]) -> None:
        """The span ids of logged requests that are not replayed, into the window: a sender's resend of one (its
        answer lost with the last process, or refused as another worker died) is then still taken once."""
        for seq, body, content_type, encoding, segment in sorted(requests, key=lambda r: r[0]):
            try:
                spans = read_request(body, content_type, encoding, limit=REPLAY_LIMIT_BYTES).spans()[0]
            except PayloadError:
                continue
            keys = self._keys(spans)
            with self._lock:
                self._spans_logged += len(spans)
                self._segment_spans[segment] = self._spans_logged
                self._remember_keys(keys)

    def _replay_one(self, seq: int, body: bytes, content_type: str, encoding: str, segment: int, *,
                    gate: _CountGate, uncounted: bool) -> int:
        """Admit one logged request again (waiting for room, as a sender would), not counted in the metrics when
        `uncounted` (only the replay admits meanwhile: the receivers are not started); its spans."""
        try:
            spans, _problems = read_request(body, content_type, encoding, limit=REPLAY_LIMIT_BYTES,
                                            keep=self.keep_messages).spans()
        except PayloadError as exc:  # it was read when taken: another version's reader, or a bug
            logger.error("otel-agent-eval serve: request %d of the write-ahead log cannot be read again (%s); skipped",
                         seq, exc)
            spans = []
        with self._lock:
            self._spans_logged += len(spans)
            self._segment_spans[segment] = self._spans_logged
        spans = self.fresh(spans)
        while spans and not self.intake.reserve(len(spans)):
            time.sleep(0.01)
        if spans and uncounted:
            gate.skip(self.intake.admitted + 1)
        self.admit(seq, spans, len(spans))
        return len(spans)

    # -- metrics ----------------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, float]:
        """This log's counts and gauges (what a `--workers` worker sends its parent, `WalTotals`)."""
        return {**self.counts, **{f"refused_{reason}": n for reason, n in self.wal.refused.items()},
                "bytes": self.wal.size, "capacity_bytes": self.wal.max_bytes, "replayed_at": self.replayed_at}

    def collect(self) -> Iterator[Metric]:
        return families(self.snapshot())


GAUGES = ("bytes", "capacity_bytes", "replayed_at")


def families(v: dict[str, float]) -> Iterator[Metric]:
    """The `agent_eval_serve_wal_*` families from a snapshot (or the sum of the workers' snapshots)."""
    refused = CounterMetricFamily(PREFIX + "refused_requests", "Requests the write-ahead log could not take "
                                  "(answered retryable), by reason.", labels=["reason"])
    for reason in (FULL, DISK_FULL, SLOW, FAILED):
        refused.add_metric([reason], v.get(f"refused_{reason}", 0))
    yield refused
    yield CounterMetricFamily(PREFIX + "replays", "Starts that replayed a write-ahead log left by a crash.",
                              value=v["replays"])
    yield GaugeMetricFamily(PREFIX + "last_replay_timestamp_seconds", "When this process last replayed a write-ahead "
                            "log at its start (Unix time; 0: never).", value=v["replayed_at"])
    replayed = CounterMetricFamily(PREFIX + "replayed_spans", "Spans evaluated again from the log at a start, by "
                                   "whether they were forwarded again (again: possibly a duplicate).", labels=["forwarded"])
    replayed.add_metric(["again"], v["forwarded_again"])
    replayed.add_metric(["no"], v["not_forwarded_again"])
    yield replayed
    recovered = CounterMetricFamily(PREFIX + "recovery_problems", "What reading the log at a start found: a record "
                                    "cut short, a corrupt record skipped, a segment of another version set aside.",
                                    labels=["problem"])
    for problem in ("truncated", "corrupt", "other_version"):
        recovered.add_metric([problem], v[problem])
    yield recovered
    yield CounterMetricFamily(PREFIX + "duplicate_spans_dropped", "Spans dropped as already taken (their span id among "
                              "the last 65,536): a sender's resend of a request the log had.", value=v["duplicates_dropped"])
    yield CounterMetricFamily(PREFIX + "runs_unpinned", "Traces with runs open whose requests the log let go, being "
                              "75% full: a crash would lose their run evaluations.", value=v["runs_unpinned"])
    yield GaugeMetricFamily(PREFIX + "bytes", "Bytes the write-ahead log holds on disk.", value=v["bytes"])
    yield GaugeMetricFamily(PREFIX + "capacity_bytes", "Bytes the write-ahead log may hold (--wal-max-mib).",
                            value=v["capacity_bytes"])


class WalTotals:
    """`serve --workers` with `--wal-dir`: the workers' logs summed for the parent's /metrics; a worker started again
    counts from zero, so what its last process counted is carried."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[int, dict[str, float]] = {}
        self._carried: dict[int, dict[str, float]] = {}

    def update(self, index: int, snapshot: dict[str, float]) -> None:
        with self._lock:
            self._last[index] = snapshot

    def ended(self, index: int) -> None:
        """The worker's process ended: its counts carried, its gauges dropped."""
        with self._lock:
            last = self._last.pop(index, None)
            if last is not None:
                carried = self._carried.setdefault(index, {})
                for name, value in last.items():
                    if name not in GAUGES:
                        carried[name] = carried.get(name, 0) + value

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if not self._last and not self._carried:
                return iter(())
            total: dict[str, float] = {}
            for values in (*self._carried.values(), *self._last.values()):
                for name, value in values.items():
                    total[name] = max(total.get(name, 0), value) if name == "replayed_at" else total.get(name, 0) + value
        for name in ("replays", "forwarded_again", "not_forwarded_again", "truncated", "corrupt", "other_version",
                     "duplicates_dropped", "runs_unpinned", *GAUGES):
            total.setdefault(name, 0)
        return families(total)


class _CountGate:
    """While a replay is evaluated: the pipeline's metrics (its sink, and the spans seen) take no count from the batches
    `skip` names, those of requests whose counts the restored metric state holds already."""

    def __init__(self, intake: Any, pipeline: Any) -> None:
        self.intake, self.pipeline = intake, pipeline
        self.sink, self.on_seen = pipeline.sink, intake.on_seen
        self.skipped: set[int] = set()
        pipeline.sink = self
        intake.on_seen = self._seen

    def skip(self, batch: int) -> None:
        """Called before the batch is admitted."""
        self.skipped.add(batch)

    def remove(self) -> None:
        """Once every skipped batch is evaluated."""
        self.pipeline.sink, self.intake.on_seen = self.sink, self.on_seen

    def _counts(self) -> bool:
        return self.intake.evaluating not in self.skipped  # 0, between batches (runs closed by their TTL): counted

    def record(self, *args: Any, **kwargs: Any) -> None:
        if self._counts():
            self.sink.record(*args, **kwargs)

    def record_run(self, run: Any) -> None:
        if self._counts():
            self.sink.record_run(run)

    def count(self, name: str, n: int = 1) -> None:
        if self._counts():
            self.sink.count(name, n)

    def span_ignored(self) -> None:
        if self._counts():
            self.sink.span_ignored()

    def catalog_changed(self, catalog: Any) -> None:
        self.sink.catalog_changed(catalog)

    def _seen(self) -> None:
        if self.on_seen is not None and self._counts():
            self.on_seen()

"""Hands spans from `span.end()` to one consumer thread, in order, as BatchSpanProcessor does.

The app's thread only appends to a bounded deque (atomic in CPython): when the queue is
full, `put` refuses at once and the caller passes the span through unscored, counted (the
SDK's BatchSpanProcessor drops in that case). Only the worker thread consumes. Anyone may
ask for what is queued to be processed (`drain`): a scrape, `force_flush` and `shutdown`
wait, up to their timeout, for the worker to get through the items queued before they asked.

Signals: a Python signal handler that raises (KeyboardInterrupt, a SIGALRM timeout) runs
in the main thread between any two bytecodes, including inside `threading.Event` and
`Condition`, whose Python-level `__enter__` can then leave their lock held for good. So
nothing here that the app's thread may run uses them: the worker's bell and the drains'
replies are raw `_thread` locks (released by one thread, acquired by another), and the
worker is started when the queue is built, not inside `span.end()`. Nor `Thread.is_alive()`
or `join()`: interrupted at the wrong moment they release the *running* thread's state lock
and mark it stopped for good (CPython 3.11 `Thread._wait_for_tstate_lock`), so the worker
says itself whether it runs (`_running`) and releases a raw lock when it ends (`_ended`).
`call_within` is the same rule for running a call that may hang (a forwarded flush).
"""
from __future__ import annotations

import _thread
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_LIMIT = 2_048  # the SDK's BatchSpanProcessor default max_queue_size
WAKE_AT = 512  # queued items that wake the worker before its interval ends


class SpanQueue:
    """`put` on any thread, `consume` on the worker only; `background=False` consumes inline instead.

    `tick`, if given, runs as the consumer after each of the worker's passes (at least every `interval_s`) and,
    with `background=False`, after each `drain`: for work that is due with time, not with items."""

    def __init__(self, consume: Callable[[Any], None], *, background: bool = True, limit: int = DEFAULT_LIMIT,
                 interval_s: float = 0.05, name: str = "otel-agent-eval", tick: Callable[[], None] | None = None) -> None:
        self._consume = consume
        self._tick = tick
        self._background = background
        self._limit = max(1, limit)
        self._wake_at = min(WAKE_AT, self._limit // 2 or 1)
        self._interval_s = interval_s
        self._name = name
        self._reset()

    def _reset(self) -> None:
        self._items: deque[Any] = deque()
        self._inline = threading.Lock()  # one consumer at a time
        self._bell = _thread.allocate_lock()  # held while nothing rang: the worker waits to acquire it
        self._bell.acquire()
        self._asked: deque[Any] = deque()  # replies owed to drains: raw locks the worker releases
        self._stopped = False
        self._worker: threading.Thread | None = None
        self._running = False  # set before the worker starts, cleared by the worker as it ends
        self._ended = _thread.allocate_lock()  # held while the worker runs: stop() waits to acquire it
        if self._background:
            self._ended.acquire()
            self._running = True
            self._worker = threading.Thread(target=self._run, name=self._name, daemon=True)
            try:
                self._worker.start()
            except BaseException:
                self._running = False
                raise

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> bool:
        """Queue one item, on the app's thread; False (and nothing queued) when the queue is full."""
        items = self._items
        if not self._background or self._stopped:
            items.append(item)
            self._consume_inline()
            return True
        if len(items) >= self._limit:
            return False
        items.append(item)
        if len(items) == self._wake_at:
            self._ring()
        return True

    def drain(self, timeout_s: float | None = None) -> bool:
        """Have everything queued now processed; False if that did not happen within `timeout_s`
        (the worker may be stuck in a hanging exporter). The worker itself never waits on itself."""
        worker = self._worker
        if worker is None or not self._running:
            self._consume_inline(tick=True)
            return True
        if worker is threading.current_thread():  # a callback flushing from inside the consumer
            return True
        reply = _thread.allocate_lock()
        reply.acquire()
        self._asked.append(reply)
        if not self._running:  # the worker ended meanwhile: nobody would answer
            self._consume_inline(tick=True)
            return True
        self._ring()
        return reply.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s))

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the worker after it has drained; later puts are consumed at once on their thread."""
        self._stopped = True
        worker = self._worker
        if worker is not None and worker is not threading.current_thread() and self._running:
            self._ring()
            self._ended.acquire(timeout=timeout_s)
            if self._running:
                return  # stuck downstream: what it holds stays with it
        self._consume_inline()

    def _ring(self) -> None:
        try:
            self._bell.release()
        except RuntimeError:  # already rung
            pass

    def reset_after_fork(self) -> None:
        """In a forked child the worker thread is gone and the locks may be held: start afresh."""
        self._reset()

    def _consume_inline(self, tick: bool = False) -> None:
        with self._inline:
            self._consume_all()
            if tick:
                self._ticked()

    def _ticked(self) -> None:
        if self._tick is not None:
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - the tick catches its own; this is a last resort
                logger.exception("otel-agent-eval: span hand-off tick failed; the worker goes on")

    def _consume_all(self, at_most: int = -1) -> None:
        """Consume until the queue is empty, or `at_most` items when that is >= 0."""
        items, consume = self._items, self._consume
        while items and at_most != 0:
            at_most -= 1
            try:
                item = items.popleft()
            except IndexError:  # taken meanwhile
                return
            try:
                consume(item)
            except Exception:  # noqa: BLE001 - the consumer catches its own; this is a last resort
                logger.exception("otel-agent-eval: span hand-off failed; the worker goes on")

    def _run(self) -> None:
        try:
            self._serve()
        finally:  # however it ends: drains and stop() no longer wait for it
            self._running = False
            self._ended.release()
            while self._asked:
                self._asked.popleft().release()

    def _serve(self) -> None:
        asked = self._asked
        while True:
            if self._items:  # behind: no sleep, but take the ring of this pass
                self._bell.acquire(blocking=False)
            else:
                self._bell.acquire(timeout=self._interval_s)  # rung, or the interval is over
            answering = [asked.popleft() for _ in range(len(asked))]  # drains that asked before this pass
            with self._inline:  # what was queued when they asked, not what arrives meanwhile: under a
                self._consume_all(len(self._items))  # steady flood a drain still ends after one pass
                self._ticked()
            for reply in answering:
                reply.release()
            if self._stopped and not self._items:
                while asked:
                    asked.popleft().release()
                return


class TimedCall:
    """Runs `call(timeout_s) -> bool` on a thread of its own for callers that wait at most their timeout
    (a forwarded `force_flush`, which may hang past its own), with only raw locks on the caller's side.

    One thread serves the calls asked while it runs, in batches: everyone who asked before a call
    starts gets its result. Behind a call that hangs, later callers time out (False) instead of
    each leaving one more thread stuck. The thread is a raw `_thread` one: `Thread.start()` waits
    on an `Event`, which an interrupt can break (module docstring).
    """

    def __init__(self, call: Callable[[float], bool]) -> None:
        self._call = call
        self._asked: deque[tuple[Any, list[bool], float]] = deque()  # (reply lock, answer, deadline)
        self._serving = False  # set by a serving thread while it runs

    def __call__(self, timeout_s: float) -> bool:
        reply = _thread.allocate_lock()
        reply.acquire()
        answer: list[bool] = []
        self._asked.append((reply, answer, time.monotonic() + timeout_s))
        if not self._serving:  # a second thread at worst, if one is just starting or ending: both serve
            _thread.start_new_thread(self._serve, ())
        reply.acquire(timeout=max(0.0, timeout_s))
        return bool(answer and answer[0])

    def _serve(self) -> None:
        self._serving = True
        while True:
            batch = []
            while True:
                try:
                    batch.append(self._asked.popleft())
                except IndexError:
                    break
            if not batch:
                self._serving = False
                if not self._asked:  # asked after the pop saw none: serve it (its caller saw us serving)
                    return
                self._serving = True
                continue
            remaining = max(deadline for _, _, deadline in batch) - time.monotonic()
            try:
                result = remaining > 0 and bool(self._call(remaining))
            except BaseException:  # noqa: BLE001 - the call counts its own; the thread must go on answering
                logger.exception("otel-agent-eval: a timed call failed")
                result = False
            for reply, answer, _ in batch:
                answer.append(result)
                reply.release()

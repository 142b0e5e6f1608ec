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
worker is started when the queue is built, not inside `span.end()`.
"""
from __future__ import annotations

import _thread
import logging
import threading
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
        if self._background:
            self._worker = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._worker.start()

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
        if worker is None or not worker.is_alive():
            self._consume_inline(tick=True)
            return True
        if worker is threading.current_thread():  # a callback flushing from inside the consumer
            return True
        reply = _thread.allocate_lock()
        reply.acquire()
        self._asked.append(reply)
        self._ring()
        return reply.acquire(timeout=-1 if timeout_s is None else max(0.0, timeout_s))

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the worker after it has drained; later puts are consumed at once on their thread."""
        self._stopped = True
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            self._ring()
            worker.join(timeout_s)
            if worker.is_alive():
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

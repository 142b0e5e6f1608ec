"""Hands spans from `span.end()` to one consumer thread, in batches, as BatchSpanProcessor does.

The app's thread only appends to a deque (atomic in CPython, ~50 ns); a daemon thread
wakes every `interval_s` and feeds everything queued to the consumer, in order. Anyone
may drain synchronously: a scrape (so metrics are current), `force_flush`, `shutdown`.
When `limit` items are waiting the appending thread drains itself: back-pressure, never
loss. One consumer runs at a time (a re-entrant lock, so a callback may flush).
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

CHUNK = 512  # items consumed per hold of the lock


class SpanQueue:
    def __init__(self, consume: Callable[[Any], None], *, background: bool = True, limit: int = 65_536,
                 interval_s: float = 0.05, name: str = "otel-agent-eval") -> None:
        self._consume = consume
        self._background = background
        self._limit = limit
        self._interval_s = interval_s
        self._name = name
        self._reset()

    def _reset(self) -> None:
        self._items: deque[Any] = deque()
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stopped = False
        self._worker: threading.Thread | None = None
        self.backpressure_drains = 0  # times an app thread found the queue full and drained it itself

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> None:
        """Queue one item; called on the app's thread, so it does as little as it can."""
        self._items.append(item)
        if not self._background or len(self._items) >= self._limit or self._stopped:
            self.backpressure_drains += self._background and not self._stopped
            self.drain()
        elif self._worker is None:
            self._start()

    def drain(self, timeout_s: float | None = None) -> bool:
        """Consume what is queued now, on the calling thread; False if the consumer stayed busy
        elsewhere for `timeout_s` (e.g. stuck in a hanging exporter).

        Works in chunks, letting go of the lock between them, so that a scrape or a flush waits
        for one chunk of the worker's, not for its whole backlog.
        """
        items, consume = self._items, self._consume
        remaining = len(items)  # later arrivals belong to the next drain
        while True:
            if not self._lock.acquire(timeout=-1 if timeout_s is None else timeout_s):
                return False
            try:
                for _ in range(min(remaining, CHUNK)):
                    try:
                        item = items.popleft()
                    except IndexError:  # another drain took them meanwhile
                        return True
                    consume(item)
                remaining -= CHUNK
            finally:
                self._lock.release()
            if remaining <= 0 or not items:
                return True

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the worker (after a last drain); later puts are consumed at once."""
        self._stopped = True
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            self._wake.set()
            worker.join(timeout_s)
        self.drain()

    def reset_after_fork(self) -> None:
        """In a forked child the worker thread is gone and the lock may be held: start afresh."""
        self._reset()

    def _start(self) -> None:
        with self._lock:
            if self._worker is None and not self._stopped:
                self._worker = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self._interval_s)
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - the consumer catches its own; this is a last resort
                logger.exception("otel-agent-eval: span hand-off failed; the worker goes on")

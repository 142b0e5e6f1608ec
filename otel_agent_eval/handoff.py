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

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> None:
        """Queue one item; called on the app's thread, so it does as little as it can."""
        self._items.append(item)
        if not self._background or len(self._items) >= self._limit or self._stopped:
            self.drain()
        elif self._worker is None:
            self._start()

    def drain(self) -> None:
        """Consume everything queued so far, on the calling thread."""
        with self._lock:
            items, consume = self._items, self._consume
            while items:
                consume(items.popleft())

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

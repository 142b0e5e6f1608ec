"""Received spans into the one evaluation core: a queue bounded in spans, one consumer thread, in arrival order.

A request's spans are admitted whole or not at all (`offer`; or `reserve` from its span count before it is
decoded, then `admit`), so a sender that is refused
can retry the very same request and nothing is counted twice. The count of queued spans
includes the batch being evaluated, so memory is bounded by `limit` spans plus the
requests being read. The consumer replays each request as `offline/score.py` replays a
file (time order, agent starts as hints) through a `Pipeline` built with
`sees_starts=False`, and hands what the core returns to `forward`; a `forward` that blocks
(the next hop is slow) fills this queue and the receivers answer "retry later".

One consumer sees every trace, which run assembly needs. With `serve --workers N`
(`workers.py`) each worker process runs its own `Intake` and sees every trace whose id
is its own (trace_id % N), so that still holds per worker.

    >>> intake = Intake(pipeline, forward=forwarder.put, limit=8192)
    >>> intake.offer(spans)   # False: full, answer 429 / RESOURCE_EXHAUSTED
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from opentelemetry.sdk.trace import ReadableSpan

from ..core.noise import Noise, noise_ended
from ..core.pipeline import Pipeline
from ..offline.score import AgentStartReader, agent_start_reader, replay_events
from .os_threads import INTAKE, name_for_os

__all__ = ["DEFAULT_QUEUE_SPANS", "Intake", "evaluated"]

logger = logging.getLogger(__name__)

DEFAULT_QUEUE_SPANS = 16_384
EXPIRE_EVERY_S = 1.0  # an idle consumer still closes runs idle past the TTL this often


class Intake:
    """`offer` from the receivers' threads; the core runs on this intake's own thread only."""

    def __init__(self, pipeline: Pipeline, *, forward: Callable[[list[ReadableSpan]], None],
                 limit: int = DEFAULT_QUEUE_SPANS, on_seen: Callable[[], object] | None = None) -> None:
        if limit < 1:
            raise ValueError(f"the intake queue must hold at least 1 span (got {limit})")
        self.pipeline = pipeline
        self.limit = limit
        self._forward = forward
        self.on_seen = on_seen  # after each span's evaluation (`metrics.seen`); `durable.py` swaps it during a replay
        self._agent_of = agent_start_reader(pipeline)
        self._batches: deque[list[ReadableSpan]] = deque()
        self._queued = 0  # spans waiting or being evaluated
        self._taken = 0  # batches the consumer finished
        self._added = 0  # batches admitted
        self._changed = threading.Condition()
        self._stopping = False
        self.on_done: Callable[[int], object] | None = None  # after each batch, with its span count (`serve --workers`)
        self.evaluating = 0  # the number of the batch being evaluated and handed on; 0 between batches (`durable.py`)
        # held while a batch (or the idle closing of runs) is evaluated and counted: whoever holds it reads the metrics
        # at a point where every batch up to `evaluated_batches` is counted and none after (`durable.py`'s checkpoints)
        self.evaluation = threading.Lock()
        self._worker = threading.Thread(target=self._run, name="otel-agent-eval-serve-intake", daemon=True)
        self._worker.start()

    def __len__(self) -> int:
        return self._queued

    def has_room(self, n: int = 1) -> bool:
        """Whether `n` more spans would be admitted now (a cheap check before decoding a request)."""
        return not self._stopping and self._queued + n <= self.limit

    def offer(self, spans: list[ReadableSpan]) -> bool:
        """Queue a request's spans, all or none; False when they do not fit or the intake is stopping."""
        if not self.reserve(len(spans)):
            return False
        self.admit(spans, len(spans))
        return True

    def reserve(self, n: int) -> bool:
        """Hold room for `n` spans, all or none (a request counted, not yet decoded); False when they do not fit
        or the intake is stopping. What is held is taken by `admit` or given back by `release`."""
        with self._changed:
            if self._stopping or self._queued + n > self.limit:
                return False
            self._queued += n
        return True

    def admit(self, spans: list[ReadableSpan], reserved: int) -> int:
        """Queue the spans read from a request `reserved` held room for (as many or fewer: the unreadable ones
        were skipped), giving back the rest. Admitted even if the intake began stopping since: it was reserved
        before, and `stop` evaluates what it holds. Returns the batch's number (`wait_evaluated`), 0 for none."""
        with self._changed:
            self._queued -= reserved - len(spans)
            if spans:
                self._batches.append(spans)
                self._added += 1
            self._changed.notify_all()
            return self._added if spans else 0

    @property
    def admitted(self) -> int:
        """The number of the last batch admitted."""
        return self._added

    @property
    def evaluated_batches(self) -> int:
        """The number of the last batch evaluated and handed on (batches go in order)."""
        return self._taken

    def wait_evaluated(self, batch: int, timeout_s: float | None = None) -> bool:
        """Wait until batch number `batch` (and every one before it) has been evaluated and handed on."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while self._taken < batch:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def release(self, reserved: int) -> None:
        """Give back room held by `reserve` for a request that was not admitted."""
        with self._changed:
            self._queued -= reserved
            self._changed.notify_all()

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until what was queued when asked has been evaluated and handed on; False on timeout."""
        return self.wait_evaluated(self._added, timeout_s)

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Refuse new spans, evaluate the queued ones, then close every open run and hand its spans on.

        False when the consumer did not finish within `timeout_s` (stuck on the next hop).
        """
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._worker.join(timeout_s)
        if self._worker.is_alive():
            return False
        self._hand_on(self.pipeline.close_all())
        return True

    def _run(self) -> None:
        name_for_os(INTAKE)
        while True:
            with self._changed:
                if not self._batches and not (self._stopping and not self._queued):
                    self._changed.wait(EXPIRE_EVERY_S)
                if not self._batches:
                    if self._stopping and not self._queued:  # nothing queued, nor reserved to be admitted
                        return
                    batch = None
                else:
                    batch = self._batches.popleft()
            if batch is None:  # a quiet while: no new trace comes to close the runs idle past the TTL
                with self.evaluation:
                    self._hand_on(self.pipeline.expire())
                continue
            with self.evaluation:
                self.evaluating = self._taken + 1
                try:
                    self._evaluate(batch)
                except Exception:  # noqa: BLE001 - the pipeline catches its own; this is a last resort
                    logger.exception("otel-agent-eval serve: evaluating a request failed; the service goes on")
                self.evaluating = 0
                with self._changed:
                    self._queued -= len(batch)
                    self._taken += 1
                    self._changed.notify_all()
            if self.on_done is not None:
                try:
                    self.on_done(len(batch))
                except Exception:  # noqa: BLE001 - a report that fails must not stop the evaluation
                    logger.exception("otel-agent-eval serve: reporting an evaluated batch failed")

    def _evaluate(self, batch: list[ReadableSpan]) -> None:
        self._hand_on(evaluated(self.pipeline, batch, self._agent_of, self.on_seen))

    def _hand_on(self, spans: list[ReadableSpan]) -> None:
        if spans:
            try:
                self._forward(spans)
            except Exception as exc:  # noqa: BLE001
                self.pipeline.failed("forward", exc, "forward_errors")


def evaluated(pipeline: Pipeline, batch: list[ReadableSpan], agent_of: AgentStartReader,
              on_seen: Callable[[], object] | None = None) -> list[ReadableSpan]:
    """One request's spans through the core in replay order, and the runs idle past the TTL closed, as between
    batches: what the core hands on to the next hop."""
    out: list[ReadableSpan] = []
    ended, started = pipeline.ended, pipeline.agent_started
    # the replay's events carry each span's attributes and facts (`replay_events`): the core does not read them again
    for event in replay_events(batch, agent_of.at, len(batch)):
        if event[5] is None:
            if type(event[4]) is Noise:  # a span that cannot matter (core/noise.py): passed on as it came
                noise_ended(pipeline, event[6])
                out.append(event[4])
            else:
                out += ended(event[4], event[7], event[6])
            if on_seen is not None:  # after its evaluation: a scrape that sees it counted sees what it scored
                on_seen()
        else:
            out += started(event[4], event[5], event[6])
    return out + pipeline.expire()

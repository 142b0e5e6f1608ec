"""When `serve` acknowledges a request: once its spans are forwarded (`forwarded`, the default), or on receipt.

OTLP lets a receiver answer a request only when it has taken responsibility for its spans; the
sender keeps and retries whatever is not acknowledged. With `received` (the old path), `serve`
answered 200 as soon as the spans were in its intake queue, so a crash (SIGKILL, OOM) lost what it
held: the intake backlog and the forward queue. With `forwarded`, a request is answered only once
every span it brought has been evaluated and settled with the next hop (exported, or failed after
`--forward-timeout`, counted as such), so a crash loses no acknowledged span that left the pipeline:
the sender retries the rest, and the next hop may get a span twice (at-least-once, as OTLP is).

What `forwarded` cannot cover is the state of the runs still open at a crash: tool spans held
until their agent is known (`held_back_calls`) and run evaluations that have not happened yet.
Acknowledging those only once their run closes would hold a sender's request until the request
that closes the run, which a sender that sends one request at a time (the SDK's batch processor)
never sends: a deadlock. So these, exactly the runs open at the crash, are what a crash costs.

The wait has a bound (`timeout_s`, below the exporters' 10 s default): a request whose spans are
still queued for a slow next hop past it is answered retryable (`not_forwarded`: HTTP 503 with
`Retry-After`, gRPC `UNAVAILABLE` with `RetryInfo`); its spans stay queued and are forwarded, so the
sender's retry is a duplicate, counted by that answer.

Batches leave the intake and the forwarder first in, first out, so one number says how far each
got: the intake's batch count and the forwarder's settled spans (`Forwarder.handed`/`settled`).

    >>> ack = ForwardedAck(intake, forwarder)
    >>> ack.wait(intake.admit(spans, reserved))   # True: forwarded; False: answer `not_forwarded`
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from .forward import Forwarder
from .intake import Intake

__all__ = ["ACK_MODES", "DEFAULT_ACK", "DEFAULT_ACK_TIMEOUT_S", "FORWARDED", "RECEIVED", "AckLater", "ForwardedAck"]

logger = logging.getLogger(__name__)

RECEIVED, FORWARDED = "received", "forwarded"
ACK_MODES = (FORWARDED, RECEIVED)
DEFAULT_ACK = FORWARDED
DEFAULT_ACK_TIMEOUT_S = 5.0  # under the SDK's and the Collector's 10 s export timeout: the sender hears "retry", not a deadline


class ForwardedAck:
    """Waits, on the receiver's thread, until a batch admitted into `intake` has been forwarded."""

    def __init__(self, intake: Intake, forwarder: Forwarder | None, *, timeout_s: float = DEFAULT_ACK_TIMEOUT_S) -> None:
        self.intake = intake
        self.forwarder = forwarder
        self.timeout_s = timeout_s

    def wait(self, batch: int, timeout_s: float | None = None) -> bool:
        """True once batch number `batch` is evaluated and every span handed on by then is settled with the next hop;
        False when that takes longer than `timeout_s` (default: this policy's)."""
        if batch <= 0:  # nothing was admitted: nothing to wait for
            return True
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        if not self.intake.wait_evaluated(batch, max(0.0, deadline - time.monotonic())):
            return False
        if self.forwarder is None:
            return True
        # read after the batch was handed on: covers it and possibly later ones (first in, first out): safe, a little late
        return self.forwarder.wait_settled(self.forwarder.handed, max(0.0, deadline - time.monotonic()))


class AckLater:
    """The same wait on a thread of its own, for a caller that must not block (a `--workers` worker's pipe reader):
    `later(batch, answer)` calls `answer(True)` once the batch is forwarded, `answer(False)` past the timeout; in
    order of admission."""

    def __init__(self, ack: ForwardedAck) -> None:
        self.ack = ack
        self._waiting: deque[tuple[int, Callable[[bool], object]]] = deque()
        self._changed = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="otel-agent-eval-serve-ack", daemon=True)
        self._thread.start()

    def later(self, batch: int, answer: Callable[[bool], object]) -> None:
        with self._changed:
            self._waiting.append((batch, answer))
            self._changed.notify_all()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Answer what waits (after the service's drain forwarded it), then end the thread."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._waiting and not self._stopping:
                    self._changed.wait()
                if not self._waiting:
                    return
                batch, answer = self._waiting.popleft()
            ok = self.ack.wait(batch)
            try:
                answer(ok)
            except Exception:  # noqa: BLE001 - one answer that fails must not stop the others
                logger.exception("otel-agent-eval serve: answering a request failed")

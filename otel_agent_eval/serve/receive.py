"""What both receivers do with one export request, whatever the transport: check, decode, admit, answer.

The transports only translate the `Answer` into their own status codes
(`http_receiver.py`, `grpc_receiver.py`), so HTTP and gRPC refuse, count and explain the
same way. The answers follow the OTLP specification: a full queue is retryable (HTTP 429,
gRPC RESOURCE_EXHAUSTED with RetryInfo), shutting down too (503 / UNAVAILABLE); an
unreadable request is not (400 / INVALID_ARGUMENT); spans skipped inside a readable request
are reported as a partial success.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from .ack import ForwardedAck
from .intake import Intake
from .payload import MAX_REQUEST_BYTES, PayloadError, TooLarge, Unsupported, read_request, span_count
from .self_metrics import ServeMetrics

if TYPE_CHECKING:
    from .durable import DurableLog

__all__ = ["Answer", "Receiving"]

ACCEPTED, FULL, STOPPING, INVALID, TOO_LARGE, UNSUPPORTED, UNAUTHORIZED = (
    "accepted", "queue_full", "shutting_down", "invalid", "too_large", "unsupported", "unauthorized")
NOT_FORWARDED = "not_forwarded"  # taken, but not forwarded within the ack's wait (`ack.py`): retryable, a duplicate then
RETRYABLE = (FULL, STOPPING, NOT_FORWARDED)


class Answer(NamedTuple):
    """The outcome of one request: `kind` (one of the constants above), a message for the sender, spans skipped."""

    kind: str
    message: str = ""
    rejected_spans: int = 0


class Receiving:
    """Decodes and admits one request into the intake, counting every span once (accepted, refused or invalid)."""

    def __init__(self, intake: Intake, metrics: ServeMetrics, *, max_bytes: int = MAX_REQUEST_BYTES,
                 retry_after_s: int = 1) -> None:
        self.intake = intake
        self.metrics = metrics
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self.stopping = False
        self.keep_messages = False  # protobuf spans keep their messages, to be forwarded from them
        self.noise_keys: Callable[[], list[str] | None] | None = None  # with them: core.noise.pipeline_keys, for its
        # fast path (spans that cannot matter pass as their bytes, unbuilt)
        self.ack: ForwardedAck | None = None  # answer only once the spans are forwarded (`ack.py`); None: on receipt
        self.log: DurableLog | None = None  # write each request to the write-ahead log before admitting it (`durable.py`)

    def noise(self) -> list[str] | None:
        """The keys for the native reader's noise rule now, or None (every span built)."""
        return self.noise_keys() if self.noise_keys is not None and self.keep_messages else None

    def take(self, transport: str, body: bytes, content_type: str, encoding: str = "identity") -> Answer:
        """Parse, count, reserve room for every span, and only then build the spans: a refused request costs
        a parse (in C) and a count, not a decode."""
        intake = self.intake
        if self.stopping or not intake.has_room():
            return self._refused(transport, body, content_type, encoding)
        try:
            request = read_request(body, content_type, encoding, limit=self.max_bytes, keep=self.keep_messages)
        except PayloadError as exc:
            return self._unreadable_body(transport, exc)
        request.noise = self.noise()
        reserved = request.count
        if self.stopping or not intake.reserve(reserved):
            self.metrics.spans(transport, "refused", reserved)
            return self._answer(transport, self._full())
        try:
            spans, problems = request.spans()
        except PayloadError as exc:
            intake.release(reserved)
            return self._unreadable_body(transport, exc)
        except BaseException:
            intake.release(reserved)
            raise
        seq, taken = 0, len(spans)  # duplicates dropped below are counted accepted: they were, once
        if self.log is not None:
            spans = self.log.fresh(spans)  # a resend of what the log replayed: taken once
            seq, why = self.log.log(body, content_type, encoding, taken)
            if why is not None:
                intake.release(reserved)
                self.metrics.spans(transport, "refused", reserved)
                return self._answer(transport, Answer(FULL, f"the write-ahead log cannot take it now ({why}); "
                                                      f"retry after {self.retry_after_s}s"))
        batch = intake.admit(spans, reserved) if self.log is None else self.log.admit(seq, spans, reserved)
        self._count_taken(transport, taken, problems)
        if self.ack is not None and not self.ack.wait(batch):
            return self._not_forwarded(transport)
        return self._accepted(transport, problems)

    def too_large(self, transport: str, length: int) -> Answer:
        """A body refused from its declared length, before it is read."""
        return self._answer(transport, Answer(TOO_LARGE, f"request body of {length:,} bytes is over the limit of {self.max_bytes:,}"))

    def unreadable(self, transport: str, why: str) -> Answer:
        """A request whose body could not be read (its framing, not its content), counted as invalid."""
        return self._answer(transport, Answer(INVALID, why))

    def unauthorized(self, transport: str) -> Answer:
        return self._answer(transport, Answer(UNAUTHORIZED, "missing or wrong bearer token"))

    def _unreadable_body(self, transport: str, exc: PayloadError) -> Answer:
        """A body refused as a whole: over the size limit, of a kind not served, or no OTLP."""
        kind = TOO_LARGE if isinstance(exc, TooLarge) else UNSUPPORTED if isinstance(exc, Unsupported) else INVALID
        return self._answer(transport, Answer(kind, str(exc)))

    def _count_taken(self, transport: str, taken: int, problems: list[str]) -> None:
        self.metrics.spans(transport, "accepted", taken)
        self.metrics.spans(transport, "invalid", len(problems))

    def _accepted(self, transport: str, problems: list[str]) -> Answer:
        """The request taken; the spans skipped inside it reported as a partial success."""
        message = ""
        if problems:
            message = f"{len(problems)} span(s) skipped: {problems[0][:200]}" + (" (and more)" if len(problems) > 1 else "")
        return self._answer(transport, Answer(ACCEPTED, message, len(problems)))

    def _not_forwarded(self, transport: str) -> Answer:
        """Taken and still queued for the next hop when the ack's wait ran out: the sender retries (a duplicate)."""
        return self._answer(transport, Answer(NOT_FORWARDED, "accepted but not yet forwarded to the next hop; "
                                              f"retry after {self.retry_after_s}s"))

    def _refused(self, transport: str, body: bytes, content_type: str, encoding: str) -> Answer:
        self.metrics.spans(transport, "refused", span_count(body, content_type, encoding, limit=self.max_bytes))
        return self._answer(transport, self._full())

    def _full(self) -> Answer:
        if self.stopping:
            return Answer(STOPPING, "shutting down; send to another replica or retry later")
        return Answer(FULL, f"the evaluation queue is full ({self.intake.limit:,} spans); retry after {self.retry_after_s}s")

    def _answer(self, transport: str, answer: Answer) -> Answer:
        self.metrics.request(transport, answer.kind)
        return answer

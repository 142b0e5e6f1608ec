"""OTLP/HTTP and OTLP/gRPC request bodies into `ReadableSpan`s, bounded, with one clear reason when refused.

Decoding is the OTLP codecs' (`otlp/proto_spans.py`, `otlp/json_spans.py`), so a
span reads the same from a file and off the wire. What a receiver must add is only the
guard: a size limit also after decompression (a gzip bomb is refused at the limit, not
inflated), and deep or broken JSON answered as a bad request rather than a crash.

    >>> spans, problems = spans_of_body(body, "application/x-protobuf", "gzip")
"""
from __future__ import annotations

import zlib
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ..otlp.json_spans import SpanProblem, decode, spans_of_request
from ..otlp.proto_spans import checked, parsed
from ..otlp.proto_spans import span_count as message_span_count
from ..otlp.proto_spans import spans_of_request as spans_of_parsed

__all__ = ["JSON", "MAX_REQUEST_BYTES", "PROTOBUF", "PayloadError", "Request", "TooLarge", "read_request", "spans_of_body"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the Collector's OTLP receiver default (max_recv_msg_size_mib: 4)
_GZIP_MAGIC = b"\x1f\x8b"
_WINDOW_BITS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class PayloadError(ValueError):
    """A request refused as a whole (HTTP 400 / gRPC INVALID_ARGUMENT); the message is what the sender sees."""

    status = 400


class TooLarge(PayloadError):
    """A body over the size limit, compressed or not (HTTP 413)."""

    status = 413


class Unsupported(PayloadError):
    """A content type or encoding this receiver does not speak (HTTP 415)."""

    status = 415


def media_type(content_type: str | None) -> str:
    """`application/json; charset=utf-8` -> `application/json`."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def spans_of_body(body: bytes, content_type: str, encoding: str = "identity", *, limit: int = MAX_REQUEST_BYTES,
                  keep: bool = False) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of one export request, and why any single span was skipped; with `keep`, protobuf spans keep
    their messages, to be forwarded from them (`otlp/messages.py`).

    Raises `PayloadError` (or its `TooLarge`, `Unsupported`) when the request as a whole cannot be read.
    """
    return read_request(body, content_type, encoding, limit=limit, keep=keep).spans()


def checked_body(body: bytes, content_type: str, encoding: str = "identity", *,
                 limit: int = MAX_REQUEST_BYTES) -> tuple[str, bytes]:
    """The media type (PROTOBUF or JSON) and the inflated body; `PayloadError` (`TooLarge`, `Unsupported`) if refused."""
    kind = media_type(content_type)
    if kind not in (PROTOBUF, JSON):
        raise Unsupported(f"unsupported Content-Type {content_type[:60]!r}: send {PROTOBUF} or {JSON}")
    return kind, decompressed(body, encoding, limit)


def protobuf_spans(data: bytes, *, keep: bool = False, noise: list[str] | None = None,
                   accepted: bool = False) -> tuple[list[ReadableSpan], list[str]]:
    """The spans of an inflated protobuf request; `accepted`: bytes checked (or parsed by upb) before, by the process
    that split them (`serve --workers`): not checked again."""
    request = Request(None, 0, keep=keep, data=data) if accepted else _protobuf_request(data, keep)
    request.noise = noise
    return request.spans()


def json_spans(data: bytes) -> tuple[list[ReadableSpan], list[str]]:
    return _json_request(data).spans()


class Request:
    """A request read as far as counting its spans (checked or parsed, not built into spans): `count`, then `spans()`."""

    __slots__ = ("count", "_message", "_json", "_keep", "_data", "noise")

    def __init__(self, message: Any, count: int, *, json: bool = False, keep: bool = False, data: bytes | None = None) -> None:
        self._message, self.count, self._json, self._keep, self._data = message, count, json, keep, data
        self.noise: list[str] | None = None  # core.noise.pipeline_keys: spans that cannot matter pass unbuilt

    def spans(self) -> tuple[list[ReadableSpan], list[str]]:
        """The spans, and why any single one was skipped; `PayloadError` when the request as a whole cannot be read."""
        try:
            if self._json:  # the request's resourceSpans
                return spans_of_request(self._message)
            return spans_of_parsed(self._message, keep=self._keep, data=self._data, noise=self.noise)
        except SpanProblem as exc:
            raise PayloadError(str(exc)) from None
        except RecursionError:
            raise PayloadError("JSON nested too deeply" if self._json else _PROTOBUF_TOO_DEEP) from None


_PROTOBUF_TOO_DEEP = "not an OTLP ExportTraceServiceRequest (nested too deeply)"


def read_request(body: bytes, content_type: str, encoding: str = "identity", *, limit: int = MAX_REQUEST_BYTES,
                 keep: bool = False) -> Request:
    """One export request parsed and its spans counted, none built yet (a refused request costs no more);
    `PayloadError` (`TooLarge`, `Unsupported`) when it cannot be read as a whole."""
    kind, data = checked_body(body, content_type, encoding, limit=limit)
    return _protobuf_request(data, keep) if kind == PROTOBUF else _json_request(data)


def _protobuf_request(data: bytes, keep: bool) -> Request:
    """Checked and counted once: by the native checker where it is in use (the native reader then reads the same
    bytes), else by upb's parse; upb parses what the checker refuses, for its words."""
    count = checked(data)
    if count is not None:
        return Request(None, count, keep=keep, data=data)
    try:
        message = parsed(data)
        return Request(message, message_span_count(message), keep=keep, data=data)
    except SpanProblem as exc:
        raise PayloadError(str(exc)) from None
    except RecursionError:
        raise PayloadError(_PROTOBUF_TOO_DEEP) from None


def _json_request(data: bytes) -> Request:
    try:
        request = decode(data)
    except RecursionError:
        raise PayloadError("JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise PayloadError(f"not JSON ({str(exc)[:120]})") from None
    if not isinstance(request, dict):
        raise PayloadError(f"a JSON {type(request).__name__}, not an ExportTraceServiceRequest object")
    resource_spans = request.get("resourceSpans", request.get("resource_spans", []))
    return Request(resource_spans, _json_count(resource_spans), json=True)


def _json_count(resource_spans: Any) -> int:
    try:
        return sum(len(scope.get("spans") or ()) for entry in resource_spans for scope in
                   (entry.get("scopeSpans", entry.get("scope_spans")) or ()))
    except Exception:  # noqa: BLE001 - a malformed request counts what spans_of_request reads of it
        return 0


def decompressed(body: bytes, encoding: str, limit: int = MAX_REQUEST_BYTES) -> bytes:
    """`body` decoded per Content-Encoding, never more than `limit` bytes of it (`TooLarge` beyond)."""
    encoding = (encoding or "identity").strip().lower()
    if len(body) > limit:
        raise TooLarge(f"request body of {len(body):,} bytes is over the limit of {limit:,}")
    if encoding == "identity":
        return body
    bits = _WINDOW_BITS.get(encoding)
    if bits is None:
        raise Unsupported(f"unsupported Content-Encoding {encoding[:40]!r}: send gzip, deflate or none")
    parts, size, rest = [], 0, body
    while True:  # gzip: every member, as RFC 1952 allows (gzip.decompress and Go's reader do the same)
        inflater = zlib.decompressobj(bits)
        try:
            data = inflater.decompress(rest, limit + 1 - size)
        except zlib.error as exc:
            raise PayloadError(f"body is not valid {encoding} ({exc})") from None
        size += len(data)
        if size > limit:
            raise TooLarge(f"request body inflates past the limit of {limit:,} bytes")
        if not inflater.eof:
            raise PayloadError(f"body is truncated {encoding}")
        parts.append(data)
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)
        if encoding != "gzip" or not rest.startswith(_GZIP_MAGIC):
            raise PayloadError(f"{len(rest):,} bytes of trailing data after the {encoding} body")


def span_count(body: bytes, content_type: str, encoding: str = "identity", *, limit: int = MAX_REQUEST_BYTES) -> int:
    """How many spans a request holds, without building them (to count a refused request); 0 if unreadable."""
    try:
        return read_request(body, content_type, encoding, limit=limit).count
    except Exception:  # noqa: BLE001 - an unreadable refused request counts no spans
        return 0

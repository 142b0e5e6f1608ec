"""Recorded OTLP trace files read back as a stream of `ReadableSpan`s, in bounded memory.

Teams already hold traces: what the Collector's `file` exporter wrote, an OTLP export of a
staging run, spans a CI job captured. Each file's format is found from its first bytes, not
its name:

- OTLP/JSON, one `ExportTraceServiceRequest` per line (the Collector `file` exporter's
  default), or one OTLP/JSON span per line, or the SDK's `ReadableSpan.to_json()` per line;
  pretty-printed JSON documents are read too, one or several one after another (what the SDK's
  `ConsoleSpanExporter` writes), each of up to `MAX_DOCUMENT_BYTES`;
- OTLP protobuf: the Collector's `format: proto` (each message after a 4-byte big-endian
  length), or one bare `ExportTraceServiceRequest` (an OTLP/HTTP body);
- any of these gzip- or zstd-compressed: a whole file (`gzip`, `zstd`), or the Collector's
  `compression: zstd` (each request compressed on its own, after its 4-byte length); zstd
  needs Python 3.14's `compression.zstd` or the optional `zstandard` package (the `zstd`
  extra), and without either a zstd file is one clear problem line;
- `-` reads the standard input.

Files are read a line or a message at a time. Bad input never raises: an unreadable line,
message or span is skipped and counted, and each file with problems gets one `FileProblem`
(its first problem, where, and how many there were).

    >>> spans = RecordedSpans(["traces/"], on_problem=print)
    >>> for span in spans: ...
    >>> spans.stats.spans, spans.stats.spans_skipped
"""
from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import IO, Any, Union

import orjson
from opentelemetry.sdk.trace import ReadableSpan

from ..otlp.json_spans import SpanProblem, decode, spans_of_record
from ..otlp.proto_spans import spans_of_message

__all__ = ["FileProblem", "ReadStats", "RecordedSpans", "TraceInputError", "ZstdReader", "trace_files", "zstd_decompressor"]

MAX_LINE_BYTES = 256 * 2**20  # one JSON line (a Collector batch of 8,192 spans is ~20 MiB)
MAX_MESSAGE_BYTES = 256 * 2**20  # one protobuf message
MAX_DOCUMENT_BYTES = 64 * 2**20  # a pretty-printed (multi-line) JSON file, read whole
READ_BUFFER = 2**20  # bytes read at a time from a plain file: a Collector line (~350 KiB) in one piece, not 8 KiB
# pieces joined (a decompressed stream keeps the small buffer: a cut one gives up the lines before the cut that way)
GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
STDIN = "-"

PathArg = Union[str, "os.PathLike[str]"]


class TraceInputError(ValueError):
    """Input that cannot be scored at all (a path that does not exist, a directory with no files)."""


@dataclass(frozen=True)
class FileProblem:
    """The first problem of one file, where it is, and how many the file had (one line for people)."""

    path: str
    where: str | None  # "line 12", "message 3", or None for the whole file
    message: str
    count: int = 1

    def __str__(self) -> str:
        where = f"{self.path}:{self.where.removeprefix('line ')}" if self.where and self.where.startswith("line ") else (
            f"{self.path}: {self.where}" if self.where else self.path)
        more = f" ({self.count - 1} more problem{'s' if self.count > 2 else ''} in this file)" if self.count > 1 else ""
        return f"{where}: {self.message}{more}"


@dataclass
class ReadStats:
    """What was read and what was skipped, over all files."""

    files: int = 0
    files_without_spans: int = 0  # empty, unreadable, or not trace data
    spans: int = 0
    spans_skipped: int = 0  # single spans that could not be read (their neighbours were)
    records_skipped: int = 0  # whole lines or messages that could not be read
    spans_duplicate: int = 0  # the same trace and span id again (the same file given twice): scored once
    problems: list[FileProblem] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"files": self.files, "files_without_spans": self.files_without_spans, "spans_read": self.spans,
                "spans_skipped": self.spans_skipped, "records_skipped": self.records_skipped,
                "spans_duplicate": self.spans_duplicate,
                "problems": [{"file": p.path, "where": p.where, "message": p.message, "count": p.count} for p in self.problems]}


def trace_files(paths: PathArg | Iterable[PathArg]) -> list[Path]:
    """Files to read: the files given, and the files under each directory given (sorted, hidden ones left out);
    `-` is the standard input.

    Raises `TraceInputError` for a path that does not exist or a directory without files:
    a typo in a CI job must not pass as "nothing to score".
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if str(given) == "":  # Path("") is ".": an unset variable would score the current directory
            raise TraceInputError("an empty path (an unset variable?)")
        if str(given) == STDIN:
            files.append(path)
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not found:
                raise TraceInputError(f"{path}: no files in this directory")
            files += found
        elif path.exists():
            files.append(path)
        else:
            raise TraceInputError(f"{path}: no such file or directory")
    if not files:
        raise TraceInputError("no trace files given")
    return files


class _Problems:
    """Problems of one file: the first is kept with where it happened; all are counted."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.first: tuple[str | None, str] | None = None
        self.count = 0

    def add(self, where: str | None, message: str) -> None:
        self.count += 1
        if self.first is None:
            self.first = (where, message)

    def summary(self) -> FileProblem | None:
        if self.first is None:
            return None
        return FileProblem(self.path, self.first[0], self.first[1], self.count)


class RecordedSpans:
    """The spans of recorded trace files, one at a time, in file order; `stats` counts what was read.

    `on_problem(FileProblem)` is called once for each file with problems, when the file is done. `noise`
    (`core.noise.json_noise`) reads the OTLP/JSON spans that cannot matter only as far as a `Noise` that stands in
    for them (`score`'s fast path); protobuf messages are read whole.
    """

    PROGRESS_EVERY = 2048  # spans between two `on_progress` calls

    def __init__(self, paths: PathArg | Iterable[PathArg], *, on_problem: Callable[[FileProblem], None] | None = None,
                 on_progress: Callable[[int, int], None] | None = None, noise: Callable[[Any], Any] | None = None) -> None:
        self.files = trace_files(paths)
        self.noise = noise
        self.on_problem = on_problem
        self.on_progress = on_progress
        self.stats = ReadStats()
        self._raw: IO[bytes] | None = None  # the file being read, for its position

    def total_bytes(self) -> int:
        """The size of the input files on disk (compressed, as read); the standard input counts 0."""
        total = 0
        for path in self.files:
            try:
                total += 0 if str(path) == STDIN else path.stat().st_size
            except OSError:
                pass
        return total

    def __iter__(self) -> Iterator[ReadableSpan]:
        return chain.from_iterable(self.batches())

    def batches(self) -> Iterator[list[ReadableSpan]]:
        """The spans a record (a JSON line, a protobuf message) holds at a time: what `score` reads, a span
        costing no Python generator step this way (a line holds hundreds)."""
        if self.on_progress is not None:
            return self._with_progress(self.on_progress)
        return self._all_files()

    def _with_progress(self, report: Callable[[int, int], None]) -> Iterator[list[ReadableSpan]]:
        """The batches, calling `report(bytes read, total bytes)` after every `PROGRESS_EVERY` spans or so and after each file."""
        total, done, count, due = self.total_bytes(), 0, 0, self.PROGRESS_EVERY
        report(0, total)
        files = self.stats.files
        for batch in self._all_files():
            if self.stats.files != files:  # a new file: the previous ones were read whole
                done += sum(_size(p) for p in self.files[max(files - 1, 0):self.stats.files - 1])
                files = self.stats.files
            count += len(batch)
            if count >= due:
                due = count + self.PROGRESS_EVERY
                report(min(total, done + self._position()), total)
            yield batch
        report(total, total)

    def _position(self) -> int:
        try:
            return self._raw.tell() if self._raw is not None else 0
        except (OSError, ValueError):
            return 0

    def _all_files(self) -> Iterator[list[ReadableSpan]]:
        for path in self.files:
            problems = _Problems(path)
            before = self.stats.spans
            self.stats.files += 1
            yield from self._file(path, problems)
            if self.stats.spans == before:
                self.stats.files_without_spans += 1
            problem = problems.summary()
            if problem is not None:
                self.stats.problems.append(problem)
                if self.on_problem is not None:
                    self.on_problem(problem)

    # -- one file ------------------------------------------------------------------------

    def _file(self, path: Path, problems: _Problems) -> Iterator[list[ReadableSpan]]:
        try:
            raw = _stdin() if str(path) == STDIN else open(path, "rb", READ_BUFFER)  # noqa: SIM115 - closed below
        except OSError as exc:
            problems.add(None, f"cannot read the file: {exc.strerror or exc}")
            return
        self._raw = raw
        try:
            stream: IO[bytes] = raw
            head = _peek(raw, 8)
            if head.startswith(GZIP_MAGIC):
                stream = io.BufferedReader(gzip.GzipFile(fileobj=raw))  # type: ignore[arg-type]
            elif head.startswith(ZSTD_MAGIC):  # `zstd traces.json`: one stream (of one or more frames)
                decompressor = zstd_decompressor()
                if decompressor is None:
                    problems.add(None, ZSTD_MISSING)
                    return
                stream = io.BufferedReader(ZstdReader(raw, decompressor))
            yield from self._stream(stream, problems)
        except (OSError, EOFError, zlib.error) as exc:  # a corrupt or cut gzip stream, a read error
            self.stats.records_skipped += 1
            problems.add(None, f"cannot read further: {_short_error(exc)}")
        finally:
            self._raw = None
            raw.close()

    def _stream(self, stream: IO[bytes], problems: _Problems) -> Iterator[list[ReadableSpan]]:
        head = _peek(stream, 4096)
        if not head:
            problems.add(None, "empty file")
            return
        if head[4:8] == ZSTD_MAGIC:  # the Collector's `compression: zstd`: each request compressed, after its length
            yield from self._framed_zstd(stream, problems)
            return
        first = head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]
        if first in (b"{", b"[") or not first:
            yield from self._json_lines(stream, problems)
        elif head[:1] == b"\x0a":  # field 1 (resource_spans), length-delimited: a bare request
            yield from self._bare_message(stream, problems)
        elif head[0] < 0x10:  # the high byte of a 4-byte length (< 256 MiB): the Collector's `format: proto`
            yield from self._framed_messages(stream, problems)
        elif b"\n{" in head or _json_value(head):  # JSON lines whose first line is damaged, or a JSON `null`: said so
            yield from self._json_lines(stream, problems)
        else:
            problems.add(None, f"not OTLP trace data: neither JSON nor OTLP protobuf (starts with {head[:16]!r})")

    def _json_lines(self, stream: IO[bytes], problems: _Problems) -> Iterator[list[ReadableSpan]]:
        number, seen_record = 0, False
        while True:
            line = stream.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            number += 1
            if len(line) > MAX_LINE_BYTES:
                _skip_rest_of_line(stream, line)
                self.stats.records_skipped += 1
                problems.add(f"line {number}", f"line longer than {MAX_LINE_BYTES // 2**20} MiB, skipped")
                continue
            if line.isspace():
                continue
            record = _decoded(line)
            if record is _UNDECODED:  # read again the slow way, for its BOM or its problem's words
                try:
                    text = line.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    self.stats.records_skipped += 1
                    problems.add(f"line {number}", f"not UTF-8 text (byte {exc.start + 1} of the line)")
                    continue
                try:
                    record = decode(text)
                except json.JSONDecodeError as exc:
                    if not seen_record and text.strip() in ("{", "["):  # a pretty-printed document, not JSON lines
                        yield from self._documents(line, stream, problems)
                        return
                    self.stats.records_skipped += 1
                    problems.add(f"line {number}", _json_problem(text, exc, line.endswith(b"\n")))
                    continue
                except RecursionError:
                    self.stats.records_skipped += 1
                    problems.add(f"line {number}", "JSON nested too deeply")
                    continue
            seen_record = True
            yield from self._records(record, f"line {number}", problems)

    def _documents(self, first_line: bytes, stream: IO[bytes], problems: _Problems) -> Iterator[list[ReadableSpan]]:
        """Pretty-printed JSON documents, one or several one after another (the SDK's ConsoleSpanExporter writes each
        span's indented `to_json()` so), read a document at a time: memory holds a piece of the file and one document
        (of at most `MAX_DOCUMENT_BYTES`). Problems name the line a document breaks on, or starts on when cut short."""
        try:
            text = first_line.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            self.stats.records_skipped += 1
            problems.add("line 1", f"not UTF-8 text (byte {exc.start + 1} of the line)")
            return
        decoder, at, line, ended = json.JSONDecoder(), 0, 1, False  # line: the line number of text[at]
        while True:
            start = _BLANK.match(text, at).end()  # type: ignore[union-attr]
            line, at = line + text.count("\n", at, start), start
            end = -1  # no whole document from `at` in what was read so far
            try:
                if at < len(text):
                    record, end = decoder.raw_decode(text, at)
            except json.JSONDecodeError as exc:
                if ended or exc.pos < len(text.rstrip()):  # broken, not cut where the piece read ends
                    self.stats.records_skipped += 1
                    cut = exc.pos >= len(text.rstrip())  # cut short: where the document starts; else where it breaks
                    broken = line if cut else line + text.count("\n", at, exc.pos)
                    problems.add(f"line {broken}", _json_problem(text, exc, True))
                    return
            except RecursionError:
                self.stats.records_skipped += 1
                problems.add(f"line {line}", "JSON nested too deeply")
                return
            if end >= 0:
                yield from self._records(record, f"line {line}", problems)
                line, at = line + text.count("\n", at, end), end
                continue
            if ended:
                return
            if len(text) - at > MAX_DOCUMENT_BYTES:
                self.stats.records_skipped += 1
                problems.add(f"line {line}", f"a multi-line JSON document over {MAX_DOCUMENT_BYTES // 2**20} MiB: write "
                                             "one request per line (as the Collector's file exporter does)")
                return
            data = stream.read(max(READ_BUFFER, len(text) - at))  # doubling a long document's piece: read in linear time
            if data and not data.endswith(b"\n"):
                data += stream.readline(MAX_LINE_BYTES)  # whole lines: no UTF-8 character cut in two
            ended = not data
            try:
                text, at = text[at:] + data.decode("utf-8"), 0
            except UnicodeDecodeError as exc:
                self.stats.records_skipped += 1
                broken = line + text.count("\n", at) + data.count(b"\n", 0, exc.start)
                problems.add(f"line {broken}", "not UTF-8 text")
                return

    def _records(self, record: object, where: str | None, problems: _Problems) -> Iterator[list[ReadableSpan]]:
        for item in record if isinstance(record, list) else (record,):
            try:
                spans, skipped = spans_of_record(item, self.noise)
            except Exception as exc:  # noqa: BLE001 - whatever a record holds, the next one is read
                self.stats.records_skipped += 1
                problems.add(where, _unreadable(exc))
                continue
            yield self._counted(spans, skipped, where, problems)

    def _bare_message(self, stream: IO[bytes], problems: _Problems) -> Iterator[list[ReadableSpan]]:
        data = stream.read(MAX_MESSAGE_BYTES + 1)
        if len(data) > MAX_MESSAGE_BYTES:
            self.stats.records_skipped += 1
            problems.add(None, f"a protobuf message over {MAX_MESSAGE_BYTES // 2**20} MiB")
            return
        yield from self._message(data, None, problems)

    def _framed_messages(self, stream: IO[bytes], problems: _Problems) -> Iterator[list[ReadableSpan]]:
        for where, data in self._frames(stream, problems, "message"):
            yield from self._message(data, where, problems)

    def _framed_zstd(self, stream: IO[bytes], problems: _Problems) -> Iterator[list[ReadableSpan]]:
        """The Collector's file exporter with `compression: zstd`: each request (JSON or protobuf) zstd-compressed on
        its own, after its length in 4 bytes (big-endian)."""
        decompressor = zstd_decompressor()
        if decompressor is None:
            problems.add(None, ZSTD_MISSING)
            return
        for where, data in self._frames(stream, problems, "compressed message"):
            try:
                plain = ZstdReader(io.BytesIO(data), decompressor).readall_limited(MAX_MESSAGE_BYTES)
            except (OSError, EOFError) as exc:
                self.stats.records_skipped += 1
                problems.add(where, f"cannot decompress: {_short_error(exc)}")
                continue
            if plain[:1] in (b"{", b"["):
                try:
                    record = decode(plain.decode("utf-8-sig"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
                    self.stats.records_skipped += 1
                    problems.add(where, f"not valid JSON after decompression ({type(exc).__name__})")
                    continue
                yield from self._records(record, where, problems)
            else:
                yield from self._message(plain, where, problems)

    def _frames(self, stream: IO[bytes], problems: _Problems, what: str) -> Iterator[tuple[str, bytes]]:
        """(where, bytes) of each length-prefixed frame (4 bytes, big-endian, then the frame); a frame cut short
        or a length past the limit ends the file with one problem."""
        number = 0
        while True:
            header = stream.read(4)
            if not header:
                return
            number += 1
            where = f"message {number}"
            if len(header) < 4:
                self.stats.records_skipped += 1
                problems.add(where, f"truncated or corrupt: the file ends inside the length prefix of a {what}")
                return
            size = int.from_bytes(header, "big")
            if size > MAX_MESSAGE_BYTES:
                self.stats.records_skipped += 1
                problems.add(where, f"truncated or corrupt: the length prefix says {size} bytes, over the limit (or this is "
                                    f"not a length-prefixed OTLP file); the rest of the file is skipped")
                return
            data = stream.read(size)
            if len(data) < size:
                self.stats.records_skipped += 1
                problems.add(where, f"truncated or corrupt: the file ends inside a {what}, after {len(data)} of its "
                                    f"{size} bytes (or this is not a length-prefixed OTLP file)")
                return
            yield where, data

    def _message(self, data: bytes, where: str | None, problems: _Problems) -> Iterator[list[ReadableSpan]]:
        try:
            spans, skipped = spans_of_message(data)
        except Exception as exc:  # noqa: BLE001 - whatever a message holds, the next one is read
            self.stats.records_skipped += 1
            problems.add(where, _unreadable(exc))
            return
        yield self._counted(spans, skipped, where, problems)

    def _counted(self, spans: list[ReadableSpan], skipped: list[str], where: str | None, problems: _Problems) -> list[ReadableSpan]:
        if skipped:
            self.stats.spans_skipped += len(skipped)
            for reason in skipped:
                problems.add(where, f"span skipped: {reason}")
        self.stats.spans += len(spans)
        return spans


ZSTD_MISSING = ("zstd-compressed; reading it needs the zstandard package: pip install 'otel-agent-eval[zstd]' "
                "(or decompress it first: zstd -d)")
ZSTD_CHUNK = 1024  # compressed bytes fed at a time: zstd expands at most ~32,000-fold, so ~32 MiB out at worst


def zstd_decompressor() -> Callable[[], object] | None:
    """A factory of streaming zstd decompressors (Python 3.14's `compression.zstd`, else the `zstandard` package),
    or None when neither is installed."""
    try:
        from compression.zstd import ZstdDecompressor  # type: ignore[import-not-found]

        return ZstdDecompressor
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        return None
    return lambda: zstandard.ZstdDecompressor().decompressobj()


class ZstdReader(io.RawIOBase):
    """The decompressed bytes of a zstd stream of one or more frames; a stream cut inside a frame raises EOFError
    (as gzip does) and corrupt data OSError, so a cut or damaged file is one problem line, never a traceback."""

    def __init__(self, raw: IO[bytes], new_decompressor: Callable[[], object]) -> None:
        super().__init__()
        self._raw, self._new = raw, new_decompressor
        self._decompressor: Any = new_decompressor()
        self._out, self._at, self._in_frame = b"", 0, False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._at >= len(self._out):
            chunk = self._raw.read(ZSTD_CHUNK)
            if not chunk:
                if self._in_frame:
                    raise EOFError("a zstd frame is cut short")
                return 0
            self._out, self._at = self._feed(chunk), 0
        size = min(len(buffer), len(self._out) - self._at)
        buffer[:size] = self._out[self._at:self._at + size]
        self._at += size
        return size

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            self._in_frame = True
            try:
                out.append(self._decompressor.decompress(data))
            except Exception as exc:  # noqa: BLE001 - zstandard.ZstdError and compression.zstd.ZstdError
                raise OSError(f"not a valid zstd stream ({str(exc)[:120]})") from None
            data = b""
            if self._decompressor.eof:  # a frame ended; the next one starts in what is left
                data, self._decompressor, self._in_frame = self._decompressor.unused_data, self._new(), False
        return b"".join(out)

    def readall_limited(self, limit: int) -> bytes:
        data = bytearray()
        chunk = bytearray(64 * 1024)
        while True:
            size = self.readinto(chunk)
            if not size:
                return bytes(data)
            data += chunk[:size]
            if len(data) > limit:
                raise OSError(f"decompresses to more than {limit // 2**20} MiB")


_UNDECODED = object()
_BLANK = re.compile(r"[ \t\r\n]*")  # JSON's whitespace


def _decoded(line: bytes) -> Any:
    """A JSON line as orjson reads it from the bytes, without a str copy of it first (a Collector line is ~350 KiB),
    or _UNDECODED when it cannot: then the line is read the slow way, through `decode`, whose results and problem
    messages stand (a BOM, bytes that are not UTF-8, NaN, deep nesting, lone surrogates)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return _UNDECODED


def _size(path: Path) -> int:
    try:
        return 0 if str(path) == STDIN else path.stat().st_size
    except OSError:
        return 0


def _stdin() -> IO[bytes]:
    """The standard input as a binary stream that can peek (closing it leaves the process's stdin open)."""
    return io.BufferedReader(io.FileIO(os.dup(sys.stdin.fileno()), "rb"))


def _peek(stream: IO[bytes], size: int) -> bytes:
    """The first `size` bytes without consuming them (every stream here is a BufferedReader)."""
    peek = getattr(stream, "peek", None)
    if peek is None:
        raise OSError("stream cannot peek")
    return peek(size)[:size]


def _json_value(head: bytes) -> bool:
    """Whether the first line is a whole JSON value (`null`, `42`, `"text"`): JSON, if not trace data."""
    try:
        json.loads(head.split(b"\n", 1)[0])
    except (ValueError, RecursionError):
        return False
    return True


def _skip_rest_of_line(stream: IO[bytes], chunk: bytes) -> None:
    while not chunk.endswith(b"\n"):
        chunk = stream.readline(MAX_LINE_BYTES)
        if not chunk:
            return


def _json_problem(text: str, exc: json.JSONDecodeError, complete_line: bool) -> str:
    """Truncated (the record stops mid-way, as when a writer was killed) or otherwise invalid JSON."""
    if exc.pos >= len(text.rstrip()) or not complete_line:
        return f"truncated JSON: the record ends early ({exc.msg})"
    return f"not valid JSON: {exc.msg} at column {exc.colno}"


def _unreadable(exc: Exception) -> str:
    if isinstance(exc, SpanProblem):
        return str(exc)
    return f"unreadable record ({type(exc).__name__}: {str(exc)[:200]})"


def _short_error(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, EOFError):
        return f"the compressed stream ends early ({text})"
    return text[:200]

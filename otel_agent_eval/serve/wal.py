"""A write-ahead log on local disk: records framed with their length and a CRC32, in numbered segment files.

`serve --wal-dir DIR` writes every request it takes here, and syncs it to disk by the fsync policy, before
it answers the sender; a process started again on the same directory reads it back (`read_log`) and replays
what was not yet forwarded, and what the runs still open need (`durable.py` decides which). This module knows
nothing of spans: it appends, syncs, reads back, recovers and deletes bytes.

A segment file, `NNNNNNNNNNNNNNNN.wal` (its number, 16 digits), starts with an 8-byte header: the magic
`OAEVWAL` and the format version (1). Each record then is: length of the payload (4 bytes, big-endian), CRC32
of the type and payload (4), the type (1 byte), the payload. A process never appends to a segment it did not
create: at start it reads the old ones and writes a new one.

What reading recovers, each with one log line and a count in `Recovery` (`agent_eval_serve_wal_*`):

- a record cut short at the end of the newest segment (a power cut mid-write): dropped, the file cut back to
  the last whole record; every record before it is read (`truncated`);
- a record whose CRC does not match (a bad disk block, a stray write), anywhere: skipped; reading resumes at
  the next offset where a whole record with a matching CRC starts, so every record after it is read (`corrupt`);
- a segment written by another version of the format, or that is not a log of ours: renamed aside
  (`.v<version>` or `.unreadable`), never replayed nor deleted (`other_version`).

Bounds: a log holds at most `max_bytes` (`append` refuses beyond it: the sender is told to retry) and segments
are deleted once no record in them is needed (`release`). A full disk (ENOSPC, EDQUOT) cuts the segment back to
its last whole record and refuses the append, counted `disk_full`, logged once until an append succeeds again;
so does any other failed write or sync. A sync slower than `slow_s` refuses new appends until it returns (counted
`disk_slow`, logged once until an append succeeds again).

Fsync policies (`--wal-fsync`): `always` (the default) syncs before every answer, one sync for all the appends
waiting at that moment (group commit): a power cut loses nothing acknowledged. `never` leaves it to the
operating system: a process crash (SIGKILL, OOM) loses nothing, since the kernel still holds what was written,
but a power cut may lose the last seconds.

    >>> log = WriteAheadLog("/var/lib/otel-agent-eval/wal")
    >>> records, recovery = log.open()        # what the last process left; then a new segment is started
    >>> log.append(REQUEST, payload)          # None once written and synced; else why not (`FULL`, `DISK_FULL`, ...)
"""
from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ALWAYS", "DISK_FULL", "FSYNC_POLICIES", "FULL", "NEVER", "SLOW", "Record", "Recovery", "WriteAheadLog",
           "read_log"]

logger = logging.getLogger(__name__)

MAGIC = b"OAEVWAL"
VERSION = 1
SEGMENT_HEADER = MAGIC + bytes((VERSION,))
RECORD = struct.Struct(">IIB")  # payload length, CRC32 of type + payload, type
SUFFIX = ".wal"
ALWAYS, NEVER = "always", "never"
FSYNC_POLICIES = (ALWAYS, NEVER)
FULL, DISK_FULL, SLOW, FAILED = "log_full", "disk_full", "disk_slow", "write_failed"  # why an append was refused
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_SEGMENT_BYTES = 16 << 20
DEFAULT_SLOW_S = 1.0
MAX_RECORD = 1 << 30


@dataclass(frozen=True)
class Record:
    """One record read back: its type, payload, and where it was (segment number, byte offset)."""

    kind: bytes
    payload: bytes
    segment: int
    offset: int


@dataclass
class Recovery:
    """What reading the log found and did (the counts of `agent_eval_serve_wal_recovered_total{problem}`)."""

    records: int = 0
    segments: int = 0
    truncated: int = 0  # records cut short at the end (their bytes dropped)
    corrupt: int = 0  # stretches of bytes skipped for a CRC that did not match
    other_version: int = 0  # segments set aside (another format version, or not a log)
    lines: list[str] = field(default_factory=list)  # the lines logged, one a problem

    def problem(self, kind: str, line: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        self.lines.append(line)
        logger.error("otel-agent-eval serve: %s", line)


def segment_path(directory: Path, number: int) -> Path:
    return directory / f"{number:016d}{SUFFIX}"


def segment_numbers(directory: Path) -> list[int]:
    return sorted(int(p.name[:-len(SUFFIX)]) for p in directory.glob(f"*{SUFFIX}")
                  if p.name[:-len(SUFFIX)].isdigit() and len(p.name) == 16 + len(SUFFIX))


def encode(kind: bytes, payload: bytes) -> bytes:
    return RECORD.pack(len(payload), zlib.crc32(payload, zlib.crc32(kind)), kind[0]) + payload


def _record_at(data: bytes, offset: int) -> tuple[bytes, bytes, int] | None:
    """The whole record with a matching CRC at `offset`: (type, payload, end), or None."""
    if offset + RECORD.size > len(data):
        return None
    length, crc, kind = RECORD.unpack_from(data, offset)
    end = offset + RECORD.size + length
    if length > MAX_RECORD or end > len(data):
        return None
    payload = data[offset + RECORD.size:end]
    kind_byte = bytes((kind,))
    if zlib.crc32(payload, zlib.crc32(kind_byte)) != crc:
        return None
    return kind_byte, payload, end


def read_segment(path: Path, number: int, recovery: Recovery, *, newest: bool) -> Iterator[Record]:
    """The records of one segment, recovering what can be (module docstring); the newest segment is cut back to
    its last whole record when it ends mid-record."""
    data = path.read_bytes()
    if data[:len(MAGIC)] != MAGIC or len(data) < len(SEGMENT_HEADER):
        if newest and len(data) < len(SEGMENT_HEADER) and MAGIC.startswith(data[:len(MAGIC)]):
            return  # created, its header not yet whole: nothing was written to it
        aside = path.with_name(path.name + ".unreadable")
        path.rename(aside)
        recovery.problem("other_version", f"write-ahead log segment {path} is not a log of ours; set aside as {aside.name}, "
                                          "not replayed")
        return
    version = data[len(MAGIC)]
    if version != VERSION:
        aside = path.with_name(f"{path.name}.v{version}")
        path.rename(aside)
        recovery.problem("other_version", f"write-ahead log segment {path} was written by format version {version} "
                                          f"(this one reads {VERSION}); set aside as {aside.name}, not replayed")
        return
    recovery.segments += 1
    offset = len(SEGMENT_HEADER)
    while offset < len(data):
        found = _record_at(data, offset)
        if found is not None:
            kind, payload, end = found
            recovery.records += 1
            yield Record(kind, payload, number, offset)
            offset = end
            continue
        length = RECORD.unpack_from(data, offset)[0] if offset + RECORD.size <= len(data) else None
        cut_short = length is None or offset + RECORD.size + length > len(data)
        resume = next((o for o in range(offset + 1, len(data) - RECORD.size + 1) if _record_at(data, o) is not None), None)
        if cut_short and resume is None:
            if newest:
                with path.open("r+b") as f:
                    f.truncate(offset)
                    os.fsync(f.fileno())
            recovery.problem("truncated", f"write-ahead log {path.name} ends mid-record at byte {offset:,} (a power cut?): "
                                          f"its last {len(data) - offset:,} bytes dropped, every record before them read")
            return
        skipped = (resume if resume is not None else len(data)) - offset
        recovery.problem("corrupt", f"write-ahead log {path.name}: a corrupt record at byte {offset:,} (CRC mismatch); "
                                    f"{skipped:,} bytes skipped, reading on from the next whole record")
        if resume is None:
            return
        offset = resume


def read_log(directory: Path, recovery: Recovery | None = None) -> tuple[list[Record], Recovery]:
    """Every readable record of the log in `directory`, oldest first, and what reading it recovered."""
    recovery = recovery or Recovery()
    numbers = segment_numbers(directory)
    records: list[Record] = []
    for number in numbers:
        records += read_segment(segment_path(directory, number), number, recovery, newest=number == numbers[-1])
    return records, recovery


class WriteAheadLog:
    """Appends from many threads (one write at a time, syncs shared), segments rotated and released."""

    def __init__(self, directory: str | os.PathLike[str], *, fsync: str = ALWAYS, max_bytes: int = DEFAULT_MAX_BYTES,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, slow_s: float = DEFAULT_SLOW_S) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"serve: --wal-fsync {fsync!r}: expected one of {', '.join(FSYNC_POLICIES)}")
        self.directory = Path(directory)
        self.fsync = fsync
        self.max_bytes = max_bytes
        self.segment_bytes = min(segment_bytes, max_bytes // 4)  # a full log still has whole segments to release
        self.slow_s = slow_s
        self.refused: dict[str, int] = dict.fromkeys((FULL, DISK_FULL, SLOW, FAILED), 0)
        self._lock = threading.Lock()  # one write at a time
        self._sync_lock = threading.Lock()  # one sync at a time
        self._sizes: dict[int, int] = {}  # segment number -> bytes, the current one included
        self._number = 0
        self._file: int | None = None  # the current segment's descriptor
        self._written = 0  # bytes ever written by this process (every segment), for group commit
        self._synced = 0
        self._syncing_since: float | None = None
        self._failing: str | None = None  # the last refusal's reason, logged once until an append succeeds

    # -- start ------------------------------------------------------------------------------------

    def open(self) -> tuple[list[Record], Recovery]:
        """Read what is there (recovering what can be), then start a new segment for this process's records."""
        self.directory.mkdir(parents=True, exist_ok=True)
        records, recovery = read_log(self.directory)
        for number in segment_numbers(self.directory):
            self._sizes[number] = segment_path(self.directory, number).stat().st_size
        self._number = max(self._sizes, default=0)
        self._start_segment()
        return records, recovery

    def _start_segment(self) -> None:
        """A new segment (lock held, or at start): the old one synced and closed first."""
        if self._file is not None:
            if self.fsync == ALWAYS:
                os.fsync(self._file)
            os.close(self._file)
            self._file = None
        number = self._number + 1
        path = segment_path(self.directory, number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            if os.write(fd, SEGMENT_HEADER) != len(SEGMENT_HEADER):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.fsync(fd)
            _sync_directory(self.directory)
        except OSError:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._number, self._file = number, fd
        self._sizes[number] = len(SEGMENT_HEADER)

    # -- append -----------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return sum(self._sizes.values())

    @property
    def segment(self) -> int:
        """The number of the segment being written."""
        return self._number

    def has_room(self, n: int = 0) -> bool:
        """Whether an append of `n` bytes would be taken now (a cheap check before reading a request)."""
        return self._refusal(n) is None

    def _refusal(self, n: int) -> str | None:
        if self.size + RECORD.size + n > self.max_bytes:
            return FULL
        since = self._syncing_since
        if since is not None and time.monotonic() - since > self.slow_s:
            return SLOW
        return None

    def append(self, kind: bytes, payload: bytes, *, bounded: bool = True, sync: bool = True) -> str | None:
        """Write one record and sync it by the policy; None when done, else why it was refused (nothing written).
        `bounded=False` for the few bytes that let the log shrink (a checkpoint): written past `max_bytes` too, and
        a refusal not counted (no request was refused). `sync=False`: written, never synced for itself (a record
        whose loss costs nothing but duplicates); the next sync covers it."""
        return self.append_at(kind, payload, bounded=bounded, sync=sync)[0]

    def append_at(self, kind: bytes, payload: bytes, *, bounded: bool = True, sync: bool = True) -> tuple[str | None, int]:
        """`append`, and the number of the segment the record went to (0 when refused)."""
        record = encode(kind, payload)
        with self._lock:
            why = self._refusal(len(payload)) if bounded else None
            if why is None:
                why = self._write(record)
            if why is not None:
                self._refuse(why, bounded)
                return why, 0
            end, segment = self._written, self._number
        if sync and self.fsync == ALWAYS:
            why = self._sync(end)
            if why is not None:
                self._refuse(why, bounded)
                return why, 0
        if self._failing is not None and bounded:
            logger.warning("otel-agent-eval serve: the write-ahead log in %s takes records again", self.directory)
            self._failing = None
        return None, segment

    def _write(self, record: bytes) -> str | None:
        """Write a whole record to the current segment (lock held), rotating first when it is full."""
        try:
            if self._file is None or self._sizes[self._number] + len(record) > self.segment_bytes:
                self._start_segment()
            assert self._file is not None
            start = self._sizes[self._number]
            try:
                view = memoryview(record)
                while view:
                    view = view[os.write(self._file, view):]
            except OSError:
                os.ftruncate(self._file, start)  # no partial record left behind
                raise
        except OSError as exc:
            return self._reason(exc)
        self._sizes[self._number] += len(record)
        self._written += len(record)
        return None

    def _sync(self, end: int) -> str | None:
        """Sync at least up to `end` (bytes ever written): whoever syncs, syncs everything written so far."""
        with self._sync_lock:
            if self._synced >= end:
                return None
            with self._lock:
                target, fd = self._written, self._file
            if fd is None:
                return None
            self._syncing_since = time.monotonic()
            try:
                os.fsync(fd)
            except OSError as exc:
                return self._reason(exc)
            finally:
                self._syncing_since = None
            self._synced = target
        return None

    def _reason(self, exc: OSError) -> str:
        why = DISK_FULL if exc.errno in (errno.ENOSPC, errno.EDQUOT) else FAILED
        if self._failing != why:
            logger.error("otel-agent-eval serve: the write-ahead log in %s cannot be written (%s): requests are refused "
                         "with a retryable answer until it can (agent_eval_serve_wal_refused_total{reason=%r})",
                         self.directory, exc.strerror or exc, why)
            self._failing = why
        return why

    def _refuse(self, why: str, counted: bool = True) -> None:
        if why == SLOW and self._failing != SLOW:
            logger.warning("otel-agent-eval serve: the write-ahead log in %s has been syncing for over %g s (a slow disk): "
                           "requests are refused with a retryable answer until the sync returns "
                           "(agent_eval_serve_wal_refused_total{reason=%r})", self.directory, self.slow_s, SLOW)
            self._failing = SLOW
        if counted:
            self.refused[why] += 1

    # -- release ----------------------------------------------------------------------------------

    def release(self, below: int) -> int:
        """Delete the whole segments numbered below `below` (never the one being written); the bytes freed."""
        freed = 0
        with self._lock:
            for number in [n for n in self._sizes if n < below and not (n == self._number and self._file is not None)]:
                try:
                    segment_path(self.directory, number).unlink(missing_ok=True)
                except OSError as exc:
                    logger.warning("otel-agent-eval serve: cannot delete write-ahead log segment %d (%s)", number, exc)
                    continue
                freed += self._sizes.pop(number)
        return freed

    def rotate(self) -> int:
        """Start a new segment now (so the current one can be released once it is no longer needed); its number."""
        with self._lock:
            try:
                self._start_segment()
            except OSError as exc:  # the old one is closed all the same: releasable, the next append tries again
                self._reason(exc)
            return self._number if self._file is not None else self._number + 1

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    os.fsync(self._file)
                except OSError:
                    pass
                os.close(self._file)
                self._file = None


def _sync_directory(directory: Path) -> None:
    """Sync the directory, so that a new segment's name survives a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

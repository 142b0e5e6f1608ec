"""Report files written whole or not at all, for `score` and `catalog draft`."""
from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from ..offline.recorded import STDIN, trace_files

__all__ = ["existing_file", "output_path", "write_atomically"]


def _read_umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it; read once, when the command starts
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def write_atomically(path: Path, text: str | Iterable[str]) -> None:
    """Write `text` (or its pieces) to `path` whole or not at all: a temporary file beside it, then a rename over it.

    A symlink is followed (its target is replaced, the link stays). What a rename would destroy, a FIFO, a device, an
    open file such as /dev/stdout, is appended to directly instead, after what was printed so far.
    """
    pieces = (text,) if isinstance(text, str) else text
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None  # a new file (or a link to one)
    if mode is not None and (not stat.S_ISREG(mode) or _open_file(path)):
        with contextlib.suppress(OSError, ValueError):  # what was printed goes first, should `path` be stdout
            sys.stdout.flush()
        with open(path, "a", encoding="utf-8") as out:
            out.writelines(pieces)
        return
    target = os.path.realpath(path)
    directory, name = os.path.split(target)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        os.chmod(temporary, 0o666 & ~_UMASK)  # a report to share: the mode a plain open() gives, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(pieces)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def output_path(flag: str, value: str, inputs: Iterable[str] = ()) -> Path:
    """The file an output flag names, refused in one line naming the flag before any input is read: a directory, a
    file in a directory that does not exist, or one of the trace files `inputs` reads (writing it would destroy it)."""
    path = Path(value)
    if path.is_dir():
        raise ValueError(f"{flag} {value}: cannot write: Is a directory")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {value}: the directory {path.parent} does not exist")
    files = [p for p in inputs if p != STDIN]
    if files and existing_file(path):
        target = os.stat(path)
        for source in trace_files(files):
            if os.path.samestat(target, source.stat()):
                raise ValueError(f"{flag} {value}: is the trace file {source}, an input; writing it would destroy it")
    return path


def existing_file(path: Path) -> bool:
    """Whether writing `path` would replace a regular file's text (not a FIFO, a device, /dev/stdout, a new file)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and not _open_file(path)
    except OSError:
        return False


def _open_file(path: Path) -> bool:
    """Whether `path` leads through /proc (/dev/stdout, /dev/fd/1): a link to an open file, not a name to replace."""
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        if os.path.realpath(os.path.dirname(current)).startswith("/proc/"):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.join(os.path.dirname(current), os.readlink(current))
    return False

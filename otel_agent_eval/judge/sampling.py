"""Which completed runs are judged: a deterministic sample by trace id.

The choice is a hash of the trace id against the rate, so every process, every `serve --workers`
worker, every replica and every re-run (online or `score --judge` offline) picks the same runs,
and a trace judged in one place is judged in all of them. A stable hash (BLAKE2b), not Python's
`hash()`, which is salted per process; a hash rather than the id's own low bits (as
`TraceIdRatioBased` uses), because ids from some SDKs and tests are sequential, not random.

    >>> chosen(0x5B8AA5A2D2C872E8321CF37308D69DF2, 0.1)
    False
"""
from __future__ import annotations

import hashlib

__all__ = ["chosen"]

_ID_MASK = (1 << 128) - 1
_SCALE = 1 << 64


def chosen(trace_id: int, rate: float) -> bool:
    """Whether the run of `trace_id` is judged at sample rate `rate` (0 none, 1 all)."""
    if rate >= 1.0:
        return True
    if not rate > 0.0:  # 0, negative or NaN: none
        return False
    digest = hashlib.blake2b((trace_id & _ID_MASK).to_bytes(16, "big"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < int(rate * _SCALE)

"""A ceiling on what judging costs: at most N judgements in any minute and at most $X of judge tokens in any hour.

Both windows slide (the last 60 s, the last 3,600 s of the injected clock), so no minute of any
alignment holds more than N judgements, and spending resumes as the hour that held it passes.
A judgement's price is known only once it returns: a judgement is admitted while the hour's spend
is below the cap, and its cost is charged when it comes back, so the hour can end up over the cap by
what the judgements under way when it was reached cost (one, with the online judge's single worker,
plus any that timed out and still answered). Thread-safe; the clock is injected (tests move it).

    >>> budget = JudgeBudget(per_minute=60, usd_per_hour=1.0)
    >>> if budget.admit():
    ...     budget.charge(result.cost_usd or 0.0)
"""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["JudgeBudget", "MINUTE_S", "HOUR_S"]

MINUTE_S = 60.0
HOUR_S = 3_600.0


class JudgeBudget:
    """Admits judgements under the per-minute cap and the hourly USD cap (None: that cap is off)."""

    def __init__(self, per_minute: int | None = 60, usd_per_hour: float | None = 1.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if per_minute is not None and (isinstance(per_minute, bool) or not isinstance(per_minute, int) or per_minute < 1):
            raise ValueError(f"per_minute={per_minute!r}: expected a whole number >= 1, or None")
        if usd_per_hour is not None and (isinstance(usd_per_hour, bool) or not isinstance(usd_per_hour, (int, float))
                                         or not 0 < usd_per_hour < math.inf):
            raise ValueError(f"usd_per_hour={usd_per_hour!r}: expected a positive number, or None")
        self.per_minute = per_minute
        self.usd_per_hour = None if usd_per_hour is None else float(usd_per_hour)
        self._clock = clock
        self._lock = threading.Lock()
        self._admitted: deque[float] = deque()  # times of the judgements admitted in the last minute
        self._spent: deque[tuple[float, float]] = deque()  # (time, USD) charged in the last hour
        self._spent_usd = 0.0

    def admit(self) -> bool:
        """Take one judgement's place if both caps allow it now; False (nothing taken) when either is reached."""
        with self._lock:
            now = self._clock()
            self._forget(now)
            if self.per_minute is not None and len(self._admitted) >= self.per_minute:
                return False
            if self.usd_per_hour is not None and self._spent_usd >= self.usd_per_hour:
                return False
            self._admitted.append(now)
            return True

    def full(self) -> bool:
        """Whether `admit` would refuse now (nothing taken): lets a caller turn a run away before queueing it."""
        with self._lock:
            now = self._clock()
            self._forget(now)
            return ((self.per_minute is not None and len(self._admitted) >= self.per_minute)
                    or (self.usd_per_hour is not None and self._spent_usd >= self.usd_per_hour))

    def charge(self, usd: float) -> None:
        """Count what a judgement cost (when it returned), against the hour it returned in."""
        if not usd > 0 or usd == math.inf:  # 0, unpriced, NaN or nonsense: nothing to count
            return
        with self._lock:
            now = self._clock()
            self._forget(now)
            self._spent.append((now, usd))
            self._spent_usd += usd

    def spent_usd(self) -> float:
        """USD charged in the last hour."""
        with self._lock:
            self._forget(self._clock())
            return self._spent_usd

    def _forget(self, now: float) -> None:
        admitted, spent = self._admitted, self._spent
        while admitted and admitted[0] <= now - MINUTE_S:
            admitted.popleft()
        while spent and spent[0][0] <= now - HOUR_S:
            self._spent_usd -= spent.popleft()[1]
        if not spent:
            self._spent_usd = 0.0  # no float residue once the hour is empty

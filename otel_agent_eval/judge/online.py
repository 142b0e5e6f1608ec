"""The tool-selection judge on live traffic: sampled, budgeted, on a worker of its own, never in the app's way.

The pipeline offers each completed run (`offer`, on the thread that evaluated it: the processor's
hand-off thread, the exporter's batch thread, `serve`'s intake); the offer decides the sample
(`sampling.chosen`, a hash of the trace id), turns the run away when the budget is spent, and
appends it to a bounded queue, nothing more (3-5 µs a run): a full queue drops the run, counted. One daemon thread takes runs from the queue, asks the budget
(`budget.JudgeBudget`), builds the request (A's `request_of`: redacted tool calls, available tools,
the task input) and runs the judgement on a thread of its own, waiting at most `timeout_s`; a
judgement that hangs is abandoned (counted `timed_out`; at most `max_hung` such calls may still be
running before the worker waits for one of them to end), and what it costs when it does answer is
still charged to the budget. Every completed run offered ends in exactly one outcome (`OUTCOMES`).
`stop()` stops taking runs, judges what is queued until its timeout, then drops the rest (counted)
and returns: a hung judge never holds up the app's shutdown.

    >>> online = OnlineJudge(judge, build=request_of_run, sample_rate=0.1, budget=JudgeBudget(60, 1.0))
    >>> pipeline.judge_run = online.offer
    >>> online.stop(timeout_s=5)
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from ..metrics.names import JUDGE_OUTCOMES
from .budget import JudgeBudget
from .sampling import chosen

__all__ = ["OUTCOMES", "OnlineJudge"]

logger = logging.getLogger(__name__)

OUTCOMES = JUDGE_OUTCOMES  # judged, sampled_out, over_budget, dropped, failed, timed_out
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_QUEUE = 100
DEFAULT_SHUTDOWN_S = 5.0
MAX_HUNG = 2  # abandoned judgements that may still be running before the worker waits for one to end


class _Call:
    """One judgement under way on its own thread: its answer, and whether the worker gave up on it."""

    __slots__ = ("request", "result", "error", "latency_s", "finished", "abandoned")

    def __init__(self, request: Any) -> None:
        self.request = request
        self.result: Any = None
        self.error: BaseException | None = None
        self.latency_s = 0.0
        self.finished = False
        self.abandoned = False


class OnlineJudge:
    """Judges a deterministic sample of completed runs off the app's threads; counts every outcome.

    `judge` has `judge(request) -> JudgeResult` (it raises on failure); `build(run, route, catalog)` makes the
    request (on the worker thread); `metrics` (a `JudgeMetrics`) and `events` (a `JudgeEvents`) take the results;
    `on_result(request, result)` too, if given (its exceptions are counted as internal errors, never raised).
    """

    def __init__(self, judge: Any, *, build: Callable[[Any, Any, Any], Any], sample_rate: float,
                 budget: JudgeBudget | None = None, timeout_s: float = DEFAULT_TIMEOUT_S, queue_limit: int = DEFAULT_QUEUE,
                 metrics: Any = None, events: Any = None, on_result: Callable[[Any, Any], None] | None = None,
                 max_hung: int = MAX_HUNG, shutdown_timeout_s: float = DEFAULT_SHUTDOWN_S,
                 mask: Callable[[str], str] | None = None) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate={sample_rate!r}: expected a number from 0 to 1")
        if not 0 < timeout_s < math.inf:
            raise ValueError(f"timeout_s={timeout_s!r}: expected a positive number")
        if queue_limit < 1:
            raise ValueError(f"queue_limit={queue_limit!r}: expected a whole number >= 1")
        self.judge = judge
        self.build = build
        self.sample_rate = float(sample_rate)
        self.budget = budget if budget is not None else JudgeBudget()
        self.timeout_s = float(timeout_s)
        self.queue_limit = queue_limit
        self.metrics = metrics
        self.events = events
        self.on_result = on_result
        self.max_hung = max_hung
        self.shutdown_timeout_s = shutdown_timeout_s
        self._mask = mask
        self._logged: set[tuple[str, type]] = set()
        self._fresh()
        _reset_in_forked_children(self)

    def _fresh(self) -> None:
        """Locks, queue and counts of this process (a forked child makes its own; its worker starts on first offer)."""
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # the queue and the worker's state changed
        self._call_done = threading.Condition(lock)  # a judgement answered (offers do not wake the worker waiting on it)
        self._items: deque[tuple[Any, Any, Any]] = deque()
        self._busy = False
        self._stopping = False
        self._stop_deadline = math.inf
        self._thread: threading.Thread | None = None
        self._calls = threading.Semaphore(1 + self.max_hung)  # the judgement under way plus the hung ones
        self.counts: Counter[str] = Counter(dict.fromkeys(OUTCOMES, 0))

    # -- the pipeline's thread: decide, append, return ---------------------------------------------

    def offer(self, run: Any, route: Any = None, catalog: Any = None) -> None:
        """A completed run (the pipeline calls this): sampled out, dropped, or queued for the worker. Never raises."""
        try:
            if not chosen(run.trace_id, self.sample_rate):
                self._count("sampled_out")
                return
            if self.budget.full():  # turned away here: a run over budget costs no queue place and no wake-up
                self._count("over_budget")
                return
            with self._cond:
                if self._stopping or len(self._items) >= self.queue_limit:
                    queued = False
                else:
                    self._items.append((run, route, catalog))
                    queued = True
                    if self._thread is None:
                        self._thread = threading.Thread(target=self._work, name="otel-agent-eval-judge", daemon=True)
                        self._thread.start()
                    if len(self._items) == 1:  # the worker waits only on an empty queue
                        self._cond.notify_all()
            if not queued:
                self._count("dropped")
        except Exception as exc:  # noqa: BLE001 - never into the app
            self._failed("offer", exc)

    __call__ = offer  # the pipeline's `judge_run` hook

    # -- the worker ---------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._items and not self._stopping:
                    self._cond.wait()
                if not self._items:
                    return  # stopping, nothing left
                if time.monotonic() >= self._stop_deadline:
                    dropped = len(self._items)
                    self._items.clear()
                    self._cond.notify_all()
                    break
                item = self._items.popleft()
                self._busy = True
            try:
                self._handle(*item)
            except Exception as exc:  # noqa: BLE001 - the worker goes on
                self._failed("judge run", exc)
                self._count("failed")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
        self._count("dropped", dropped)

    def _handle(self, run: Any, route: Any, catalog: Any) -> None:
        if not self.budget.admit():
            self._count("over_budget")
            return
        try:
            request = self.build(run, route, catalog)
        except Exception as exc:  # noqa: BLE001
            self._failed("build judge request", exc)
            self._count("failed")
            return
        if not self._call_slot():
            self._count("dropped")  # stopping, with the judge's calls still hung
            return
        call = _Call(request)
        threading.Thread(target=self._call, args=(call,), name="otel-agent-eval-judge-call", daemon=True).start()
        deadline = time.monotonic() + self.timeout_s
        with self._call_done:
            while not call.finished:
                remaining = min(deadline, self._stop_deadline) - time.monotonic()
                if remaining <= 0:
                    call.abandoned = True  # its cost is charged when (if) it answers
                    break
                self._call_done.wait(remaining)
        if call.abandoned:
            self._count("timed_out")
            return
        self._settle(call)

    def _call_slot(self) -> bool:
        """Wait for room among the calls under way (hung ones hold theirs); False when stopping past its deadline."""
        while not self._calls.acquire(timeout=0.05):
            if time.monotonic() >= self._stop_deadline:
                return False
        return True

    def _call(self, call: _Call) -> None:
        """On the call's own thread: the judgement, however long it takes."""
        started = time.perf_counter()
        try:
            call.result = self.judge.judge(call.request)
        except BaseException as exc:  # noqa: BLE001 - counted by the worker
            call.error = exc
        call.latency_s = time.perf_counter() - started
        self._calls.release()
        with self._call_done:
            call.finished = True
            late = call.abandoned
            self._call_done.notify_all()
        if late:
            try:
                self._spent(call)
            except Exception as exc:  # noqa: BLE001
                self._failed("late judgement", exc)

    def _spent(self, call: _Call) -> Any:
        """Charge what the call used to the budget and the metrics; returns its result (None when it failed)."""
        result = call.result if call.error is None else None
        tokens_in = getattr(result, "input_tokens", 0) or 0
        tokens_out = getattr(result, "output_tokens", 0) or 0
        cost = getattr(result, "cost_usd", None)
        cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) else None
        if result is not None and cost is None and (tokens_in or tokens_out):
            self._once("unpriced", "otel-agent-eval: the judge's model %r has no price: its tokens are counted, its cost "
                       "is not, and the USD cap cannot bound it (price it in the catalog's `models`)",
                       getattr(result, "judge_model", "?"))
        self.budget.charge(cost or 0.0)
        if self.metrics is not None:
            self.metrics.spent(call.latency_s, tokens_in, tokens_out, cost)
        return result

    def _settle(self, call: _Call) -> None:
        result = self._spent(call)
        if call.error is not None:
            self._failed("judgement", call.error)
            self._count("failed")
            return
        score = getattr(result, "score", None)
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
            self._failed("judgement", ValueError(f"the judge gave no score from 0 to 1 ({type(result).__name__}, "
                                                 f"score {score!r})"))
            self._count("failed")
            return
        if getattr(result, "sample_rate", self.sample_rate) != self.sample_rate and dataclasses.is_dataclass(result):
            result = dataclasses.replace(result, sample_rate=self.sample_rate)  # provenance: the rate that chose it
        request = call.request
        if self.metrics is not None:
            self.metrics.judged(request.agent, request.task or "", result, request.trace_id)
        with self._cond:
            self.counts["judged"] += 1
        for stage, deliver in (("judge event", self.events.emit if self.events is not None else None),
                               ("on_result callback", self.on_result)):
            if deliver is not None:
                try:
                    deliver(request, result)
                except Exception as exc:  # noqa: BLE001
                    self._failed(stage, exc)

    def prepare(self) -> None:
        """Have the judge make what it needs now (deepeval's import and model, ~1.2 s of CPU) instead of at the first
        judgement, if it can (`serve`: at its start, where it is frozen out of the collector's scans, not in the middle
        of its load, sharing the GIL with the intake). Never raises."""
        prepare = getattr(self.judge, "prepare", None)
        if prepare is not None:
            try:
                prepare()
            except Exception as exc:  # noqa: BLE001
                self._failed("judge preparation", exc)

    # -- waiting and stopping -----------------------------------------------------------------------

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every queued run has an outcome (judged or not); False if `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._items or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def stop(self, timeout_s: float | None = None) -> None:
        """Take no more runs; judge the queued ones for at most `timeout_s` (default `shutdown_timeout_s`), then drop
        the rest, counted, and return: a hung judgement is abandoned (`timed_out`). Never raises."""
        try:
            timeout = self.shutdown_timeout_s if timeout_s is None else timeout_s
            with self._cond:
                if self._stopping:
                    return
                self._stopping = True
                self._stop_deadline = time.monotonic() + max(0.0, timeout)
                thread = self._thread
                self._cond.notify_all()
                self._call_done.notify_all()
            if thread is not None:
                thread.join(max(0.0, timeout) + 1.0)  # the worker leaves at the deadline; the second is its margin
        except Exception as exc:  # noqa: BLE001
            self._failed("judge shutdown", exc)

    @property
    def queued(self) -> int:
        return len(self._items)

    # -- counting and logging -----------------------------------------------------------------------

    def _count(self, outcome: str, n: int = 1) -> None:
        if outcome != "judged" and n:  # judged is counted with its score (`_settle`)
            with self._cond:
                self.counts[outcome] += n
            if self.metrics is not None:
                self.metrics.outcome(outcome, n)

    def _failed(self, stage: str, exc: BaseException) -> None:
        """Log each kind of failure once (masked as exported values are, when redaction is on); never raise."""
        try:
            key = (stage, type(exc))
            if key in self._logged:
                return
            self._logged.add(key)
            text = str(exc)[:300]
            logger.warning("otel-agent-eval: %s failed (%s: %s); the app goes on, further %s errors are only counted "
                           "(agent_eval_judgements_total)", stage, type(exc).__name__,
                           self._mask(text) if self._mask is not None else text, type(exc).__name__)
        except Exception:  # noqa: BLE001
            pass

    def _once(self, key: str, message: str, *args: Any) -> None:
        if (key, type(None)) not in self._logged:
            self._logged.add((key, type(None)))
            logger.warning(message, *args)


def _reset_in_forked_children(online: OnlineJudge) -> None:
    """A forked child (a gunicorn worker after preload) has no worker thread and may hold a lock mid-use: start afresh."""
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(online)

    def in_child() -> None:
        alive = ref()
        if alive is not None:
            stopped = alive._stopping
            alive._fresh()
            alive._stopping = stopped

    os.register_at_fork(after_in_child=in_child)

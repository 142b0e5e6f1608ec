"""At interpreter exit, evaluate what is still held before any OpenTelemetry provider shuts down.

The SDK's TracerProvider, MeterProvider and LoggerProvider each register `atexit` shutdown
handlers, run in reverse order of creation. Under `opentelemetry-instrument` (tracing, then
metrics, then logs) the logs and metrics providers shut down first: the metrics and
`gen_ai.evaluation.result` log records of the spans still in a `BatchSpanProcessor` or in our
hand-off queue were recorded after the last export, so a short-lived app (a CLI, a batch or CI
job) lost every one. So each evaluator (processor or zero-code exporter) is registered here, and
at exit, before every provider's handler, is asked to evaluate what it holds and close its open
runs (`flush_for_exit`); the providers then shut down in whatever order and export it all.

How "before every provider's handler" holds whatever was created first: `threading`'s own exit
hook (`threading._register_atexit`, run when the main thread ends, before any `atexit` handler)
registers our handler with `atexit` then, after every provider registered its own, so ours runs
first, and after the app's non-daemon threads ended. Without that hook (a Python without it),
ours is registered with `atexit` at once: it then runs before the providers created before it only.

    >>> flush_at_exit(processor)   # the processor and the exporter do this when built
"""
from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from typing import Protocol

from .handoff import TimedCall

logger = logging.getLogger(__name__)

EXIT_TIMEOUT_S = 10.0  # all evaluators together; a hanging downstream never holds the exit longer than this


class Evaluator(Protocol):
    """A processor or the zero-code exporter."""

    is_shut_down: bool

    def flush_for_exit(self, timeout_s: float, close_runs: bool = True) -> bool: ...


_evaluators: weakref.WeakSet[Evaluator] = weakref.WeakSet()
_armed = False
_arming = threading.Lock()


def flush_at_exit(evaluator: Evaluator) -> None:
    """Have `evaluator.flush_for_exit()` run at interpreter exit, before the providers' shutdown handlers."""
    global _armed
    with _arming:
        _evaluators.add(evaluator)
        if _armed:
            return
        _armed = True
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError("threading._register_atexit is not there")
        register(_register_last)
    except RuntimeError:  # no such hook, or the interpreter is shutting down already
        atexit.register(flush_all)


def _register_last() -> None:
    """Run by `threading` as the main thread ends: every provider has registered its handler by now."""
    atexit.register(flush_all)


def flush_all(timeout_s: float = EXIT_TIMEOUT_S) -> None:
    """Every live evaluator evaluates what it holds, within `timeout_s` in all; never raises."""
    deadline = time.monotonic() + timeout_s
    for evaluator in list(_evaluators):
        if evaluator.is_shut_down:
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            logger.warning("otel-agent-eval: exit flush out of time (%.0f s); spans still held are evaluated at the "
                           "tracer provider's shutdown, their metrics and events may not be exported", timeout_s)
            return
        try:
            done = within(evaluator.flush_for_exit, remaining)
        except Exception:  # noqa: BLE001 - the exit goes on
            logger.exception("otel-agent-eval: exit flush failed")
            continue
        if not done:
            logger.warning("otel-agent-eval: exit flush did not finish within %.1f s (a downstream exporter hangs?); "
                           "what it did not reach is evaluated at the tracer provider's shutdown", remaining)


def within(call: Callable[[float], bool], timeout_s: float) -> bool:
    """`call(timeout_s)` on a thread of its own, waited for at most `timeout_s`; inline when no thread can start."""
    try:
        return TimedCall(call)(timeout_s)
    except RuntimeError:  # e.g. "can't create new thread at interpreter shutdown"
        return bool(call(timeout_s))

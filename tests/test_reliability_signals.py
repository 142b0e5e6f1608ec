"""Ctrl-C in the app: a `SIGALRM` handler raises `KeyboardInterrupt` at random points inside
`span.end()` and `force_flush()`, as a user pressing Ctrl-C (once or again and again) would.

The app must get the `KeyboardInterrupt` itself (never another exception made of the
interrupted bookkeeping), the processor's thread must go on being the one that scores, and
afterwards every count must agree. Random delays from a fixed seed and a bounded number of
calls; nothing here asserts a duration (how many interrupts land where depends on the machine,
which is why each probe makes thousands of calls and checks a property of every one of them).
"""
from __future__ import annotations

import collections
import gc
import json
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from reliability_helpers import LIVENESS_TIMEOUT_S, App, CountingExporter, in_thread, join_or_fail, tool_attrs

HERE = __file__


class Interrupts:
    """Raises KeyboardInterrupt from SIGALRM while armed, only in frames that are not this file's:
    inside the product, the SDK and the standard library, never in the probe's own bookkeeping."""

    def __init__(self, seed: int, per_call: int) -> None:
        self.armed = 0  # interrupts still to raise in this call
        self.per_call = per_call  # Ctrl-C pressed once, or again while the first is being handled
        self.rng = random.Random(seed)
        self.low_s = self.high_s = 0.0

    def handler(self, signum: int, frame: Any) -> None:
        if not self.armed:
            return
        if frame is not None and frame.f_code.co_filename == HERE:  # not yet, or no longer, inside the call
            self._alarm()
            return
        self.armed -= 1
        if self.armed:
            self._alarm()
        raise KeyboardInterrupt

    def _alarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, self.rng.uniform(self.low_s, self.high_s))

    def call(self, work: Callable[[], Any], low_s: float, high_s: float) -> BaseException | None:
        """Run `work` with an alarm due after a random delay in [low_s, high_s] (and again as often, for `per_call` > 1)."""
        self.low_s, self.high_s = low_s, high_s
        try:
            self.armed = self.per_call
            self._alarm()
            work()
            self.armed = 0
        except BaseException as exc:  # noqa: BLE001 - what the app would get is what is checked
            self.armed = 0
            return exc
        finally:
            self.armed = 0
            signal.setitimer(signal.ITIMER_REAL, 0)
        return None


@contextmanager
def alarms(seed: int, per_call: int) -> Iterator[Interrupts]:
    """GC is off meanwhile: a collection would run finalizers (pytest's own among them) where an
    interrupt can only be reported as unraisable, which says nothing about the product."""
    interrupts = Interrupts(seed, per_call)
    previous = signal.signal(signal.SIGALRM, interrupts.handler)
    gc.disable()
    try:
        yield interrupts
    finally:
        interrupts.armed = 0
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        gc.enable()


def _warmed_up(app: App) -> App:
    """Every lazy import and first-use cache of the span path made before the alarms start: an interrupt
    inside an import leaves a module half made for the rest of the process (other tests included)."""
    for _ in range(3):
        app.tracer.start_span("execute_tool", attributes=tool_attrs("web_search")).end()
        app.processor.force_flush()
    return app


def _flushes_afterwards(app: App) -> None:
    thread, out = in_thread(lambda: app.processor.force_flush(10_000), "force_flush after the interrupts")
    join_or_fail([thread], LIVENESS_TIMEOUT_S, "force_flush() after the interrupts")
    assert out.get("result") is True, out


def probe_ctrl_c(background: bool) -> dict[str, int]:
    """What span.end() and force_flush() raised under up to 3 interrupts a call (2,000 spans), then whether a
    flush still goes through. Run in a child process: an interrupt may land anywhere, also in the SDK's or
    the standard library's module state, which must not leak into the tests that follow."""
    exporter = CountingExporter()
    app = _warmed_up(App(forward_to=SimpleSpanProcessor(exporter), background=background))
    got: collections.Counter[str] = collections.Counter()
    with alarms(seed=30, per_call=3) as interrupts:
        for _ in range(2_000):
            span = app.tracer.start_span("execute_tool", attributes=tool_attrs("web_search"))
            for exc in (interrupts.call(span.end, 5e-6, 150e-6), interrupts.call(app.processor.force_flush, 5e-6, 150e-6)):
                got[type(exc).__name__ if exc is not None else "returned"] += 1
    _flushes_afterwards(app)  # nothing left locked
    app.provider.shutdown()
    return dict(got)


@pytest.mark.parametrize("background", [True, False])
def test_ctrl_c_in_span_end_and_force_flush_reaches_the_app_as_keyboard_interrupt(background):
    """Once `force_flush()` started a thread per call (`Thread.start` waits on an `Event`): an interrupt
    landing in that `Event`'s `Condition` surfaced as RuntimeError('release unlocked lock')."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_reliability_signals as t; "
            "print(json.dumps(t.probe_ctrl_c(sys.argv[2] == 'True')))")
    child = subprocess.run([sys.executable, "-c", code, str(Path(HERE).parent), str(background)],
                           capture_output=True, text=True, timeout=LIVENESS_TIMEOUT_S * 2)
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.strip().splitlines()[-1])
    assert got.get("KeyboardInterrupt", 0) > 0, got  # the probe did interrupt
    assert set(got) <= {"KeyboardInterrupt", "returned"}, got  # and the app never got anything else


def test_ctrl_c_in_force_flush_never_moves_scoring_onto_the_apps_thread():
    """`drain()` once asked `Thread.is_alive()`, which an interrupt at the wrong moment turns into
    "the thread is dead" (CPython releases the running thread's state lock on the way out): from
    then on every flush and scrape scored on the caller's thread, where later interrupts cut
    scoring halfway and the counts drifted apart. Scoring stays on the processor's thread."""
    exporter = CountingExporter()
    threads: collections.Counter[str] = collections.Counter()
    app = _warmed_up(App(forward_to=SimpleSpanProcessor(exporter), background=True, queue_limit=8_192,
                         on_call=lambda record, score: threads.update([threading.current_thread().name])))
    threads.clear()
    exporter.spans = exporter.enriched = 0
    warm = app.self_metric("spans_scored")
    ended = 3_000
    with alarms(seed=30, per_call=1) as interrupts:
        for _ in range(ended):
            app.tracer.start_span("execute_tool", attributes=tool_attrs("web_search")).end()  # not interrupted
            interrupts.call(app.processor.force_flush, 5e-6, 100e-6)
    _flushes_afterwards(app)
    assert threading.main_thread().name not in threads, threads
    assert sum(threads.values()) == ended
    assert app.self_metric("spans_scored") == warm + ended
    assert sum(app.series("agent_eval_tool_calls_total").values()) == warm + ended
    assert sum(app.series("gen_ai_execute_tool_duration_seconds_count").values()) == warm + ended
    assert exporter.spans == exporter.enriched == ended  # every span reached the exporter, scored
    app.provider.shutdown()

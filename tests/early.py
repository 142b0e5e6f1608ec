"""Slow workloads in fresh interpreters that run beside the rest of the suite, on the CPU it leaves idle.

The suite runs one test at a time, and its second core sits idle much of the time (a live Prometheus waiting for
its scrapes, servers waiting for requests). A workload that runs in a child of its own and asserts what no
neighbour changes (a child's resident memory, instructions counted under valgrind, counts that must come out
exact under any interleaving) can run meanwhile. Its test says so with `@pytest.mark.early(workload)`;
`conftest.py` moves such tests to the end of the session and starts their workloads once it has collected them,
one after another on a thread of this module, each child at the lowest CPU priority (nice 19), so that it takes
only what the tests leave. A test takes its workload's result (or its error) when its turn comes. Run without the
session's start, the test runs the workload itself.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
# A child started early must not see what a test running meanwhile patches: the interpreter and environment are
# the session's, as they were when this module loaded.
PYTHON, ENV = sys.executable, dict(os.environ)
LIVENESS_S = 900  # a child still running after this is hung
# A child at nice 19 may wait its turn for minutes while the suite is busy: its own liveness bounds
# (reliability_helpers.LIVENESS_TIMEOUT_S) stretch to this one's, which still catches a hang.
ENV["AGENT_EVAL_TESTS_LIVENESS_S"] = str(LIVENESS_S - 60)

_started: dict[Callable[[], Any], Future[Any]] = {}


def fresh_process(module: str, call: str) -> dict[str, Any]:
    """Evaluate `module.call` (a test module of this folder) in a new interpreter: the JSON-able dict it returns,
    with what it printed under "output" (for the test to print: this may run beside another test)."""
    code = (f"import json, os, sys; os.nice(19); sys.path.insert(0, {HERE!r}); import {module} as m; "
            f"print('RESULT=' + json.dumps(m.{call}))")
    try:
        proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=LIVENESS_S, cwd=HERE,
                              env=ENV)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{module}.{call} still running after {LIVENESS_S} s (hang?)")
    output, _, result = proc.stdout.rpartition("RESULT=")
    assert proc.returncode == 0, f"{module}.{call} failed in its own process:\n{proc.stdout}{proc.stderr[-6000:]}"
    return {**json.loads(result), "output": output}


def start(items: Iterable[pytest.Item]) -> None:
    """Start the workloads the collected tests mark as early, one after another in the tests' order, on one thread
    (a daemon: an interrupted session does not wait for a child it no longer needs)."""
    markers = (item.get_closest_marker("early") for item in items)
    workloads = [w for w in dict.fromkeys(m.args[0] for m in markers if m is not None) if w not in _started]
    for workload in workloads:
        _started[workload] = Future()
    if workloads:
        jobs = [(workload, _started[workload]) for workload in workloads]
        threading.Thread(target=_run, args=(jobs,), name="early-workloads", daemon=True).start()


def _run(jobs: list[tuple[Callable[[], Any], Future[Any]]]) -> None:
    for workload, future in jobs:
        try:
            future.set_result(workload())
        except BaseException as error:  # pytest.fail's exception too: the test raises it when it takes the result
            future.set_exception(error)


def result(workload: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The workload's result, from its early start if it had one, else computed now; what it printed is printed."""
    future = _started.pop(workload, None)
    figures = dict(workload() if future is None else future.result())
    print(figures.pop("output", ""), end="")
    return figures

"""serve's busiest threads carry names the OS shows (`top -H`, /proc), which the bench reads to split a hop's CPU."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from otel_agent_eval.serve.os_threads import FORWARD, INTAKE, name_for_os

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names in /proc are Linux's")


def _os_name(native_id: int) -> str:
    return Path(f"/proc/self/task/{native_id}/comm").read_text().strip()


def test_a_thread_names_itself_for_the_os_and_others_keep_theirs() -> None:
    seen: dict[str, str] = {}

    def run() -> None:
        name_for_os(INTAKE)
        seen["named"] = _os_name(threading.get_native_id())

    before = _os_name(threading.get_native_id())
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen["named"] == INTAKE and _os_name(threading.get_native_id()) == before
    assert all(len(name.encode()) <= 15 for name in (INTAKE, FORWARD))  # the kernel would cut a longer one


def test_a_name_the_os_refuses_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threading, "get_native_id", lambda: 0)  # no such task: the write fails, nothing is raised
    name_for_os(FORWARD)


def test_a_serving_intake_and_forwarder_run_on_named_threads() -> None:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    from otel_agent_eval.otel.wiring import build_pipeline
    from otel_agent_eval.serve.forward import Forwarder
    from otel_agent_eval.serve.intake import Intake
    from otel_agent_eval.serve.self_metrics import ServeMetrics

    class Nowhere(SpanExporter):
        def export(self, spans):  # noqa: ANN001, ANN202
            return SpanExportResult.SUCCESS

    pipeline, _ = build_pipeline(registry=None, sees_starts=False)
    forwarder = Forwarder(Nowhere(), ServeMetrics(registry=None))
    intake = Intake(pipeline, forward=forwarder.put)
    try:
        deadline = time.monotonic() + 10  # each names itself as it starts running: wait for that, not for a time
        while (names := {_os_name(t.native_id) for t in (intake._worker, forwarder._worker)}) != {INTAKE, FORWARD}:
            assert time.monotonic() < deadline, names
            time.sleep(0.01)
    finally:
        intake.stop()
        forwarder.shutdown()

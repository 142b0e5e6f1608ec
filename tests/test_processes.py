"""Processes: forking after install() (gunicorn preload) and prometheus-client multiprocess mode."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otel_agent_eval import install

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search", "gen_ai.agent.name": "support_agent"}
CALLS = ("agent_eval_tool_calls_total", dict(gen_ai_tool_name="web_search", gen_ai_agent_name="support_agent", task="faq",
                                              outcome="suboptimal", verdict="fail", optimal_tool="local_index"))


def test_a_forked_child_has_its_own_working_metrics_and_no_held_locks():
    provider = TracerProvider()
    registry = CollectorRegistry()
    processor = install(tracer_provider=provider, registry=registry, port=0)
    tracer = provider.get_tracer("app")
    for _ in range(3):
        tracer.start_span("t", attributes=TOOL).end()
    # the worst case: another thread of the parent holds the processor's locks at the moment of fork
    held, release = threading.Event(), threading.Event()

    def hold():
        with processor.metrics._lock, processor.runs._lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: must not deadlock, must count only its own calls
        try:
            os.close(read)
            for _ in range(2):
                tracer.start_span("t", attributes=TOOL).end()
            ok = registry.get_sample_value(*CALLS) == 2 and registry.get_sample_value("agent_eval_processor_spans_seen_total") == 2
            processor.shutdown()  # the parent's endpoint is not the child's to stop
            os.write(write, b"ok" if ok else b"bad")
        finally:
            os._exit(0)
    os.close(write)
    release.set()
    holder.join(10)
    answer = []
    reader = threading.Thread(target=lambda: answer.append(os.read(read, 10)))
    reader.start()
    reader.join(30)  # bounded: a deadlocked child never writes
    os.waitpid(pid, 0) if answer else os.kill(pid, 9)
    assert answer == [b"ok"]
    assert registry.get_sample_value(*CALLS) == 3  # the parent's own counts are untouched
    processor.shutdown()


MULTIPROCESS_APP = textwrap.dedent('''
    import multiprocessing, os, sys, urllib.request
    from opentelemetry.sdk.trace import TracerProvider
    import otel_agent_eval

    provider = TracerProvider()
    processor = otel_agent_eval.install(tracer_provider=provider, port=0)   # in the "master", before forking
    TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search", "gen_ai.agent.name": "support_agent"}

    def worker(n):
        tracer = provider.get_tracer("worker")
        for i in range(n):
            tracer.start_span("t", attributes=TOOL, start_time=0).end(end_time=int(0.5e9))
        provider.force_flush()  # as with BatchSpanProcessor: a process that ends abruptly flushes first

    if __name__ == "__main__":
        ctx = multiprocessing.get_context("fork")
        workers = [ctx.Process(target=worker, args=(100,)) for _ in range(3)]
        for w in workers: w.start()
        for w in workers: w.join(60)
        host, port = processor.metrics_address
        print(urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode())
''')


def test_multiprocess_mode_sums_counters_and_histograms_across_workers(tmp_path):
    app = tmp_path / "app.py"
    app.write_text(MULTIPROCESS_APP)
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    run = subprocess.run([sys.executable, str(app)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    calls = [l for l in lines if l.startswith("agent_eval_tool_calls_total{")]
    assert calls == ['agent_eval_tool_calls_total{gen_ai_agent_name="support_agent",gen_ai_tool_name="web_search",'
                     'optimal_tool="local_index",outcome="suboptimal",task="faq",verdict="fail"} 300.0']
    assert 'gen_ai_execute_tool_duration_seconds_count{error_type="",gen_ai_tool_name="web_search",gen_ai_tool_type=""} 300.0' in lines
    assert 'gen_ai_execute_tool_duration_seconds_bucket{error_type="",gen_ai_tool_name="web_search",gen_ai_tool_type="",le="0.5"} 300.0' in lines
    (wasted,) = [float(l.rsplit(" ", 1)[1]) for l in lines if l.startswith("agent_eval_tool_excess_cost_usd_total{")]
    assert abs(wasted - 300 * 0.003) < 1e-9
    assert "agent_eval_processor_spans_scored_total 300.0" in lines
    assert 'agent_eval_tool_cost_per_call_usd{gen_ai_tool_name="web_search"} 0.003' in lines

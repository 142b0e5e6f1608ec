"""The context counters (what tool results cost later model calls, docs/true-cost.md) in prometheus-client's
multiprocess mode: written by every forked worker, summed by the one endpoint, as the in-process counters count them.

prometheus-client picks its file-backed values when imported with PROMETHEUS_MULTIPROC_DIR set, so the app runs in
a process of its own (as in test_processes.py); the same runs go through an in-process processor here, whose
registry gives the figures each worker must add.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry

from otel_agent_eval import install

RUNS = '''
AGENT = "support_agent"
ROOT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
MODEL = "gpt-4o-mini"

def chat(tokens_in, tokens_out):
    return "chat " + MODEL, {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL,
                             "gen_ai.usage.input_tokens": tokens_in, "gen_ai.usage.output_tokens": tokens_out}

def tool(name, arguments, result):
    return "execute_tool " + name, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                    "gen_ai.tool.call.arguments": arguments, "gen_ai.tool.call.result": result}

# 1,000/50; local_index; 1,600 (550 added, held by 2 calls: 1,100); basic_calculator; 1,660 (20 added, held by 1)
RUN = (chat(1000, 50), tool("local_index", '{"query": "return policy"}', "Returns within 30 days. " * 20),
       chat(1600, 40), tool("basic_calculator", '{"expression": "19.99 * 3"}', "59.97"), chat(1660, 120))

def run_agents(provider, n):
    from opentelemetry.trace import set_span_in_context
    tracer = provider.get_tracer("agent")
    for r in range(n):
        t = r * 10_000_000_000
        root = tracer.start_span("invoke_agent " + AGENT, attributes=ROOT, start_time=t)
        context = set_span_in_context(root)
        for k, (name, attributes) in enumerate(RUN):
            tracer.start_span(name, context=context, attributes=attributes,
                              start_time=t + (k + 1) * 1_000_000).end(end_time=t + (k + 1) * 1_000_000 + 500_000)
        root.end(end_time=t + 1_000_000_000)
        # a run without model calls: its pair's calls are counted, their context cost is not (nothing measured it)
        root = tracer.start_span("invoke_agent triage_agent", start_time=t + 2_000_000_000,
                                 attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "triage_agent"})
        name, attributes = tool("web_search", '{"query": "returns"}', "no results")
        tracer.start_span(name, context=set_span_in_context(root), attributes=attributes,
                          start_time=t + 2_001_000_000).end(end_time=t + 2_002_000_000)
        root.end(end_time=t + 3_000_000_000)
'''

APP = RUNS + textwrap.dedent('''
    import multiprocessing, urllib.request
    from opentelemetry.sdk.trace import TracerProvider
    import otel_agent_eval

    provider = TracerProvider()
    processor = otel_agent_eval.install(tracer_provider=provider, port=0)   # in the "master", before forking

    def worker(n):
        run_agents(provider, n)
        provider.force_flush()

    if __name__ == "__main__":
        ctx = multiprocessing.get_context("fork")
        workers = [ctx.Process(target=worker, args=(RUNS_PER_WORKER,)) for _ in range(WORKERS)]
        for w in workers: w.start()
        for w in workers: w.join(60)
        assert all(w.exitcode == 0 for w in workers)
        host, port = processor.metrics_address
        print(urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode())
''')
WORKERS, RUNS_PER_WORKER = 3, 4
CONTEXT = ("agent_eval_tool_context_tokens_total", "agent_eval_tool_context_cost_usd_total",
           "agent_eval_tool_context_calls_total")


def _context_lines(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(CONTEXT)}


BUFFERED_APP = RUNS + textwrap.dedent('''
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.multiprocess import MultiProcessCollector
    from otel_agent_eval.otel.wiring import build_pipeline

    memory, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    run_agents(provider, RUNS_PER_WORKER)
    pipeline, metrics = build_pipeline(registry=None)
    metrics.mirror.buffer()  # as a serve worker: nothing written until a flush
    for span in memory.get_finished_spans():
        pipeline.ended(span)
    pipeline.close_all()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=sys.argv[1])
    before = generate_latest(registry).decode()
    metrics.mirror.flush(metrics)
    print(before)
    print("--- flushed")
    print(generate_latest(registry).decode())
''')


def _one_process() -> dict[str, float]:
    """The context series (those counted) of the runs of one worker, in this process, without the multiprocess mode."""
    from prometheus_client.exposition import generate_latest

    namespace: dict = {}
    exec(RUNS, namespace)  # the same runs, in this process, without the multiprocess mode
    provider, registry = TracerProvider(), CollectorRegistry()
    processor = install(tracer_provider=provider, registry=registry, serve_metrics=False, otlp_metrics=False)
    try:
        namespace["run_agents"](provider, RUNS_PER_WORKER)
        provider.force_flush()
        exposed = _context_lines(generate_latest(registry).decode())
        assert not any("triage_agent" in key for key in exposed)  # a tool-only agent: no context series, no zeros
        one_process = exposed
        assert one_process and all(one_process.values())
    finally:
        processor.shutdown()
    return one_process


def _app(tmp_path, text: str, *args: str) -> str:
    app = tmp_path / "app.py"
    app.write_text(text.replace("RUNS_PER_WORKER", str(RUNS_PER_WORKER)).replace("WORKERS", str(WORKERS)))
    multiproc = tmp_path / "prom"
    multiproc.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc)}
    run = subprocess.run([sys.executable, str(app), str(multiproc), *args], env=env, cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_forked_workers_write_the_context_counters_and_the_endpoint_sums_them(tmp_path):
    one_process = _one_process()
    tokens = 'agent_eval_tool_context_tokens_total{gen_ai_agent_name="support_agent",gen_ai_tool_name="local_index"}'
    assert one_process[tokens] == RUNS_PER_WORKER * 1_100  # the hand-worked figure: 550 added, held by 2 calls
    assert len(one_process) == 6  # tokens, cost (gpt-4o-mini is priced) and calls, for both tools

    summed = _context_lines(_app(tmp_path, APP))
    assert summed.keys() == one_process.keys()
    for key, value in one_process.items():  # each worker added what one process counts
        assert abs(summed[key] - WORKERS * value) <= 1e-12 + 1e-9 * abs(value), key


def test_a_buffered_mirror_writes_the_context_counters_when_flushed(tmp_path):
    """`serve --workers`: a worker's mirror writes nothing on an update and all its series at a flush; the context
    series of the pairs it measured are among them, as the unbuffered mirror writes them (and no others)."""
    one_process = _one_process()
    before, after = _app(tmp_path, BUFFERED_APP).split("--- flushed")
    assert _context_lines(before) == {}
    flushed = _context_lines(after)
    assert flushed.keys() == one_process.keys()
    for key, value in one_process.items():
        assert abs(flushed[key] - value) <= 1e-12 + 1e-9 * abs(value), key

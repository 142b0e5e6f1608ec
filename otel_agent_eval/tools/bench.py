"""What `AgentEvalSpanProcessor` adds to `span.end()`, against the bare SDK, in one run.

    python -m otel_agent_eval.bench [--spans N] [--rounds R] [--json]

Why it measures this way:

- The processor runs inside someone else's `span.end()`, so what matters is the cost it
  *adds* to `tracer.start_span(...)` + `span.end()`, as a ratio to the bare SDK timed in the
  same run: absolute µs differ between machines and, on a shared box, from minute to minute.
- Two figures per row, because the processor hands tool spans to its own thread (as
  `BatchSpanProcessor` does): **on the app's thread** (`thread_time_ns` of the loop: what
  `span.end()` costs the caller; the targets apply here) and **in total** (wall time of the
  loop plus the drain of the queue: every µs the processor spends, on any thread, with the
  GIL making the threads take turns).
- Each row's baseline differs only in our processor: same span name, attributes and parent;
  for the enriched copy, the same no-op `SpanProcessor()` as next stage (added to the bare
  provider, given to ours as `forward_to=`), so its calls cancel out.
- Tool spans are children of an open `invoke_agent` span, as in an agent run. That span
  starts and ends outside the timing: its end evaluates the run, a per-run cost. A tool
  span without a parent is a run of one call, so it gets a row of its own.
- Interleaved: each round runs every variant for N/R spans, in an order rotated per round,
  so drift hits all alike; noise only ever slows a run, so the median of the rounds is
  kept. A warm-up fills the caches (routes, static scores, metric series) first. GC is off
  while timing, so a collection cannot land in one variant; it runs between rounds.
- Throughput: a processor with `background=False` scoring finished spans handed to
  `on_end` directly: everything it does per tool span, on one thread.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context
from prometheus_client import CollectorRegistry

from ..core import conventions as c
from ..otel.processor import AgentEvalSpanProcessor

SPAN_NAME = "execute_tool web_search"
PLAIN_ATTRIBUTES = {"http.request.method": "GET", "http.route": "/orders/{id}", "http.response.status_code": 200}
TOOL_ATTRIBUTES = {
    c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
    c.GEN_AI_TOOL_NAME: "web_search",
    c.GEN_AI_TOOL_CALL_ID: "call_7f3a9c2e",
    c.GEN_AI_TOOL_CALL_ARGUMENTS: '{"query": "return policy", "max_results": 5}',
}
AGENT_ATTRIBUTES = {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT, c.GEN_AI_AGENT_NAME: "support_bot"}
VARIANTS = {  # name: (processor, attributes, inside an open agent span); pairs side by side
    "bare/plain": (None, PLAIN_ATTRIBUTES, False), "ours/plain": ("ours", PLAIN_ATTRIBUTES, False),
    "bare/tool": (None, TOOL_ATTRIBUTES, True), "ours/tool": ("ours", TOOL_ATTRIBUTES, True),
    "noop/tool": ("noop", TOOL_ATTRIBUTES, True), "ours+copy/tool": ("ours+copy", TOOL_ATTRIBUTES, True),
    "bare/plain-in-run": (None, PLAIN_ATTRIBUTES, True), "ours/plain-in-run": ("ours", PLAIN_ATTRIBUTES, True),
    "bare/root-tool": (None, TOOL_ATTRIBUTES, False), "ours/root-tool": ("ours", TOOL_ATTRIBUTES, False),
}
OVERHEAD_ROWS = (  # (row, variant, its baseline, target for added cost / baseline)
    ("non-tool span (3 plain attributes)", "ours/plain", "bare/plain", 0.05),
    ("tool span, no enriched copy", "ours/tool", "bare/tool", 0.25),
    ("tool span + enriched copy [1]", "ours+copy/tool", "noop/tool", 0.5),
    ("extra: non-tool span in an agent run", "ours/plain-in-run", "bare/plain-in-run", 0.05),
    ("extra: tool span as trace root [2]", "ours/root-tool", "bare/root-tool", 0.25),
)
THROUGHPUT_ROWS = (("on_end, no enriched copy", "on_end/tool"), ("on_end + enriched copy", "on_end+copy/tool"))
POOL = 1000  # distinct finished tool spans, cycled, for the direct on_end runs


def _processor(kind: str | None, **options: Any) -> SpanProcessor | None:
    if kind in (None, "noop"):
        return kind and SpanProcessor()
    return AgentEvalSpanProcessor(registry=CollectorRegistry(), forward_to=SpanProcessor() if kind == "ours+copy" else None, **options)


def _tracer(processor: SpanProcessor | None) -> Any:
    provider = TracerProvider()
    if processor is not None:
        provider.add_span_processor(processor)
    return provider.get_tracer(__name__)


def _end_to_end(kind: str | None, attributes: dict[str, Any], in_run: bool) -> Callable[[int], tuple[int, int]]:
    processor = _processor(kind)
    tracer = _tracer(processor)
    flush = processor.force_flush if isinstance(processor, AgentEvalSpanProcessor) else (lambda: True)

    def run(n: int) -> tuple[int, int]:
        """(ns of CPU on this thread for the loop, ns of wall time for the loop and the drain)"""
        agent = tracer.start_span("invoke_agent support_bot", attributes=AGENT_ATTRIBUTES) if in_run else None
        context, start = set_span_in_context(agent) if agent else None, tracer.start_span
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        for _ in range(n):
            start(SPAN_NAME, context=context, attributes=attributes).end()
        app = time.thread_time_ns() - c0
        flush()
        total = time.perf_counter_ns() - w0
        if agent:
            agent.end()
            flush()
        return app, total
    return run


def _on_end_only(kind: str, n_max: int) -> Callable[[int], tuple[int, int]]:
    exporter, ours = InMemorySpanExporter(), _processor(kind, background=False)
    tracer = _tracer(SimpleSpanProcessor(exporter))
    agent = tracer.start_span("invoke_agent support_bot", attributes=AGENT_ATTRIBUTES)
    ours.on_start(agent)  # so ours knows the run and scores the tool spans instead of holding them back
    for _ in range(POOL):
        tracer.start_span(SPAN_NAME, context=set_span_in_context(agent), attributes=TOOL_ATTRIBUTES).end()
    spans, on_end = (list(exporter.get_finished_spans()) * (n_max // POOL + 1))[:n_max], ours.on_end

    def run(n: int) -> tuple[int, int]:
        batch = spans if n == len(spans) else spans[:n]
        t0 = time.perf_counter_ns()
        for span in batch:
            on_end(span)
        elapsed = time.perf_counter_ns() - t0
        return elapsed, elapsed
    return run


def run(spans: int = 200_000, rounds: int = 20, *, warmup: int = 2_000) -> dict[str, Any]:
    """Time every variant; returns the machine, the `overhead` rows and the `throughput` rows."""
    chunk = max(1, spans // rounds)
    variants = {name: _end_to_end(*spec) for name, spec in VARIANTS.items()}
    variants["on_end/tool"], variants["on_end+copy/tool"] = _on_end_only("ours", chunk), _on_end_only("ours+copy", chunk)
    names, gc_was_enabled = list(variants), gc.isenabled()
    for name in names:
        variants[name](min(warmup, chunk))
    app: dict[str, list[float]] = {name: [] for name in names}
    total: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        gc.collect()
        gc.disable()
        try:
            for name in names[r % len(names):] + names[:r % len(names)]:
                a, t = variants[name](chunk)
                app[name].append(a / chunk / 1000)
                total[name].append(t / chunk / 1000)
        finally:
            if gc_was_enabled:
                gc.enable()
    us = {name: statistics.median(t) for name, t in app.items()}
    us_total = {name: statistics.median(t) for name, t in total.items()}
    overhead = []
    for row, v, b, target in OVERHEAD_ROWS:
        added, added_total = us[v] - us[b], us_total[v] - us_total[b]
        overhead.append({"row": row, "variant": v, "baseline": b, "us_per_span": us[v], "baseline_us": us[b],
                         "added_us": added, "ratio": added / us[b], "target": target, "ok": added / us[b] <= target,
                         "total_us_per_span": us_total[v], "total_baseline_us": us_total[b],
                         "total_added_us": added_total, "total_ratio": added_total / us_total[b]})
    throughput = [{"row": row, "variant": v, "us_per_span": us[v], "spans_per_s": 1e6 / us[v]} for row, v in THROUGHPUT_ROWS]
    machine = {"python": platform.python_version(), "implementation": platform.python_implementation(),
               "cpu_count": os.cpu_count(), "platform": platform.platform(),
               "opentelemetry_sdk": version("opentelemetry-sdk"), "prometheus_client": version("prometheus-client")}
    return {"machine": machine, "spans": chunk * rounds, "rounds": rounds, "span_name": SPAN_NAME,
            "plain_attributes": PLAIN_ATTRIBUTES, "tool_attributes": TOOL_ATTRIBUTES, "agent_attributes": AGENT_ATTRIBUTES,
            "overhead": overhead, "throughput": throughput}


def format_table(result: dict[str, Any]) -> str:
    m = result["machine"]
    machine = (f"Python {m['python']} ({m['implementation']}), {m['cpu_count']} CPUs, opentelemetry-sdk "
               f"{m['opentelemetry_sdk']}, prometheus-client {m['prometheus_client']}, {m['platform']}")
    method = f"{result['spans']} spans per variant in {result['rounds']} interleaved rounds, median of the rounds, GC off while timing"
    lines = [machine, method, "tool span: " + ", ".join(f"{k}={v}" for k, v in result["tool_attributes"].items()), "",
             f"{'':36} {'on the app thread (span.end)':^38}   {'in total (all threads)':^24}",
             f"{'start_span + end()':36} {'µs/span':>8} {'baseline':>8} {'added':>7} {'ratio':>7} {'target':>7}"
             f"   {'added µs':>9} {'ratio':>7}"]
    lines += [f"{r['row']:36} {r['us_per_span']:8.2f} {r['baseline_us']:8.2f} {r['added_us']:7.2f} {r['ratio']:6.3f}x "
              f"{'<=' + format(r['target'], 'g') + 'x':>7} {'OK' if r['ok'] else 'OVER':>4}"
              f" {r['total_added_us']:8.2f} {r['total_ratio']:6.3f}x" for r in result["overhead"]]
    lines += ["", f"{'processor alone, on_end(span) inline':36} {'µs/span':>8} {'tool spans/s':>13}"]
    lines += [f"{r['row']:36} {r['us_per_span']:8.2f} {r['spans_per_s']:13,.0f}" for r in result["throughput"]]
    lines += ["", "Baselines: a TracerProvider without our processor; same span name, attributes (3 plain or the 4 above)",
              "and parent: tool spans and spans 'in an agent run' are children of an open invoke_agent span",
              "(gen_ai.agent.name=support_bot), the others are trace roots.",
              "On the app thread: CPU time of the loop on the calling thread. In total: wall time of the loop plus",
              "the drain of the hand-off queue, so the scoring done by the processor's own thread is included.",
              "[1] Both sides forward to a no-op SpanProcessor(): added to the baseline's provider, given to ours as",
              "    forward_to=, so only our scoring and enriched copy differ.",
              "[2] A tool span without a local parent (e.g. in a tool server called over the network) is an agent",
              "    run of one call: it also assembles, evaluates and records that run."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m otel_agent_eval.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000, help="spans per variant, over all rounds (default 200000)")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds (default 20)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.spans < 1 or args.rounds < 1:
        parser.error("--spans and --rounds must be positive")
    result = run(args.spans, args.rounds)
    print(json.dumps(result, indent=2) if args.json else format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

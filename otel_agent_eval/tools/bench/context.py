"""The context-cost section: what measuring each tool call's true cost (core/context_cost.py) adds to the processor.

Why it measures this way: the headline workload has no model calls, so the attribution would have nothing to do
there. Here each run is what the attribution works on: an `invoke_agent` root, a model call (`chat`, token counts),
two tool calls with results, a second model call whose input grew by them, a third tool call and a last model call
(7 spans). The same processor runs it with the attribution and with it left out (`RunEvaluator.context_cost`
replaced by one that returns nothing, so no figure reaches the root, the events or the metrics), beside the bare
SDK, interleaved and rotated per round as the overhead section runs its variants; total process CPU per span
(the processor's thread included: `force_flush` is inside the timing), median of rounds, ratio to bare.
"""
from __future__ import annotations

import gc
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import set_span_in_context

from .processor import AGENT, ROOT_ATTRIBUTES, ROOT_NAME, RUN_PLAN, _processor, _provider

MODEL = "gpt-4o-mini"
OP, TOOL_NAME, TOOL_ARGS, TOOL_RESULT = ("gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.arguments",
                                         "gen_ai.tool.call.result")


def _chat(tokens_in: int, tokens_out: int) -> tuple[str, dict[str, Any]]:
    return f"chat {MODEL}", {OP: "chat", "gen_ai.request.model": MODEL, "gen_ai.usage.input_tokens": tokens_in,
                             "gen_ai.usage.output_tokens": tokens_out}


def _tool(name: str, arguments: dict[str, Any], result: str) -> tuple[str, dict[str, Any]]:
    return f"execute_tool {name}", {OP: "execute_tool", TOOL_NAME: name, TOOL_ARGS: json.dumps(arguments), TOOL_RESULT: result}


RUN = (  # one run, in the order its spans end
    _chat(1_000, 50),
    _tool("local_index", {"query": "return policy"}, "Returns are accepted within 30 days. " * 20),
    _tool("web_search", {"query": "return policy", "max_results": 5}, "1. Return policy - example.com ... " * 60),
    _chat(1_600, 40),
    _tool("basic_calculator", {"expression": "19.99 * 3"}, "59.97"),
    _chat(1_660, 120),
)
TOOLS_ONLY = RUN_PLAN[0]  # the overhead section's run (4 tool calls, no model call): the attribution has nothing to do
WORKLOADS = {"with model calls": RUN, "tool calls only (the overhead section's runs)": TOOLS_ONLY}
VARIANTS = (
    ("bare", "bare TracerProvider"),
    ("ours-no-context", "AgentEvalSpanProcessor, context cost left out"),
    ("ours", "AgentEvalSpanProcessor"),
)


def _build(key: str) -> Any:
    processor = _processor("ours" if key.startswith("ours") else key)
    if key == "ours-no-context":
        processor.pipeline.state.evaluator.context_cost = lambda run: None  # the attribution left out, nothing else
    return processor


def _timed_block(tracer: Any, flush: Callable[[], Any], runs: int, plan: Any) -> int:
    start, in_context = tracer.start_span, set_span_in_context
    c0 = time.process_time_ns()
    for _ in range(runs):
        root = start(ROOT_NAME, attributes=ROOT_ATTRIBUTES)
        context = in_context(root)
        for name, attributes in plan:
            start(name, context=context, attributes=attributes).end()
        root.end()
    flush()
    return time.process_time_ns() - c0


def context_cost_section(runs: int, rounds: int, warmup: int) -> dict[str, Any]:
    """Each workload: the three variants interleaved; per-span total CPU and its ratio to the bare SDK."""
    return {name: _workload(plan, runs, rounds, warmup) for name, plan in WORKLOADS.items()}


def _workload(plan: Any, runs: int, rounds: int, warmup: int) -> dict[str, Any]:
    per_round = max(1, runs // rounds)
    spans_per_run = 1 + len(plan)
    keys = [key for key, _ in VARIANTS]
    processors = {key: (_build(key) if key != "bare" else None) for key in keys}
    providers = {key: _provider(p) for key, p in processors.items()}
    tracers = {key: providers[key].get_tracer(__name__) for key in keys}
    flushes = {key: (p.force_flush if p is not None else (lambda: True)) for key, p in processors.items()}
    cpu: dict[str, list[float]] = {k: [] for k in keys}
    gc_was_enabled = gc.isenabled()
    try:
        for key in keys:
            _timed_block(tracers[key], flushes[key], max(1, min(warmup, per_round)), plan)
        for r in range(rounds):
            gc.collect()
            gc.disable()
            try:
                for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                    cpu[key].append(_timed_block(tracers[key], flushes[key], per_round, plan) / (per_round * spans_per_run) / 1000)
            finally:
                if gc_was_enabled:
                    gc.enable()
    finally:
        for provider in providers.values():
            provider.shutdown()
    bare = statistics.median(cpu["bare"])
    rows = [{"variant": key, "label": label, "total_cpu_us": statistics.median(cpu[key]),
             "total_cpu_ratio": statistics.median(cpu[key]) / bare} for key, label in VARIANTS]
    return {"runs": per_round * rounds, "spans": per_round * rounds * spans_per_run, "rounds": rounds, "rows": rows}


def format_context_cost(section: dict[str, Any]) -> list[str]:
    lines = ["", f"CONTEXT COST (what measuring each tool call's true cost adds), runs of invoke_agent {AGENT}; interleaved "
             "rounds, median; total CPU, all threads"]
    for name, workload in section.items():
        rows = {r["variant"]: r for r in workload["rows"]}
        lines.append(f"  {name}: {workload['runs']:,} runs = {workload['spans']:,} spans per variant, {workload['rounds']} rounds")
        lines += [f"    {r['label']:48} {r['total_cpu_us']:7.2f} µs/span {r['total_cpu_ratio']:5.2f}x" for r in workload["rows"]]
        with_it, without = rows["ours"]["total_cpu_us"], rows["ours-no-context"]["total_cpu_us"]
        lines.append(f"    the attribution's share: {with_it - without:+.2f} µs/span ({with_it / without - 1:+.1%} of the "
                     "processor's total CPU)")
    lines.append("  A shared machine moves these figures by several percent between runs.")
    return lines

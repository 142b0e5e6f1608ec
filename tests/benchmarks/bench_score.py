"""Throughput and memory of `score_traces` on a large Collector file-exporter file.

    python tests/benchmarks/bench_score.py [SPANS] [--gzip]

Not a test (pytest collects only test_*.py): writes SPANS spans (default 1,000,000) of
agent runs as OTLP/JSON lines (512 spans a line, as a Collector batch), scores them on one
core, and prints the time, spans per second and the peak resident memory, with the peak
after a tenth of the input, so flat memory shows as two close figures.
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import sys
import tempfile
import time

from otel_agent_eval.offline.score import score_traces

T0 = 1_750_000_000_000_000_000
TOOLS = ["local_index", "web_search", "basic_calculator", "code_interpreter", "simple_filter", "ml_pipeline"]
AGENTS = ["support_agent", "math_agent", "analytics_bot", "forecaster"]


def _kv(key: str, value: object) -> dict[str, object]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _span(trace: int, span: int, parent: int | None, name: str, start: int, end: int, attrs: dict[str, object]) -> dict[str, object]:
    out: dict[str, object] = {"traceId": f"{trace:032x}", "spanId": f"{span:016x}", "name": name, "kind": 1,
                              "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
                              "attributes": [_kv(k, v) for k, v in attrs.items()], "status": {}, "flags": 256}
    if parent:
        out["parentSpanId"] = f"{parent:016x}"
    return out


def spans(count: int):
    """Agent runs of four spans (an LLM call, two tool calls, the root), in end order."""
    now, trace = T0, 0
    while True:
        trace += 1
        root, agent = trace * 16, AGENTS[trace % len(AGENTS)]
        start = now
        yield _span(trace, root + 1, root, "chat gpt-4o-mini", now, now + 300_000_000, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.usage.input_tokens": 500, "gen_ai.usage.output_tokens": 100})
        now += 300_000_000
        for i in range(2):
            tool = TOOLS[(trace + i) % len(TOOLS)]
            yield _span(trace, root + 2 + i, root, f"execute_tool {tool}", now, now + (trace % 7 + 1) * 40_000_000, {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                "gen_ai.tool.call.arguments": json.dumps({"query": f"q{trace % 13}"})})
            now += (trace % 7 + 1) * 40_000_000
        yield _span(trace, root, None, f"invoke_agent {agent}", start, now + 1_000_000, {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent})
        now += 2_000_000
        count -= 4
        if count <= 0:
            return


def write(path: str, count: int, compress: bool) -> None:
    opener = gzip.open if compress else open
    resource_ = {"attributes": [_kv("service.name", "bench")]}
    with opener(path, "wt") as out:
        batch: list[dict[str, object]] = []
        for span in spans(count):
            batch.append(span)
            if len(batch) == 512:
                out.write(json.dumps({"resourceSpans": [{"resource": resource_, "scopeSpans": [{"scope": {"name": "bench"}, "spans": batch}]}]}, separators=(",", ":")) + "\n")
                batch = []
        if batch:
            out.write(json.dumps({"resourceSpans": [{"resource": resource_, "scopeSpans": [{"scope": {"name": "bench"}, "spans": batch}]}]}, separators=(",", ":")) + "\n")


def main() -> None:
    count = int(next((a for a in sys.argv[1:] if a.isdigit()), 1_000_000))
    compress = "--gzip" in sys.argv
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "traces.json" + (".gz" if compress else ""))
        write(path, count, compress)
        size = os.path.getsize(path)
        peaks: list[int] = []
        calls = [0]

        def on_call(record: object, score: object) -> None:
            calls[0] += 1
            if calls[0] == count // 20:  # a tenth of the spans are tool calls here
                peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

        started, cpu = time.perf_counter(), time.process_time()
        report = score_traces(path, on_call=on_call)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{report.inputs.spans:,} spans ({size / 2**20:.0f} MiB{' gzip' if compress else ''}): {report.calls:,} calls, "
          f"{report.runs:,} runs scored in {wall:.1f} s wall, {cpu:.1f} s CPU ({report.inputs.spans / cpu:,.0f} spans/s of CPU)")
    print(f"peak RSS: {peaks[0] / 1024 if peaks else float('nan'):.0f} MiB after a tenth, {peak / 1024:.0f} MiB at the end")


if __name__ == "__main__":
    main()

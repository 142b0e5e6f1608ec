"""Throughput and memory of `score_traces` on a large Collector file-exporter file.

    python tests/benchmarks/bench_score.py [SPANS] [--gzip] [--demo] [--file PATH] [--rounds N]

Not a test (pytest collects only test_*.py): writes SPANS spans (default 1,000,000) of
agent runs as OTLP/JSON lines (512 spans a line, as a Collector batch), scores them on one
core, and prints the time, spans per second and the peak resident memory, with the peak
after a tenth of the input, so flat memory shows as two close figures.

`--demo` writes whole runs of the demo's simulated agents (`otel_agent_eval.tools.demo`: an agent
span, two chats, one or two tool calls, with arguments, results, errors and events) instead of the
four-span runs below; `--file PATH` keeps the file there (written once, reused when it exists).
Each of `--rounds` rounds (default 1) scores the file in a fresh process and decodes it with
`orjson` alone, the anchor: what reading the lines costs before a span is built.
"""
from __future__ import annotations

import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel_agent_eval.offline.score import score_traces
from otel_agent_eval.tools.demo import run_workload

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' helpers
from test_score import collector_json  # noqa: E402 - the Collector's file exporter's JSON, as the tests write it

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


class _CollectorFileExporter(SpanExporter):
    """Spans as the Collector's file exporter writes them: a request of 512 spans a line, hex ids, numeric enums."""

    def __init__(self, out: object) -> None:
        self.out, self.batch = out, []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batch += spans
        if len(self.batch) >= 512:
            self.flush()
        return SpanExportResult.SUCCESS

    def flush(self) -> None:
        if self.batch:
            self.out.write(json.dumps(collector_json(self.batch), separators=(",", ":")) + "\n")
            self.batch = []


def write_demo(path: str, count: int, compress: bool) -> None:
    """About `count` spans of the demo's simulated agent runs (4.1 spans a run), one run a second of recorded time."""
    now = [T0]

    def clock() -> int:
        now[0] += 1_000_000_000
        return now[0]

    opener = gzip.open if compress else open
    with opener(path, "wt") as out:
        exporter = _CollectorFileExporter(out)
        written = 0
        while written < count:
            runs = max(1, min(1000, (count - written) // 4))
            written += run_workload(SimpleSpanProcessor(exporter), runs=runs, seed=written, clock=clock).spans
        exporter.flush()


def orjson_only(path: str) -> float:
    """CPU seconds to read the file's lines and decode each with orjson, building nothing: the anchor."""
    opener = gzip.open if path.endswith(".gz") else open
    cpu = time.process_time()
    with opener(path, "rb") as lines:
        for line in lines:
            orjson.loads(line)
    return time.process_time() - cpu


def rounds(path: str, count: int) -> None:
    """Score the file in a fresh process per round, beside an orjson-only read; medians per million spans."""
    scored, decoded = [], []
    for number in range(count):
        result = subprocess.run([sys.executable, __file__, "--file", path, "--rounds", "0"], check=True,
                                capture_output=True, text=True)
        print(f"round {number + 1}: {result.stdout.strip()}")
        spans, cpu = (float(v) for v in result.stdout.split("CSV:")[1].split(","))
        scored.append(cpu / spans * 1e6)
        decoded.append(orjson_only(path) / spans * 1e6)
    print(f"median CPU per million spans: score {statistics.median(scored):.1f} s, orjson decode alone "
          f"{statistics.median(decoded):.1f} s (score {', '.join(f'{v:.1f}' for v in scored)}; "
          f"orjson {', '.join(f'{v:.1f}' for v in decoded)})")


def main() -> None:
    count = int(next((a for a in sys.argv[1:] if a.isdigit()), 1_000_000))
    compress = "--gzip" in sys.argv
    given = sys.argv[sys.argv.index("--file") + 1] if "--file" in sys.argv else None
    repeat = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 1
    with tempfile.TemporaryDirectory() as directory:
        path = given or os.path.join(directory, "traces.json" + (".gz" if compress else ""))
        if not os.path.exists(path):
            (write_demo if "--demo" in sys.argv else write)(path, count, compress)
        if repeat > 0:
            rounds(path, repeat)
            return
        size = os.path.getsize(path)
        peaks: list[int] = []

        def on_progress(done: int, total: int) -> None:
            if not peaks and done >= total / 10:
                peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

        started, cpu = time.perf_counter(), time.process_time()
        report = score_traces(path, on_progress=on_progress)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{report.inputs.spans:,} spans ({size / 2**20:.0f} MiB{' gzip' if compress else ''}): {report.calls:,} calls, "
          f"{report.runs:,} runs scored in {wall:.1f} s wall, {cpu:.1f} s CPU ({report.inputs.spans / cpu:,.0f} spans/s of CPU)")
    print(f"peak RSS: {peaks[0] / 1024 if peaks else float('nan'):.0f} MiB after a tenth, {peak / 1024:.0f} MiB at the end")
    print(f"CSV:{report.inputs.spans},{cpu}")


if __name__ == "__main__":
    main()

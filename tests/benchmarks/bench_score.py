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

The same measure on the demo runs, in one run with the other figures, is the score section of
`python -m otel_agent_eval.bench --section score` (otel_agent_eval/tools/bench/score.py, whose
demo writer and orjson anchor this script uses); `--gzip` and the four-span runs are here only.
"""
from __future__ import annotations

import gzip
import json
import os
import statistics
import sys
import tempfile

from otel_agent_eval.tools.bench.score import T0, orjson_only, score_once, write_demo

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


def rounds(path: str, count: int, compress: bool) -> None:
    """Score the file in a fresh process per round, beside an orjson-only read; medians per million spans."""
    scored, decoded = [], []
    size = os.path.getsize(path)
    for number in range(count):
        r = score_once(path)
        print(f"round {number + 1}: {r['spans']:,} spans ({size / 2**20:.0f} MiB{' gzip' if compress else ''}): "
              f"{r['calls']:,} calls, {r['runs']:,} runs scored in {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU "
              f"({r['spans'] / r['cpu_s']:,.0f} spans/s of CPU); peak RSS: {r['rss_tenth_mib'] or float('nan'):.0f} MiB "
              f"after a tenth, {r['rss_end_mib']:.0f} MiB at the end")
        scored.append(r["cpu_s"] / r["spans"] * 1e6)
        decoded.append(orjson_only(path) / r["spans"] * 1e6)
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
            if "--demo" in sys.argv:
                write_demo(path, count, gzip.open if compress else open)
            else:
                write(path, count, compress)
        rounds(path, max(1, repeat), compress)


if __name__ == "__main__":
    main()

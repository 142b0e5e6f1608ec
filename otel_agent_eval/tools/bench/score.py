"""The score section: `score_traces` on a Collector file-exporter file of demo agent runs, beside a plain orjson read.

The file holds whole runs of the demo's simulated agents (an agent span, chats, one or two tool calls with
arguments, results, errors and events) as the Collector's file exporter writes them: one OTLP/JSON request of 512
spans a line, hex ids, numeric enums. It is written once per run into a temporary directory (or kept at a given
path and reused). Each round scores it in a fresh process (CPU of `score_traces` alone, not the interpreter's start)
and decodes its lines with orjson alone in this one: the anchor, what reading the lines costs before a span is
built. A third fresh process does score's reading alone (spans built and put in replay order, none evaluated): the
rest of score's CPU is the evaluation. The figures are CPU seconds per million spans, the median of the rounds, and their ratio; beside them the
scoring process's peak resident memory after a tenth of the input and at the end (flat memory: two close figures).
"""
from __future__ import annotations

import base64
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import orjson
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from ..demo import run_workload

T0 = 1_750_000_000_000_000_000
SPANS_PER_LINE = 512


def collector_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """One request as the Collector's file exporter writes it: protobuf's JSON mapping with hex ids and numeric enums."""
    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in data["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return data


class CollectorFileExporter(SpanExporter):
    """Spans as the Collector's file exporter writes them: a request of 512 spans a line."""

    def __init__(self, out: Any) -> None:
        self.out, self.batch = out, []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.batch += spans
        if len(self.batch) >= SPANS_PER_LINE:
            self.flush()
        return SpanExportResult.SUCCESS

    def flush(self) -> None:
        if self.batch:
            self.out.write(json.dumps(collector_json(self.batch), separators=(",", ":")) + "\n")
            self.batch = []


def write_demo(path: str, count: int, opener: Any = open, noise_leaves: int = 0) -> int:
    """About `count` spans of the demo's simulated agent runs (4.1 spans a run; 13.4 with `noise_leaves`=3, the
    realistic mix), one run a second of recorded time."""
    now = [T0]

    def clock() -> int:
        now[0] += 1_000_000_000
        return now[0]

    written = 0
    with opener(path, "wt") as out:
        exporter = CollectorFileExporter(out)
        while written < count:
            runs = max(1, min(1000, (count - written) // (4 + 3 * noise_leaves)))
            written += run_workload(SimpleSpanProcessor(exporter), runs=runs, seed=written, clock=clock,
                                    noise_leaves=noise_leaves).spans
        exporter.flush()
    return written


def orjson_only(path: str) -> float:
    """CPU seconds to read the file's lines and decode each with orjson, building nothing: the anchor."""
    opener: Any = __import__("gzip").open if path.endswith(".gz") else open
    cpu = time.process_time()
    with opener(path, "rb") as lines:
        for line in lines:
            orjson.loads(line)
    return time.process_time() - cpu


def score_child(path: str) -> None:
    """In the fresh process: scores `path` and prints one JSON line of what it took."""
    from ...offline.score import score_traces

    peaks: list[int] = []

    def on_progress(done: int, total: int) -> None:
        if not peaks and done >= total / 10:
            peaks.append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

    started, cpu = time.perf_counter(), time.process_time()
    report = score_traces(path, on_progress=on_progress)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"spans": report.inputs.spans, "calls": report.calls, "runs": report.runs, "cpu_s": cpu,
                      "wall_s": wall, "rss_tenth_mib": peaks[0] / 1024 if peaks else None, "rss_end_mib": peak / 1024}))


def read_child(path: str) -> None:
    """In the fresh process: score's reading alone (lines decoded, spans built, repeats dropped, put in replay
    order), nothing evaluated; prints one JSON line with its CPU seconds."""
    from ...offline.recorded import RecordedSpans
    from ...offline.score import DEFAULT_REORDER_SPANS, agent_start_reader, fewer_collections, first_copies, replay_events
    from ...otel.wiring import build_pipeline

    from ...core import noise

    pipeline, _ = build_pipeline(registry=None, sees_starts=False)  # what names an agent at its start
    at = agent_start_reader(pipeline).at
    cpu = time.process_time()
    spans = RecordedSpans(path, noise=noise.json_noise(noise.typed_keys(None)) if noise.FAST_PATH else None)  # as score
    with fewer_collections():
        for _ in replay_events(first_copies(spans), at, DEFAULT_REORDER_SPANS):
            pass
    print(json.dumps({"spans": spans.stats.spans, "cpu_s": time.process_time() - cpu}))


def score_once(path: str, mode: str = "--score-child", env: dict[str, str] | None = None) -> dict[str, Any]:
    """What the fresh process printed: scoring `path`, or (`--read-child`) reading it alone; `env`: added to its
    environment (`OTEL_AGENT_EVAL_NOISE_FAST_PATH=0`: the old path)."""
    child = subprocess.run([sys.executable, "-m", "otel_agent_eval.bench", mode, path],
                           capture_output=True, text=True, env={**os.environ, **env} if env else None)
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"scoring {path} failed (exit {child.returncode}): {last}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def score_section(spans: int, rounds: int, path: str | None = None) -> dict[str, Any]:
    """`rounds` rounds of score (fresh process) and the orjson read, on a demo file of about `spans` spans."""
    with tempfile.TemporaryDirectory(prefix="bench-score-") as directory:
        path_given = path is not None
        path = path or os.path.join(directory, "traces.json")
        written = None
        if not os.path.exists(path):
            t0 = time.perf_counter()
            written = write_demo(path, spans)
            write_s = time.perf_counter() - t0
        result: dict[str, Any] = {"file": path if path_given else None, "bytes": os.path.getsize(path), "written_now": written is not None,
                                  "write_s": write_s if written is not None else None, "rounds": []}
        for _ in range(rounds):
            scored = score_once(path)
            if not scored["spans"]:
                raise RuntimeError(f"{path}: no spans that score reads (the section wants OTLP/JSON lines)")
            read = score_once(path, "--read-child")
            if read["spans"] != scored["spans"]:
                raise RuntimeError(f"{path}: reading alone found {read['spans']:,} spans, scoring {scored['spans']:,}")
            scored["read_cpu_s"] = read["cpu_s"]
            try:
                scored["orjson_cpu_s"] = orjson_only(path)
            except orjson.JSONDecodeError as exc:
                raise RuntimeError(f"{path}: a line orjson cannot read ({exc})") from None
            result["rounds"].append(scored)
    first = result["rounds"][0]
    per_million = 1e6 / first["spans"]
    score_s = statistics.median(r["cpu_s"] for r in result["rounds"]) * per_million
    orjson_s = statistics.median(r["orjson_cpu_s"] for r in result["rounds"]) * per_million
    read_s = statistics.median(r["read_cpu_s"] for r in result["rounds"]) * per_million
    result.update(spans=first["spans"], calls=first["calls"], runs=first["runs"],
                  score_cpu_s_per_million=score_s, orjson_cpu_s_per_million=orjson_s, ratio=score_s / orjson_s,
                  read_cpu_s_per_million=read_s,
                  rss_tenth_mib=first["rss_tenth_mib"], rss_end_mib=max(r["rss_end_mib"] for r in result["rounds"]))
    return result

"""The serve-judge section: what the online judge costs `serve` at capacity, beside `serve` with the judge off.

`otel-agent-eval serve` runs as a process with its default judge settings (a 10 % sample, at most 60 judgements a
minute, a 30 s timeout, the argument judge on) three ways, in the same run and interleaved in rounds: the judge
off; judging against an endpoint that hangs (every request held until the section ends); judging against an
endpoint that answers (the scripted OpenAI-compatible server of the tests, `judge_server.py`, in this process).
Each is fed the serve section's 512-span requests of whole demo agent runs (`serve.py`: its load, its counting
sink as the next hop, its CPU readings from /proc), for a short warm-up, then for the measured window: a minute
by default, because the cap allows 60 judgements in any 60 s, and against a local endpoint that answers at once a
process judges 60 runs in the first seconds of each minute and then none; any minute holds the cap's 60. The
figure is spans per CPU-second of the serve process over the window and the drain; the ratios are each judging
variant's over the judge off's. Judgements (`agent_eval_judgements_total`) are read from serve's /metrics before
it stops. serve makes the judge's model at its start (deepeval's import, `OnlineJudge.prepare`): not in the window.
"""
from __future__ import annotations

import statistics
import tempfile
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .judge_server import JudgeServer, Reply
from .serve import Load, Sink, _drain, measure, requests_of, start_serve

MODEL = "bench-judge"  # unpriced: only the per-minute cap bounds it, as for any model no price source knows
VARIANTS = (("off", "judge off"), ("hanging", "judge on, endpoint hangs"), ("answering", "judge on, endpoint answers"))


def _judge_env(base_url: str) -> dict[str, str]:
    """The judge on with every other judge setting at its default (`OTEL_AGENT_EVAL_JUDGE_*` unset)."""
    return {"OTEL_AGENT_EVAL_JUDGE_MODEL": MODEL, "OTEL_AGENT_EVAL_JUDGE_BASE_URL": base_url,
            "DEEPEVAL_TELEMETRY_OPT_OUT": "YES"}


def judgements(metrics_url: str) -> dict[str, float]:
    """`agent_eval_judgements_total` by outcome, from serve's /metrics (empty with the judge off)."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    return {s.labels["outcome"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "agent_eval_judgements_total"}


def one_variant(label: str, base_url: str | None, requests: list[tuple[bytes, int]], connections: int, warm_s: float,
                seconds: float) -> dict[str, Any]:
    """Start serve (judging against `base_url`, or not), warm it up, measure the window, stop it: the serve section's
    row, with the window's judgements and the accounting over the warm-up and the window."""
    sink = Sink()
    with tempfile.TemporaryFile("w+") as log:
        try:
            hop = start_serve(sink, 1, log, name=f"serve, {label}", env=_judge_env(base_url) if base_url else None)
            warm = Load(hop.address, requests)
            warm.run(connections, warm_s)
            _drain(hop, warm.acked_spans)
            before = judgements(hop.telemetry_url)
            after: dict[str, float] = {}
            row = measure(hop, requests, None, connections, seconds,
                          before_stop=lambda h: after.update(judgements(h.telemetry_url)))
        finally:
            sink.close()
    row["judgements"] = {k: v - before.get(k, 0.0) for k, v in after.items()}
    account = row["accounting"]  # serve's own count is since its start: the warm-up's spans belong in the sum
    account["acknowledged"] += warm.acked_spans
    account["sink"] = sink.spans
    account["equal"] = (account["acknowledged"] == account["accepted"] == account["forwarded"] == account["sink"]
                        and account["failed"] == 0)
    return row


def serve_judge_section(seconds: float, connections: int, spans_per_request: int, runs: int, rounds: int,
                        warm_s: float) -> dict[str, Any]:
    """Each variant `rounds` times, interleaved; the median spans per CPU-second of each and its ratio to the judge off."""
    requests = requests_of(spans_per_request, runs)
    servers = {"hanging": JudgeServer(respond=lambda _: Reply(hang=True)), "answering": JudgeServer()}
    for server in servers.values():
        server.start()
    rows: list[dict[str, Any]] = []
    try:
        for round_ in range(rounds):
            for variant, label in VARIANTS:
                server = servers.get(variant)
                row = one_variant(label, server.base_url if server else None, requests, connections, warm_s, seconds)
                rows.append({**row, "variant": variant, "label": label, "round": round_})
    finally:
        for server in servers.values():
            server.close()
    summary = []
    for variant, label in VARIANTS:
        mine = [r for r in rows if r["variant"] == variant]
        summary.append({"variant": variant, "label": label,
                        "spans_per_cpu_s": statistics.median(r["spans_per_cpu_s"] for r in mine),
                        "range": (min(r["spans_per_cpu_s"] for r in mine), max(r["spans_per_cpu_s"] for r in mine)),
                        "judged_per_s": statistics.median(r["judgements"].get("judged", 0.0) / r["seconds"] for r in mine),
                        "equal": all(r["accounting"]["equal"] for r in mine)})
    off = summary[0]["spans_per_cpu_s"]
    for s in summary:
        s["ratio"] = s["spans_per_cpu_s"] / off if off else None
    return {"spans_per_request": spans_per_request, "connections": connections, "seconds": seconds, "rounds": rounds,
            "warm_s": warm_s, "model": MODEL, "rows": rows, "summary": summary}


def serve_judge_lines(j: dict[str, Any]) -> list[str]:
    """The section as the report prints it."""
    lines = [f"SERVE WITH THE JUDGE: one serve process, the judge's defaults (10 % sample, 60 a minute, 30 s timeout, "
             f"argument judge on), {j['spans_per_request']} spans a request, {j['connections']} connections for "
             f"{j['seconds']:g} s after a {j['warm_s']:g}-s warm-up, {j['rounds']} interleaved rounds, median; the serve "
             "process's CPU from /proc",
             f"  {'variant':28} {'spans per CPU-s':>16} {'range':>17} {'ratio':>6} {'judged/s':>9}  accounting"]
    for s in j["summary"]:
        low, high = s["range"]
        lines.append(f"  {s['label']:28} {s['spans_per_cpu_s']:16,.0f} {low:8,.0f}-{high:<8,.0f} {s['ratio']:5.2f}x "
                     f"{s['judged_per_s']:9.2f}  " + ("no accepted span lost" if s["equal"] else "MISMATCH"))
    return lines

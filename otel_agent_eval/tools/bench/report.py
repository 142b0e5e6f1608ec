"""The bench's results as the text report a person reads."""
from __future__ import annotations

from typing import Any


from ...serve.os_threads import FORWARD, INTAKE
from .instructions import COUNT_WARMUP
from .context import format_context_cost
from .judge import serve_judge_lines
from .mix import mix_lines
from .processor import AGENT, CALLS_PER_RUN, SAMPLE_EVERY, TOOLS
from .scale import BUILD_CAP_S


# issue #27's goals for the fleet paths
SERVE_SPANS_PER_CPU_S = 30_000  # one process
WORKERS_SCALING = 1.8  # --workers 2 against one process, spans/s
P99_MS = 50.0  # ingest latency at half capacity
SCORE_CPU_S_PER_MILLION = 10.0


def _goal(what: str, met: bool, measured: str) -> str:
    return f"  Goal (issue #27), {what}: {'met' if met else 'MISSED'} ({measured})."


def _fmt(value: float | None, spec: str = ".2f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _overhead_table(o: dict[str, Any]) -> list[str]:
    lines = [f"{o['rounds']} interleaved rounds (order rotated), median of rounds, ratio = median / bare's median; GC off while timing",
             "",
             f"{'':42} {'total CPU, all threads':^23}   {'app-thread wall':^15}  {'app CPU':>7}   {'single end() wall, µs':^29}",
             f"{'variant':42} {'µs/span':>7} {'ratio':>6} {'target':>8}   {'µs/span':>7} {'ratio':>6}  "
             f"{'µs/span':>7}   {'tool p99':>8} {'max':>6} {'root p99':>8} {'max':>6}"]
    for r in o["rows"]:
        target = "" if r["target"] is None else f"<={r['target']:g}x"
        lines.append(f"{r['label']:42} {r['total_cpu_us']:7.2f} {r['total_cpu_ratio']:5.2f}x {target:>8}   "
                     f"{r['app_wall_us']:7.2f} {r['app_wall_ratio']:5.2f}x  {r['app_cpu_us']:7.2f}   "
                     f"{r['tool_end_p99_us']:8.1f} {r['tool_end_max_us']:6.0f} {r['root_end_p99_us']:8.1f} {r['root_end_max_us']:6.0f}")
    lines.append("")
    return lines


def format_report(result: dict[str, Any]) -> str:
    e = result["environment"]
    load = e.get("load_average")
    lines = [f"Python {e['python']} ({e['implementation']}), {e['cpu_count']} CPUs, opentelemetry-sdk {e['opentelemetry_sdk']}, "
             f"prometheus-client {e['prometheus_client']}, otel-agent-eval {e['otel_agent_eval']}",
             f"{e['platform']}; load average {', '.join(f'{x:.1f}' for x in load) if load else 'n/a'} at start"
             + (f", {', '.join(f'{x:.1f}' for x in e['load_average_end'])} at end" if e.get("load_average_end") else "")
             + (" (quick run: tiny sizes, figures are not meaningful)" if result.get("quick") else "")]
    if "overhead" in result:
        o = result["overhead"]
        lines += ["", f"OVERHEAD PER SPAN: whole agent runs (invoke_agent {AGENT} + {CALLS_PER_RUN} execute_tool children over "
                  f"{len(TOOLS)} tools), {o['runs']:,} runs = {o['spans']:,} spans per variant,", *_overhead_table(o)]
        for r in o["rows"]:
            if r["target"] is not None:
                verdict = ("met" if r["target_met"] else
                           f"MISSED by {r['total_cpu_ratio'] - r['target']:.2f}x ({r['total_cpu_ratio']:.2f}x > {r['target']:g}x)")
                lines.append(f"Goal (issue #27), {r['label']}: total CPU <= {r['target']:g}x bare: {verdict}.")
        lines += ["Total CPU: process_time around the loop plus the processor's force_flush(), so work on its thread counts.",
                  "App-thread wall: the loop alone; under the GIL another thread's work makes it slower. App CPU: reference only.",
                  f"end() wall: every {SAMPLE_EVERY}th run's root and tool span.end() timed one by one, p99 and max over all rounds;",
                  "the bare SDK's max is the floor a busy machine sets (the OS descheduling the process), not a cost."]
    if "floor" in result:
        o = result["floor"]
        lines += ["", f"FLOOR: the processor with its scoring left out (every span passes through its hooks, queue and thread "
                  f"unscored), beside the whole processor; {o['runs']:,} whole runs per variant,", *_overhead_table(o),
                  "A target's ratio less the floor's is what reading, scoring, tracking and evaluating may spend; the whole "
                  "processor's ratio less it is what they spend."]
    if "throughput" in result:
        lines += ["", "THROUGHPUT, the processor alone (background=False; the on_start/on_end calls of recorded whole runs replayed; "
                  "process CPU, median of rounds)"]
        lines += [f"  {r['label']:42} {r['us_per_run']:8.1f} µs/run {r['tool_spans_per_s_per_core']:10,.0f} tool spans/s per core"
                  for r in result["throughput"]]
    if "scrape_under_load" in result:
        s = result["scrape_under_load"]
        lines += ["", f"SCRAPE UNDER LOAD (one thread ends whole runs flat out into AgentEvalSpanProcessor; another runs "
                  f"generate_latest every {s['pause_ms']:g} ms; {s['seconds']:.1f} s)",
                  f"  {s['scrapes']} scrapes (p99 of fewer than 100 is their max): p50 {s['p50_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms, max {s['max_ms']:.2f} ms; "
                  f"exposition {s['samples']:,} samples, {s['bytes']:,} bytes; load meanwhile {s['load_runs_per_s']:,.0f} runs/s"]
    if "scrape_size" in result:
        rows = result["scrape_size"]
        lines += ["", f"SCRAPE SIZE, many series ({rows[0]['series']}, one exposition)",
                  f"  {'':62} {'samples':>8} {'bytes':>10} {'ms/scrape':>10}"]
        lines += [f"  {r['row']:62} {r['samples']:8,} {r['bytes']:10,} {r['s_per_scrape'] * 1000:10.2f}" for r in rows]
        if len(rows) == 2 and rows[1]["bytes"]:
            lines.append(f"  {'ratio ours / peer':62} {rows[0]['samples'] / rows[1]['samples']:7.2f}x "
                         f"{rows[0]['bytes'] / rows[1]['bytes']:9.2f}x {rows[0]['s_per_scrape'] / rows[1]['s_per_scrape']:9.2f}x")
    if "catalog_scale" in result:
        lines += ["", f"CATALOG SCALE (each in a subprocess; build = AgentEvalSpanProcessor(catalog), capped at {BUILD_CAP_S:g} s)",
                  f"  {'catalog':40} {'parse s':>8} {'build s':>8} {'+MB':>6} {'route() µs, repeated':>21} {'never-repeating':>16}"]
        for r in result["catalog_scale"]:
            build = f"over {r['build_over_s']:g}" if r["build_over_s"] else _fmt(r["build_s"], ".2f")
            lines.append(f"  {r['catalog']:40} {_fmt(r['parse_s'], '.2f'):>8} {build:>8} {_fmt(r['memory_mb'], '.0f'):>6} "
                         f"{_fmt(r['route_repeated_us'], '.2f'):>21} {_fmt(r['route_fresh_us'], '.1f'):>16}"
                         + (f"  ({r['error']})" if r["error"] else ""))
        lines.append("  +MB: resident memory added by parsing and building (catalog, scorer, processor).")
        lines.append("  route(agent, attributes): repeated = one key again and again (cached); never-repeating = a new value "
                     "per call (app.route values that match no route, the worst case for a scan of the routes; or new agent names).")
    if "context_cost" in result:
        lines += format_context_cost(result["context_cost"])
    if "otlp_metrics" in result:
        o = result["otlp_metrics"]
        lines += ["", "OTLP METRICS: the same runs with the metrics also going out over OTLP (a discarding exporter); they are "
                  "built from the accumulators when the reader collects, so span.end() pays nothing more", *_overhead_table(o["overhead"]),
                  f"  one collection: {o['collect_ms']:.2f} ms for {o['points']:,} points (median), on the reader's thread"]
    if "routing" in result:
        rows = result["routing"]
        lines += ["", "ROUTING A NEW VALUE (tool spans whose tenant.id is new on every span and matches no route; "
                  "background=False, process CPU, median of rounds)",
                  f"  {'catalog':52} {'µs/tool span':>12} {'route() µs, new value':>22}"]
        for r in rows:
            bound = "" if r["bound_us"] is None else (f"  bound <= {r['bound_us']:g} µs: "
                                                      + ("met" if r["bound_met"] else "MISSED"))
            lines.append(f"  {r['row']:52} {r['cpu_us_per_span']:12.1f} {r['route_new_value_us']:22.2f}{bound}")
        if len(rows) == 2:
            lines.append(f"  the routes add {rows[1]['cpu_us_per_span'] - rows[0]['cpu_us_per_span']:.1f} µs per tool span")
    if "instructions" in result:
        n = result["instructions"]
        lines += ["", f"INSTRUCTIONS PER SPAN (cachegrind; children ending {n['runs']:,} and {2 * n['runs']:,} whole runs after "
                  f"{COUNT_WARMUP} warm-up runs, the difference per span; all threads; GC off)"]
        if n["error"]:
            lines.append(f"  not measured: {n['error']}")
        else:
            lines.append(f"  {'variant':42} {'instructions':>12} {'ratio':>6}   {'L2 misses':>9}")
        for r in n["rows"]:
            lines.append(f"  {r['label']:42} {r['instructions_per_span']:12,.0f} {r['ratio']:5.2f}x   {r['l2_misses_per_span']:9.1f}"
                         + (f"  ({r['spans_unscored']:,} spans unscored: the queue overflowed)" if r["spans_unscored"] else ""))
        if n["rows"]:
            lines.append("  Work done, not time taken. L2 misses: of a simulated 512 KiB 8-way L2 (a Zen 2/3 server core's), "
                         "each paid again at the L3 or memory.")
    if "serve" in result:
        lines += ["", *_serve_lines(result["serve"])]
    if "score" in result:
        lines += ["", *_score_lines(result["score"])]
    if "mix" in result:
        lines += ["", *mix_lines(result["mix"])]
    if "serve_judge" in result:
        lines += ["", *serve_judge_lines(result["serve_judge"])]
    return "\n".join(lines)


def _serve_lines(s: dict[str, Any]) -> list[str]:
    lines = [f"SERVE beside the OpenTelemetry Collector doing the same hop (OTLP/HTTP in; serve: evaluate + forward + its "
             f"OTLP metrics; Collector: span_metrics connector + OTLP/HTTP out): demo agent runs, {s['spans_per_request']} "
             f"spans a request, {s['connections']} keep-alive connections as fast as answers come for {s['seconds']:g} s, "
             "then the drain; CPU of the process tree from /proc",
             f"  {'hop':22} {'spans':>10} {'CPU s':>7} {'spans/s':>10} {'spans per CPU-s':>16} {'429s':>6} {'peak RSS MiB':>13}"]
    for r in s["rows"]:
        lines.append(f"  {r['hop']:22} {r['spans']:10,} {r['cpu_s']:7.2f} {r['spans_per_s']:10,.0f} {r['spans_per_cpu_s']:16,.0f} "
                     f"{r['refused_requests']:6,} {r['peak_rss_mib']:13,.0f}")
    if s["ratio"] is not None:
        lines.append(f"  ratio serve / Collector, spans per CPU-second: {s['ratio']:.3f} "
                     f"(the Collector does {1 / s['ratio']:.1f}x the spans per CPU-second)")
    else:
        lines.append(f"  no Collector beside it: {s['collector_missing']}")
    for r in s["rows"]:
        lat = r["latency"]
        if lat is not None:
            lines.append(f"  ingest latency, {r['hop']}, open loop at {lat['rate_spans_per_s']:,.0f} spans/s (half serve's capacity; "
                         f"{lat['spans_per_request']} spans a request): p50 {_fmt(lat['p50_ms'], '.1f')} ms, "
                         f"p99 {_fmt(lat['p99_ms'], '.1f')} ms, max {_fmt(lat['max_ms'], '.1f')} ms over {lat['requests']} "
                         f"requests; {lat['refused_requests']} told to retry")
    lines += _serve_steps(s)
    lines += _serve_goals(s["rows"])
    for r in s["rows"]:
        a = r["accounting"]
        lines.append(f"  accounting, {r['hop']}: senders acknowledged {a['acknowledged']:,} spans; the hop accepted "
                     f"{_fmt(a['accepted'], ',')}, forwarded {_fmt(a['forwarded'], ',')} (failed {_fmt(a['failed'], ',')}); "
                     f"the sink counted {a['sink']:,}: " + ("no accepted span lost" if a["equal"] else "MISMATCH")
                     + f"; {r['metric_requests']} OTLP metric requests")
    return lines


def _serve_steps(s: dict[str, Any]) -> list[str]:
    """Where one serve process's CPU per span goes, by thread in the hop and by step alone, beside what the goal leaves."""
    steps = s.get("steps_us_per_span")
    one = next((r for r in s["rows"] if r["hop"] == "serve"), None)
    if not steps or one is None or not one["spans_per_cpu_s"]:
        return []
    hop_us = 1e6 / one["spans_per_cpu_s"]
    lines = [f"  serve's CPU per span: {hop_us:.1f} µs in the hop. {SERVE_SPANS_PER_CPU_S:,} spans per CPU-second leaves "
             f"{1e6 / SERVE_SPANS_PER_CPU_S:.1f} µs a span for all of it."]
    threads = one.get("threads_us_per_span")
    if threads:
        lines.append(f"    by thread, in the hop: the intake {threads[INTAKE]:.1f} µs (replay order, the core, metrics, enrichment), "
                     f"the forwarder {threads[FORWARD]:.1f} µs (writing the request, the exporter's HTTP, freeing the spans), "
                     f"the rest of the process {threads['rest']:.1f} µs (HTTP in and reading the requests, OTLP metrics)")
    lines.append(f"    by step, each alone on warm data in this process: read {steps['read']:.1f} µs (parse, build spans), "
                 f"evaluate {steps['evaluate']:.1f} µs, write {steps['write']:.1f} µs (the forwarded request)")
    return lines


def _serve_goals(rows: list[dict[str, Any]]) -> list[str]:
    one = next((r for r in rows if r["hop"] == "serve"), None)
    if one is None:
        return []
    lines = [_goal(f"serve >= {SERVE_SPANS_PER_CPU_S:,} spans per CPU-second", one["spans_per_cpu_s"] >= SERVE_SPANS_PER_CPU_S,
                   f"{one['spans_per_cpu_s']:,.0f}")]
    two = next((r for r in rows if r["hop"].startswith("serve --workers")), None)
    if two is not None and one["spans_per_s"]:
        scaling = two["spans_per_s"] / one["spans_per_s"]
        lines.append(_goal(f"{two['hop']} >= {WORKERS_SCALING:g}x one process's spans/s", scaling >= WORKERS_SCALING,
                           f"{scaling:.2f}x, with the load generator on the same cores"))
    lat = one["latency"]
    if lat is not None and lat["p99_ms"] is not None:
        lines.append(_goal(f"p99 ingest latency <= {P99_MS:g} ms at half capacity", lat["p99_ms"] <= P99_MS, f"{lat['p99_ms']:.1f} ms"))
    return lines


def _score_lines(s: dict[str, Any]) -> list[str]:
    rounds = s["rounds"]
    where = s["file"] or "a temporary file"
    return [f"SCORE beside a plain orjson read of the same lines: {s['spans']:,} spans of demo agent runs ({s['runs']:,} runs, "
            f"{s['calls']:,} tool calls; {s['bytes'] / 2**20:.0f} MiB of Collector file-exporter OTLP/JSON in {where}"
            + (f", written in {s['write_s']:.0f} s" if s["write_s"] is not None else "") + f"); {len(rounds)} round{'s' if len(rounds) > 1 else ''}, "
            "score in a fresh process each, median",
            f"  CPU per million spans: score {s['score_cpu_s_per_million']:.2f} s, orjson decode alone "
            f"{s['orjson_cpu_s_per_million']:.2f} s: ratio {s['ratio']:.1f}x "
            f"(score {', '.join(format(r['cpu_s'] * 1e6 / s['spans'], '.2f') for r in rounds)}; "
            f"orjson {', '.join(format(r['orjson_cpu_s'] * 1e6 / s['spans'], '.2f') for r in rounds)})",
            f"  of score's CPU per million spans: reading {s['read_cpu_s_per_million']:.2f} s (decode, build spans, drop "
            f"repeats, replay order; measured alone), evaluating the other {max(s['score_cpu_s_per_million'] - s['read_cpu_s_per_million'], 0):.2f} s",
            f"  score's peak resident memory: {_fmt(s['rss_tenth_mib'], '.0f')} MiB after a tenth of the input, "
            f"{s['rss_end_mib']:.0f} MiB at the end",
            _goal(f"score <= {SCORE_CPU_S_PER_MILLION:g} s of CPU per million spans",
                  s["score_cpu_s_per_million"] <= SCORE_CPU_S_PER_MILLION, f"{s['score_cpu_s_per_million']:.2f} s")]

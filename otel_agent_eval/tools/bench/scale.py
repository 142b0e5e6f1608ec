"""The processor at scale: scrapes under load and of many series, catalog size, routing a never-seen value."""
from __future__ import annotations

import gc
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.trace import set_span_in_context
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from ... import AgentEvalSpanProcessor
from ...config.catalog import parse_catalog
from .processor import AGENT_NAME, OP, TOOL_ARGS, TOOL_NAME, _end_runs, _processor, _provider, _quantile


BUILD_CAP_S = 30.0
ROUTE_BOUND_US = 50.0  # issue 30: routing a never-seen attribute value, at 10,000 glob routes
PARSE_CAP_S = 180.0
SCRAPE_PAUSE_S = 0.01


# -- secondary: scrapes ----------------------------------------------------------------

def _count_samples(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def scrape_under_load(seconds: float, pause_s: float = SCRAPE_PAUSE_S) -> dict[str, Any]:
    """One thread ends whole runs flat out into the processor; another scrapes the registry repeatedly."""
    gc.collect()  # GC stays on here, as in an app: not with the garbage of the sections before (a 170 ms pause)
    registry = CollectorRegistry()
    processor = _processor("ours", registry=registry)
    provider = _provider(processor)
    tracer = provider.get_tracer(__name__)
    stop, ended, latencies = threading.Event(), [0], []

    def load() -> None:
        while not stop.is_set():
            _end_runs(tracer, 20)
            ended[0] += 20

    def scrape() -> None:  # at least once, however short the run
        while True:
            t0 = time.perf_counter_ns()
            generate_latest(registry)
            latencies.append(time.perf_counter_ns() - t0)
            if stop.wait(pause_s):
                return

    _end_runs(tracer, 50)  # the series exist before the first scrape
    processor.force_flush()
    threads = [threading.Thread(target=load, daemon=True), threading.Thread(target=scrape, daemon=True)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    processor.force_flush()
    body = generate_latest(registry)
    provider.shutdown()
    ms = [ns / 1e6 for ns in latencies]
    return {"seconds": elapsed, "pause_ms": pause_s * 1000, "scrapes": len(latencies),
            "p50_ms": _quantile(ms, 0.5), "p99_ms": _quantile(ms, 0.99), "max_ms": max(ms),
            "samples": _count_samples(body), "bytes": len(body), "load_runs_per_s": ended[0] / elapsed}


def _exposition(registry: CollectorRegistry, scrapes: int, cap_s: float = 5.0) -> dict[str, Any]:
    """Size of one exposition, and the median time of up to `scrapes` (fewer once `cap_s` is spent)."""
    times: list[float] = []
    body = b""
    while len(times) < max(1, scrapes) and sum(times) < cap_s:
        t0 = time.perf_counter()
        body = generate_latest(registry)
        times.append(time.perf_counter() - t0)
    return {"samples": _count_samples(body), "bytes": len(body), "s_per_scrape": statistics.median(times), "scrapes": len(times)}


def scrape_size(tools: int, agents: int, calls: int, scrapes: int) -> list[dict[str, Any]]:
    """Exposition size for tools x agents series, beside a prometheus_client Histogram + Counter over the same labels."""
    catalog = parse_catalog(catalog_text(tools, 0), source="<bench: many series>")
    names = list(catalog.tools)
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(catalog, registry=registry, background=False)
    provider = _provider(processor)
    tracer = provider.get_tracer(__name__)
    for a in range(agents):
        agent = f"agent_{a:02d}"
        for _ in range(calls):
            for i in range(0, len(names), 10):  # runs of 10 calls
                root = tracer.start_span(f"invoke_agent {agent}", attributes={OP: "invoke_agent", AGENT_NAME: agent})
                context = set_span_in_context(root)
                for name in names[i:i + 10]:
                    tracer.start_span(f"execute_tool {name}", context=context,
                                      attributes={OP: "execute_tool", TOOL_NAME: name, TOOL_ARGS: '{"query": "x"}'}).end()
                root.end()
    processor.force_flush()
    ours = _exposition(registry, scrapes)
    provider.shutdown()
    peer_registry = CollectorRegistry()
    histogram = Histogram("tool_call_duration_seconds", "Tool call duration.", ["tool", "agent"], registry=peer_registry)
    counter = Counter("tool_calls", "Tool calls.", ["tool", "agent"], registry=peer_registry)
    for a in range(agents):
        for name in names:
            for _ in range(calls):
                histogram.labels(name, f"agent_{a:02d}").observe(0.012)
                counter.labels(name, f"agent_{a:02d}").inc()
    peer = _exposition(peer_registry, scrapes)
    series = f"{tools} tools x {agents} agents"
    return [{"row": "AgentEvalSpanProcessor registry", "series": series, **ours},
            {"row": "peer: prometheus_client Histogram (default buckets) + Counter", "series": series, **peer}]


# -- secondary: catalog scale (in a subprocess) ----------------------------------------

def catalog_text(tools: int, routes: int) -> str:
    """Catalog YAML: `tools` tools; `routes` task routes on app.route, or (routes=0) 4 routes on the agent name."""
    import yaml

    tiers = ("simple", "moderate", "advanced")
    data: dict[str, Any] = {"version": 1, "tools": {
        f"tool_{i:05d}": {"description": f"Tool {i}.", "cost_usd": round(0.001 * (i % 10), 4), "latency_ms": 50 + i % 500,
                          "latency_slo_ms": 2000, "capabilities": ["search", "lookup"] if i % 2 else ["search"],
                          "complexity": tiers[i % 3]}
        for i in range(tools)}}
    if routes:
        data["tasks"] = {f"route_{j:05d}": {"match": {"app.route": f"/r{j}"}, "capability": "search",
                                            "optimal_tool": f"tool_{j % tools:05d}", "expected_tools": [f"tool_{j % tools:05d}"],
                                            "max_calls": 3, "profile": "balanced"}
                         for j in range(routes)}
    else:
        data["tasks"] = {f"agents_{j}": {"match": {AGENT_NAME: f"agent_{j}*"}, "capability": "search",
                                         "optimal_tool": f"tool_{j:05d}", "max_calls": 2} for j in range(min(4, tools))}
    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _per_call_us(call: Callable[..., Any], arguments: Sequence[tuple[Any, ...]], cap_s: float) -> tuple[float, int]:
    n, t0 = 0, time.perf_counter()
    for args in arguments:
        call(*args)
        n += 1
        if not n & 63 and time.perf_counter() - t0 > cap_s:
            break
    return (time.perf_counter() - t0) / n * 1e6, n


def _rss_mb() -> float | None:
    """Resident memory of this process now (Linux), else its peak."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        try:
            import resource
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        except (ImportError, AttributeError):
            return None


def catalog_child(spec: str) -> None:
    """Runs in the subprocess: prints one JSON line per phase, so the parent can cap each phase."""
    tools, routes, repeated_calls, fresh_calls, cap_s = json.loads(spec)
    text = catalog_text(tools, routes)
    gc.collect()
    rss_before = _rss_mb()
    _say(phase="generated", bytes=len(text))
    t0 = time.perf_counter()
    catalog = parse_catalog(text, source="<bench: catalog scale>")
    _say(phase="parsed", s=time.perf_counter() - t0)
    t0 = time.perf_counter()
    processor = AgentEvalSpanProcessor(catalog, registry=CollectorRegistry(), background=False)
    built = time.perf_counter() - t0
    del text
    gc.collect()
    rss_after = _rss_mb()
    _say(phase="built", s=built, mb=None if rss_before is None or rss_after is None else rss_after - rss_before)
    scorer = getattr(processor, "scorer", None)
    if scorer is None:
        from ...core.scoring import Scorer
        scorer = Scorer(catalog)
    if routes:  # matched on an attribute; the fresh values match no route (the worst case for a scan)
        repeated = [("support_agent", {"app.route": f"/r{routes - 1}"})] * repeated_calls
        fresh = [("support_agent", {"app.route": f"/orders/{i}"}) for i in range(fresh_calls)]
    else:  # matched on the agent name alone
        repeated = [("agent_3_support", {})] * repeated_calls
        fresh = [(f"user_agent_{i}", {}) for i in range(fresh_calls)]
    us, n = _per_call_us(scorer.route, repeated, cap_s)
    _say(phase="route_repeated", us=us, calls=n)
    us, n = _per_call_us(scorer.route, fresh, cap_s)
    _say(phase="route_fresh", us=us, calls=n)


def catalog_scale(tools: int, routes: int, repeated_calls: int, fresh_calls: int, cap_s: float,
                  build_cap_s: float = BUILD_CAP_S) -> dict[str, Any]:
    """Build time and routing cost for one catalog size, in a subprocess whose build is capped."""
    label = f"{tools:,} tools x {routes:,} routes (app.route)" if routes else f"{tools:,} tools, 4 routes on the agent name"
    row: dict[str, Any] = {"catalog": label, "tools": tools, "routes": routes, "parse_s": None, "build_s": None,
                           "build_over_s": None, "memory_mb": None, "route_repeated_us": None, "route_fresh_us": None,
                           "route_calls": None, "error": None}
    code = "import sys; from otel_agent_eval.tools.bench.scale import catalog_child; catalog_child(sys.argv[1])"
    errors = tempfile.TemporaryFile("w+")  # not a pipe: a chatty child cannot block on it
    child = subprocess.Popen([sys.executable, "-c", code, json.dumps([tools, routes, repeated_calls, fresh_calls, cap_s])],
                             stdout=subprocess.PIPE, stderr=errors, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in child.stdout or ():
            lines.put(line)
        lines.put(None)
    threading.Thread(target=read, daemon=True).start()
    caps = {"generated": PARSE_CAP_S, "parsed": PARSE_CAP_S, "built": build_cap_s,
            "route_repeated": 10 * cap_s + 30, "route_fresh": 10 * cap_s + 30}
    try:
        for phase, cap in caps.items():
            try:
                line = lines.get(timeout=cap)
            except queue.Empty:
                if phase == "built":
                    row["build_over_s"] = build_cap_s
                else:
                    row["error"] = f"no {phase} within {cap:g} s"
                break
            if line is None:
                child.wait()
                errors.seek(0)
                tail = errors.read().strip().splitlines()
                row["error"] = f"child exited ({child.returncode}) before {phase}: {tail[-1] if tail else ''}"
                break
            got = json.loads(line)
            if phase == "parsed":
                row["parse_s"] = got["s"]
            elif phase == "built":
                row["build_s"], row["memory_mb"] = got["s"], got["mb"]
            elif phase == "route_repeated":
                row["route_repeated_us"] = got["us"]
            elif phase == "route_fresh":
                row["route_fresh_us"], row["route_calls"] = got["us"], got["calls"]
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        errors.close()
    return row


# -- secondary: routing on an attribute whose value is new on every span ------------------

def _routing_catalog(routes: int) -> Any:
    """The packaged catalog with its task routes replaced by `routes` glob routes on tenant.id (none: no routes)."""
    from importlib import resources

    import yaml

    from ...config import catalog as c

    data = yaml.safe_load(resources.files(c.__package__).joinpath(c.DEFAULT_CATALOG_NAME).read_text("utf-8"))
    capability = next(iter(data["tasks"].values()))["capability"]
    data["tasks"] = {f"tenant_{j:05d}": {"match": {"tenant.id": f"tenant-{j:05d}-*"}, "capability": capability}
                     for j in range(routes)}
    return parse_catalog(yaml.safe_dump(data, sort_keys=False), source=f"<bench: {routes} glob routes>")


def routing(routes: int, spans: int, rounds: int) -> list[dict[str, Any]]:
    """Tool spans whose tenant.id is new on every span (matching no route: a scan's worst case), through the
    processor with no task routes and with `routes` glob routes on tenant.id, interleaved in one run: process
    CPU per tool span (background=False: all of it on the timed thread), median of rounds; beside it, what
    `Scorer.route` costs for such a value (the part the routes add)."""
    variants = [("no task routes (baseline)", 0), (f"{routes:,} glob routes on tenant.id (tenant-NNNNN-*)", routes)]
    built = []
    for label, n in variants:
        processor = AgentEvalSpanProcessor(_routing_catalog(n), registry=CollectorRegistry(), background=False)
        built.append((label, n, processor, _provider(processor).get_tracer("bench-routing")))
    fresh = iter(range(10**12))
    cpu: dict[str, list[float]] = {label: [] for label, *_ in built}
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for label, _, _, tracer in built[r % 2:] + built[:r % 2]:
                t0 = time.process_time_ns()
                for _ in range(spans):
                    tracer.start_span("execute_tool web_search", attributes={
                        OP: "execute_tool", TOOL_NAME: "web_search", "tenant.id": f"tenant-{next(fresh):07d}"}).end()
                cpu[label].append((time.process_time_ns() - t0) / spans / 1000)
    finally:
        gc.enable()
    rows = []
    for label, n, processor, _ in built:
        values = [(None, {"tenant.id": f"tenant-{next(fresh):07d}"}) for _ in range(max(spans, 1_000))]
        route_us, calls = _per_call_us(processor.scorer.route, values, cap_s=2.0)
        rows.append({"row": label, "routes": n, "cpu_us_per_span": statistics.median(cpu[label]),
                     "route_new_value_us": route_us, "route_calls": calls,
                     "bound_us": ROUTE_BOUND_US if n else None, "bound_met": route_us <= ROUTE_BOUND_US if n else None})
        processor.shutdown()
    return rows

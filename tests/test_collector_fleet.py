"""The fleet on the real Collector: agents -> the kit's otelcol-fleet.yaml (`load_balancing` by trace id) -> 2 `serve`
replicas -> back through the same Collector -> a next-hop Collector standing in for Tempo -> file exporter, with real
Prometheus scraping the replicas.

The agents are an unmodified Python app under `opentelemetry-instrument` with the processor's zero-code exporter
(OTEL_TRACES_EXPORTER=agent_eval) and the Node OTel JS agent of tests/node. The first tier runs the shipped
otelcol-fleet.yaml untouched with the test's places and timings over it (collector_fleet.fleet_overrides); a
third `serve` gets all the traffic as the one-replica reference.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from collector_fleet import (BALANCER, FLEET_COLLECTOR, Collector, balance_to, file_spans, fleet_overrides, grpc_endpoint, metric_sum, next_hop,
                             receiver_url, scrape)
from ops_helpers import APP_JOB, load_yaml, RECORDING_RULES, PrometheusServer, dashboard_panels, free_port, grafana_expr, rules_of, wait_for
from serve_process import local_only, start_serve
from test_ops_fleet import PER_INSTANCE
from test_serve_restart import tool_batches

import otel_agent_eval

NODE_AGENT = Path(__file__).parent / "node" / "agent.mjs"
NODE_SPANS, NODE_CALLS, NODE_RUNS = 15, 8, 4  # tests/node/agent.mjs: 15 spans, 8 scored calls (final_answer is ignored), 4 runs
RUNS = 24  # with the Node agent's 4, 28 traces: each replica gets some (all on one: p = 2 * 2**-28)
APP = textwrap.dedent(f'''
    """An agent app that knows nothing of otel-agent-eval: {RUNS} runs of support_agent and math_agent."""
    from opentelemetry import trace

    tracer = trace.get_tracer("fleet-app")
    plan = {{"support_agent": ("local_index", "web_search"), "math_agent": ("calculator", "wolfram_alpha")}}
    for i in range({RUNS}):
        agent = ("support_agent", "math_agent")[i % 2]
        with tracer.start_as_current_span(f"invoke_agent {{agent}}", attributes={{
                "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}}):
            for tool in plan[agent][: 1 + (i % 3 == 2)]:
                with tracer.start_as_current_span(f"execute_tool {{tool}}", attributes={{
                        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": f"c{{i}}{{tool}}",
                        "gen_ai.tool.call.arguments": '{{"query": "q{{i}}"}}'}}):
                    pass
    trace.get_tracer_provider().force_flush()
    print("done")
''')
DEADLINE_S = 60.0


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


def node_or_fail() -> str:
    node = shutil.which("node")
    if node is None or not (NODE_AGENT.parent / "node_modules" / "@opentelemetry").is_dir():
        pytest.fail("node and tests/node/node_modules are needed: run `npm ci --prefix tests/node` (or `make setup`)", pytrace=False)
    return node


FLEET_COMPOSE = Path(__file__).resolve().parents[1] / "collector-config" / "docker-compose.fleet.yml"


def compose_otlp_metrics_flags() -> list[str]:
    """The shipped fleet's `serve` flags about OTLP metrics (docker-compose.fleet.yml), so that the replicas here send
    metrics where the shipped ones do; when they send any, every second, so that a failing export shows within the test."""
    command = " ".join(load_yaml(FLEET_COMPOSE)["x-serve"]["command"])
    flags = re.findall(r"--no-otlp-metrics\b|--otlp-metrics-to\s+\S+", command)
    return flags if "--no-otlp-metrics" in flags else [*" ".join(flags).split(), "--otlp-metrics-interval", "1"]


class Replica:
    """`otel-agent-eval serve` on fixed free ports (OTLP/gRPC in; a restart finds the same ports)."""

    def __init__(self, forward_to: str | None, *extra: str) -> None:
        self.grpc_port, self.metrics_port = free_port(), free_port()
        self.args = ["--grpc-port", str(self.grpc_port), "--no-http", "--metrics-port", str(self.metrics_port), *extra]
        if forward_to:
            self.args += ["--forward-to", forward_to, "--forward-protocol", "grpc", *compose_otlp_metrics_flags()]
        self.process: subprocess.Popen[str] | None = None
        self.stderr = ""

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    def start(self) -> Replica:
        self.process, _ = start_serve(*self.args)
        return self

    def metric(self, name: str, **labels: str) -> float:
        return metric_sum(scrape(f"http://{self.target}/metrics"), name, **labels)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        if self.process is not None and self.process.stderr is not None and not self.process.stderr.closed:
            self.stderr += self.process.stderr.read()
            self.process.stderr.close()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            assert self.process.wait(timeout=30) == 0


@contextmanager
def replicas(*replicas: Replica) -> Iterator[None]:
    try:
        for replica in replicas:
            replica.start()
        yield
    finally:
        for replica in replicas:
            replica.kill()


def agent_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_", "PROMETHEUS_MULTIPROC"))}


def run_python_app(tmp_path: Path, endpoint: str) -> None:
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = {**agent_env(), "OTEL_TRACES_EXPORTER": "agent_eval", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
           "OTEL_SERVICE_NAME": "fleet-app", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
           "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "OTEL_AGENT_EVAL_METRICS_PORT": str(free_port())}
    run = subprocess.run([str(Path(sys.executable).with_name("opentelemetry-instrument")), sys.executable, str(app)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "done" in run.stdout, run.stderr


def app_spans_and_calls() -> tuple[int, int]:
    calls = sum(1 + (i % 3 == 2) for i in range(RUNS))
    return RUNS + calls, calls


# -- the rules and the dashboard, on totals --------------------------------------------------------------

RANGE_FUNCTION = re.compile(r"\b(?:rate|irate|increase)\(\s*([a-zA-Z_:][\w:]*(?:\{[^{}]*\})?)\s*\[[^\]]+\]\s*\)")
OFFSET = re.compile(r"\s+offset\s+\d+[smhdwy]")


def on_totals(expr: str) -> str:
    """A query with every rate/increase over a window replaced by the counter itself (and offsets dropped).

    Rates depend on when each Prometheus scraped; totals do not, so the fleet's and one replica's answers can be
    compared exactly, and every aggregation the query makes over instances is kept as it is.
    """
    out = RANGE_FUNCTION.sub(r"(\1)", OFFSET.sub("", expr))
    assert "[" not in out, f"a range left in {out!r}"
    return out


def comparable_queries() -> list[tuple[str, str]]:
    """The recording rules' and the dashboard's scoring queries (not the per-instance health ones, nor `up`)."""
    queries = [(rule["record"], rule["expr"]) for rule in rules_of(RECORDING_RULES)]
    for panel in dashboard_panels():
        for target in panel["targets"]:
            queries.append((f"panel {panel['title']!r}", grafana_expr(target["expr"]).replace('job=~".*"', f'job="{APP_JOB}"')))
    return [(where, on_totals(expr)) for where, expr in queries
            if not any(name in expr for name in (*PER_INSTANCE, "up{"))]


def answers(prometheus: PrometheusServer, expr: str) -> list[tuple[tuple[tuple[str, str], ...], float]]:
    return sorted((tuple(sorted((k, v) for k, v in sample["metric"].items() if k not in ("instance", "job"))),
                   sample["value"]) for sample in prometheus.query(expr))


def same(fleet: list[tuple[Any, float]], single: list[tuple[Any, float]]) -> bool:
    """The same series with the same values (sums of floats in another order may differ in the last digits)."""
    return [labels for labels, _ in fleet] == [labels for labels, _ in single] and all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for (_, a), (_, b) in zip(fleet, single))


def prometheus_config(targets: list[str]) -> dict[str, Any]:
    return {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": APP_JOB, "static_configs": [{"targets": targets}]}]}


# -- the test ------------------------------------------------------------------------------------------

def test_the_fleet_scores_every_call_once_and_adds_up_to_one_replica(tmp_path: Path) -> None:
    node = node_or_fail()
    spans_file, span_metrics_port = tmp_path / "spans.jsonl", free_port()
    app_spans, app_calls = app_spans_and_calls()
    total_spans, total_calls, total_runs = app_spans + NODE_SPANS, app_calls + NODE_CALLS, RUNS + NODE_RUNS
    with ExitStack() as stack:
        hop_config = next_hop(spans_file, span_metrics_port)
        stack.enter_context(Collector(tmp_path, "next-hop", hop_config))
        one = Replica(None)
        front = fleet_overrides(grpc_endpoint(hop_config), reference=one.endpoint)
        evaluated = grpc_endpoint(front, "otlp/evaluated")  # the replicas send their spans back to the Collector
        serve_1, serve_2 = Replica(evaluated, "--forward-delay", "0.05"), Replica(evaluated, "--forward-delay", "0.05")
        balance_to(front, [serve_1.endpoint, serve_2.endpoint])
        stack.enter_context(replicas(serve_1, serve_2, one))
        collector = stack.enter_context(Collector(tmp_path, "front", front, base=FLEET_COLLECTOR))
        fleet_prom = stack.enter_context(PrometheusServer(mkdir(tmp_path / "prom-fleet"), prometheus_config([serve_1.target, serve_2.target])))
        one_prom = stack.enter_context(PrometheusServer(mkdir(tmp_path / "prom-one"), prometheus_config([one.target])))

        run_python_app(tmp_path, receiver_url(front, "otlp", "http"))
        agent = subprocess.run([node, str(NODE_AGENT), "--endpoint", receiver_url(front, "otlp", "http")],
                               capture_output=True, text=True, timeout=DEADLINE_S, env=agent_env())
        assert agent.returncode == 0, agent.stderr

        # every span once at the file exporter, enriched
        spans = wait_for(lambda: (s := file_spans(spans_file)) and len(s) >= total_spans and s, timeout_s=DEADLINE_S,
                         what=f"{total_spans} spans at the next hop's file exporter")
        assert len(spans) == total_spans and len({(s["trace_id"], s["span_id"]) for s in spans}) == total_spans
        calls = [s for s in spans if s["name"].startswith("execute_tool") and s["name"] != "execute_tool final_answer"]
        assert len(calls) == total_calls
        assert all("agent_eval.outcome" in s["attributes"] for s in calls)
        # The zero-code exporter judges the app's calls in the app, and the replica judges them again: the replica's
        # evaluation replaces the app's, so every span carries each evaluation once, as the Node agent's spans do.
        assert all([name for name, _ in evaluations(s)].count("agent_eval.tool_efficiency") == 1 for s in calls)
        # once per evaluation and, for a run's true-cost evaluations (one per tool call its later model calls paid
        # for), per call
        assert all(len(keys := [(name, dict(a).get("agent_eval.tool_call.span_id")) for name, a in evaluations(s)])
                   == len(set(keys)) for s in spans)
        roots = [s for s in spans if "agent_eval.run.outcome" in s["attributes"]]
        assert len(roots) == total_runs and all("agent_eval.run_health" in dict(evaluations(s)) for s in roots)
        # each trace reached one replica whole: its runs count all its calls
        calls_by_trace = Counter(s["trace_id"] for s in calls)
        counted_by_trace: Counter[str] = Counter()
        for root in roots:
            counted_by_trace[root["trace_id"]] += root["attributes"]["agent_eval.run.tool_calls"]
        assert counted_by_trace == calls_by_trace

        # every call counted once over the replicas, as by the one replica, once Prometheus has the final totals
        for prom in (fleet_prom, one_prom):
            wait_for(lambda p=prom: [s["value"] for s in p.query("sum(agent_eval_tool_calls_total) or vector(0)")] == [total_calls]
                     and [s["value"] for s in p.query("sum(agent_eval_runs_total) or vector(0)")] == [total_runs],
                     timeout_s=DEADLINE_S, what=f"{total_calls} calls and {total_runs} runs in {prom.url}")
        # the balancer spread the traces over both replicas, and says so per replica
        per_replica = {s["metric"]["instance"]: s["value"] for s in fleet_prom.query("sum by (instance) (agent_eval_tool_calls_total)")}
        assert set(per_replica) == {serve_1.target, serve_2.target} and all(per_replica.values())
        for replica in (serve_1, serve_2):
            accepted = replica.metric("agent_eval_serve_spans_total", outcome="accepted")
            assert accepted and collector.metric("otelcol_loadbalancer_backend_outcome_total", endpoint=replica.endpoint, success="true")
        assert sum(r.metric("agent_eval_serve_spans_total", outcome="accepted") for r in (serve_1, serve_2)) == total_spans
        assert collector.metric("otelcol_exporter_sent_spans_total", exporter=BALANCER) == total_spans

        # the recording rules and the dashboard, over the replicas, give the one replica's numbers
        nonempty = 0
        for where, expr in comparable_queries():
            single = answers(one_prom, expr)
            assert same(answers(fleet_prom, expr), single), f"{where}: {expr}"
            nonempty += bool(single)
        assert nonempty >= 30

        # the Collector's span_metrics connector counts the calls ours counts, per tool
        ours = {s["metric"]["gen_ai_tool_name"]: s["value"] for s in one_prom.query(
            "sum by (gen_ai_tool_name) (last_over_time(gen_ai_execute_tool_duration_seconds_count[1h]))")}

        def theirs() -> dict[str, float]:  # by the catalog's name of each tool, as ours labels calls
            counts: Counter[str] = Counter()
            for tool, value in span_metrics_counts(scrape(f"http://127.0.0.1:{span_metrics_port}/metrics")).items():
                if tool:
                    counts[catalog_names().get(tool, tool)] += value
            return dict(counts)

        peer = wait_for(lambda: (t := theirs()) and all(t.get(k) == v for k, v in ours.items()) and t,
                        timeout_s=DEADLINE_S, what=f"span_metrics to count {ours}")
        assert sum(ours.values()) == total_calls
        assert set(peer) - set(ours) == {"final_answer"}  # the Node agent's final_answer: a span, not a scored call

        # the replicas, with the shipped fleet's OTLP-metrics flags, log no failed metrics export (QA: the next hop
        # :4319 has no metrics pipeline, and a copy through the Collector would double what Prometheus scrapes)
        for replica in (serve_1, serve_2):
            replica.kill()
            assert "Failed to export metrics" not in replica.stderr, replica.stderr[-2000:]


def catalog_names() -> dict[str, str]:
    """The packaged catalog's aliases, each to its tool's name (`calculator` is `basic_calculator`)."""
    catalog = load_yaml(Path(otel_agent_eval.__file__).parent / "config" / "default_catalog.yaml")
    return {alias: name for name, tool in catalog["tools"].items() for alias in tool.get("aliases") or []}


def evaluations(span: dict[str, Any]) -> list[tuple[str, Any]]:
    """The span's `gen_ai.evaluation.result` events: (the evaluation's name, its attributes)."""
    return [(e["attributes"]["gen_ai.evaluation.name"], sorted(e["attributes"].items()))
            for e in span["events"] if e["name"] == "gen_ai.evaluation.result"]


def span_metrics_counts(exposition: str) -> dict[str, float]:
    counts: Counter[str] = Counter()
    for line in exposition.splitlines():
        if line.startswith("traces_span_metrics_duration_seconds_count"):
            match = re.search(r'gen_ai_tool_name="([^"]*)"', line)
            counts[match.group(1) if match else ""] += float(line.rsplit(" ", 1)[1])
    return dict(counts)


def mkdir(path: Path) -> Path:
    path.mkdir()
    return path


# -- a replica killed mid-stream and restarted ------------------------------------------------------------

BATCH_SPANS = 10
BEFORE, WHILE_DOWN = 10, 20  # batches (each span a trace of its own): acknowledged before the kill, sent while it is down
GIVE_UP_AFTER = "2s"  # the replicas' exporters' max_elapsed_time (shipped: 120s), so that the give-up is seen soon


def dropped_by_collector(log: Path) -> Counter[str]:
    """Spans the Collector gave up on, per replica endpoint, from its log (JSON lines): "Exporting failed. Dropping
    data." with `endpoint` and `dropped_items`. Its metrics do not count them (the replicas' exporters inside
    `load_balancing` report to no meter)."""
    dropped: Counter[str] = Counter()
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") == "Exporting failed. Dropping data.":
            dropped[entry["endpoint"]] += entry["dropped_items"]
    return dropped


def test_a_replica_killed_mid_stream_loses_what_it_held_and_what_the_balancer_gave_up(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    spans_file = tmp_path / "spans.jsonl"
    sent: list[str] = []
    with ExitStack() as stack:
        hop_config = next_hop(spans_file, free_port())
        stack.enter_context(Collector(tmp_path, "next-hop", hop_config))
        front = fleet_overrides(grpc_endpoint(hop_config), give_up_after=GIVE_UP_AFTER)
        evaluated = grpc_endpoint(front, "otlp/evaluated")
        # the killed replica holds what it accepts (acknowledged on receipt, the old path, and forward delay 60 s), so
        # what it loses is what it accepted (tests/test_serve_durable.py: the default, --ack forwarded, loses nothing)
        killed = Replica(evaluated, "--forward-delay", "60", "--ack", "received")
        other = Replica(evaluated, "--forward-delay", "0.05")
        balance_to(front, [killed.endpoint, other.endpoint])
        stack.enter_context(replicas(killed, other))
        collector = stack.enter_context(Collector(tmp_path, "front", front, base=FLEET_COLLECTOR, json_logs=True))
        sender = OTLPSpanExporter(endpoint=grpc_endpoint(front), insecure=True, timeout=10)
        stack.callback(sender.shutdown)

        def send(batches: list[list[Any]]) -> None:
            for batch in batches:
                assert sender.export(batch) is SpanExportResult.SUCCESS  # the senders see no error, down or not
                sent.extend(s.name for s in batch)

        def accepted(replica: Replica) -> float:
            return replica.metric("agent_eval_serve_spans_total", outcome="accepted")

        def dropped() -> int:
            return dropped_by_collector(collector.log)[killed.endpoint]

        send(tool_batches(BEFORE, BATCH_SPANS, "a"))
        wait_for(lambda: accepted(killed) + accepted(other) == len(sent), timeout_s=DEADLINE_S,
                 what="the replicas to accept the first spans")
        held = accepted(killed)  # the killed life's accepted spans, none forwarded
        assert held and killed.metric("agent_eval_serve_forwarded_spans_total") == 0
        killed.kill()

        # Down: the balancer keeps routing the killed replica's share of trace ids to it (the other replica gets
        # only its own share), its exporter retries, then gives up on it.
        other_before = accepted(other)
        send(tool_batches(WHILE_DOWN, BATCH_SPANS, "b"))
        down = WHILE_DOWN * BATCH_SPANS
        given_up = wait_for(lambda: (d := dropped()) and d + accepted(other) - other_before == down and d,
                            timeout_s=DEADLINE_S, what="the Collector to give up on the killed replica's share")

        # Restarted on the same ports: sent on until the balancer reaches it again (its exporter reconnects with
        # gRPC's backoff, so the first batches for it may be given up too: counted all the same).
        killed.args[killed.args.index("60")] = "0.05"
        killed.start()
        after = itertools.count()
        wait_for(lambda: send(tool_batches(1, BATCH_SPANS, f"c{next(after)}-")) or accepted(killed), timeout_s=DEADLINE_S, interval_s=0.1,
                 what="the restarted replica to get spans again")
        wait_for(lambda: held + accepted(killed) + accepted(other) + dropped() == len(sent), timeout_s=DEADLINE_S,
                 what="every span sent to be accepted by a replica or given up by the Collector")

        # The Collector's metrics count every span as sent to a replica, the given-up ones too: only its log and
        # serve's counters tell the loss, and they add up to what the apps sent.
        assert collector.metric("otelcol_receiver_accepted_spans_total", receiver="otlp") == len(sent)
        assert collector.metric("otelcol_exporter_sent_spans_total", exporter=BALANCER) == len(sent)
        assert collector.metric("otelcol_exporter_send_failed_spans_total", exporter=BALANCER) == 0
        outcome = "otelcol_loadbalancer_backend_outcome_total"  # per request handed to a replica's exporter's queue
        assert collector.metric(outcome, endpoint=killed.endpoint, success="true") > 0
        assert collector.metric(outcome, endpoint=killed.endpoint, success="false") == 0
        lost_in_collector = collector.metric("otelcol_exporter_sent_spans_total", exporter=BALANCER) - (
            held + accepted(killed) + accepted(other))
        assert lost_in_collector == dropped() >= given_up
        assert dropped_by_collector(collector.log).keys() == {killed.endpoint}  # the other replica lost nothing

        for replica in (killed, other):
            replica.stop()  # SIGTERM: each forwards everything it accepted
        expected = len(sent) - held - dropped()
        at_hop = wait_for(lambda: (names := [s["name"] for s in file_spans(spans_file)]) and len(names) >= expected and names,
                          timeout_s=DEADLINE_S, what=f"{expected} spans at the next hop")
        # the loss: what the killed process had accepted and not forwarded, and what the Collector gave up; no more
        assert len(at_hop) == len(set(at_hop)) == expected and set(at_hop) <= set(sent)

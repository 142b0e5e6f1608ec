"""The serve fleet kit: the Collector's `load_balancing` exporter routes traces by id to N `serve` replicas,
Prometheus scrapes all of them, and the shipped rules and dashboard sum across replicas unchanged.

Structural checks of collector-config/otelcol-fleet.yaml, docker-compose.fleet.yml and
prometheus-fleet.yml against each other and against the `serve` command's real parser;
a PromQL check that every scoring query aggregates over instances; and a live check with
real `serve` replicas (in this process, real SDK OTLP exporters, traces routed by trace id
as the Collector does) that the replicas' series add up to one service's.
"""
from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from ops_helpers import ALERTING_RULES, APP_JOB, CONFIG_DIR, PROMETHEUS_CONFIG, RECORDING_RULES, binary, dashboard_panels, load_yaml, rules_of
from test_ops_configs import LABEL_NAMES, check_collector_structure, component_type

FLEET_COLLECTOR = CONFIG_DIR / "otelcol-fleet.yaml"
FLEET_COMPOSE = CONFIG_DIR / "docker-compose.fleet.yml"
FLEET_PROMETHEUS = CONFIG_DIR / "prometheus-fleet.yml"
MAIN_COMPOSE = CONFIG_DIR / "docker-compose.yml"


def collector() -> dict[str, Any]:
    return load_yaml(FLEET_COLLECTOR)


def compose() -> dict[str, Any]:
    return load_yaml(FLEET_COMPOSE)


def replicas() -> dict[str, dict[str, Any]]:
    return {name: service for name, service in compose()["services"].items() if name.startswith("serve-")}


def serve_args(service: Mapping[str, Any]) -> list[str]:
    """The arguments after `otel-agent-eval serve` in a replica's shell command."""
    script = service["command"][-1]
    return script.split("otel-agent-eval serve", 1)[1].split()


def parsed(service: Mapping[str, Any]) -> Any:
    """The replica's command line through the real `serve` parser."""
    from otel_agent_eval.tools.cli import build_parser

    return build_parser().parse_args(["serve", *serve_args(service)])


def mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    out = {}
    for volume in service.get("volumes", []):
        host, container, *_ = volume.split(":")
        out[container] = (FLEET_COMPOSE.parent / host).resolve()
    return out


def port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


# -- the Collector: balanced by trace id onto exactly the compose replicas ---------------------------------

def test_fleet_collector_balances_traces_by_trace_id_onto_every_replica() -> None:
    config = collector()
    check_collector_structure(config)
    pipelines = config["service"]["pipelines"]
    balancer = config["exporters"]["load_balancing"]
    assert balancer["routing_key"] == "traceID"
    assert "endpoint" not in balancer["protocol"]["otlp"], "the load-balancing exporter sets endpoints itself"
    assert balancer["protocol"]["otlp"]["retry_on_failure"]["enabled"], "serve's RESOURCE_EXHAUSTED must be retried"
    hostnames = balancer["resolver"]["static"]["hostnames"]
    assert len(replicas()) >= 2
    assert sorted(hostnames) == sorted(f"{name}:{parsed(service).grpc_port}" for name, service in replicas().items())
    balanced = [name for name, p in pipelines.items() if "load_balancing" in p["exporters"]]
    assert balanced == ["traces"] and pipelines["traces"]["receivers"] == ["otlp"]
    assert "batch" not in pipelines["traces"].get("processors", [])


def test_evaluated_spans_come_back_on_their_own_receiver_and_are_not_balanced_again() -> None:
    config = collector()
    pipelines = config["service"]["pipelines"]
    returning = [name for name, p in pipelines.items() if "otlp/evaluated" in p["receivers"]]
    assert len(returning) == 1 and component_type(returning[0]) == "traces"
    assert "load_balancing" not in pipelines[returning[0]]["exporters"], "a loop: evaluated spans balanced again"
    evaluated_port = port_of(config["receivers"]["otlp/evaluated"]["protocols"]["grpc"]["endpoint"])
    assert evaluated_port not in {port_of(p["endpoint"]) for p in config["receivers"]["otlp"]["protocols"].values()}
    for name, service in replicas().items():
        args = parsed(service)
        target = urlsplit(args.forward_to)
        assert (target.hostname, target.port, args.forward_protocol) == ("otel-collector", evaluated_port, "grpc"), name


def test_the_replicas_command_lines_are_valid_serve_commands() -> None:
    from otel_agent_eval.serve.next_hop import NextHop

    for name, service in replicas().items():
        args = parsed(service)
        assert args.bind == "0.0.0.0", f"{name} must listen on all interfaces inside its container"
        assert not args.no_grpc and args.metrics_port
        hop = NextHop.parse(args.forward_to, protocol=args.forward_protocol, headers=args.forward_header)
        assert hop.url == "http://otel-collector:4319"
    first, *others = replicas().values()
    assert all(serve_args(other) == serve_args(first) for other in others), "replicas must be alike"


# -- compose: collector, replicas, Prometheus and Grafana, wired to the files that exist ------------------

def test_fleet_compose_runs_collector_replicas_prometheus_and_grafana() -> None:
    services = compose()["services"]
    assert {"otel-collector", "prometheus", "grafana", "tempo"} <= set(services) and len(replicas()) >= 2
    for name, service in services.items():
        for container, host in mounts(service).items():
            assert host.exists(), f"{name}: {host} (mounted at {container}) does not exist"
    collector_service = services["otel-collector"]
    config_arg = next(a for a in collector_service["command"] if a.startswith("--config="))
    assert mounts(collector_service)[config_arg.split("=", 1)[1]] == FLEET_COLLECTOR
    assert set(replicas()) <= set(collector_service["depends_on"])
    prometheus = services["prometheus"]
    config_path = next(a for a in prometheus["command"] if a.startswith("--config.file=")).split("=", 1)[1]
    prom_mounts = mounts(prometheus)
    assert prom_mounts[config_path] == FLEET_PROMETHEUS
    for rule_file in load_yaml(FLEET_PROMETHEUS)["rule_files"]:
        in_container = Path(config_path).parent / rule_file
        mounted = next(host / in_container.relative_to(c) for c, host in prom_mounts.items() if in_container.is_relative_to(c)
                       and in_container != Path(c))
        assert mounted == (CONFIG_DIR / rule_file).resolve()
    # Grafana: the very dashboards and data sources of the single-Collector kit
    assert services["grafana"] == load_yaml(MAIN_COMPOSE)["services"]["grafana"]
    collector_ports = {port_of(p["endpoint"]) for r in collector()["receivers"].values() for p in r["protocols"].values()}
    for mapping in collector_service["ports"]:
        assert int(str(mapping).rsplit(":", 1)[1]) in collector_ports


def test_fleet_prometheus_scrapes_every_replica_under_the_app_job() -> None:
    config = load_yaml(FLEET_PROMETHEUS)
    job = next(j for j in config["scrape_configs"] if j["job_name"] == APP_JOB)
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert sorted(targets) == sorted(f"{name}:{parsed(s).metrics_port}" for name, s in replicas().items())
    assert config["rule_files"] == load_yaml(PROMETHEUS_CONFIG)["rule_files"], "the same rules as the single setup"
    check = subprocess.run([binary("promtool"), "check", "config", FLEET_PROMETHEUS.name], cwd=CONFIG_DIR,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr


# -- every scoring query sums over instances ----------------------------------------------------------------

AGGREGATIONS = ("sum", "max", "min", "avg", "count", "topk", "bottomk", "quantile", "group", "count_values", "stddev", "stdvar")
AGGREGATION_BEFORE_PAREN = re.compile(r"\b(?:%s)\s*(?:(?:by|without)\s*\(([^()]*)\)\s*)?$" % "|".join(AGGREGATIONS))
AGGREGATION_AFTER_PAREN = re.compile(r"^\s*(?:by|without)\s*\(([^()]*)\)")
SELECTOR = re.compile(r"(?<![\w:])((?:agent_eval|gen_ai)_[a-z0-9_]*)(?=\s*[{\[)\s]|$)")
#: Per-process by design: the service's and processor's own health (and catalog fallback), and sliding-window quantiles
#: that cannot be added.
# per process by design: the processor's and serve's health, the sliding-window latency, the catalog in force, and the
# online judge's outcomes (each process has its own judge worker, budget and endpoint connection)
PER_INSTANCE = ("agent_eval_processor_", "agent_eval_serve_", "agent_eval_tool_latency_seconds", "agent_eval_catalog_fallback",
                "agent_eval_judgements")


def enclosing_aggregations(expr: str, position: int) -> Iterator[list[str]]:
    """For each aggregation enclosing `position`, its grouping labels (empty list: none)."""
    depth = 0
    for i in range(position - 1, -1, -1):
        ch = expr[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            if depth:
                depth -= 1
                continue
            before = AGGREGATION_BEFORE_PAREN.search(expr[:i])
            if before:
                yield _labels(before.group(1))
                continue
            close = _matching_close(expr, i)
            after = AGGREGATION_AFTER_PAREN.match(expr[close + 1:]) if close is not None else None
            if after and re.search(r"\b(?:%s)\s*$" % "|".join(AGGREGATIONS), expr[:i]):
                yield _labels(after.group(1))


def _labels(text: str | None) -> list[str]:
    return [label.strip() for label in (text or "").split(",") if label.strip()]


def _matching_close(expr: str, open_at: int) -> int | None:
    depth = 0
    for i in range(open_at, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[i], 0)
        if depth == 0:
            return i
    return None


def fleet_problems(expr: str) -> list[str]:
    """Scoring series used outside any aggregation, or grouped by `instance`."""
    problems = []
    for match in SELECTOR.finditer(expr):
        name = match.group(1)
        if name in LABEL_NAMES or name.startswith(PER_INSTANCE) or expr[match.end():].lstrip().startswith("("):
            continue  # a label, per-process by design, or a function name
        groups = list(enclosing_aggregations(expr, match.start()))
        if not groups:
            problems.append(f"{name} is not aggregated over instances")
        elif any(label in ("instance", "pod") for labels in groups for label in labels):
            problems.append(f"{name} is grouped by instance")
    return problems


def scoring_queries() -> Iterator[tuple[str, str]]:
    for path in (RECORDING_RULES, ALERTING_RULES):
        for rule in rules_of(path):
            yield rule.get("record") or rule["alert"], rule["expr"]
    for panel in dashboard_panels():
        for target in panel["targets"]:
            yield f"panel {panel['title']!r}", target["expr"]


def test_rules_and_dashboard_sum_scores_across_replicas_without_an_instance_dependency() -> None:
    problems = {where: p for where, expr in scoring_queries() if (p := fleet_problems(expr))}
    assert not problems


def test_the_aggregation_check_catches_per_instance_queries() -> None:
    assert fleet_problems("sum by (gen_ai_tool_name) (rate(agent_eval_tool_calls_total[5m]))") == []
    assert fleet_problems("sum(rate(agent_eval_tool_calls_total[5m])) by (gen_ai_tool_name)") == []
    assert fleet_problems("histogram_quantile(0.99, sum by (le) (rate(gen_ai_execute_tool_duration_seconds_bucket[5m])))") == []
    assert fleet_problems("rate(agent_eval_tool_calls_total[5m])") == ["agent_eval_tool_calls_total is not aggregated over instances"]
    assert fleet_problems("sum by (instance) (rate(agent_eval_runs_total[5m]))") == ["agent_eval_runs_total is grouped by instance"]
    assert fleet_problems('max by (instance) (agent_eval_tool_latency_seconds{quantile="0.99"})') == []  # per-process by design


# -- live: replicas fed by trace id add up to one service ---------------------------------------------------

@pytest.fixture
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "grpc_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def additive_samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Scored counters and histogram series (those Prometheus sums over instances), by name and labels."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for metric in registry.collect():
        if metric.type not in ("counter", "histogram") or not metric.name.startswith(("agent_eval_", "gen_ai_")):
            continue
        if metric.name.startswith(PER_INSTANCE[:2]):
            continue
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def whole_traces(spans: list[Any], most: int) -> Iterator[list[Any]]:
    """Requests of about `most` spans that never split a trace (spans in their order; a trace in the request of its
    first span). See test_a_trace_split_across_requests_is_scored_as_when_whole for why."""
    request: list[Any] = []
    traces: dict[int, list[Any]] = {}
    for span in spans:
        traces.setdefault(span.context.trace_id, []).append(span)
    for trace_spans in traces.values():
        if request and len(request) + len(trace_spans) > most:
            yield request
            request = []
        request += trace_spans
    if request:
        yield request


@pytest.mark.usefixtures("_no_proxy")
def test_replicas_fed_by_trace_id_add_up_to_one_service() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from prometheus_client import CollectorRegistry

    from otel_agent_eval.config.settings import Settings
    from otel_agent_eval.serve import ServeConfig, Service
    from otel_agent_eval.tools.demo import run_workload

    memory = InMemorySpanExporter()
    run_workload(SimpleSpanProcessor(memory), runs=150, suboptimal_share=0.3, seed=7)
    spans = list(memory.get_finished_spans())

    def start() -> Service:
        return Service(ServeConfig(grpc_port=0, http_port=None, metrics_port=None), settings=Settings(metrics_enabled=False),
                       registry=CollectorRegistry()).start()

    one, fleet = start(), [start(), start()]
    try:
        by_replica: dict[int, list[Any]] = defaultdict(list)
        for span in spans:  # what load_balancing does: every span of a trace to the replica its trace id hashes to
            by_replica[span.context.trace_id % len(fleet)].append(span)
        assert all(by_replica[i] for i in range(len(fleet)))
        for svc, batch in [(one, spans), *((fleet[i], by_replica[i]) for i in range(len(fleet)))]:
            exporter = GrpcSpanExporter(endpoint=svc.grpc.endpoint, insecure=True, timeout=10)
            for request in whole_traces(batch, 1):  # one trace a request (the test below splits them otherwise)
                assert exporter.export(request) is SpanExportResult.SUCCESS
            exporter.shutdown()
        for svc in (one, *fleet):
            svc.stop()  # closes open runs too, as a replica's shutdown does
        reference = additive_samples(one.registry)
        summed: dict[Any, float] = defaultdict(float)
        for svc in fleet:
            for key, value in additive_samples(svc.registry).items():
                summed[key] += value
        assert reference and any(name.startswith("agent_eval_runs") for name, _ in reference)
        differing = {key: (reference.get(key), summed.get(key)) for key in set(reference) | set(summed)
                     if abs(reference.get(key, 0.0) - summed.get(key, 0.0)) > 1e-9 * max(1.0, abs(reference.get(key, 0.0)))}
        assert not differing
    finally:
        for svc in (one, *fleet):
            svc.stop()


def runs_counted(batches: list[list[Any]]) -> dict[tuple[str, ...], float]:
    from prometheus_client import CollectorRegistry

    from otel_agent_eval.config.settings import Settings
    from otel_agent_eval.serve import ServeConfig, Service

    svc = Service(ServeConfig(grpc_port=None, http_port=None, metrics_port=None), settings=Settings(metrics_enabled=False),
                  registry=CollectorRegistry())
    try:
        for batch in batches:
            assert svc.intake.offer(list(batch))
    finally:
        svc.stop()
    return {tuple(sample.labels.values()): sample.value for metric in svc.registry.collect() for sample in metric.samples
            if sample.name == "agent_eval_runs_total"}


def demo_spans(runs: int) -> list[Any]:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_agent_eval.tools.demo import run_workload

    memory = InMemorySpanExporter()
    run_workload(SimpleSpanProcessor(memory), runs=runs, suboptimal_share=0.3, seed=7)
    return list(memory.get_finished_spans())  # per trace: chat, execute_tool, chat, invoke_agent (the root ends last)


@pytest.mark.parametrize("split", ["a trace over two requests", "several traces in one request"])
def test_scores_do_not_depend_on_how_requests_split_the_spans(split: str) -> None:
    """An app's BatchSpanProcessor, and the Collector's batching and balancing, may export a trace's children in one
    request and its root in the next, and put many traces in one request; the scores must not depend on that."""
    if split == "a trace over two requests":
        spans = demo_spans(1)
        assert runs_counted([spans]) == runs_counted([spans[:-1], spans[-1:]])
    else:
        spans = demo_spans(60)
        assert runs_counted(list(whole_traces(spans, 1))) == runs_counted([spans])

"""Structural checks of collector-config/ that need no server: the Collector pipelines
(its binary is not available here), cross-file consistency of docker-compose.yml, the
dashboard's panels and the rules' metric names against the product's real exposition.
"""
from __future__ import annotations

import json
import os
import importlib
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from ops_helpers import (
    ALERTING_RULES,
    APP_JOB,
    COLLECTOR_CONFIG,
    COMPOSE_FILE,
    CONFIG_DIR,
    DASHBOARD,
    GRAFANA_DASHBOARD_PROVIDERS,
    GRAFANA_DATASOURCES,
    OPS_README,
    PROMETHEUS_CONFIG,
    RECORDING_RULES,
    ROOT,
    TEMPO_CONFIG,
    UNIT_RANGES,
    dashboard,
    dashboard_panels,
    exposed_metric_names,
    grafana_expr,
    load_yaml,
    recording_rule_names,
    rules_of,
)

KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")

# Component types of otelcol-contrib that this kit uses or suggests, with their current
# names (the Collector is renaming components to lower_snake_case; old names are
# deprecated aliases for a while and then go away).
CONTRIB_COMPONENTS = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch"},
    "exporters": {"otlp_grpc", "otlp_http", "prometheus", "load_balancing", "debug"},
    "extensions": {"health_check"},
    "connectors": set(),
}
DEPRECATED_COMPONENTS = {
    ("exporters", "otlp"): "otlp_grpc",
    ("exporters", "otlphttp"): "otlp_http",
    ("exporters", "loadbalancing"): "load_balancing",
    ("exporters", "logging"): "debug",
    ("exporters", "jaeger"): "otlp_grpc (Jaeger takes OTLP)",
    ("exporters", "prometheusremotewrite"): "prometheus_remote_write",
    ("extensions", "memory_ballast"): "memory_limiter alone",
}
FLEET_VARIANT = re.compile(r"^# ---8<--- fleet variant.*?$(.*?)^# ---8<--- end of fleet variant", re.MULTILINE | re.DOTALL)


# -- the Collector ----------------------------------------------------------------------


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def check_collector_structure(config: Mapping[str, Any]) -> None:
    """What `otelcol validate` checks about wiring: every pipeline component is defined,
    every defined component is used, processors in the recommended order."""
    service = config["service"]
    defined = {kind: set((config.get(kind) or {}).keys()) for kind in KINDS}
    used: dict[str, set[str]] = {kind: set() for kind in KINDS}
    used["extensions"] = set(service.get("extensions") or [])
    assert service.get("pipelines"), "service.pipelines is empty"
    for name, pipeline in service["pipelines"].items():
        signal = component_type(name)
        assert signal in {"traces", "metrics", "logs"}, f"pipeline {name}: unknown signal"
        assert pipeline.get("receivers"), f"pipeline {name} has no receivers"
        assert pipeline.get("exporters"), f"pipeline {name} has no exporters"
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind) or []:
                assert component in defined[kind] or component in defined["connectors"], \
                    f"pipeline {name} uses {kind[:-1]} {component!r}, which is not defined under {kind}:"
                used[kind].add(component)
        processors = pipeline.get("processors") or []
        if "memory_limiter" in processors:
            assert processors[0] == "memory_limiter", f"pipeline {name}: memory_limiter must come first"
        if "batch" in processors:
            assert processors[-1] == "batch", f"pipeline {name}: batch must come last"
    for kind in KINDS:
        unused = defined[kind] - used[kind]
        assert not unused, f"{kind} defined but not used in any pipeline: {sorted(unused)}"
        undefined = used[kind] - defined[kind] - (defined["connectors"] if kind != "extensions" else set())
        assert not undefined, f"{kind} used but not defined: {sorted(undefined)}"
        for component in defined[kind]:
            kind_name = component_type(component)
            assert (kind, kind_name) not in DEPRECATED_COMPONENTS, \
                f"{kind}: {kind_name!r} is deprecated, use {DEPRECATED_COMPONENTS[(kind, kind_name)]}"
            assert kind_name in CONTRIB_COMPONENTS[kind], f"{kind}: {kind_name!r} is not a component this kit knows"


def collector_config() -> dict[str, Any]:
    return load_yaml(COLLECTOR_CONFIG)


def fleet_variant() -> dict[str, Any]:
    """The commented load-balancing variant, uncommented and merged into the main config."""
    match = FLEET_VARIANT.search(COLLECTOR_CONFIG.read_text())
    assert match, "otelcol.yaml lost its commented fleet variant (the ---8<--- markers)"
    lines = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in match.group(1).splitlines()]
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"[a-z_]+:", line))  # after the prose
    variant = yaml.safe_load("\n".join(lines[start:]))
    merged = collector_config()
    merged.update(variant)  # the variant replaces `exporters:` and `service:`
    return merged


def test_collector_pipelines_are_wired():
    config = collector_config()
    check_collector_structure(config)
    pipelines = config["service"]["pipelines"]
    assert {"traces", "metrics"} <= set(pipelines)
    for pipeline in pipelines.values():
        assert pipeline["processors"] == ["memory_limiter", "batch"]
    assert [component_type(e) for e in pipelines["traces"]["exporters"]] == ["otlp_grpc"]
    assert pipelines["metrics"]["exporters"] == ["prometheus"]


def test_collector_receives_otlp_over_grpc_and_http_on_all_interfaces():
    protocols = collector_config()["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"] == "0.0.0.0:4317"
    assert protocols["http"]["endpoint"] == "0.0.0.0:4318"


def test_collector_uses_current_keys():
    config = collector_config()
    limiter = config["processors"]["memory_limiter"]
    assert "check_interval" in limiter and ("limit_percentage" in limiter or "limit_mib" in limiter)
    assert not {"ballast_size_mib"} & set(limiter)
    telemetry = config["service"]["telemetry"]["metrics"]
    assert "address" not in telemetry, "service.telemetry.metrics.address is deprecated: use readers"
    reader = telemetry["readers"][0]["pull"]["exporter"]["prometheus"]
    assert reader["port"] == 8888
    assert "add_metric_suffixes" not in config["exporters"]["prometheus"]


def test_collector_fleet_variant_shards_traces_by_trace_id():
    config = fleet_variant()
    check_collector_structure(config)
    balancer = config["exporters"]["load_balancing"]
    assert balancer["routing_key"] == "traceID"
    assert "endpoint" not in balancer["protocol"]["otlp"], "the load-balancing exporter sets endpoints itself"
    assert balancer["resolver"]["dns"]["hostname"]
    assert config["service"]["pipelines"]["traces"]["exporters"] == ["load_balancing"]


def test_collector_structure_check_catches_mistakes():
    config = collector_config()
    config["service"]["pipelines"]["traces"]["exporters"].append("otlp_grpc/missing")
    with pytest.raises(AssertionError, match="not defined"):
        check_collector_structure(config)
    config = collector_config()
    config["exporters"]["debug"] = {}
    with pytest.raises(AssertionError, match="not used"):
        check_collector_structure(config)
    config = collector_config()
    config["exporters"]["otlp/tempo"] = config["exporters"].pop("otlp_grpc/tempo")
    config["service"]["pipelines"]["traces"]["exporters"] = ["otlp/tempo"]
    with pytest.raises(AssertionError, match="deprecated"):
        check_collector_structure(config)


# -- docker-compose.yml and the files it wires together --------------------------------


def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE_FILE)


def host_port(address: str) -> tuple[str, int]:
    parts = urlsplit(address if "://" in address else f"//{address}")
    assert parts.hostname and parts.port, f"{address!r} has no host:port"
    return parts.hostname, parts.port


def listen_port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def mounts(service: Mapping[str, Any]) -> dict[str, Path]:
    """Container path -> host path of a compose service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        host, container, *_ = volume.split(":")
        out[container] = (COMPOSE_FILE.parent / host).resolve()
    return out


def service_ports() -> dict[str, set[int]]:
    """The ports each compose service listens on inside the network, read from its own config."""
    services = compose()["services"]
    collector = collector_config()
    tempo = load_yaml(TEMPO_CONFIG)
    demo_command = " ".join(services["demo"]["command"])
    demo_port = int(re.search(r"--port\s+(\d+)", demo_command).group(1))
    return {
        "demo": {demo_port},
        "otel-collector": {
            listen_port(collector["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]),
            listen_port(collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"]),
            listen_port(collector["exporters"]["prometheus"]["endpoint"]),
            collector["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]["prometheus"]["port"],
            listen_port(collector["extensions"]["health_check"]["endpoint"]),
        },
        "tempo": {tempo["server"]["http_listen_port"],
                  listen_port(tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"])},
        "prometheus": {9090},
        "grafana": {3000},
    }


def test_compose_mounts_existing_files():
    for name, service in compose()["services"].items():
        for container, host in mounts(service).items():
            assert host.exists(), f"{name}: {host} (mounted at {container}) does not exist"


def test_compose_mounts_match_what_each_service_reads():
    services = compose()["services"]
    collector_mounts = mounts(services["otel-collector"])
    config_arg = next(a for a in services["otel-collector"]["command"] if a.startswith("--config="))
    assert collector_mounts[config_arg.split("=", 1)[1]] == COLLECTOR_CONFIG
    tempo_arg = next(a for a in services["tempo"]["command"] if a.startswith("-config.file="))
    assert mounts(services["tempo"])[tempo_arg.split("=", 1)[1]] == TEMPO_CONFIG

    prometheus = services["prometheus"]
    prom_mounts = mounts(prometheus)
    config_path = next(a for a in prometheus["command"] if a.startswith("--config.file=")).split("=", 1)[1]
    assert prom_mounts[config_path] == PROMETHEUS_CONFIG
    config_dir = Path(config_path).parent
    for rule_file in load_yaml(PROMETHEUS_CONFIG)["rule_files"]:  # relative to the config file
        in_container = config_dir / rule_file
        mounted = next((host / in_container.relative_to(c) for c, host in prom_mounts.items()
                        if in_container.is_relative_to(c) and in_container != Path(c)), None)
        assert mounted == (CONFIG_DIR / rule_file).resolve(), f"{rule_file} is not mounted where prometheus.yml expects it"
    for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            for pattern in sd["files"]:
                directory = config_dir / Path(pattern).parent
                assert str(directory) in prom_mounts, f"file_sd directory {directory} is not mounted"

    grafana_mounts = mounts(services["grafana"])
    assert grafana_mounts["/etc/grafana/provisioning"] == (CONFIG_DIR / "grafana" / "provisioning").resolve()
    provider_path = load_yaml(GRAFANA_DASHBOARD_PROVIDERS)["providers"][0]["options"]["path"]
    assert grafana_mounts[provider_path] == DASHBOARD.parent.resolve()
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider_path}/{DASHBOARD.name}"


def test_compose_addresses_and_ports_agree():
    services = compose()["services"]
    ports = service_ports()
    assert set(ports) == set(services), "a compose service without known ports, or the other way round"

    def reachable(address: str, who: str) -> None:
        host, port = host_port(address)
        assert host in services, f"{who} points at {host!r}, which is no compose service"
        assert port in ports[host], f"{who} points at {host}:{port}, but {host} listens on {sorted(ports[host])}"

    for job in load_yaml(PROMETHEUS_CONFIG)["scrape_configs"]:
        for group in job.get("static_configs", []):
            for target in group["targets"]:
                if not target.startswith("localhost:"):
                    reachable(target, f"prometheus.yml job {job['job_name']}")
    collector = collector_config()
    for name, exporter in collector["exporters"].items():
        if "endpoint" in exporter and not exporter["endpoint"].startswith("0.0.0.0"):
            reachable(exporter["endpoint"], f"otelcol.yaml exporter {name}")
    for source in load_yaml(GRAFANA_DATASOURCES)["datasources"]:
        reachable(source["url"], f"Grafana data source {source['name']}")
    demo_command = " ".join(services["demo"]["command"])
    reachable(re.search(r"--otlp-endpoint\s+(\S+)", demo_command).group(1), "the demo's OTLP exporter")
    assert "--addr 0.0.0.0" in demo_command, "the demo must listen on all interfaces inside its container"
    for name, service in services.items():
        for mapping in service.get("ports", []):
            container_port = int(str(mapping).rsplit(":", 1)[1])
            assert container_port in ports[name], f"{name} publishes {container_port}, which it does not listen on"


def test_scrape_jobs_agree_with_rules_dashboard_and_grafana():
    config = load_yaml(PROMETHEUS_CONFIG)
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert len(jobs) == len(set(jobs)), "duplicate job names"
    assert APP_JOB in jobs
    selectors = set(re.findall(r'job="([^"%]+)"', ALERTING_RULES.read_text()))  # not the templates' "%s"
    assert selectors == {APP_JOB}, f"alerts select jobs {selectors}, prometheus.yml defines {jobs}"
    app_job = next(job for job in config["scrape_configs"] if job["job_name"] == APP_JOB)
    assert app_job["static_configs"][0]["targets"] == ["demo:9464"]
    sources = {s["uid"]: s for s in load_yaml(GRAFANA_DATASOURCES)["datasources"]}
    assert sources["prometheus"]["jsonData"]["timeInterval"] == config["global"]["scrape_interval"]
    assert sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"][0]["datasourceUid"] in sources
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert "job" in variables["job"]["query"]


def test_file_discovery_example_is_a_valid_target_list():
    for path in (CONFIG_DIR / "targets").glob("*.yml"):
        groups = load_yaml(path)
        assert isinstance(groups, list), f"{path} must hold a list of target groups"


# -- the dashboard ----------------------------------------------------------------------


def test_dashboard_has_job_agent_and_tool_variables():
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for name in ("job", "agent", "tool"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"] and variables[name]["multi"]
    assert "gen_ai_agent_name" in variables["agent"]["query"]
    assert "gen_ai_tool_name" in variables["tool"]["query"]


def test_dashboard_panels_have_units_descriptions_and_queries():
    board = dashboard()
    panels = list(dashboard_panels(board))
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"]), "duplicate panel ids"
    for panel in panels:
        where = f"panel {panel['title']!r}"
        assert panel.get("description"), f"{where} has no description"
        assert panel["datasource"]["uid"] == "${datasource}", f"{where} does not use the datasource variable"
        assert panel["fieldConfig"]["defaults"].get("unit") in UNIT_RANGES, f"{where} has no known unit"
        assert panel["targets"], f"{where} has no query"
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), f"{where} repeats a refId"
        for target in panel["targets"]:
            grafana_expr(target["expr"])  # only known variables


def test_dashboard_covers_what_the_issue_asks_for():
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in dashboard_panels()}
    def panel_using(pattern: str) -> str:
        found = [title for title, expr in exprs.items() if re.search(pattern, expr)]
        assert found, f"no panel queries {pattern!r}"
        return found[0]
    panel_using(r'agent_eval_tool_efficiency_score_sum\{dimension="efficiency"')
    panel_using(r"agent_eval_tool_excess_cost_usd_total")
    for q in ("0.5", "0.95", "0.99"):
        panel_using(rf"histogram_quantile\({q}, sum by \(le, gen_ai_tool_name\)")
    panel_using(r"sum by \(outcome\) \(rate\(agent_eval_tool_calls_total")
    panel_using(r'outcome="suboptimal".*optimal_tool')
    panel_using(r"agent_eval_runs_total")
    panel_using(r"agent_eval_run_cost_usd")


def test_dashboard_panels_do_not_overlap():
    taken: dict[tuple[int, int], str] = {}
    for panel in dashboard()["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, f"panel {panel['title']!r} is wider than the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in taken, f"panels {taken[(x, y)]!r} and {panel['title']!r} overlap"
                taken[(x, y)] = panel["title"]


def test_grafana_provisioning_files_are_well_formed():
    sources = load_yaml(GRAFANA_DATASOURCES)
    assert sources["apiVersion"] == 1
    assert {s["type"] for s in sources["datasources"]} == {"prometheus", "tempo"}
    assert sum(1 for s in sources["datasources"] if s.get("isDefault")) == 1
    providers = load_yaml(GRAFANA_DASHBOARD_PROVIDERS)
    assert providers["apiVersion"] == 1 and providers["providers"][0]["type"] == "file"
    json.loads(DASHBOARD.read_text())


# -- metric names against the product's real exposition ---------------------------------

LABEL_NAMES = {"gen_ai_tool_name", "gen_ai_agent_name"}
METRIC_NAME = re.compile(r"(?<![\w:])((?:[a-z_]+:)*(?:agent_eval|gen_ai)[a-z0-9_:]*)")


def metric_names_in(expr: str) -> set[str]:
    return {name.rstrip(":") for name in METRIC_NAME.findall(expr) if name not in LABEL_NAMES}


def rule_expressions() -> Iterator[tuple[str, str]]:
    for path in (RECORDING_RULES, ALERTING_RULES):
        for rule in rules_of(path):
            name = rule.get("record") or rule["alert"]
            yield name, rule["expr"]
            for text in (rule.get("annotations") or {}).values():  # queries inside templates
                yield f"{name} annotation", text


def dashboard_expressions() -> Iterator[tuple[str, str]]:
    for panel in dashboard_panels():
        for target in panel["targets"]:
            yield f"panel {panel['title']!r}", target["expr"]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']}", variable["query"]


@pytest.fixture(scope="module")
def exposed() -> set[str]:
    return exposed_metric_names()


def test_every_metric_used_is_exposed_by_the_product_or_recorded(exposed):
    recorded = set(recording_rule_names())
    unknown = {}
    for where, expr in [*rule_expressions(), *dashboard_expressions()]:
        for name in metric_names_in(expr) - exposed - recorded:
            unknown.setdefault(name, where)
    assert not unknown, f"metrics that neither the product exposes nor a rule records: {unknown}"


SELECTOR = re.compile(r"(?<![\w:])((?:agent_eval|gen_ai)[a-z0-9_]*)\{([^{}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
TARGET_LABELS = {"job", "instance"}  # added by Prometheus to every scraped series


def product_labels() -> dict[str, set[str]]:
    """Sample name -> the labels the product puts on it, from the metric table (names.py)."""
    from otel_agent_eval.metrics import names as n

    specs = [v for v in vars(n).values() if isinstance(v, n.Spec)]
    specs += [n.Spec(n.SELF_PREFIX + name, "counter", doc) for name, doc in n.SELF_COUNTERS.items()]
    out: dict[str, set[str]] = {}
    for spec in specs:
        labels = set(spec.labels)
        if spec.kind == "counter":
            out[spec.name + "_total"] = labels
        elif spec.kind == "histogram":
            out.update({spec.name + "_bucket": labels | {"le"}, spec.name + "_sum": labels, spec.name + "_count": labels})
        elif spec.kind == "summary":
            out.update({spec.name: labels | {"quantile"}, spec.name + "_sum": labels, spec.name + "_count": labels})
        else:
            out[spec.name] = labels
    return out


def test_no_query_selects_by_a_label_its_metric_does_not_have():
    """E.g. the fleet latency histogram has no agent label: a panel filtering it by agent would show nothing."""
    known = product_labels()
    wrong = []
    for where, expr in [*rule_expressions(), *dashboard_expressions()]:
        for name, matchers in SELECTOR.findall(expr):
            if name in known:
                wrong += [(where, name, label) for label in MATCHER.findall(matchers) if label not in known[name] | TARGET_LABELS]
    assert not wrong


def test_metric_name_extraction():
    assert metric_names_in('sum by (gen_ai_tool_name) (rate(agent_eval_tool_calls_total{gen_ai_agent_name="x"}[5m]))') \
        == {"agent_eval_tool_calls_total"}
    assert metric_names_in("tool:gen_ai_execute_tool_duration_seconds:p99_rate5m > agent_eval:suboptimal_ratio:max") \
        == {"tool:gen_ai_execute_tool_duration_seconds:p99_rate5m", "agent_eval:suboptimal_ratio:max"}


# -- the rules' texts -------------------------------------------------------------------


def test_alerts_carry_severity_and_runbook_text():
    names = []
    for rule in rules_of(ALERTING_RULES):
        names.append(rule["alert"])
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        annotations = rule["annotations"]
        assert annotations["summary"] and "Runbook:" in annotations["description"], rule["alert"]
        text = annotations["summary"] + annotations["description"]
        assert "$value" in text or "| query" in text, f"{rule['alert']} shows no number"
    assert len(names) == len(set(names))


def test_panels_named_in_runbooks_exist():
    titles = [p["title"] for p in dashboard_panels()]
    for rule in rules_of(ALERTING_RULES):
        for quoted in re.findall(r'"([A-Z][^"]*)"', rule["annotations"]["description"]):
            assert any(t.startswith(quoted) for t in titles), f"{rule['alert']} names a panel {quoted!r} that does not exist"


def test_recording_rule_names_follow_level_metric_operation():
    for name in recording_rule_names():
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", name), name


def test_settings_are_in_one_group():
    groups = load_yaml(RECORDING_RULES)["groups"]
    settings = groups[0]
    assert settings["name"] == "agent-eval-settings"
    environments = re.findall(r'environment="([^"]+)"', RECORDING_RULES.read_text() + ALERTING_RULES.read_text())
    assert set(environments) == {"production"} and len(environments) == 2, \
        "the catalog environment must be set in the settings group only"


# -- documentation and CI -----------------------------------------------------------------


def test_operations_readme_describes_every_panel_and_alert():
    text = OPS_README.read_text()
    assert "## Operations" in text
    missing = [p["title"] for p in dashboard_panels() if p["title"] not in text]
    missing += [name for name in (r["alert"] for r in rules_of(ALERTING_RULES)) if name not in text]
    assert not missing, f"collector-config/README.md does not describe: {missing}"


def test_make_test_installs_prometheus_before_the_tests():
    """`make test` runs .ci/setup first, which installs Debian's `prometheus` when promtool or prometheus is missing
    (its paths, with stand-ins for apt-get: tests/test_ci_setup.py)."""
    script = ROOT / ".ci" / "setup"
    assert os.access(script, os.X_OK)
    text = script.read_text()
    install = text.index("apt-get install")
    assert "want prometheus promtool prometheus" in text[:install], "the install must be skipped when both are on PATH"
    assert "--no-install-recommends" in text and "DEBIAN_FRONTEND=noninteractive" in text
    subprocess.run(["bash", "-n", str(script)], check=True)
    make = shutil.which("make")
    assert make, "the README's test command is `make test`"
    dry = subprocess.run([make, "--no-print-directory", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert dry[0] == "bash .ci/setup" and "-m pytest" in dry[-1], dry
    for page, section in (("README.md", "## Quickstart"), ("docs/getting-started.md", "## Quickstart"),
                          ("docs/development.md", "# Development")):
        text = (ROOT / page).read_text().split(section + "\n", 1)[1].split("\n## ", 1)[0]
        assert "make test" in text and "prometheus" in text and "promtool" in text, f"{page} {section} does not say what make test installs"


def test_the_kit_names_only_python_names_and_settings_that_exist():
    """The kit once told users to call `otel_agent_eval.prometheus.serve` (a module that moved) after
    install(), which already holds the port: every dotted name must import, every setting must exist,
    and the way to expose the endpoint in a container is the main README's OTEL_AGENT_EVAL_METRICS_ADDR."""
    from otel_agent_eval.config.settings import ENV_VARS

    def resolves(dotted: str) -> bool:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj: Any = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
        return False

    settings = {var.name for var in ENV_VARS}
    bad = []
    for path in sorted(CONFIG_DIR.rglob("*")):
        if path.suffix not in (".md", ".yml", ".yaml", ".json") or not path.is_file():
            continue
        text = path.read_text()
        bad += [f"{path.relative_to(ROOT)}: {name}" for name in re.findall(r"\botel_agent_eval(?:\.\w+)+", text) if not resolves(name)]
        bad += [f"{path.relative_to(ROOT)}: {name}" for name in re.findall(r"\bOTEL_AGENT_EVAL_[A-Z_]+", text) if name not in settings]
    assert not bad, f"names that do not exist: {bad}"
    (target_down,) = [r for r in rules_of(ALERTING_RULES) if r.get("alert") == "AgentEvalTargetDown"]
    assert "OTEL_AGENT_EVAL_METRICS_ADDR=0.0.0.0" in target_down["annotations"]["description"]
    readme = OPS_README.read_text()
    assert "OTEL_AGENT_EVAL_METRICS_ADDR=0.0.0.0" in readme and "serve(" not in readme


PROMETHEUS_CONFIGS = sorted(CONFIG_DIR.glob("prometheus*.yml"))


@pytest.mark.parametrize("config_file", PROMETHEUS_CONFIGS, ids=lambda p: p.name)
def test_the_collector_job_drops_the_scores_the_app_job_scrapes(config_file):
    """One copy of every score (QA: an app scraped on /metrics that also sends its OTLP metrics to the kit's Collector
    got every number twice, and a p99 at 512 s from the re-served exponential histogram's lone +Inf bucket): the job
    scraping the Collector's prometheus exporter drops every name otel-agent-eval exposes, in the exporter's spelling
    too (`_USD`), and keeps the app's other metrics."""
    config = load_yaml(config_file)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert APP_JOB in jobs
    if "otel-collector" not in jobs:
        return
    drops = [re.compile(rule["regex"]) for rule in jobs["otel-collector"].get("metric_relabel_configs", [])
             if rule.get("action") == "drop" and rule.get("source_labels") == ["__name__"]]
    assert drops, f"{config_file.name}: the otel-collector job drops nothing"
    ours = exposed_metric_names()
    ours |= {name.replace("_usd", "_USD") for name in ours} | {"agent_eval_serve_spans_total", "gen_ai_execute_tool_duration_seconds"}
    kept = [name for name in ours if not any(d.fullmatch(name) for d in drops)]
    assert not kept, f"{config_file.name}: the Collector's copies of {sorted(kept)} would be counted twice"
    others = ["gen_ai_client_token_usage_bucket", "gen_ai_client_operation_duration_seconds_count",
              "http_server_request_duration_seconds_bucket", "target_info"]
    assert not [name for name in others if any(d.fullmatch(name) for d in drops)]

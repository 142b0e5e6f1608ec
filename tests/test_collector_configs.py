"""The kit's Collector configs on the real Collector: the distribution built from collector-config/builder-config.yaml
(`.ci/collector`) holds the components the configs use, at one release, and validates every shipped config.

`load_balancing` (otelcol-fleet.yaml's first tier) is the one component missing: the Go module proxy the project
builds from refuses its module. The fleet config is validated with that one exporter swapped for the OTLP exporter
it runs per replica (its `protocol.otlp` options), so every other line is checked by the real binary.
"""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml
from collector_binary import MANIFEST, manifest, otelcol
from collector_fleet import BALANCER, FLEET_COLLECTOR, replica_exporter, validate
from ops_helpers import COLLECTOR_CONFIG, load_yaml

SHIPPED = (COLLECTOR_CONFIG, FLEET_COLLECTOR)
NOT_BUILDABLE = {("exporters", BALANCER)}  # refused by the Go module proxy: see the manifest's comment
KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
#: In the distribution for the tests' next hop (file, span_metrics) and for users (debug, otlp_http), beyond the shipped configs.
ALSO_BUILT = {("exporters", "file"), ("connectors", "span_metrics"), ("exporters", "debug"), ("exporters", "otlp_http")}


def used_types(config: dict) -> set[tuple[str, str]]:
    return {(kind, name.split("/", 1)[0]) for kind in KINDS for name in (config.get(kind) or {})}


def built_types() -> set[tuple[str, str]]:
    listing = yaml.safe_load(subprocess.run([otelcol(), "components"], capture_output=True, text=True, timeout=60,
                                            check=True).stdout)
    return {(kind, component["name"]) for kind in KINDS for component in listing.get(kind) or []}


def test_the_manifest_pins_one_release_for_the_builder_and_every_component() -> None:
    spec = manifest()
    release = spec["dist"]["version"]
    modules = [entry["gomod"] for kind in KINDS for entry in spec.get(kind) or []]
    assert modules and {module.split()[1] for module in modules} == {f"v{release}"}
    assert f"cmd/builder@v{release}" in MANIFEST.read_text()  # the builder command its comment gives


def test_the_distribution_holds_exactly_the_components_the_configs_use() -> None:
    used = set().union(*(used_types(load_yaml(path)) for path in SHIPPED))
    assert NOT_BUILDABLE <= used
    assert built_types() == (used - NOT_BUILDABLE) | ALSO_BUILT


def test_every_shipped_config_validates_without_warnings(tmp_path: Path) -> None:
    for path in SHIPPED:
        config = load_yaml(path)
        if BALANCER in config["exporters"]:  # swap the one unbuildable exporter for what it runs per replica
            balancer = config["exporters"].pop(BALANCER)
            config["exporters"]["otlp_grpc/replica"] = replica_exporter(balancer["resolver"]["static"]["hostnames"][0])
            for pipeline in config["service"]["pipelines"].values():
                pipeline["exporters"] = ["otlp_grpc/replica" if e == BALANCER else e for e in pipeline["exporters"]]
            path = tmp_path / path.name
            path.write_text(yaml.safe_dump(config))
        result = validate(path)
        assert result.returncode == 0, f"{path.name}: {result.stderr}"
        assert "deprecated" not in result.stderr.lower(), f"{path.name}: {result.stderr}"


def test_validate_refuses_a_broken_config(tmp_path: Path) -> None:
    config = copy.deepcopy(load_yaml(COLLECTOR_CONFIG))
    config["service"]["pipelines"]["traces"]["exporters"] = ["otlp_grpc/tmepo"]  # a typo a user could make
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(config))
    result = validate(broken)
    assert result.returncode != 0 and "otlp_grpc/tmepo" in result.stderr


def test_the_fleet_config_fails_only_on_the_exporter_this_build_lacks() -> None:
    result = validate(FLEET_COLLECTOR)
    assert result.returncode != 0 and f'unknown type: "{BALANCER}"' in result.stderr

"""The kit's Collector configs on the real Collector: the distribution built from collector-config/builder-config.yaml
(`.ci/collector`) holds exactly the components the configs use, at one release, and validates every shipped config
as it is.
"""
from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml
from collector_binary import MANIFEST, manifest, otelcol
from collector_fleet import FLEET_COLLECTOR, validate
from ops_helpers import COLLECTOR_CONFIG, load_yaml

SHIPPED = (COLLECTOR_CONFIG, FLEET_COLLECTOR)
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
    assert ("exporters", "load_balancing") in used
    assert built_types() == used | ALSO_BUILT


def test_every_shipped_config_validates_without_warnings() -> None:
    for path in SHIPPED:
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


def test_validate_checks_the_balancer_options(tmp_path: Path) -> None:
    config = copy.deepcopy(load_yaml(FLEET_COLLECTOR))
    config["exporters"]["load_balancing"]["routing_key"] = "trace_id"  # the option's value is `traceID`
    broken = tmp_path / "broken-fleet.yaml"
    broken.write_text(yaml.safe_dump(config))
    result = validate(broken)
    assert result.returncode != 0 and "trace_id" in result.stderr

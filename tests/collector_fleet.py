"""Pieces of the tests on the real Collector (tests/test_collector*.py): a Collector process of the test's own,
what the tests set over the kit's shipped configs, and reading the Collector's outputs.

The Collector is the binary `.ci/collector` builds from collector-config/builder-config.yaml (collector_binary.py).
Every Collector here listens on free 127.0.0.1 ports only, its own telemetry included (never :8888).
"""
from __future__ import annotations

import base64
import copy
import json
import subprocess
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from collector_binary import otelcol
from google.protobuf import json_format
from ops_helpers import CONFIG_DIR, free_port, wait_for
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from otlp_receiver import flatten
from prometheus_client.parser import text_string_to_metric_families

FLEET_COLLECTOR = CONFIG_DIR / "otelcol-fleet.yaml"
BALANCER = "load_balancing"
DEADLINE_S = 60.0  # liveness only


class Collector:
    """`otelcol-agent-eval` running `config`; its own metrics on `telemetry_url`.

    With `base`, the Collector runs that file untouched with `config` over it (`--config=BASE --config=OVERRIDES`:
    the Collector merges maps key by key, a list replaces a list): how the tests run a shipped config on their own
    ports. Without it, `config` is the whole configuration.
    """

    def __init__(self, workdir: Path, name: str, config: Mapping[str, Any], base: Path | None = None,
                 json_logs: bool = False) -> None:
        self.telemetry_port = free_port()
        config = copy.deepcopy(dict(config))
        service = config.setdefault("service", {})
        if base is None:
            service.pop("extensions", None)  # health_check on a fixed port: not needed by the tests
            config.pop("extensions", None)
        logs: dict[str, Any] = {"level": "warn"}
        if json_logs:  # one JSON object a line, every one of them (the default samples: 10 a message per 10 s)
            logs.update(encoding="json", disable_stacktrace=True, sampling={"enabled": False})
        service["telemetry"] = {"logs": logs, "metrics": {"level": "detailed", "readers": [
            {"pull": {"exporter": {"prometheus": {"host": "127.0.0.1", "port": self.telemetry_port}}}}]}}
        self.config_file = workdir / f"{name}.yaml"
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.configs = [*([base] if base else []), self.config_file]
        self.log = workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def telemetry_url(self) -> str:
        return f"http://127.0.0.1:{self.telemetry_port}/metrics"

    def __enter__(self) -> Collector:
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([otelcol(), *(f"--config={path}" for path in self.configs)],
                                            stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._ready, timeout_s=DEADLINE_S, what=f"the Collector of {self.config_file.name} to serve its metrics")
        return self

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"the Collector exited with {self.process.returncode}:\n{self.log.read_text()}")
        return bool(scrape(self.telemetry_url))

    def __exit__(self, *exc: object) -> None:
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def metric(self, name: str, **labels: str) -> float:
        return metric_sum(scrape(self.telemetry_url), name, **labels)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def metric_sum(exposition: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels`."""
    return sum(sample.value for family in text_string_to_metric_families(exposition) for sample in family.samples
               if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()))


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([otelcol(), "validate", f"--config={path}"], capture_output=True, text=True, timeout=120)


# -- the test copies of the kit's configs ---------------------------------------------------------------

def fleet_overrides(next_hop: str, *, give_up_after: str | None = None, reference: str | None = None) -> dict[str, Any]:
    """What the tests set over the untouched otelcol-fleet.yaml (`Collector(..., base=FLEET_COLLECTOR)`).

    Places: every listener on a free 127.0.0.1 port; the `load_balancing` static resolver's hostnames the test's
    replicas (empty here: `balance_to` sets them, once the replicas know where to send back); Tempo's exporter pointed at the test's `next_hop`. Timing: the replicas' exporters retry quickly
    (the first retry after 100 ms, at most 1 s apart) so that a restarted replica is found within a second, and
    give up after `give_up_after` (the shipped `max_elapsed_time` when None); the evaluated spans' batch waits
    100 ms. With `reference`, one more pipeline sends the apps' spans to that endpoint as well (the tests'
    one-replica reference); the shipped pipelines are untouched.
    """
    retry: dict[str, Any] = {"initial_interval": "100ms", "max_interval": "1s"}
    if give_up_after is not None:
        retry["max_elapsed_time"] = give_up_after
    overrides: dict[str, Any] = {
        "extensions": {"health_check": {"endpoint": f"127.0.0.1:{free_port()}"}},
        "receivers": {
            "otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{free_port()}"},
                                   "http": {"endpoint": f"127.0.0.1:{free_port()}"}}},
            "otlp/evaluated": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{free_port()}"}}}},
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {
            BALANCER: {"protocol": {"otlp": {"retry_on_failure": retry}}, "resolver": {"static": {"hostnames": []}}},
            "otlp_grpc/tempo": {"endpoint": next_hop},
            "prometheus": {"endpoint": f"127.0.0.1:{free_port()}"}},
    }
    if reference is not None:
        overrides["exporters"]["otlp_grpc/reference"] = {"endpoint": reference, "tls": {"insecure": True}}
        overrides["service"] = {"pipelines": {"traces/reference": {"receivers": ["otlp"], "exporters": ["otlp_grpc/reference"]}}}
    return overrides


def balance_to(overrides: dict[str, Any], endpoints: list[str]) -> None:
    """The `load_balancing` exporter's static resolver in `fleet_overrides`: these replicas."""
    overrides["exporters"][BALANCER]["resolver"]["static"]["hostnames"] = endpoints


def grpc_endpoint(config: Mapping[str, Any], receiver: str = "otlp") -> str:
    """Where `receiver`'s OTLP/gRPC listens, as `--forward-to` takes it."""
    return f"http://{config['receivers'][receiver]['protocols']['grpc']['endpoint']}"


def receiver_url(config: Mapping[str, Any], receiver: str, protocol: str) -> str:
    endpoint = config["receivers"][receiver]["protocols"][protocol]["endpoint"]
    return f"http://{endpoint}/v1/traces" if protocol == "http" else f"http://{endpoint}"


def next_hop(spans_file: Path, span_metrics_port: int) -> dict[str, Any]:
    """The next hop of the replicas' enriched spans: OTLP/gRPC in, every span to a file exporter, and the
    `span_metrics` connector (duration histogram in seconds by `gen_ai.tool.name`, flushed every second)
    served by a Prometheus exporter on `span_metrics_port`."""
    return {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{free_port()}"}}}},
        "processors": {"batch": {"timeout": "100ms"}},
        "connectors": {"span_metrics": {"histogram": {"unit": "s"}, "dimensions": [{"name": "gen_ai.tool.name"}],
                                        "metrics_flush_interval": "1s"}},
        "exporters": {"file": {"path": str(spans_file)},
                      "prometheus": {"endpoint": f"127.0.0.1:{span_metrics_port}"}},
        "service": {"pipelines": {
            "traces": {"receivers": ["otlp"], "processors": ["batch"], "exporters": ["file", "span_metrics"]},
            "metrics": {"receivers": ["span_metrics"], "exporters": ["prometheus"]}}},
    }


def file_spans(path: Path) -> list[dict[str, Any]]:
    """Every span the file exporter wrote (one OTLP/JSON request a line), flattened as otlp_receiver.flatten does."""
    if not path.exists():
        return []
    requests = [json_format.ParseDict(hex_ids_as_base64(json.loads(line)), ExportTraceServiceRequest())
                for line in path.read_text().splitlines() if line.strip()]
    return flatten(requests)


def hex_ids_as_base64(message: Any) -> Any:
    """OTLP/JSON writes trace and span ids in hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(message, list):
        return [hex_ids_as_base64(item) for item in message]
    if not isinstance(message, dict):
        return message
    return {key: base64.b64encode(bytes.fromhex(value)).decode() if key in ("traceId", "spanId", "parentSpanId") and value
            else hex_ids_as_base64(value) for key, value in message.items()}

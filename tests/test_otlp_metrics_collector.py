"""The final proof of OTLP metrics: the kit's real Collector receives them and exports them to Prometheus
(its prometheus exporter), and every series there matches our own /metrics, cumulative and delta.

Counters, gauges and explicit histograms are read from the Collector's /metrics; the exponential histograms
leave the Collector as Prometheus native histograms, which only the protobuf exposition carries, so a real
Prometheus server (native histograms on) scrapes the Collector and answers their count and p99."""
from __future__ import annotations

import glob
import math
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from prometheus_client import CollectorRegistry, generate_latest

from ops_helpers import PrometheusServer, binary, free_port, wait_for
from otel_agent_eval import AgentEvalSpanProcessor
from otel_agent_eval.tools.demo.workload import run_workload
from otlp_metrics_receiver import IGNORED_LABELS, Histo, scrape, scrape_view
from test_otlp_metrics import TEMPORALITY

# exponential histograms over OTLP (bounds of histogram.exponential_layout): native ones after the Collector
NATIVE = ("gen_ai_execute_tool_duration_seconds", "agent_eval_run_duration_seconds", "agent_eval_run_cost_usd")


def otelcol() -> str:
    """The kit's Collector (tests/collector_binary.py once that lands; until then its cache directory)."""
    try:
        from collector_binary import otelcol as built
    except ImportError:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "otel-agent-eval"
        found = sorted(glob.glob(str(cache / "otelcol-*" / "otelcol-agent-eval")), key=os.path.getmtime)
        if not found:
            pytest.fail("the kit's Collector is not built: run `bash .ci/collector`", pytrace=False)
        return found[-1]
    return built()


class Collector:
    """otelcol: OTLP/HTTP in, the prometheus exporter out, on free localhost ports."""

    def __init__(self, workdir: Path) -> None:
        self.otlp_port, self.prometheus_port = free_port(), free_port()
        config = {
            "receivers": {"otlp": {"protocols": {"http": {"endpoint": f"127.0.0.1:{self.otlp_port}"}}}},
            "exporters": {"prometheus": {"endpoint": f"127.0.0.1:{self.prometheus_port}", "metric_expiration": "30m"}},
            "service": {"telemetry": {"metrics": {"level": "none"}},
                        "pipelines": {"metrics": {"receivers": ["otlp"], "exporters": ["prometheus"]}}},
        }
        (workdir / "otelcol.yaml").write_text(yaml.safe_dump(config))
        self.log = workdir / "otelcol.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([otelcol(), f"--config={workdir / 'otelcol.yaml'}"], stdout=log, stderr=subprocess.STDOUT)
        wait_for(lambda: self.scrape() is not None, timeout_s=30, what="the Collector's prometheus exporter")

    @property
    def metrics_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}/v1/metrics"

    def scrape(self) -> str:
        assert self.process.poll() is None, self.log.read_text()[-3000:]
        return scrape(f"http://127.0.0.1:{self.prometheus_port}/metrics")

    def view(self) -> dict:
        """The Collector's series, without the labels it adds (job, instance, otel_scope_*)."""
        return {(name.replace("_USD", "_usd"), tuple((k, v) for k, v in labels if k not in IGNORED_LABELS)): value
                for (name, labels), value in scrape_view(self.scrape()).items()}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def processor_scrape(collector: Collector, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The processor with its own OTLP exporter to the Collector: three exports, then our /metrics."""
    registry = CollectorRegistry()
    processor = AgentEvalSpanProcessor(registry=registry, otlp_metrics=OTLPMetricExporter(endpoint=collector.metrics_endpoint))
    for seed in (21, 22, 23):  # three exports: deltas must add up to the cumulative counts
        run_workload(processor, runs=150, seed=seed)
        processor.otlp_metrics.force_flush()
    text = generate_latest(registry).decode()
    processor.shutdown()  # one more export, of the same counts
    return text


def serve_scrape(collector: Collector, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """`serve` sending its metrics to the Collector; /metrics once all is evaluated, then the last export at shutdown."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_agent_eval.tools.demo.workload import private_provider
    from serve_process import local_only, serving, stop_cleanly
    from test_otlp_metrics import evaluated_scrape

    local_only(monkeypatch)
    env = {**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""}
    with serving("--no-grpc", "--http-port", "0", "--metrics-port", "0", "--otlp-metrics-to",
                 f"http://127.0.0.1:{collector.otlp_port}", "--otlp-metrics-interval", "1", env=env) as (process, where):
        provider = private_provider(SimpleSpanProcessor(OTLPSpanExporter(endpoint=where["OTLP/HTTP"])))
        run_workload(provider, runs=200, seed=24)
        provider.shutdown()
        text = evaluated_scrape(where["metrics"])
        stop_cleanly(process)
    return text


def zero_code_scrape(collector: Collector, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """An unmodified app under opentelemetry-instrument with OTEL_METRICS_EXPORTER=otlp to the Collector."""
    import sys

    from test_otlp_metrics import ZERO_CODE_APP
    from test_zero_code import free_port as port

    app = tmp_path / "app.py"
    app.write_text(ZERO_CODE_APP)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DEEPEVAL_"))}
    env.update({
        "OTEL_TRACES_EXPORTER": "agent_eval", "OTEL_METRICS_EXPORTER": "otlp", "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": collector.metrics_endpoint,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port()}/v1/traces", TEMPORALITY: os.environ[TEMPORALITY],
        "OTEL_METRIC_EXPORT_INTERVAL": "600000", "OTEL_AGENT_EVAL_METRICS_PORT": str(port()), "NO_PROXY": "127.0.0.1,localhost",
    })
    instrument = Path(sys.executable).with_name("opentelemetry-instrument")
    run = subprocess.run([str(instrument), sys.executable, str(app)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


SOURCES = {"processor": processor_scrape, "serve": serve_scrape, "zero-code": zero_code_scrape}


@pytest.mark.parametrize("temporality", ["cumulative", "delta"])
@pytest.mark.parametrize("source", list(SOURCES))
def test_through_the_collector_into_prometheus_every_series_matches(tmp_path, monkeypatch, source, temporality):
    binary("prometheus")
    monkeypatch.setenv(TEMPORALITY, temporality)
    collector = Collector(tmp_path)
    try:
        ours = scrape_view(SOURCES[source](collector, monkeypatch, tmp_path))
        theirs = wait_for(lambda: (lambda view: view if set(view) == set(ours) else None)(collector.view()), timeout_s=20,
                          what="the Collector to show every series of ours")
        for key, value in ours.items():
            got = theirs[key]
            if isinstance(value, Histo):
                assert (got.count, got.sum) == (value.count, pytest.approx(value.sum, rel=1e-9)), key
                if key[0] not in NATIVE:  # classic buckets: the same ones
                    assert {b: c for b, c in got.buckets.items() if c} == {b: c for b, c in value.buckets.items() if c}, key
            elif math.isnan(value):
                assert math.isnan(got), key
            else:
                assert got == pytest.approx(value, rel=1e-9, abs=1e-12), key
        # the native histograms' buckets: p99 as Prometheus computes it, within 1 % of our /metrics' p99
        config = {"global": {"scrape_interval": "1s"},
                  "scrape_configs": [{"job_name": "collector", "honor_labels": True, "static_configs": [
                      {"targets": [f"127.0.0.1:{collector.prometheus_port}"]}]}]}
        (tmp_path / "prometheus").mkdir()
        with PrometheusServer(tmp_path / "prometheus", config, flags=("--enable-feature=native-histograms",)) as prometheus:
            p99 = {}
            for native in NATIVE:
                there = native.replace("_usd", "_USD")  # the Collector names USD metrics by their UCUM unit
                total = sum(v.count for (name, _), v in ours.items() if name == native)
                wait_for(lambda native=native, total=total: sum(
                    s["value"] for s in prometheus.query(f"histogram_count({there})")) == total,
                    timeout_s=30, what=f"Prometheus to scrape the Collector's native histograms {native}")
                p99.update({(native, tuple(sorted((k, v) for k, v in s["metric"].items() if k not in IGNORED_LABELS))): s["value"]
                            for s in prometheus.query(f"histogram_quantile(0.99, {there})")})
        expected = {key: value.quantile(0.99) for key, value in ours.items() if key[0] in NATIVE}
        assert set(p99) == set(expected)
        for key, value in expected.items():
            assert p99[key] == pytest.approx(value, rel=0.01), key
    finally:
        collector.stop()

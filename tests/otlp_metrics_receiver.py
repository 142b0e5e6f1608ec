"""A real OTLP metrics receiver inside the test process (gRPC and HTTP/protobuf on 127.0.0.1), and what a
Prometheus exporter behind it would show.

    >>> with running_metrics_receiver("grpc") as receiver:
    ...     exporter = OTLPMetricExporter(endpoint=receiver.endpoint, insecure=True)
    ...     ...
    ...     series = receiver.prometheus_view()   # {(prometheus name, labels): value or Histo}

`prometheus_view` turns every received point into the series the Collector's prometheus exporter
exposes (the OTLP -> Prometheus name rules of prometheus/otlptranslator: dots to underscores, the unit
as a suffix, `_total` on monotonic sums) and accumulates deltas the way its accumulator does: a delta
point must start where the series' previous point ended, else the test fails (a gap would lose counts).
`scrape_view` reads our own /metrics text into the same shape, so the two compare series by series.
"""
from __future__ import annotations

import gzip
import math
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.metrics.v1 import metrics_pb2
from prometheus_client.parser import text_string_to_metric_families

from otlp_receiver import HOST, PROTOBUF, attributes

METRICS_PATH = "/v1/metrics"
DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": ""}
# what a test ignores of a series' labels: the exporter's job/instance and scope labels
IGNORED_LABELS = {"job", "instance", "otel_scope_name", "otel_scope_version", "otel_scope_schema_url"}


@dataclass
class Histo:
    """A histogram as (upper bound -> count in that bucket), with its sum and count."""

    buckets: dict[float, int] = field(default_factory=dict)
    sum: float = 0.0
    count: int = 0
    lowest: float = 0.0  # the lower bound of the first bucket (0 for explicit buckets, as Prometheus has it)

    def quantile(self, q: float) -> float:
        """As Prometheus' histogram_quantile: linear interpolation inside the bucket the rank falls in."""
        rank, seen, lower = q * self.count, 0, self.lowest
        for upper in sorted(self.buckets):
            count = self.buckets[upper]
            if count and seen + count >= rank:
                if math.isinf(upper):
                    return lower
                return lower + (upper - lower) * (rank - seen) / count
            seen += count
            lower = upper
        return lower


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The name the Collector's prometheus exporter gives an OTLP metric (suffixes on, UTF-8 escaped)."""
    tokens = [t for t in "".join(c if c.isalnum() or c == ":" else " " for c in name).split()]
    main = unit.split("/")[0].strip()
    suffix = "" if not main or "{" in main else _UNITS.get(main, main)
    if suffix and suffix not in tokens:
        tokens.append(suffix)
    if kind == "monotonic_sum":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    return "_".join(tokens)


def _labels(attrs: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k.replace(".", "_"), str(v)) for k, v in attrs.items() if str(v) != ""))


class MetricsReceiver:
    """Stores every ExportMetricsServiceRequest; both transports share this."""

    endpoint: str

    def __init__(self) -> None:
        self._requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []
        self._changed = threading.Condition()

    def store(self, request: metrics_service_pb2.ExportMetricsServiceRequest) -> None:
        with self._changed:
            self._requests.append(request)
            self._changed.notify_all()

    @property
    def requests(self) -> list[metrics_service_pb2.ExportMetricsServiceRequest]:
        with self._changed:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self._requests) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{self.endpoint}: expected {count} export requests within {timeout}s, "
                                         f"got {len(self._requests)}")
                self._changed.wait(remaining)

    def metrics(self, scope: str | None = "otel_agent_eval") -> list[tuple[dict[str, Any], metrics_pb2.Metric]]:
        """(resource attributes, metric) of every metric received, in order (of `scope` only, unless None)."""
        out = []
        for request in self.requests:
            for rm in request.resource_metrics:
                resource = attributes(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    if scope is None or sm.scope.name == scope:
                        out += [(resource, m) for m in sm.metrics]
        return out

    def prometheus_view(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
        """Every series as the Collector's prometheus exporter would show it after all the requests so far."""
        view: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        ends: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}  # series -> end time of its last point
        for _, metric in self.metrics():
            kind = metric.WhichOneof("data")
            data = getattr(metric, kind)
            delta = getattr(data, "aggregation_temporality", 0) == DELTA
            if kind == "sum":
                name = prometheus_name(metric.name, metric.unit, "monotonic_sum" if data.is_monotonic else "gauge")
            else:
                name = prometheus_name(metric.name, metric.unit, "gauge" if kind == "gauge" else kind)
            for point in data.data_points:
                key = (name, _labels(attributes(point.attributes)))
                if delta and key in ends:
                    assert point.start_time_unix_nano == ends[key], f"{key}: a delta point that does not start where the last ended"
                ends[key] = point.time_unix_nano
                value = _value(kind, point)
                if delta and key in view:
                    value = _add(view[key], value)
                view[key] = value
        return view


def _value(kind: str, point: Any) -> Any:
    if kind in ("sum", "gauge"):
        return point.as_double if point.HasField("as_double") else point.as_int
    if kind == "histogram":
        bounds = [*point.explicit_bounds, math.inf]
        return Histo(dict(zip(bounds, point.bucket_counts)), point.sum, point.count)
    if kind == "exponential_histogram":
        base = 2 ** (2 ** -point.scale)
        buckets = {base ** (point.positive.offset + i + 1): c for i, c in enumerate(point.positive.bucket_counts)}
        return Histo(buckets, point.sum, point.count, base ** point.positive.offset)
    raise AssertionError(f"unexpected metric type {kind}")


def _add(before: Any, delta: Any) -> Any:
    if isinstance(before, Histo):
        buckets = dict(before.buckets)
        for upper, count in delta.buckets.items():
            buckets[upper] = buckets.get(upper, 0) + count
        lowest = min(h.lowest for h in (before, delta) if h.buckets) if delta.buckets else before.lowest
        return Histo(buckets, before.sum + delta.sum, before.count + delta.count, lowest)
    return before + delta


def scrape_view(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], Any]:
    """Our families (agent_eval_*, gen_ai_*) of a /metrics text in the shape of `prometheus_view` (histograms as
    per-bucket counts); the registry's others (process_*, python_*) are not ours to send."""
    view: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(("agent_eval_", "gen_ai_")):
            continue
        histos: dict[tuple[tuple[str, str], ...], Histo] = {}
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if v != ""}
            if family.type == "histogram":
                le = labels.pop("le", None)
                histo = histos.setdefault(_labels(labels), Histo())
                if sample.name.endswith("_bucket"):
                    histo.buckets[float(le)] = int(sample.value)  # cumulative for now
                elif sample.name.endswith("_sum"):
                    histo.sum = sample.value
                elif sample.name.endswith("_count"):
                    histo.count = int(sample.value)
            elif family.type == "summary":
                if sample.name == family.name:
                    view[(family.name, _labels(labels))] = sample.value
            elif not sample.name.endswith("_created"):
                view[(sample.name, _labels(labels))] = sample.value
        for labels, histo in histos.items():
            bounds = sorted(histo.buckets)
            cumulative = [histo.buckets[b] for b in bounds]
            histo.buckets = {b: c - p for b, c, p in zip(bounds, cumulative, [0, *cumulative[:-1]])}
            view[(family.name, labels)] = histo
    return view


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


# -- the transports ----------------------------------------------------------------------

class _MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: MetricsReceiver) -> None:
        self._receiver = receiver

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - the gRPC method name
        self._receiver.store(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class GrpcMetricsReceiver(MetricsReceiver):
    """OTLP/gRPC metrics on 127.0.0.1:<free port>; `endpoint` is `127.0.0.1:PORT` (use `insecure=True`)."""

    def __init__(self) -> None:
        super().__init__()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsService(self), self._server)
        self.port = self._server.add_insecure_port(f"{HOST}:0")
        self.endpoint = f"{HOST}:{self.port}"
        self.base_url = f"http://{self.endpoint}"

    def start(self) -> GrpcMetricsReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None).wait(timeout=5)


class _Handler(BaseHTTPRequestHandler):
    receiver: HttpMetricsReceiver

    def do_POST(self) -> None:  # noqa: N802 - http.server name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != METRICS_PATH:
            return self._reply(404, b"")
        if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
            body = gzip.decompress(body)
        self.receiver.store(metrics_service_pb2.ExportMetricsServiceRequest.FromString(body))
        self._reply(200, metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString())

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", PROTOBUF)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass


class HttpMetricsReceiver(MetricsReceiver):
    """OTLP/HTTP metrics on 127.0.0.1:<free port>; `endpoint` is the full `/v1/metrics` URL."""

    def __init__(self) -> None:
        super().__init__()
        self._server = ThreadingHTTPServer((HOST, 0), type("Handler", (_Handler,), {"receiver": self}))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.base_url = f"http://{HOST}:{self.port}"
        self.endpoint = self.base_url + METRICS_PATH
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> HttpMetricsReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def running_metrics_receiver(protocol: str) -> Iterator[MetricsReceiver]:
    receiver: Any = {"grpc": GrpcMetricsReceiver, "http": HttpMetricsReceiver}[protocol]()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()

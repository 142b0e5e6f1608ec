"""`serve` over TLS, and TLS and headers to the next hop: real SDK OTLP exporters, real gRPC and HTTP on 127.0.0.1.

The certificates are made in the test (`tls_helpers.py`). The next hop is a second `serve`
that requires TLS (mutual, in one test) and a bearer token, so a header that did not
arrive shows as a refused export.
"""
from __future__ import annotations

import http.client
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from serve_process import FREE_PORTS, local_only, start_serve, stop_cleanly
from tls_helpers import Pki, make_pki

from otel_agent_eval.config.settings import Settings
from otel_agent_eval.core import conventions as c
from otel_agent_eval.serve import ServeConfig, Service
from otel_agent_eval.serve.auth import BearerToken
from otel_agent_eval.serve.next_hop import NextHop
from otel_agent_eval.serve.tls import ServerTls
from otel_agent_eval.tools.cli import main

SETTINGS = Settings(metrics_enabled=False)


@pytest.fixture(autouse=True)
def _local_only(monkeypatch: pytest.MonkeyPatch) -> None:
    local_only(monkeypatch)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def service(exporter: SpanExporter | None = None, **config: Any) -> Service:
    options = dict(grpc_port=0, http_port=0, metrics_port=0, forward_delay_s=0.05, **config)
    return Service(ServeConfig(**options), settings=SETTINGS, registry=CollectorRegistry(), exporter=exporter).start()


@pytest.fixture
def tls_service(pki: Pki) -> Iterator[Service]:
    svc = service(tls=ServerTls.load(pki.server_cert, pki.server_key))
    try:
        yield svc
    finally:
        svc.stop()


def tool_spans(n: int, tool: str = "web_search") -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n):
        provider.get_tracer("tls").start_span(f"execute_tool {tool} {i}", attributes={
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL, c.GEN_AI_TOOL_NAME: tool}).end()
    return list(memory.get_finished_spans())


def grpc_exporter(svc: Service, pki: Pki | None, *, client: bool = False, ca: str | None = None, **options: Any) -> GrpcSpanExporter:
    """The SDK's gRPC exporter to `svc`: TLS trusting `ca` (default the test CA), or plaintext when `pki` is None."""
    if pki is None:
        return GrpcSpanExporter(endpoint=svc.grpc.endpoint, insecure=True, **options)
    read = lambda path: Path(path).read_bytes()  # noqa: E731
    credentials = grpc.ssl_channel_credentials(read(ca or pki.ca), read(pki.client_key) if client else None,
                                               read(pki.client_cert) if client else None)
    return GrpcSpanExporter(endpoint=svc.grpc.url, credentials=credentials, **options)


def http_exporter(svc: Service, pki: Pki | None, *, client: bool = False, ca: str | None = None, **options: Any) -> HttpSpanExporter:
    if pki is None:
        return HttpSpanExporter(endpoint=svc.http.endpoint.replace("https://", "http://"), **options)
    if client:
        options.update(client_certificate_file=pki.client_cert, client_key_file=pki.client_key)
    return HttpSpanExporter(endpoint=svc.http.endpoint, certificate_file=ca or pki.ca, **options)


def counted(svc: Service, name: str, **labels: str) -> float:
    return svc.registry.get_sample_value(f"agent_eval_serve_{name}_total", labels) or 0


def test_both_receivers_speak_tls_to_the_sdk_exporters(pki: Pki, tls_service: Service) -> None:
    svc = tls_service
    assert svc.http.endpoint.startswith("https://127.0.0.1:") and svc.grpc.url.startswith("https://127.0.0.1:")
    assert http_exporter(svc, pki, timeout=10).export(tool_spans(3)) is SpanExportResult.SUCCESS
    assert grpc_exporter(svc, pki, timeout=10).export(tool_spans(4)) is SpanExportResult.SUCCESS
    assert svc.drain()
    assert counted(svc, "spans", transport="http", outcome="accepted") == 3
    assert counted(svc, "spans", transport="grpc", outcome="accepted") == 4
    assert svc.registry.get_sample_value("agent_eval_processor_spans_seen_total") == 7


def test_plaintext_and_untrusting_clients_fail_cleanly_and_the_service_goes_on(pki: Pki, tls_service: Service) -> None:
    svc = tls_service
    # plain HTTP to the TLS port: a 400 saying why, which the SDK exporter does not retry
    connection = http.client.HTTPConnection(*svc.http.address, timeout=10)
    connection.request("POST", "/v1/traces", encode_spans(tool_spans(1)).SerializeToString(),
                       {"Content-Type": "application/x-protobuf"})
    response = connection.getresponse()
    assert (response.status, response.read()) == (400, b"this port speaks TLS: send to https://\n")
    connection.close()
    assert http_exporter(svc, None, timeout=5).export(tool_spans(1)) is SpanExportResult.FAILURE
    # plaintext gRPC: the handshake fails, UNAVAILABLE on the client's side, retried until its timeout
    assert grpc_exporter(svc, None, timeout=1).export(tool_spans(1)) is SpanExportResult.FAILURE
    # TLS clients that do not trust our certificate
    assert http_exporter(svc, pki, ca=pki.other_ca, timeout=1).export(tool_spans(1)) is SpanExportResult.FAILURE
    assert grpc_exporter(svc, pki, ca=pki.other_ca, timeout=1).export(tool_spans(1)) is SpanExportResult.FAILURE
    # a client that connects and says nothing holds one slot until the idle timeout; it does not stop the others
    with ssl.create_default_context(cafile=pki.ca).wrap_socket(
            __import__("socket").create_connection(svc.http.address, timeout=10), server_hostname="127.0.0.1"):
        assert http_exporter(svc, pki, timeout=10).export(tool_spans(2)) is SpanExportResult.SUCCESS
    assert grpc_exporter(svc, pki, timeout=10).export(tool_spans(2)) is SpanExportResult.SUCCESS
    assert svc.drain()
    assert counted(svc, "requests", transport="http", answer="not_tls") == 2
    assert counted(svc, "requests", transport="http", answer="tls_failed") >= 1  # the exporter's retries may add more
    assert counted(svc, "spans", transport="http", outcome="accepted") == 2
    assert counted(svc, "spans", transport="grpc", outcome="accepted") == 2


def test_mutual_tls_requires_a_client_certificate_from_the_ca(pki: Pki) -> None:
    svc = service(tls=ServerTls.load(pki.server_cert, pki.server_key, pki.ca))
    try:
        assert http_exporter(svc, pki, client=True, timeout=10).export(tool_spans(1)) is SpanExportResult.SUCCESS
        assert grpc_exporter(svc, pki, client=True, timeout=10).export(tool_spans(1)) is SpanExportResult.SUCCESS
        assert http_exporter(svc, pki, timeout=1).export(tool_spans(1)) is SpanExportResult.FAILURE
        assert grpc_exporter(svc, pki, timeout=1).export(tool_spans(1)) is SpanExportResult.FAILURE
        assert svc.drain()
        assert counted(svc, "spans", transport="http", outcome="accepted") == 1
        assert counted(svc, "spans", transport="grpc", outcome="accepted") == 1
    finally:
        svc.stop()


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_forwarding_over_mutual_tls_with_headers(pki: Pki, protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """serve -> serve: the second requires mutual TLS and a bearer token; the first presents both."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", pki.other_ca)  # as many images set it: --forward-ca-file must still win
    arrived = InMemorySpanExporter()
    last = service(arrived, tls=ServerTls.load(pki.server_cert, pki.server_key, pki.ca), bearer_token=BearerToken("s3cret"))
    grpc_hop = protocol == "grpc"
    url = last.grpc.url if grpc_hop else last.http.endpoint
    first = wrong = None
    try:
        first = service(next_hop=NextHop.parse(url, protocol=protocol, headers=["Authorization=Bearer s3cret", "X-Tenant=t1"],
                                               ca_file=pki.ca, client_cert_file=pki.client_cert,
                                               client_key_file=pki.client_key))
        wrong = service(next_hop=NextHop.parse(url, protocol=protocol, headers=["Authorization=Bearer nope"],
                                               ca_file=pki.ca, client_cert_file=pki.client_cert,
                                               client_key_file=pki.client_key, timeout_s=2))
        assert http_exporter(first, None, timeout=10).export(tool_spans(5)) is SpanExportResult.SUCCESS
        assert http_exporter(wrong, None, timeout=10).export(tool_spans(2)) is SpanExportResult.SUCCESS
        assert first.drain() and wrong.drain() and last.drain()
        spans = arrived.get_finished_spans()
        assert len(spans) == 5
        assert all(any(k.startswith("agent_eval.") for k in s.attributes) for s in spans)  # enriched by the first hop
        assert counted(first, "forwarded_spans", outcome="exported") == 5
        assert counted(wrong, "forwarded_spans", outcome="failed") == 2  # 401 / UNAUTHENTICATED is not retried
        transport = "grpc" if grpc_hop else "http"
        assert counted(last, "spans", transport=transport, outcome="accepted") == 5
        assert counted(last, "requests", transport=transport, answer="unauthorized") == 1
    finally:
        for svc in (first, wrong, last):
            if svc is not None:
                svc.stop()


# -- the command: TLS in, gRPC over TLS with a header read from a file out ------------------------------

def test_the_command_serves_tls_and_forwards_over_grpc_tls(pki: Pki, tmp_path: Path) -> None:
    """`--forward-to grpcs://host:port`: OTLP/gRPC with TLS, the CA given, a header read from a file."""
    arrived = InMemorySpanExporter()
    last = service(arrived, tls=ServerTls.load(pki.server_cert, pki.server_key), bearer_token=BearerToken("t0ken"))
    token = tmp_path / "token"
    token.write_text("Bearer t0ken\n")
    process, where = start_serve(
        *FREE_PORTS, "--tls-cert-file", pki.server_cert, "--tls-key-file", pki.server_key,
        "--forward-to", last.grpc.url.replace("https://", "grpcs://"), "--forward-ca-file", pki.ca,
        "--forward-header", f"authorization=@{token}", "--forward-delay", "60")
    try:
        assert where["OTLP/gRPC"].startswith("https://") and where["OTLP/HTTP"].startswith("https://")
        assert where["forwarding to"] == f"{last.grpc.url} (grpc)"
        exporter = GrpcSpanExporter(endpoint=where["OTLP/gRPC"], credentials=grpc.ssl_channel_credentials(
            Path(pki.ca).read_bytes()), timeout=10)
        assert exporter.export(tool_spans(3)) is SpanExportResult.SUCCESS
        assert HttpSpanExporter(endpoint=where["OTLP/HTTP"], certificate_file=pki.ca, timeout=10).export(
            tool_spans(4)) is SpanExportResult.SUCCESS
        stop_cleanly(process)  # the 60 s batch delay: only the graceful shutdown forwards them
        assert last.drain()
        assert len(arrived.get_finished_spans()) == 7
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        last.stop()


def test_bad_tls_and_forwarding_flags_end_in_one_line(pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OTEL_AGENT_EVAL_CATALOG", "")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    base = ["serve", "--grpc-port", "0", "--http-port", "0", "--metrics-port", "0"]
    cases = {
        ("--tls-cert-file", pki.server_cert): "serve: --tls-cert-file and --tls-key-file go together",
        ("--tls-cert-file", pki.server_cert, "--tls-key-file", str(tmp_path / "missing")):
            f"--tls-key-file {tmp_path / 'missing'}: cannot read it (No such file or directory)",
        ("--tls-cert-file", str(not_pem), "--tls-key-file", pki.server_key): f"--tls-cert-file {not_pem}: not a PEM file",
        ("--tls-cert-file", pki.server_cert, "--tls-key-file", pki.client_key): "cannot use them",
        ("--tls-client-ca-file", pki.ca): "serve: --tls-client-ca-file needs --tls-cert-file and --tls-key-file",
        ("--forward-header", "A=b"): "serve: --forward-header needs --forward-to",
        ("--forward-to", "collector:4318"): "serve: --forward-to 'collector:4318': expected an http://, https://, grpc:// or",
        ("--forward-to", "http://c:4318", "--forward-header", "no-equals"): "serve: --forward-header 'no-equals': expected NAME=VALUE",
        ("--forward-to", "http://c:4318", "--forward-header", f"A=@{tmp_path / 'missing'}"): "cannot read it",
        ("--forward-to", "http://c:4318", "--forward-ca-file", pki.ca): "serve: --forward-ca-file needs an https:// --forward-to",
        ("--forward-to", "https://c:4317/v1/traces", "--forward-protocol", "grpc"): "gRPC takes scheme://host:port, without a path",
        ("--forward-to", "https://c:4318", "--forward-client-cert-file", pki.client_cert):
            "serve: --forward-client-cert-file and --forward-client-key-file go together",
    }
    for args, expected in cases.items():
        assert main([*base, *args]) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("otel-agent-eval: ") and expected in err[0], (args, err)
    # and a real process, to see exit code 2 and no traceback
    run = subprocess.run([sys.executable, "-m", "otel_agent_eval.tools.cli", *base, "--tls-cert-file", pki.server_cert,
                          "--tls-key-file", pki.client_key], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OTEL_AGENT_EVAL_CATALOG": ""})
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"otel-agent-eval: --tls-cert-file {pki.server_cert} / --tls-key-file")


def test_a_pathless_http_url_gets_the_traces_path() -> None:
    assert NextHop.parse("https://collector:4318").url == "https://collector:4318/v1/traces"
    assert NextHop.parse("http://collector:4318/custom/traces").url == "http://collector:4318/custom/traces"
    assert NextHop.parse("https://collector:4317/", protocol="grpc").url == "https://collector:4317"


def test_a_grpc_scheme_chooses_grpc() -> None:
    hop = NextHop.parse("grpcs://collector:4317")
    assert (hop.protocol, hop.url, hop.tls) == ("grpc", "https://collector:4317", True)
    hop = NextHop.parse("grpc://collector:4317")
    assert (hop.protocol, hop.url, hop.tls) == ("grpc", "http://collector:4317", False)
    with pytest.raises(ValueError, match="gRPC takes scheme://host:port"):
        NextHop.parse("grpc://collector:4317/v1/traces")

"""The next hop: which SDK OTLP exporter `serve` forwards through, with its TLS and headers, checked at start.

`--forward-to` is a URL. With the default protocol (`http/protobuf`) it is the traces URL
(`/v1/traces` is appended when the URL has no path, as the Collector's `otlphttp`
exporter does); with `--forward-protocol grpc`, or a `grpc://` / `grpcs://` URL, it is
`scheme://host:port`. Either way `https://` (`grpcs://`) means TLS, verified against `--forward-ca-file` (default: the system's
trust store), optionally with a client certificate (`--forward-client-cert-file` and
`--forward-client-key-file`, mutual TLS). `--forward-header K=V` adds a header (gRPC:
metadata) to every export; `K=@FILE` reads the value from a file, so a secret stays out
of the process list. The SDK exporters' own variables (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`
and the rest) still apply to what the flags leave unset.

    >>> hop = NextHop.parse("https://collector:4318", headers=["X-Tenant=a"], ca_file="ca.pem")
    >>> exporter = hop.exporter()
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry.sdk.trace.export import SpanExporter

from .message_export import MAX_REQUEST_BYTES
from .tls import read_pem

__all__ = ["GRPC", "HTTP_PROTOBUF", "PROTOCOLS", "NextHop", "parse_header"]

HTTP_PROTOBUF, GRPC = "http/protobuf", "grpc"
PROTOCOLS = (HTTP_PROTOBUF, GRPC)  # the values of OTEL_EXPORTER_OTLP_PROTOCOL that serve can forward with
TRACES_PATH, METRICS_PATH, LOGS_PATH = "/v1/traces", "/v1/metrics", "/v1/logs"
EXPORT_TIMEOUT_S = 10.0
MAX_TIMEOUT_S = 3600  # the longest export timeout, and batch delay, that serve takes
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)


def parse_header(text: str) -> tuple[str, str]:
    """`"K=V"` (or `"K=@FILE"`) as (name, value); ValueError in one line when it is not one."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not _TOKEN.fullmatch(name):
        raise ValueError(f"serve: --forward-header {text!r}: expected NAME=VALUE (or NAME=@FILE), NAME an HTTP header name")
    if value.startswith("@"):
        path = value[1:]
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"serve: --forward-header {name}=@{path}: cannot read it "
                             f"({getattr(exc, 'strerror', None) or exc})") from None
    if any(ch in value for ch in "\r\n\0"):
        raise ValueError(f"serve: --forward-header {name}: the value must be one line")
    return name, value


@dataclass(frozen=True)
class NextHop:
    """Where and how evaluated spans are exported; `parse` checks everything before the service starts."""

    url: str
    protocol: str = HTTP_PROTOBUF
    headers: tuple[tuple[str, str], ...] = ()
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    timeout_s: float = EXPORT_TIMEOUT_S
    max_request_bytes: int = MAX_REQUEST_BYTES  # the largest request sent; a larger batch is split (forward.py)
    flag: str = "--forward-to"  # named in the errors about the URL
    _pem: dict[str, bytes | None] = field(default_factory=dict, repr=False, compare=False)

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "https"

    @classmethod
    def parse(cls, url: str, *, protocol: str = HTTP_PROTOBUF, headers: list[str] | tuple[str, ...] = (),
              ca_file: str | None = None, client_cert_file: str | None = None, client_key_file: str | None = None,
              timeout_s: float = EXPORT_TIMEOUT_S, max_request_bytes: int = MAX_REQUEST_BYTES,
              flag: str = "--forward-to") -> NextHop:
        if protocol not in PROTOCOLS:
            raise ValueError(f"serve: --forward-protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        typed = url
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            parts = None
        if parts is not None and parts.scheme in ("grpc", "grpcs"):  # the scheme says gRPC (grpcs: with TLS)
            protocol = GRPC
            parts = parts._replace(scheme="https" if parts.scheme == "grpcs" else "http")
            url = urlunsplit(parts)
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"serve: {flag} {typed!r}: expected an http://, https://, grpc:// or grpcs:// URL "
                             f"(e.g. http://collector:{4317 if protocol == GRPC else 4318})")
        if protocol == GRPC:
            if parts.path not in ("", "/") or parts.query:
                raise ValueError(f"serve: {flag} {typed!r}: gRPC takes scheme://host:port, without a path")
            url = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        elif parts.path in ("", "/"):
            url = urlunsplit((parts.scheme, parts.netloc, TRACES_PATH, parts.query, ""))
        tls_files = {"--forward-ca-file": ca_file, "--forward-client-cert-file": client_cert_file,
                     "--forward-client-key-file": client_key_file}
        given = [flag for flag, path in tls_files.items() if path]
        if given and parts.scheme != "https":
            raise ValueError(f"serve: {given[0]} needs an https:// {flag} (got {typed})")
        if bool(client_cert_file) != bool(client_key_file):
            raise ValueError("serve: --forward-client-cert-file and --forward-client-key-file go together")
        pem = {flag: read_pem(flag, path) if path else None for flag, path in tls_files.items()}
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise ValueError(f"serve: the export timeout must be above 0 and at most {MAX_TIMEOUT_S} s (got {timeout_s:g})")
        return cls(url, protocol, tuple(parse_header(h) for h in headers), ca_file, client_cert_file, client_key_file,
                   timeout_s, max_request_bytes, flag, pem)

    def exporter(self, *, keep_messages: bool = False) -> SpanExporter:
        """The SDK's OTLP exporter for this hop (its own retries with backoff on retryable answers), saying why a
        batch failed and sending no request over `max_request_bytes`; with `keep_messages`, one that writes received
        spans from their messages (`message_export.py`)."""
        from functools import partial

        from .message_export import GrpcMessageExporter, HttpMessageExporter

        options = {"keep_messages": keep_messages, "max_request_size": self.max_request_bytes}
        return self._exporter(partial(GrpcMessageExporter, **options), partial(HttpMessageExporter, **options), self.url)

    @property
    def metrics_url(self) -> str:
        """Where metrics go on this hop: its URL with `/v1/metrics` for `/v1/traces` (HTTP), or as it is (gRPC, or an
        HTTP URL given for metrics); ValueError when an HTTP traces URL has another path, which says nothing of metrics."""
        return self._signal_url(METRICS_PATH, "metrics", "--otlp-metrics-to")

    @property
    def logs_url(self) -> str:
        """Where log records (the judge's events) go on this hop: as `metrics_url`, with `/v1/logs`."""
        return self._signal_url(LOGS_PATH, "logs", "--otlp-logs-to")

    def _signal_url(self, path: str, signal: str, flag: str) -> str:
        parts = urlsplit(self.url)
        if self.protocol == GRPC or parts.path.endswith(path):
            return self.url
        if not parts.path.endswith(TRACES_PATH):
            raise ValueError(f"serve: cannot tell the {signal} URL of {self.url} (no {TRACES_PATH} path); give {flag}")
        return urlunsplit(parts._replace(path=parts.path[:-len(TRACES_PATH)] + path))

    def metric_exporter(self):  # noqa: ANN201 - a MetricExporter (the SDK's metrics module is imported only here)
        """The SDK's OTLP metric exporter for this hop (temporality from OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE)."""
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpExporter

        return self._exporter(GrpcExporter, HttpExporter, self.metrics_url)

    def log_exporter(self):  # noqa: ANN201 - a LogExporter (the SDK's logs modules are imported only here)
        """The SDK's OTLP log exporter for this hop (HTTP: `logs_url`; gRPC: the hop's LogsService)."""
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcExporter
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpExporter

        return self._exporter(GrpcExporter, HttpExporter, self.logs_url)

    def _exporter(self, GrpcExporter: Any, HttpExporter: Any, url: str) -> Any:  # noqa: N803 - classes
        headers = dict(self.headers) or None
        if self.protocol == GRPC:
            import grpc

            credentials = None
            if self.tls and any(self._pem.values()):
                credentials = grpc.ssl_channel_credentials(
                    root_certificates=self._pem.get("--forward-ca-file"),
                    private_key=self._pem.get("--forward-client-key-file"),
                    certificate_chain=self._pem.get("--forward-client-cert-file"))
            grpc_headers = {k.lower(): v for k, v in headers.items()} if headers else None  # gRPC metadata is lower case
            return GrpcExporter(endpoint=url, insecure=not self.tls, credentials=credentials,
                                headers=grpc_headers, timeout=self.timeout_s)
        return HttpExporter(endpoint=url, headers=headers, timeout=self.timeout_s,
                            certificate_file=self.ca_file or None, client_certificate_file=self.client_cert_file or None,
                            client_key_file=self.client_key_file or None,
                            session=_session_keeping_ca() if self.ca_file else None)


def _session_keeping_ca():  # noqa: ANN202 - a requests.Session
    """A requests session whose own CA file wins over `REQUESTS_CA_BUNDLE` / `CURL_CA_BUNDLE`.

    The SDK's HTTP exporter sets `session.verify` to the CA file, but requests lets those
    variables override a session's `verify` (psf/requests#3829), so on a host that sets them
    (many container images do) `--forward-ca-file` would be ignored.
    """
    from .message_export import SettledSession  # the environment read once, not on every request

    class KeepCa(SettledSession):
        def merge_environment_settings(self, url, proxies, stream, verify, cert):  # noqa: ANN001, ANN202
            settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
            if verify is None and isinstance(self.verify, str):
                settings["verify"] = self.verify
            return settings

    return KeepCa()

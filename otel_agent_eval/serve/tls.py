"""Optional TLS for both receivers, as the Collector's OTLP receiver configures it (`tls.cert_file`, `tls.key_file`,
`tls.client_ca_file`).

The files are read and checked once, at start: a missing file, a key that does not match
the certificate or a file that is not PEM stops the command in one line (exit 2), before
anything listens. gRPC gets `grpc.ssl_server_credentials`; HTTP wraps each accepted
connection on its own thread (`wrap`), so a slow or broken handshake never holds up the
accept loop. With `client_ca_file`, every client must present a certificate signed by it
(mutual TLS).

    >>> tls = ServerTls.load("server.pem", "server-key.pem")
    >>> GrpcReceiver(receiving, port=4317, tls=tls); HttpReceiver(receiving, port=4318, tls=tls)
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ServerTls", "read_pem"]

TLS_RECORD_HANDSHAKE = 0x16  # the first byte of every TLS ClientHello


def read_pem(flag: str, path: str) -> bytes:
    """The bytes of a PEM file; ValueError in one line naming the flag when it cannot be read or is not PEM."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot read it ({exc.strerror or exc})") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{flag} {path}: not a PEM file (no '-----BEGIN' line)")
    return data


@dataclass(frozen=True)
class ServerTls:
    """A server certificate chain and its key (PEM), and optionally the CA that client certificates must chain to."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    cert: bytes = field(default=b"", repr=False)
    key: bytes = field(default=b"", repr=False)
    client_ca: bytes | None = field(default=None, repr=False)

    @classmethod
    def load(cls, cert_file: str, key_file: str, client_ca_file: str | None = None) -> ServerTls:
        """Read and check the files now; ValueError in one line when they cannot serve TLS."""
        tls = cls(cert_file, key_file, client_ca_file, read_pem("--tls-cert-file", cert_file),
                  read_pem("--tls-key-file", key_file),
                  read_pem("--tls-client-ca-file", client_ca_file) if client_ca_file else None)
        tls.ssl_context()  # OpenSSL checks that the key matches the certificate
        return tls

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None

    def ssl_context(self) -> ssl.SSLContext:
        """A server-side context (TLS 1.2 or later) for the HTTP receiver."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except ssl.SSLError as exc:
            raise ValueError(f"--tls-cert-file {self.cert_file} / --tls-key-file {self.key_file}: cannot use them "
                             f"({exc.reason or exc}; is the key the certificate's?)") from None
        except OSError as exc:
            raise ValueError(f"--tls-cert-file {self.cert_file}: cannot read it ({exc.strerror or exc})") from None
        if self.client_ca is not None:
            try:
                context.load_verify_locations(cadata=self.client_ca.decode("ascii", "replace"))
            except ssl.SSLError as exc:
                raise ValueError(f"--tls-client-ca-file {self.client_ca_file}: not a usable CA certificate "
                                 f"({exc.reason or exc})") from None
            context.verify_mode = ssl.CERT_REQUIRED
        context.set_alpn_protocols(["http/1.1"])
        return context

    def grpc_credentials(self):  # noqa: ANN201 - grpc.ServerCredentials, imported lazily
        import grpc

        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.client_ca,
                                           require_client_auth=self.client_ca is not None)

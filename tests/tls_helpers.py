"""Certificates made in the test: a throwaway CA, a server certificate for 127.0.0.1/localhost, a client certificate.

Made with the `cryptography` package when it is importable, else with the `openssl`
binary; the test fails (never skips) when neither is there.

    >>> pki = make_pki(tmp_path)
    >>> pki.ca, pki.server_cert, pki.server_key, pki.client_cert, pki.client_key   # PEM file paths
"""
from __future__ import annotations

import datetime
import ipaddress
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str  # a CA that signed none of these


def make_pki(directory: Path) -> Pki:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return _with_openssl(directory)
    return _with_cryptography(directory)


def _with_cryptography(directory: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def write(stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[str, str]:
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return str(cert_path), str(key_path)

    def ca(common: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(common)).issuer_name(name(common))
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                             data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                             crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                .sign(key, hashes.SHA256()))
        return cert, key

    def leaf(common: str, issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], usage: x509.ObjectIdentifier,
             san: list[x509.GeneralName]) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        issuer_cert, issuer_key = issuer
        builder = (x509.CertificateBuilder().subject_name(name(common)).issuer_name(issuer_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False))
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256()), key

    root = ca("otel-agent-eval test CA")
    ca_path, _ = write("ca", *root)
    other_path, _ = write("other-ca", *ca("some other CA"))
    server = leaf("localhost", root, ExtendedKeyUsageOID.SERVER_AUTH,
                  [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    client = leaf("test client", root, ExtendedKeyUsageOID.CLIENT_AUTH, [])
    return Pki(ca_path, *write("server", *server), *write("client", *client), other_path)


def _with_openssl(directory: Path) -> Pki:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("neither the `cryptography` package nor the `openssl` binary is there to make test certificates",
                    pytrace=False)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, cwd=directory, timeout=60)

    def ca(stem: str, common: str) -> None:
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", f"/CN={common}", "-keyout", f"{stem}-key.pem", "-out", f"{stem}.pem",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def leaf(stem: str, common: str, extensions: str) -> None:
        (directory / f"{stem}.ext").write_text(extensions)
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", f"/CN={common}",
            "-keyout", f"{stem}-key.pem", "-out", f"{stem}.csr")
        run("x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
            "-days", "1", "-out", f"{stem}.pem", "-extfile", f"{stem}.ext")

    ca("ca", "otel-agent-eval test CA")
    ca("other-ca", "some other CA")
    leaf("server", "localhost", "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    leaf("client", "test client", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    d = str(directory)
    return Pki(f"{d}/ca.pem", f"{d}/server.pem", f"{d}/server-key.pem", f"{d}/client.pem", f"{d}/client-key.pem",
               f"{d}/other-ca.pem")

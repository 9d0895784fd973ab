"""A certificate authority of the local stack, made at `steward local up`, for its HTTPS relay.

Stock boto3 (botocore >= 1.44) refuses bearer authentication over plain http, so the relay
is also served over HTTPS on loopback, with a server certificate for `127.0.0.1`, `::1` and
`localhost` signed by a CA made for this stack alone. Clients trust it by path
(`AWS_CA_BUNDLE`, `SSL_CERT_FILE`, httpx's `verify=`): the CA's certificate is written to
`ca.pem` in the stack's state directory (named `ca_bundle` in `local.json`); its key never
touches the disk and dies with the process, so nothing that file holds can sign anything
after the stack stops. The server's own key and certificate are written (0600) only because
`ssl.SSLContext.load_cert_chain` reads files. The extensions are those strict verifiers
(Python 3.13's default `VERIFY_X509_STRICT`) require: a critical basicConstraints, key
usages, subject and authority key identifiers.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = timedelta(days=30)
CA_FILE = "ca.pem"
SERVER_FILE = "relay-tls.pem"


@dataclass(frozen=True)
class LocalTls:
    ca_bundle: Path  # the CA certificate clients trust
    context: ssl.SSLContext  # the server side, for `LocalHttpServer(tls=...)`


def _key_usage(**granted: bool) -> x509.KeyUsage:
    """Key usage with only the `granted` bits set."""
    bits = (
        "digital_signature",
        "content_commitment",
        "key_encipherment",
        "data_encipherment",
        "key_agreement",
        "key_cert_sign",
        "crl_sign",
        "encipher_only",
        "decipher_only",
    )
    return x509.KeyUsage(**{bit: granted.get(bit, False) for bit in bits})


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def create(state_dir: Path, *, now: datetime | None = None) -> LocalTls:
    """A fresh CA and a server certificate signed by it; files in `state_dir`."""
    now = now or datetime.now(UTC)
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("Steward local stack CA")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                    x509.DNSName("localhost"),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_path = state_dir / CA_FILE
    _write(ca_path, ca.public_bytes(serialization.Encoding.PEM), mode=0o644)
    server_path = state_dir / SERVER_FILE
    _write(
        server_path,
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        + server.public_bytes(serialization.Encoding.PEM),
        mode=0o600,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(server_path)
    return LocalTls(ca_bundle=ca_path, context=context)


def _write(path: Path, data: bytes, *, mode: int) -> None:
    """Replace `path` atomically, created with `mode` (never readable by others first)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    tmp.chmod(mode)
    tmp.replace(path)

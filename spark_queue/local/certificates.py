"""Making the local node's certificates: a CA, a node certificate and a client certificate.

``bdq cassandra start --tls`` calls :func:`make_certificates` once per home; the
files land where :class:`~spark_queue.local.tls.TlsFiles` says. This is the one
module that needs the ``cryptography`` package, which the core install leaves
out: importing it without the ``local`` extra raises ``MissingExtra``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from spark_queue.errors import MissingExtra
from spark_queue.local.tls import TlsFiles

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
except ImportError as e:
    raise MissingExtra(
        "making the local node's TLS certificates (bdq cassandra start --tls)", "local", e.name
    ) from e

#: Days the generated certificates stay valid.
VALID_DAYS = 825


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _builder(
    subject: str, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def make_ca(folder: Path, name: str = "spark-queue local CA") -> TlsFiles:
    """A self-signed CA in ``folder`` (``ca.pem``, ``ca.key``); the node and client files follow."""
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(name, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    files = TlsFiles(folder)
    _write(files.ca_key, _key_pem(key))
    _write(files.ca, _cert_pem(cert))
    return files


def _signed(
    files: TlsFiles,
    subject: str,
    usage: x509.ObjectIdentifier,
    addresses: Iterable[str] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = _key()
    builder = _builder(subject, ca_cert.subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([usage]), critical=False
    )
    names: list[x509.GeneralName] = [x509.DNSName("localhost")] if addresses else []
    names += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def make_certificates(folder: Path, first_address: str = "127.0.0.1", nodes: int = 9) -> TlsFiles:
    """Make (or reuse) the CA, a node certificate and a client certificate in ``folder``.

    Args:
        folder: Where the PEM files go.
        first_address: Address of node 1; the node certificate names it and the
            next ``nodes - 1`` addresses, as the local nodes use them.
        nodes: How many node addresses the certificate names.

    Returns:
        The files, existing ones kept.
    """
    files = TlsFiles(folder)
    if files.exist():
        return files
    if not files.ca.is_file() or not files.ca_key.is_file():
        make_ca(folder)
    first = ipaddress.IPv4Address(first_address)
    addresses = [str(first + i) for i in range(nodes)]
    node_key, node_cert = _signed(
        files, "spark-queue local node", ExtendedKeyUsageOID.SERVER_AUTH, addresses
    )
    ca_pem = files.ca.read_bytes()
    _write(files.node, _key_pem(node_key) + _cert_pem(node_cert) + ca_pem)
    client_key, client_cert = _signed(
        files, "spark-queue local client", ExtendedKeyUsageOID.CLIENT_AUTH
    )
    _write(files.client_key, _key_pem(client_key))
    _write(files.client_cert, _cert_pem(client_cert))
    return files

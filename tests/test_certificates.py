"""The local node's certificates (spark_queue.local.certificates), checked with ssl and x509."""

from __future__ import annotations

import ipaddress
import ssl
from pathlib import Path

from cryptography import x509

from spark_queue.local.certificates import make_certificates


def test_certificates_chain_to_the_ca_and_name_the_node_addresses(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "tls", "127.0.0.60", nodes=3)

    node = x509.load_pem_x509_certificates(files.node.read_bytes())[0]
    names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address(a) for a in ("127.0.0.60", "127.0.0.61", "127.0.0.62")
    ]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert b"-----BEGIN PRIVATE KEY-----" in files.node.read_bytes()
    # Python's ssl accepts the CA, and the client certificate with its key
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(files.client_cert), str(files.client_key))
    assert files.client_key.stat().st_mode & 0o077 == 0  # readable by the owner only


def test_existing_certificates_are_kept(tmp_path: Path) -> None:
    first = make_certificates(tmp_path / "tls").ca.read_bytes()

    assert make_certificates(tmp_path / "tls").ca.read_bytes() == first


def test_node_settings_for_optional_and_required_tls(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "tls")

    optional = files.node_settings(required=False)["client_encryption_options"]
    required = files.node_settings(required=True)["client_encryption_options"]

    assert isinstance(optional, dict) and isinstance(required, dict)
    assert optional["optional"] is True and required["optional"] is False
    assert required["ssl_context_factory"] == {
        "class_name": "org.apache.cassandra.security.PEMBasedSslContextFactory"
    }
    assert required["keystore"] == str(files.node) and required["truststore"] == str(files.ca)
    assert required["require_client_auth"] is True

"""Where a local node that speaks TLS keeps its CA, node and client certificates.

``bdq cassandra start --tls`` makes them once under ``<home>/tls/``
(:mod:`spark_queue.local.certificates`, with the ``cryptography`` package of the
``local`` extra), as PEM files that both Cassandra 5.0 (its
``PEMBasedSslContextFactory``) and Python's ``ssl`` module read directly:

* ``ca.pem``: the CA certificate, what clients trust (``tls_ca_file``);
  ``ca.key`` stays beside it so later nodes can be signed by the same CA.
* ``node.pem``: the nodes' private key and certificate chain, naming every
  local node address (127.0.0.1 to .9 from the first one) and ``localhost``.
* ``client.pem`` and ``client.key``: a client certificate for mutual TLS.

They are for local development and tests only: unencrypted keys, readable by
the owner alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_PEM_FACTORY = "org.apache.cassandra.security.PEMBasedSslContextFactory"


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of a local node's TLS, under one folder."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def node(self) -> Path:
        return self.folder / "node.pem"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    def exist(self) -> bool:
        return all(p.is_file() for p in (self.ca, self.ca_key, self.node, self.client_cert))

    def node_settings(self, *, required: bool) -> dict[str, object]:
        """The ``client_encryption_options`` table of ``cassandra.yaml``.

        Args:
            required: Refuse plain-text clients; otherwise both are served on one port.
        """
        options = {
            "enabled": True,
            "optional": not required,
            "ssl_context_factory": {"class_name": _PEM_FACTORY},
            "keystore": str(self.node),
            "truststore": str(self.ca),
            # TLS clients must show a certificate signed by the CA (mutual TLS).
            "require_client_auth": True,
        }
        return {"client_encryption_options": options}

"""Running the service: uvicorn over the app, in one process or ``workers`` processes.

Several workers share nothing but the keyspace, as several ``bdq serve``
processes do: each is a stateless front end. Workers are started by uvicorn
from an import string, so the connection settings reach them through the
environment variable ``_BDQ_SERVE_SETTINGS`` (JSON), which this module sets for
its own children only, with ``PROMETHEUS_MULTIPROC_DIR`` so that a scrape of any
worker sums every worker's request counts. Uvicorn's graceful shutdown (SIGINT,
SIGTERM) lets requests in flight finish; waiting receives return empty within
200 ms (``app.py`` hooks the signals for them). With ``TlsFiles`` uvicorn serves
HTTPS, and the queue URLs answered start with ``https``, since they follow the
scheme a request came in by.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, MissingExtra

#: prometheus-client's multiprocess folder (``request_metrics.MULTIPROCESS_ENV``; not
#: imported from there: that module needs the extra this module checks for).
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"

_SETTINGS_ENV = "_BDQ_SERVE_SETTINGS"


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The server's certificate (PEM, the chain after it) and its private key (PEM)."""

    cert: Path
    key: Path

    def check(self) -> None:
        """Load the pair as the server will; InvalidSetting naming both files otherwise."""
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as e:
            raise InvalidSetting(
                f"--tls-cert {str(self.cert)!r} and --tls-key {str(self.key)!r}: must be a PEM"
                f" certificate and its private key, readable and unencrypted ({e})"
            ) from e


def serve(
    settings: ConnectionSettings,
    host: str,
    port: int,
    workers: int = 1,
    tls: TlsFiles | None = None,
) -> None:
    """Serve SQS's protocol on ``host:port`` until interrupted.

    Args:
        settings: The keyspace served and how to reach it.
        host: The address to listen on.
        port: The port to listen on.
        workers: Server processes (uvicorn's workers).
        tls: Serve HTTPS with these files; plain HTTP without.
    """
    try:
        import prometheus_client  # noqa: F401  (GET /metrics; checked here to fail in one line)
        import uvicorn
    except ImportError as e:
        raise MissingExtra("bdq serve", "serve", e.name) from e
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "warning",
        "access_log": False,  # one line per request is the metrics' job
        "lifespan": "on",
    }
    if tls is not None:
        options["ssl_certfile"] = str(tls.cert)
        options["ssl_keyfile"] = str(tls.key)
    if workers == 1:
        from spark_queue.service.app import create_app

        uvicorn.run(create_app(settings), **options)
        return
    os.environ[_SETTINGS_ENV] = json.dumps(_settings_json(settings))
    # The workers' metrics go to files that any worker's GET /metrics sums
    # (request_metrics.py); a folder of this run's own, so no stale counts join in.
    metrics_dir = tempfile.mkdtemp(prefix="bdq-serve-metrics-")
    os.environ[MULTIPROCESS_ENV] = metrics_dir
    try:
        uvicorn.run(
            "spark_queue.service.server:app_from_env", factory=True, workers=workers, **options
        )
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def app_from_env() -> Any:
    """The app of a worker process, from the settings its parent left in the environment."""
    from spark_queue.service.app import create_app

    given = json.loads(os.environ[_SETTINGS_ENV])
    return create_app(ConnectionSettings(**given))


def _settings_json(settings: ConnectionSettings) -> dict[str, Any]:
    values = dataclasses.asdict(settings)
    values["hosts"] = [str(h) for h in settings.hosts]
    return values

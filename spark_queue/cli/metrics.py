"""``bdq metrics serve``: the queues' series for Prometheus to scrape.

The exporter needs the ``metrics`` extra (prometheus-client), imported when the
command runs: ``bdq`` itself, and ``bdq metrics --help``, work without it.
"""

from __future__ import annotations

import errno
import socket
import time
from collections.abc import Sequence
from typing import Any

import click

from spark_queue.cli.flags import CommandGroup, connection_options, echo_progress
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting, MissingExtra


@click.group(cls=CommandGroup)
def metrics() -> None:
    """Prometheus metrics of the queues."""


@metrics.command(name="serve")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=9464, show_default=True,
    help="Port to listen on.",
)  # fmt: skip
@click.option(
    "--addr", default="127.0.0.1", show_default=True,
    help="Address to listen on (0.0.0.0: every interface).",
)  # fmt: skip
@click.option(
    "--queue", "patterns", multiple=True, metavar="PATTERN",
    help="Only queues whose name matches this glob (orders-*); repeatable.  [default: all]",
)  # fmt: skip
@connection_options
def serve_command(
    settings: ConnectionSettings, port: int, addr: str, patterns: Sequence[str]
) -> None:
    """Serve per-queue series at http://ADDR:PORT/metrics until Ctrl-C.

    Each scrape counts every matching queue the cheap way (a bounded number
    of buckets scanned per queue, however long its backlog): visible, in
    flight, delayed, age of the oldest message, dead letters; and reads its
    id sequence for the sends and consumption of every process
    (bdq_queue_sent_total, bdq_queue_consumed_total). Labelled keyspace and
    queue. Needs the 'metrics' extra: pip install 'spark-queue[metrics]'.
    """
    try:
        from spark_queue.ops.prometheus import REGISTRY, QueueCollector
    except MissingExtra as e:
        raise MissingExtra("bdq metrics serve", e.extra, e.name) from e
    with QueueClient(settings=settings) as client:
        collector = QueueCollector(client, patterns)
        REGISTRY.register(collector)
        try:
            server = _listen(port, addr)
            try:
                echo_progress(
                    f"serving metrics of keyspace {settings.keyspace!r} at"
                    f" http://{addr}:{port}/metrics (Ctrl-C stops)"
                )
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
            finally:
                server.shutdown()
        finally:
            REGISTRY.unregister(collector)


def _listen(port: int, addr: str) -> Any:
    """Start the endpoint, or say in one line why it cannot listen at ``addr``:``port``."""
    from spark_queue.ops.prometheus import serve

    try:
        return serve(port, addr)
    except socket.gaierror as e:
        raise InvalidSetting(
            f"--addr {addr!r}: not a name or address this machine resolves ({e.strerror}); give"
            " one of its addresses, such as 127.0.0.1, or 0.0.0.0 for every interface"
        ) from e
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            rule = "already in use; stop what listens there, or pick another port with --port"
        elif e.errno == errno.EADDRNOTAVAIL:
            rule = "not an address of this machine; give one of its own, or 0.0.0.0"
        elif e.errno == errno.EACCES:
            rule = "not allowed (ports below 1024 need privileges); pick another with --port"
        else:
            rule = f"cannot listen there ({e.strerror or e})"
        raise InvalidSetting(f"--addr {addr!r} --port {port}: {rule}") from e

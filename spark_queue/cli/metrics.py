"""``bdq metrics serve``: the queues' gauges for Prometheus to scrape."""

from __future__ import annotations

import time
from collections.abc import Sequence

import click

from spark_queue.cli.flags import CommandGroup, connection_options, echo_progress
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.ops.prometheus import REGISTRY, QueueCollector, serve


@click.group(cls=CommandGroup)
def metrics() -> None:
    """Prometheus metrics of the queues."""


@metrics.command(name="serve")
@click.option("--port", type=click.IntRange(1, 65535), default=9464, show_default=True)
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
    """Serve per-queue gauges at http://ADDR:PORT/metrics until Ctrl-C.

    Each scrape counts every matching queue the cheap way (a bounded number
    of buckets scanned per queue, however long its backlog): visible, in
    flight, delayed, age of the oldest message, dead letters. The counters
    (sent, received, acked, ...) of this process's registry are served too.
    """
    with QueueClient(settings=settings) as client:
        collector = QueueCollector(client, patterns)
        REGISTRY.register(collector)
        server = serve(port, addr)
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
            REGISTRY.unregister(collector)

"""A real ``bdq serve`` process for the service's tests, and keys to sign for it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cryptography.fernet import Fernet

from spark_queue.config import ConnectionSettings
from spark_queue.service.accounts import AccessKeys, NewKey
from spark_queue.store.session import Store

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Server:
    """A running server: its URL, and keys of two accounts."""

    url: str
    acme: NewKey
    globex: NewKey
    settings: ConnectionSettings
    env: dict[str, str]
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(
    settings: ConnectionSettings,
    peer: Server | None = None,
    workers: int = 1,
    tls: tuple[Path, Path] | None = None,
) -> Iterator[Server]:
    """Start ``bdq serve`` on a free loopback port over ``settings``' keyspace; stop it after.

    With ``peer``, the new server is another front end of the peer's keyspace: it
    shares the peer's server key, so the peer's access keys sign for it too.
    ``workers`` is its ``--workers``; ``tls`` its ``--tls-cert`` and ``--tls-key``.
    """
    if peer is None:
        server_key = Fernet.generate_key().decode()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BDQ_SERVE_KEY": server_key}
        store = Store(settings)
        try:
            keys = AccessKeys(store, Fernet(server_key.encode()))
            acme, globex = keys.create("acme"), keys.create("globex")
        finally:
            store.close()
    else:
        env, acme, globex = peer.env, peer.acme, peer.globex
    port = free_port()
    hosts = ",".join(str(h) for h in settings.hosts)
    # A file, not a pipe: a chatty server never blocks on a full pipe.
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "spark_queue.cli", "serve", "--port", str(port)),
                *("--hosts", hosts, "--keyspace", settings.keyspace),
                *("--workers", str(workers)),
                *(() if tls is None else ("--tls-cert", str(tls[0]), "--tls-key", str(tls[1]))),
            ],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_until_listening(process, port, output)
            scheme = "http" if tls is None else "https"
            yield Server(f"{scheme}://127.0.0.1:{port}", acme, globex, settings, env, process)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_listening(process: subprocess.Popen[bytes], port: int, output: IO[bytes]) -> None:
    # Startup connects to Cassandra first; a dead process fails at once with its output.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output.seek(0)
            said = output.read().decode(errors="replace")
            raise RuntimeError(f"bdq serve exited with {process.returncode}:\n{said}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"bdq serve did not listen on port {port} within 60 s")

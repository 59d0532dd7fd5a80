"""``bdq top``: rates alone, then one frame and a live session under a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.cli import main
from spark_queue.cli.top import Look, rates
from spark_queue.message import QueueStats


def look(total: int, tail: int, at: float) -> Look:
    return Look(QueueStats(visible=total, in_flight=0, delayed=0, buckets=1), tail, at)


def test_rates_come_from_the_sequence_and_the_backlog() -> None:
    assert rates(None, look(5, 5, 1.0)) == (None, None)
    # 2 s: 100 ids handed out, the backlog grew by 40, so 60 left the queue
    assert rates(look(10, 100, 1.0), look(50, 200, 3.0)) == (50.0, 30.0)


def connection(settings: ConnectionSettings) -> list[str]:
    return ["--hosts", ",".join(map(str, settings.hosts)), "--keyspace", settings.keyspace]


@pytest.mark.cassandra
def test_top_once_prints_one_frame_of_the_matching_queues(keyspace: ConnectionSettings) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("orders").send_batch([b"a"] * 7)
        client.create_queue("other")
    args = ["top", "--once", "--interval", "0.2", "--queue", "ord*", *connection(keyspace)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "orders" in result.stdout and "other" not in result.stdout
    row = next(line for line in result.stdout.splitlines() if "orders" in line)
    assert row.split("│")[2].strip() == "7"  # the visible column


def run_in_terminal(args: list[str], marker: bytes) -> tuple[int, bytes]:
    """Run ``args`` under a pseudo-terminal until ``marker`` shows twice, then press Ctrl-C."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        args,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "COLUMNS": "120", "LINES": "30", "TERM": "xterm"},
    )
    os.close(terminal)
    screen = b""
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and screen.count(marker) < 2:
            if select.select([controller], [], [], 0.5)[0]:
                screen += os.read(controller, 65536)
        assert screen.count(marker) >= 2, screen.decode(errors="replace")  # a frame, a refresh
        process.send_signal(signal.SIGINT)
        code = process.wait(20)
        while select.select([controller], [], [], 0.2)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            screen += chunk
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    return code, screen


@pytest.mark.cassandra
def test_top_runs_live_in_a_terminal_and_quits_cleanly_on_ctrl_c(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("live-queue").send(b"x")
    bdq = str(Path(sys.executable).with_name("bdq"))
    code, screen = run_in_terminal(
        [bdq, "top", "--interval", "0.3", *connection(keyspace)], b"live-queue"
    )
    assert code == 0
    assert b"Traceback" not in screen and b"Aborted" not in screen


@pytest.mark.cassandra
def test_queue_stats_watch_refreshes_until_ctrl_c(keyspace: ConnectionSettings) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("watched").send_batch([b"x"] * 3)
    bdq = str(Path(sys.executable).with_name("bdq"))
    args = [bdq, "queue", "stats", "watched", "--watch", "--interval", "0.3"]
    code, screen = run_in_terminal([*args, *connection(keyspace)], b"watched")
    assert code == 0
    assert b"Traceback" not in screen

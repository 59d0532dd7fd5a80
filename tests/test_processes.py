"""Processes of local nodes and of the fault relay, seen through psutil, with real child processes.

``spark_queue.local.processes.exited`` decides when a node's ports are free;
``spark_queue.bench.relay_faults`` finds and kills the executor JVM above a
Spark task. Both are tried on throwaway Python processes that sleep.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from spark_queue.bench import relay_faults
from spark_queue.local.processes import exited

SLEEPER = "import time; time.sleep(60)"


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def _until(condition: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


def test_a_running_process_has_not_exited_and_its_unreaped_zombie_has(
    sleeper: subprocess.Popen[bytes],
) -> None:
    assert not exited(sleeper.pid)

    # When it dies and nobody reaps it yet: a zombie with no thread left
    sleeper.kill()

    assert _until(lambda: exited(sleeper.pid))
    with open(f"/proc/{sleeper.pid}/stat") as stat:  # still there, as a zombie
        assert stat.read().rsplit(") ", 1)[1].startswith("Z")
    sleeper.wait()
    assert exited(sleeper.pid)


def test_our_own_process_runs() -> None:
    assert not exited(os.getpid())


def test_the_relay_kills_an_executor_jvm_only() -> None:
    # Given two sleepers, one carrying the executor's main class on its command line
    plain = subprocess.Popen([sys.executable, "-c", SLEEPER])
    executor = subprocess.Popen([sys.executable, "-c", SLEEPER, relay_faults.EXECUTOR_CLASS])
    try:
        # When the relay is asked to kill each
        relay_faults._kill(plain.pid)
        relay_faults._kill(executor.pid)

        # Then only the executor died, of SIGKILL
        assert executor.wait(timeout=10) == -9
        assert plain.poll() is None
    finally:
        for child in (plain, executor):
            child.kill()
            child.wait()


def test_the_relay_finds_the_executor_above_its_worker() -> None:
    # Given a worker whose parent's command line names the executor class, and one whose does not
    probe = (
        "import os, subprocess, sys\n"
        "code = 'from spark_queue.bench.relay_faults import _executor_pid as p; print(p())'\n"
        "out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)\n"
        "print(out.stdout.strip() or out.stderr, os.getpid())\n"
    )

    def run(*extra: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-c", probe, *extra], capture_output=True, text=True, timeout=60
        )
        return done.stdout.split()

    found, parent = run(relay_faults.EXECUTOR_CLASS)
    nothing, _ = run()

    # Then the first finds its parent, and the other (this pytest above it) finds none
    assert found == parent
    assert nothing == "0"

"""Processes of local nodes and of the fault relay, seen through psutil, with real child processes.

``spark_queue.local.processes.exited`` decides when a node's ports are free;
``spark_queue.bench.relay_faults`` finds and kills the executor JVM above a
Spark task. Both are tried on throwaway Python processes that sleep.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark_queue.bench import relay_faults
from spark_queue.errors import LocalNodeError
from spark_queue.local import node as node_module
from spark_queue.local.node import LocalCluster
from spark_queue.local.processes import exited, timer_slack

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


def _runs(child: subprocess.Popen[bytes], code: str) -> bool:
    """Whether ``child`` has exec'd the command it was given (its command line shows ``code``)."""
    with open(f"/proc/{child.pid}/cmdline", "rb") as cmdline:
        return code.encode() in cmdline.read()


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
        # (until a child has exec'd, its command line is still pytest's)
        assert _until(lambda: _runs(plain, SLEEPER) and _runs(executor, SLEEPER))
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


def _slack_of_a_child_and_its_thread() -> tuple[int, int]:
    """The timer slack (ns) a child process's main thread and a thread it starts run with."""
    script = (
        "import threading\n"
        "def slack():\n"
        "    return int(open(f'/proc/{threading.get_native_id()}/timerslack_ns').read())\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(slack()))\n"
        "t.start(); t.join()\n"
        "print(slack(), seen[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    main, thread = out.stdout.split()
    return int(main), int(thread)


def _own_slack() -> int:
    return int(Path(f"/proc/{threading.get_native_id()}/timerslack_ns").read_text())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is Linux's")
def test_a_process_started_under_a_timer_slack_keeps_it_in_every_thread() -> None:
    before = _own_slack()
    with timer_slack(700):
        assert _slack_of_a_child_and_its_thread() == (700_000, 700_000)
    assert _own_slack() == before  # the caller's thread gets its own value back
    assert _slack_of_a_child_and_its_thread() == (before, before)
    with timer_slack(0):  # 0 leaves the system's value
        assert _slack_of_a_child_and_its_thread() == (before, before)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is Linux's")
def test_a_local_node_is_launched_under_its_timer_slack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    class Launched:
        pid = 4242

        def __init__(self, command: list[str], **kwargs: object) -> None:
            seen.append(_own_slack())

    monkeypatch.setattr(node_module.subprocess, "Popen", Launched)
    monkeypatch.setitem(node_module.CHILDREN, Launched.pid, Launched([]))
    seen.clear()
    cluster = LocalCluster(tmp_path, timer_slack_us=900)
    spec = cluster.node(1)
    spec.make_folders()
    cluster._launch(spec, "java", [], None)
    assert seen == [900_000]
    assert _own_slack() != 900_000


def test_a_timer_slack_out_of_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LocalNodeError, match=r"timer slack 20000 us: must be 0 .* to 10000 us"):
        LocalCluster(tmp_path, timer_slack_us=20_000)

"""The renewal thread: a shorter period at once, no renewals once orphaned (no Spark)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from spark_queue.spark.renewal import LeaseRenewal


def test_a_shorter_period_takes_effect_without_waiting_out_the_longer_sleep() -> None:
    # Given a renewal thread sleeping through an hour-long period
    renewed = threading.Event()

    def renew(queue: str, step: int) -> tuple[int, int]:
        renewed.set()
        return 1, 0

    renewal = LeaseRenewal(renew, period=3600.0, name="t")
    try:
        renewal.track(1, ["q"])
        assert not renewed.wait(0.3)  # asleep: no round yet

        # When a step with a short visibility timeout asks for a shorter period
        renewal.set_period(0.1)

        # Then a round runs well before the old sleep would have ended
        assert renewed.wait(10.0), "no renewal round after the period was shortened"
    finally:
        renewal.stop()


def test_a_longer_period_waits_from_the_last_round_and_stop_ends_the_sleep() -> None:
    rounds: list[int] = []
    renewal = LeaseRenewal(lambda q, s: rounds.append(s) or (1, 0), period=3600.0, name="t")
    renewal.track(1, ["q"])
    renewal.set_period(7200.0)  # longer: nothing to wake for

    stopper = threading.Thread(target=renewal.stop)
    stopper.start()
    stopper.join(5.0)

    assert not stopper.is_alive(), "stop() waited out the sleep"
    assert rounds == []


# A stand-in for the source runner: renews every 50 ms, logging each round to a file.
ORPHAN = """
import logging, sys, time
from spark_queue.spark.renewal import LeaseRenewal

out = open(sys.argv[1], "a", buffering=1)
logging.basicConfig(stream=out, level=logging.WARNING, format="%(message)s")

def renew(queue, step):
    out.write("round\\n")
    return 1, 0

renewal = LeaseRenewal(renew, period=0.05, name="t")
renewal.track(1, ["q"])
time.sleep(60)
"""

# The JVM's stand-in: starts the runner, prints its pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_renewals_stop_when_the_process_that_started_the_runner_is_gone(tmp_path: Path) -> None:
    out = tmp_path / "runner.log"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, ORPHAN, str(out)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    runner = int(parent.stdout.readline())
    try:
        # Given a runner renewing while the process that started it lives
        assert _wait(lambda: _lines(out).count("round") >= 3), "no renewal rounds"

        # When that process dies (as a JVM killed under its runner)
        parent.kill()
        parent.wait(10)

        # Then the runner says so and renews no more, though it still runs
        assert _wait(lambda: any("is gone" in line for line in _lines(out))), _lines(out)
        rounds = _lines(out).count("round")
        time.sleep(0.5)  # ten periods
        assert _lines(out).count("round") == rounds
        os.kill(runner, 0)  # alive: only its renewals stopped
    finally:
        parent.kill()
        parent.wait(10)
        parent.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner, signal.SIGKILL)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()

"""SIGTERM in the source's process runs the reader's stop first (spark_queue.spark.stopping).

Pure process logic, no Spark and no Cassandra: a child process stands in for
pyspark's source runner (same main module name, a ``finally`` around a
blocking socket read, a reader whose ``stop`` takes a while) and the test
sends it the JVM's two SIGTERMs. The same with the real runner is
``tests/test_spark_stop.py``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import importlib.machinery, socket, sys, time
    from spark_queue.spark import stopping

    if sys.argv[2] == "runner":
        sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec(stopping.RUNNER, None)
    out = open(sys.argv[1], "a", buffering=1)

    class Reader:
        stopped = False

        def stop(self):
            if self.stopped:
                out.write("again\\n")
                return
            self.stopped = True
            stopping.stop_begins()
            out.write("stop begins\\n")
            time.sleep(1.0)  # the ack in flight, the release: a SIGTERM must not cut this
            out.write("stop ends\\n")

    reader = Reader()
    out.write(f"installed {stopping.stop_on_sigterm(reader.stop)}\\n")
    ours, theirs = socket.socketpair()
    try:
        if sys.argv[3] == "read":
            ours.recv(4)  # the runner waiting for the JVM's next call
        else:
            theirs.close()  # the JVM closed the socket first: the finally is reached
            ours.recv(4)
    finally:
        reader.stop()
    """
)


#: SIGTERMs sent at once to each of BURSTS children by the test of back-to-back signals.
BURST = 500
BURSTS = 10


def _start(tmp_path: Path, mode: str, wait: str) -> tuple[subprocess.Popen[bytes], Path]:
    tmp_path.mkdir(exist_ok=True)
    log = tmp_path / "log"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(log), mode, wait])
    deadline = time.monotonic() + 30
    while "installed" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.05)
    return child, log


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_sigterm_while_waiting_runs_stop_to_its_end_despite_the_second_sigterm(
    tmp_path: Path,
) -> None:
    child, log = _start(tmp_path, "runner", "read")
    child.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    child.send_signal(signal.SIGTERM)  # PythonWorkerFactory.stop ends it a second time
    assert child.wait(30) == 128 + signal.SIGTERM
    assert _lines(log) == ["installed True", "stop begins", "stop ends", "again"]


def test_sigterms_back_to_back_run_stop_once_and_end_the_process(tmp_path: Path) -> None:
    # The JVM's two SIGTERMs can come back to back: Python then runs the second handler
    # inside the first, between any two of its bytecodes. Bursts make that all but certain.
    children = [_start(tmp_path / str(i), "runner", "read") for i in range(BURSTS)]
    for child, _ in children:
        for _ in range(BURST):
            child.send_signal(signal.SIGTERM)
    for child, log in children:
        assert child.wait(30) == 128 + signal.SIGTERM
        assert _lines(log) == ["installed True", "stop begins", "stop ends", "again"]


def test_sigterm_while_stop_runs_lets_it_finish(tmp_path: Path) -> None:
    child, log = _start(tmp_path, "runner", "closed")
    while "stop begins" not in _lines(log):
        time.sleep(0.02)
    child.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    child.send_signal(signal.SIGTERM)
    child.wait(30)
    assert _lines(log)[1:3] == ["stop begins", "stop ends"]


def test_a_stop_that_hangs_ends_the_process_after_the_grace(tmp_path: Path) -> None:
    hang = CHILD.replace("time.sleep(1.0)", "time.sleep(3600)").replace(
        "from spark_queue.spark import stopping",
        "from spark_queue.spark import stopping\nstopping.STOP_GRACE = 0.5",
    )
    log = tmp_path / "log"
    child = subprocess.Popen([sys.executable, "-c", hang, str(log), "runner", "read"])
    while "installed" not in (log.read_text() if log.exists() else ""):
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    assert child.wait(30) == 128 + signal.SIGTERM
    assert _lines(log) == ["installed True", "stop begins"]


def test_other_processes_keep_their_sigterm(tmp_path: Path) -> None:
    child, log = _start(tmp_path, "other", "read")
    child.send_signal(signal.SIGTERM)
    assert child.wait(30) == -signal.SIGTERM  # killed at once, as before
    assert _lines(log) == ["installed False"]

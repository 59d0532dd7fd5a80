"""The query stops: the source's ``stop`` runs before its process ends.

pyspark 4.3 hosts a streaming source's reader in a Python process of its own
on the driver (``pyspark.sql.streaming.python_streaming_source_runner``).
When the query stops, the JVM closes that process's socket and ends the
process in the same breath (``PythonWorkerFactory.stopWorker``, a SIGTERM).
The runner calls ``reader.stop()`` in a ``finally`` once its socket read
fails, but Python's default for SIGTERM ends the process at once, ``finally``
blocks and all: over the 116 Spark tests the reader's ``stop`` ran for 4
queries. Without it the ack in flight is cut off and the buckets the query
owns stay owned until the ownership period runs out (the visibility timeout,
30 s by default), so another query on the queue waits that long for them.

``stop_on_sigterm`` makes that process's first SIGTERM a ``SystemExit``
raised in its main thread, which unwinds into the runner's ``finally``; one
that comes while ``stop`` already runs lets it finish. The JVM sends a second
SIGTERM right after the first (``PythonWorkerFactory.stop`` ends every worker
it started), so later ones are ignored too. An exit hook runs ``stop`` if the
exit came before the ``finally`` reached it, so ``stop`` must be safe to call
twice. A ``stop`` that hangs (Cassandra gone) ends the process after
``STOP_GRACE`` seconds; SIGKILL ends it at once.

The two SIGTERMs can come back to back, and Python then runs the second
handler inside the first, between any two of its bytecodes. So the handler
marks itself with a plain flag before it does anything that takes a lock.
It used ``threading.Event``s, whose ``set`` takes one: a second SIGTERM that
came inside the first's ``set`` waited for a lock its own thread held,
forever, and the process outlived its query with its lease renewal thread
still renewing the last step's leases and buckets.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

#: Seconds a stopping source process may take to finish its ``stop`` after SIGTERM.
STOP_GRACE = 60.0

#: The main module of the process pyspark hosts a streaming source's reader in.
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"

# Plain flags, not threading.Events: the signal handler reads and sets them, and must
# take no lock (see the module docstring).
_stopping = False  # the reader's stop runs
_terminating = False  # a SIGTERM is being handled


def stop_begins() -> None:
    """Note that the source's ``stop`` runs: a SIGTERM now must not interrupt it."""
    global _stopping
    _stopping = True


def stop_on_sigterm(stop: Callable[[], None]) -> bool:
    """In the process that hosts the reader: SIGTERM runs ``stop`` before the process ends.

    Only in pyspark's source process (its main module is ``RUNNER``), from its
    main thread, and only while SIGTERM has its default action there. pyspark
    calls ``DataSource.streamReader`` in other workers too (planning a read):
    those keep their own handling.

    Returns:
        Whether the handler was installed.
    """
    main = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main is None or main.name != RUNNER:
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    signal.signal(signal.SIGTERM, _terminated)
    atexit.register(stop)
    return True


def _terminated(signum: int, frame: FrameType | None) -> None:
    global _terminating
    if _terminating:
        return  # the JVM's second SIGTERM: the first is being handled
    # Set before any lock is taken: a handler run inside this one returns above. One
    # run between the test and this line does the work itself, while this one holds
    # no lock yet, and its SystemExit unwinds through this frame.
    _terminating = True
    deadline = threading.Timer(STOP_GRACE, os._exit, args=(128 + signum,))
    deadline.daemon = True
    deadline.start()
    if not _stopping:  # else the runner's finally is in stop already: let it finish
        raise SystemExit(128 + signum)

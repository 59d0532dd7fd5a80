"""Cheap garbage collections in Spark's reused Python workers.

pyspark's daemon runs a full ``gc.collect()`` in a reused worker after every
task and every planning or commit call it serves (``pyspark/daemon.py``). A
full collection walks every object the process tracks: with pyspark, pyarrow,
the Cassandra driver and spark_queue imported and a connection open, about
75,000 to 100,000 objects, 45-200 ms of CPU on this project's 2-core machine.
At a steady trigger that is several collections per micro-batch in the
workers, the sink's commit runner and the write planner, each finding almost
nothing to free; profiling the latency query found them using more CPU than
the connector's own work.

Objects that live as long as the worker (modules, the shared client, its
connection and prepared statements) are moved out of the collector's reach with
``gc.freeze()``, at the start of a call, when the daemon's last collection has
just freed the previous call's garbage. Freezing stops once a process has done
it ``MAX_FREEZES`` times: an object frozen and freed later in a reference cycle
is never reclaimed, so what freezing can keep is bounded by what was alive at
a few points early in the worker's life. Only the daemon's workers freeze: the
driver, the CLI and tests keep the collector as it is.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

#: Times a worker process freezes what it holds (first imports, then handles opened).
MAX_FREEZES = 3
#: Objects surviving in the oldest generation above which a call freezes them.
SURVIVORS_TO_FREEZE = 5_000
#: The module pyspark's reused Python workers run as ``__main__``.
DAEMON_MODULE = "pyspark.daemon"

_freezes: dict[int, int] = {}  # by process id: a forked child starts again

P = ParamSpec("P")
R = TypeVar("R")


def in_daemon_worker() -> bool:
    """True in a process forked by pyspark's daemon (which collects after every call)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == DAEMON_MODULE


def settle() -> bool:
    """Freeze the objects this worker has kept since its last freeze, if they are many.

    Cheap once the process froze ``MAX_FREEZES`` times, and a no-op outside
    pyspark's daemon. Returns whether it froze.
    """
    pid = os.getpid()
    done = _freezes.get(pid, 0)
    if done >= MAX_FREEZES or not in_daemon_worker():
        return False
    if len(gc.get_objects(generation=2)) < SURVIVORS_TO_FREEZE:
        return False
    gc.freeze()
    _freezes[pid] = done + 1
    return True


def settled(call: Callable[P, R]) -> Callable[P, R]:
    """Decorate an entry point Spark calls in a Python worker: ``settle()`` first."""

    @functools.wraps(call)
    def entry(*args: P.args, **kwargs: P.kwargs) -> R:
        settle()
        return call(*args, **kwargs)

    return entry

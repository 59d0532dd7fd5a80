"""Writes repeated until they land: the same rows at the same write timestamp (idempotent sends).

Kafka's producer is idempotent by default: a send retried after a timeout or a
dropped connection is written once. Here a send's rows have their ids before
the first attempt (``store/ids.py``) and carry one write timestamp, chosen once
(``now_us``): an attempt after one that landed rewrites the same cells with the
same values at the same time, so it changes nothing, not even a lease or an
ack a consumer wrote since (those carry later timestamps and win). So the
sender repeats a failed write itself, for ``SEND_RETRY`` seconds, instead of
handing the failure to a caller whose only remedy, sending again under new
ids, may duplicate.

Only transient failures are repeated (no host answered, a timeout, too few
replicas, a dropped connection, an overloaded node); a refused statement or a
missing permission is raised at once. The clocks: the timestamp is the sending
host's; a consumer whose clock is behind it by more than the time from send to
receive has its lease overruled (a duplicate, never a loss), the bound the
README states for every plain write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from cassandra import OperationTimedOut, Unavailable, WriteTimeout
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from spark_queue.defaults import SEND_RETRY
from spark_queue.errors import BackendUnavailable, SparkQueueError

T = TypeVar("T")

#: Driver errors after which the same write may be sent again.
TRANSIENT = (NoHostAvailable, OperationTimedOut, WriteTimeout, Unavailable, ConnectionException)
#: First pause between two attempts (seconds); it doubles up to ``MAX_PAUSE``.
FIRST_PAUSE = 0.05
MAX_PAUSE = 1.0


def now_us() -> int:
    """Wall time in microseconds: the unit of Cassandra's write timestamps."""
    return time.time_ns() // 1000


def transient(error: BaseException) -> bool:
    """Whether ``error`` (a translated one, or the driver's) may pass if the write is repeated."""
    if isinstance(error, SparkQueueError):
        return isinstance(error, BackendUnavailable) and isinstance(error.__cause__, TRANSIENT)
    return isinstance(error, TRANSIENT)


def pause_before(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` (``attempt`` >= 1 failed so far)."""
    return float(min(MAX_PAUSE, FIRST_PAUSE * 2 ** (attempt - 1)))


def repeated(write: Callable[[], T], *, retry_for: float = SEND_RETRY) -> T:
    """Run ``write`` until it lands, repeating it on a transient failure for ``retry_for`` s.

    ``write`` must be safe to repeat (the same rows at the same timestamp). The
    last failure is raised when time runs out, and any other failure at once.
    """
    retrying = Retrying(
        retry=retry_if_exception(transient),
        stop=stop_after_delay(retry_for),
        wait=wait_exponential(multiplier=FIRST_PAUSE, max=MAX_PAUSE),
        reraise=True,
    )
    return retrying(write)

"""Own leases: the leases a handle wrote itself, so that their acks need no read and no Paxos.

A plain consumer leases in lanes it owns, with plain writes (``receiving.py``),
and every receive leases only what its scan saw visible (``visible_at <= now``).
So until a lease's deadline, nobody but the receipt's holder can change that
message's lease: the handle that wrote it knows, without asking Cassandra, that
the receipt still names the current delivery. An ack of such a receipt, made
``ACK_PLAIN_MARGIN`` seconds or more before the deadline by the handle's own
clock, is one plain ``UPDATE ... SET acked = true WHERE id IN`` per bucket: no
read, no conditional write. Measured on the project's local node (one thread,
receives of 10): 1.5 ms of Cassandra's CPU per ack against 4.8 for the
conditional one and 4.9 for a read and a plain write.

What the handle remembers and for how long: ``(bucket, id) -> (lease, deadline)``
for each delivery it handed out, the deadline on the monotonic clock (taken
before the receive's scan, so never later than the ``visible_at`` it wrote). An
ack takes its entry away; so do ``change_visibility`` and ``purge`` through the
handle; entries past their deadline are pruned at most once a second, and at
most ``MAX_OWN`` are kept (a consumer that never acks falls back to the
conditional ack, nothing else). A receipt the handle did not lease (another
handle's or process's), or one past the margin, is acked as before
(``store/acks.py``).

What the handle cannot see, and why it is accepted: the same receipt used
through another handle. A ``change_visibility`` of it elsewhere, then an ack of
the old receipt here, acks the message instead of raising ``StaleReceipt``; a
``purge`` elsewhere, then the ack, writes an ``acked`` cell to the purged row
(it carries the message's TTL, so it goes when the message would have; scans
skip acked rows). In both, whoever holds the receipt declared the message
processed, so nothing is lost; the holder racing itself through two handles is
already accepted by ``store/acks.py``. ``Queue.ack_own_leases = False`` turns
the path off for consumers that pass receipts between handles that way.

Pure bookkeeping, no Cassandra: see tests/test_own_leases.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from spark_queue.store.message_values import LeaseCheck

#: Most leases one handle remembers; past it the oldest are forgotten (their acks go conditional).
MAX_OWN = 100_000
#: Seconds between two prunes of leases past their deadline.
PRUNE_EVERY = 1.0


@dataclass(frozen=True, slots=True)
class OwnLease:
    """A lease this handle wrote: its token, and until when (monotonic) it surely holds."""

    lease: int
    deadline: float


class OwnLeases:
    """The leases one handle wrote and handed out, by ``(bucket, id)``; safe to share."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[int, int], OwnLease] = {}
        self._pruned_at = 0.0

    def __len__(self) -> int:
        return len(self._held)

    def record(self, leases: Iterable[tuple[int, int, int]], deadline: float) -> None:
        """Remember ``(bucket, id, lease)`` deliveries, surely held until ``deadline``."""
        with self._lock:
            for bucket, message_id, lease in leases:
                self._held[(bucket, message_id)] = OwnLease(lease, deadline)
            while len(self._held) > MAX_OWN:  # oldest first: dicts keep insertion order
                del self._held[next(iter(self._held))]

    def take(
        self, checks: Sequence[LeaseCheck], clock: float, margin: float
    ) -> tuple[list[LeaseCheck], list[LeaseCheck]]:
        """Split receipts into those this handle leased with ``margin`` s left, and the rest.

        The first are forgotten here (their ack is under way); of several
        receipts for one message only the last is considered, as an ack does.
        """
        last = {(c.bucket, c.id): c for c in checks}
        mine: list[LeaseCheck] = []
        rest: list[LeaseCheck] = []
        with self._lock:
            if self._held and clock >= self._pruned_at + PRUNE_EVERY:
                self._held = {k: h for k, h in self._held.items() if h.deadline > clock}
                self._pruned_at = clock
            for key, c in last.items():
                held = self._held.get(key)
                if held is not None and held.lease == c.lease and held.deadline - clock >= margin:
                    del self._held[key]
                    mine.append(c)
                else:
                    rest.append(c)
        return mine, rest

    def forget(self, keys: Iterable[tuple[int, int]]) -> None:
        """Forget leases this handle changed or removed some other way."""
        with self._lock:
            for key in keys:
                self._held.pop(key, None)

    def clear(self) -> None:
        """Forget every lease (the queue was purged)."""
        with self._lock:
            self._held.clear()

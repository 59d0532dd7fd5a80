"""What a receipt can do after a receive: ack its message, make it visible again, reject it.

A receipt names one delivery (``message.Receipt``). An ack takes one of three
paths per receipt: a plain write and no read for a lease this handle wrote
itself and surely still holds (``lease_memory.py``), a read and a plain write
per bucket while the lease surely holds (``plain_acks``, ``store/acks.py``),
or a conditional batch per bucket. A stale receipt changes nothing on any path.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from spark_queue.config import check_seconds
from spark_queue.defaults import ACK_PLAIN_MARGIN
from spark_queue.engine.counters import QueueCounters
from spark_queue.engine.dead_letters import DeadLetters
from spark_queue.engine.receiving import Receiver
from spark_queue.errors import InvalidMessage, StaleReceipt
from spark_queue.message import Receipt, new_lease
from spark_queue.store import acks
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import Candidate, LeaseCheck, now_ms


class ReceiptActions:
    """Acks and visibility changes of one queue handle's receipts; safe to share between threads.

    Args:
        name: The queue's name (for errors).
        queue_id: The queue's incarnation: receipts of another are stale.
        buckets: The queue's bucket store.
        receiving: The handle's receiver, whose memory of claims and own leases
            an ack or a visibility change updates.
        counts: The handle's counters of acked and stale receipts.
    """

    def __init__(
        self,
        name: str,
        queue_id: uuid.UUID,
        buckets: Buckets,
        receiving: Receiver,
        counts: QueueCounters,
    ) -> None:
        self._name = name
        self._queue_id = queue_id
        self._buckets = buckets
        self._receiving = receiving
        self._counts = counts

    def ack_batch(
        self, receipts: Sequence[str], *, strict: bool, plain: bool, own_leases: bool
    ) -> list[str]:
        """Ack receipts (``Queue.ack_batch``); return the stale ones unless ``strict`` raises."""
        if isinstance(receipts, str):
            raise InvalidMessage(f"receipts {receipts[:40]!r}: ack_batch takes a list; use ack()")
        decoded = [(text, Receipt.decode(text)) for text in receipts]
        foreign = [text for text, r in decoded if r.queue_id != self._queue_id]
        mine = [(text, r) for text, r in decoded if r.queue_id == self._queue_id]
        checks = [LeaseCheck(r.bucket, r.id, r.lease, r.expires_at_ms) for _, r in mine]
        own: list[LeaseCheck] = []
        if own_leases:
            own, checks = self._receiving.own_leases.take(
                checks, time.monotonic(), ACK_PLAIN_MARGIN
            )
        stale_keys = acks.ack(self._buckets, checks, plain=plain, own=own)
        self._receiving.acked([(r.bucket, r.id) for _, r in mine])
        # An ack that empties a bucket leaves its count, 0, for stats (drains.py).
        self._receiving.drains.acked(
            r.bucket for _, r in mine if (r.bucket, r.id) not in stale_keys
        )
        stale = foreign + [text for text, r in mine if (r.bucket, r.id) in stale_keys]
        self._counts.acked.inc(len(receipts) - len(stale))
        self._counts.stale_acks.inc(len(stale))
        if stale and strict:
            raise StaleReceipt(
                f"{len(stale)} of {len(receipts)} receipt(s) for queue {self._name!r} no longer"
                " name the current delivery (acked already, received again after the"
                " visibility timeout, or from another queue); nothing was changed for them",
            )
        return stale

    def change_visibility(self, receipt: str, seconds: float) -> str:
        """Make the receipt's message visible after ``seconds``; return the new receipt."""
        delay = check_seconds("seconds", seconds, allow_zero=True)
        r = Receipt.decode(receipt)
        now = now_ms()
        lease = new_lease()
        check = LeaseCheck(r.bucket, r.id, r.lease, r.expires_at_ms)
        if r.queue_id != self._queue_id or not self._buckets.change_visibility(
            check, lease, now + int(delay * 1000), now
        ):
            raise StaleReceipt(
                f"receipt for message {r.id} of queue {self._name!r}: no longer names the current"
                " delivery, or its visibility timeout ran out (the message is visible again);"
                " its visibility was not changed"
            )
        self._receiving.unskip(r.bucket)
        self._receiving.claims.drop([(r.bucket, r.id)])
        self._receiving.own_leases.forget([(r.bucket, r.id)])
        return Receipt(self._queue_id, r.bucket, r.id, lease, r.expires_at_ms).encode()

    def reject(
        self, receipt: str, reason: str | None, dead_letters: DeadLetters, hold: float
    ) -> int:
        """Move the receipt's message to the dead-letter queue now; return its id there.

        The receipt's lease is first moved to a new one for ``hold`` seconds, as a
        visibility change: only while it holds (a stale receipt, or one whose
        lease ran out, raises StaleReceipt and moves nothing), and no other
        receipt can act on the message meanwhile. The move then takes, sends
        and acks it under that lease (``dead_letters.py``): at most one copy
        reaches the dead-letter queue unless the process dies between the send
        and the ack. A failed send leaves the message here, visible again once
        ``hold`` ends.
        """
        dead_letters.check_reject(reason)  # bad input changes nothing, not even the lease
        taken = Receipt.decode(self.change_visibility(receipt, hold))
        candidate = Candidate(taken.id, taken.bucket, taken.expires_at_ms, 0, taken.lease)
        moved = dead_letters.reject(candidate, reason, now_ms())
        if moved is None:  # only a handle holding the new receipt could have acted meanwhile
            raise StaleReceipt(
                f"receipt for message {taken.id} of queue {self._name!r}: changed while it was"
                " being rejected; nothing was moved"
            )
        self._counts.acked.inc()
        return moved

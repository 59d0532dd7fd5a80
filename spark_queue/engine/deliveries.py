"""A leased message as a delivery: the helpers both ways of receiving share.

A receive writes a lease on each message it picks (``fresh_lease``), checks
that each still holds (``still_held``: a redelivery's late consumer may have
acked it meanwhile), and hands out each message it won as a ``Delivery``
with its receipt (``delivery_of``);
a caller that hands out rows (the Spark source) takes them a field at a time
(``LeasedColumns``).
A peek hands out messages without a lease (``message_of``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from spark_queue.message import Delivery, Message, Receipt, new_lease
from spark_queue.store.journal import pack_columns
from spark_queue.store.message_values import Candidate, LeaseWrite, StoredMessage

if TYPE_CHECKING:
    from spark_queue.store.buckets import Buckets

#: A message with the lease a receive wrote on it (its delivery, before any receipt).
Leased = tuple[StoredMessage, LeaseWrite]


@dataclass(frozen=True, slots=True)
class LeasedColumns:
    """Leased messages a field at a time, in id order: what a Spark task hands out.

    A receive of first deliveries fills the columns straight from the rows it
    scanned (``BucketReceiver.lease_columns``), with no message object each;
    any other receive's pairs become columns (``of``). ``headers`` holds None
    for a message without any.
    """

    ids: list[int]
    buckets: list[int]
    payloads: list[bytes]
    headers: list[Mapping[str, str] | None]
    enqueued_at: list[int]
    delivery_counts: list[int]
    keys: list[str | None]
    leases: list[int]
    expires_at: list[int]

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def of(cls, leased: Sequence[Leased]) -> LeasedColumns:
        return cls(
            ids=[m.id for m, _ in leased],
            buckets=[m.bucket for m, _ in leased],
            payloads=[m.payload for m, _ in leased],
            headers=[m.headers or None for m, _ in leased],
            enqueued_at=[m.enqueued_at for m, _ in leased],
            delivery_counts=[w.delivery_count for _, w in leased],
            keys=[m.key for m, _ in leased],
            leases=[w.lease for _, w in leased],
            expires_at=[w.expires_at for _, w in leased],
        )

    def journal(self) -> bytes:
        """The journal's record of these deliveries (``store/journal.py``)."""
        return pack_columns(
            self.buckets, self.ids, self.leases, self.expires_at, self.delivery_counts
        )


def as_datetime(ms: int) -> datetime:
    """A stored time (integer ms) as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def fresh_lease(
    m: Candidate | StoredMessage, timeout_ms: int, now: int, token: int | None = None
) -> LeaseWrite:
    """A fresh lease on ``m`` until ``now + timeout_ms``: its next delivery.

    ``token``: the lease token to write (a Spark step part's, shared by its
    messages); default a new random one.
    """
    return LeaseWrite(
        bucket=m.bucket,
        id=m.id,
        lease=new_lease() if token is None else token,
        visible_at=now + timeout_ms,
        delivery_count=m.delivery_count + 1,
        expires_at=m.expires_at,
    )


def still_held(buckets: Buckets, writes: Sequence[LeaseWrite]) -> list[bool]:
    """Whether each lease just written still holds, reading back only redeliveries' leases.

    A message delivered before has a late consumer whose ack may have landed
    between the receive's scan and its lease write (the ack's condition held:
    it was still that consumer's lease), so its lease is read back: it must
    be the one written and not acked. A first delivery has no receipt anyone
    could ack, so it costs no read.
    """
    again = [(w.bucket, w.id) for w in writes if w.delivery_count > 1]
    held = buckets.leases_of(again) if again else {}
    return [w.delivery_count <= 1 or held.get((w.bucket, w.id)) == (w.lease, False) for w in writes]


def delivery_of(queue_id: uuid.UUID, m: StoredMessage, w: LeaseWrite) -> Delivery:
    """The delivery of message ``m`` under lease ``w``, with its receipt."""
    receipt = Receipt(queue_id, m.bucket, m.id, w.lease, m.expires_at).encode()
    return Delivery(
        id=m.id,
        bucket=m.bucket,
        payload=m.payload,
        headers=m.headers,
        enqueued_at=as_datetime(m.enqueued_at),
        delivery_count=w.delivery_count,
        key=m.key,
        lane=m.lane,
        receipt=receipt,
        visible_at=as_datetime(w.visible_at),
    )


def message_of(m: StoredMessage) -> Message:
    """Stored message ``m`` as a peek hands it out: no lease, no receipt."""
    return Message(
        id=m.id,
        bucket=m.bucket,
        payload=m.payload,
        headers=m.headers,
        enqueued_at=as_datetime(m.enqueued_at),
        delivery_count=m.delivery_count,
        key=m.key,
        lane=m.lane,
    )

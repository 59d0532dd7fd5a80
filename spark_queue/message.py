"""Values the queue hands out: messages, deliveries, their receipts, and counts.

They know nothing of Cassandra. A receipt names one delivery of one message:
the queue's incarnation, the bucket, the id and the lease token written when
the message was received. Any process can ack with it; once the message is
received again (or acked, or its visibility changed) the receipt is stale.
"""

from __future__ import annotations

import base64
import binascii
import secrets
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from spark_queue.errors import InvalidSetting

_RECEIPT_VERSION = 1
_RECEIPT = struct.Struct(">B16sqqqq")


def new_lease() -> int:
    """A fresh lease token for one delivery (0 means "never delivered")."""
    return secrets.randbits(63) or 1


@dataclass(frozen=True, slots=True)
class Receipt:
    """The decoded form of a receipt string."""

    queue_id: uuid.UUID
    bucket: int
    id: int
    lease: int
    expires_at_ms: int  # lets updates keep the message's TTL without reading it first

    def encode(self) -> str:
        """The opaque, URL-safe text handed to users."""
        raw = _RECEIPT.pack(
            _RECEIPT_VERSION,
            self.queue_id.bytes,
            self.bucket,
            self.id,
            self.lease,
            self.expires_at_ms,
        )
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Receipt:
        """Parse a receipt string; InvalidSetting if it is not one."""
        if not isinstance(text, str):
            raise InvalidSetting(
                f"receipt {text!r}: must be the receipt string of a Delivery,"
                f" not {type(text).__name__}"
            )
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            version, qid, bucket, message_id, lease, expires = _RECEIPT.unpack(raw)
        except (binascii.Error, struct.error, ValueError) as e:
            raise InvalidSetting(
                f"receipt {text[:80]!r}: not a spark-queue receipt (use Delivery.receipt)"
            ) from e
        if version != _RECEIPT_VERSION:
            raise InvalidSetting(f"receipt {text[:80]!r}: unknown receipt version {version}")
        return cls(uuid.UUID(bytes=qid), bucket, message_id, lease, expires)


@dataclass(frozen=True, slots=True)
class Message:
    """A message as stored in the queue.

    Attributes:
        id: Position in the queue's monotonic id sequence.
        bucket: The bucket (Cassandra partition) holding it: ``id // bucket_size``.
        payload: The body, as bytes.
        headers: String key/value pairs sent with it.
        enqueued_at: When it was sent (UTC).
        delivery_count: How many times it has been received.
        key: The key it was sent with (its unit of order), or None when it was
            sent without one (or before keys were stored).
        lane: The lane it was written in, as stored: ``crc32(key) % lanes`` for
            a keyed message; for a keyless one -1 (``KEYLESS``: in no lane, any
            consumer may receive it) in a queue of several lanes, and 0 in a
            queue of one lane. None only in a message not read from a queue.
    """

    id: int
    bucket: int
    payload: bytes
    headers: Mapping[str, str] = field(default_factory=dict)
    enqueued_at: datetime | None = None
    delivery_count: int = 0
    key: str | None = None
    lane: int | None = None


@dataclass(frozen=True, slots=True)
class Delivery(Message):
    """A message received under a lease.

    Attributes:
        receipt: Names this delivery; pass it to ``ack`` or ``change_visibility``.
        visible_at: When the lease ends and the message may be delivered again (UTC).
    """

    receipt: str = ""
    visible_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Approximate counts of a queue (``spark_queue.engine.counting`` keeps them cheap).

    Attributes:
        visible: Messages that a receive could return now.
        in_flight: Messages received and not yet acked, under a lease.
        delayed: Messages sent with a delay that has not passed yet.
        buckets: Live (not yet dropped) buckets.
        oldest_age: Seconds since the oldest visible message was sent (SQS's
            ApproximateAgeOfOldestMessage), or None when none is visible.
        estimated_buckets: Live buckets not counted yet, whose handed-out ids
            were counted as visible messages.
        counts_age: Seconds since the oldest bucket count used was taken.
    """

    visible: int
    in_flight: int
    delayed: int
    buckets: int
    oldest_age: float | None = None
    estimated_buckets: int = 0
    counts_age: float = 0.0

    @property
    def total(self) -> int:
        """Every message still in the queue."""
        return self.visible + self.in_flight + self.delayed


@dataclass(frozen=True, slots=True)
class SentOnce:
    """What the send log holds of one ``send_batch_once`` key (``Staging.record``).

    Attributes:
        ids: The ids recorded for its messages, in order.
        first_sent_ms: When its first attempt began (ms since the epoch, that
            attempt's clock, fixed by a lightweight transaction).
        done: Its messages were released: visible to consumers (after their delay).
    """

    ids: tuple[int, ...]
    first_sent_ms: int
    done: bool

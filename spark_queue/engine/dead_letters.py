"""Dead letters: messages delivered ``max_deliveries`` times move to another queue.

A receive that finds such a message moves it instead of delivering it:

1. **take** it with a conditional lease (only if it is still unacked under
   the lease the receive saw), so an acked message stays acked and of two
   consumers racing for it exactly one moves it;
2. **send** it to the dead-letter queue, with headers naming where it came
   from, how often it was delivered and its original id;
3. **ack** it here under the lease taken in step 1.

A crash between 2 and 3 leaves a duplicate in the dead-letter queue, never a
lost message; a failed send leaves it here, to be moved by a later receive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from spark_queue.config import QueueSettings
from spark_queue.engine import counters
from spark_queue.errors import SparkQueueError
from spark_queue.message import new_lease
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import Candidate, LeaseCheck

if TYPE_CHECKING:
    from spark_queue.engine.sending import Headers, Keys, Payload

log = logging.getLogger(__name__)

HEADER_SOURCE = "bdq-dead-letter-source"
HEADER_DELIVERIES = "bdq-delivery-count"
HEADER_ORIGINAL_ID = "bdq-original-id"


class DeadLetterQueue(Protocol):
    """What a dead-letter move needs of the queue it moves messages to (``Queue`` is one)."""

    def send_batch(
        self,
        payloads: Sequence[Payload],
        headers: Headers = None,
        delay: float | Sequence[float] = 0.0,
        *,
        key: Keys = None,
    ) -> list[int]: ...


class DeadLetters:
    """Moves one queue's over-delivered messages to its dead-letter queue.

    Args:
        buckets: The source queue's bucket store.
        name: The source queue's name.
        settings: Returns its current settings (``dead_letter_queue``,
            ``visibility_timeout``), which may change (see ``settings_change``).
        open_queue: Opens a queue by name (the client's ``queue``).
    """

    def __init__(
        self,
        buckets: Buckets,
        name: str,
        settings: Callable[[], QueueSettings],
        open_queue: Callable[[str], DeadLetterQueue],
    ) -> None:
        self._buckets = buckets
        self._name = name
        self._settings = settings
        self._open_queue = open_queue

    def limit(self) -> int | None:
        """Deliveries after which a message moves, or None when it never does."""
        return self._settings().max_deliveries

    def move(self, candidates: Sequence[Candidate], now: int) -> int:
        """Move these messages (found past the limit) to the dead-letter queue.

        Returns:
            How many this call moved (others were acked, or taken by another consumer).
        """
        name = self._settings().dead_letter_queue
        if name is None:
            return 0  # update_queue removed the dead-letter queue since limit() was read
        taken = self._buckets.take(
            [LeaseCheck(c.bucket, c.id, c.lease, c.expires_at) for c in candidates],
            new_lease(),
            now + int(self._settings().visibility_timeout * 1000),
            now,
        )
        if not taken:
            return 0
        stored = self._buckets.read_many([(t.bucket, t.id) for t in taken])
        messages = [stored[(t.bucket, t.id)] for t in taken if (t.bucket, t.id) in stored]
        try:
            dead_letters = self._open_queue(name)
            dead_letters.send_batch(
                [m.payload for m in messages],
                headers=[
                    {
                        **m.headers,
                        HEADER_SOURCE: self._name,
                        HEADER_DELIVERIES: str(m.delivery_count),
                        HEADER_ORIGINAL_ID: str(m.id),
                    }
                    for m in messages
                ],
            )
        except SparkQueueError:
            log.exception(
                "queue %r: could not move %d message(s) to dead-letter queue %r; they stay here",
                self._name,
                len(messages),
                name,
            )
            return 0
        self._buckets.ack(taken, now)
        keyspace = self._buckets.store.keyspace
        counters.DEAD_LETTERED.labels(keyspace=keyspace, queue=self._name).inc(len(messages))
        return len(messages)

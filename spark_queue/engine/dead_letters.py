"""Dead letters: messages delivered ``max_deliveries`` times move to another queue.

A receive that finds such a message moves it instead of delivering it:

1. **take** it with a conditional lease (only if it is still unacked under
   the lease the receive saw), so an acked message stays acked and of two
   consumers racing for it exactly one moves it;
2. **send** it to the dead-letter queue, with its key, and headers naming
   where it came from, how often it was delivered and its original id;
3. **ack** it here under the lease taken in step 1.

A crash between 2 and 3 leaves a duplicate in the dead-letter queue, never a
lost message; a failed send leaves it here, to be moved by a later receive.

A consumer may also **reject** a message it received (``Queue.reject``, Kafka
share groups' REJECT): the same three steps at once, for that one delivery,
with the reason in a header. The take holds only while the receipt names the
current delivery, so a stale receipt moves nothing, and a failed send leaves
the message here under the take's lease, visible again when it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from spark_queue.config import QueueSettings
from spark_queue.engine import counters
from spark_queue.errors import InvalidSetting, SparkQueueError
from spark_queue.message import new_lease
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import Candidate, LeaseCheck

if TYPE_CHECKING:
    from spark_queue.engine.sending import Headers, Keys, Payload

log = logging.getLogger(__name__)

HEADER_SOURCE = "bdq-dead-letter-source"
HEADER_DELIVERIES = "bdq-delivery-count"
HEADER_ORIGINAL_ID = "bdq-original-id"
HEADER_REJECT_REASON = "bdq-reject-reason"
#: Longest reason a reject keeps (characters).
MAX_REASON = 1000


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
        try:
            return len(self._move(name, candidates, now, {}))
        except SparkQueueError:
            log.exception(
                "queue %r: could not move %d message(s) to dead-letter queue %r; they stay here",
                self._name,
                len(candidates),
                name,
            )
            return 0

    def check_reject(self, reason: str | None) -> str:
        """The dead-letter queue a reject with ``reason`` goes to; InvalidSetting if none."""
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
            raise InvalidSetting(
                f"reason {reason!r:.60}: must be a str of at most {MAX_REASON} characters"
            )
        name = self._settings().dead_letter_queue
        if name is None:
            raise InvalidSetting(
                f"queue {self._name!r} has no dead_letter_queue to reject a message to: set one"
                " with update_queue(..., max_deliveries=N, dead_letter_queue=NAME)"
            )
        return name

    def reject(self, candidate: Candidate, reason: str | None, now: int) -> int | None:
        """Move one received message to the dead-letter queue now, with ``reason``.

        Returns:
            Its id in the dead-letter queue, or None when the candidate's lease
            is no longer current (a stale receipt: nothing moved).

        Raises:
            InvalidSetting: The queue has no dead-letter queue, or a bad reason.
            SparkQueueError: The send failed: the message stays here, leased.
        """
        name = self.check_reject(reason)
        extra = {} if reason is None else {HEADER_REJECT_REASON: reason}
        moved = self._move(name, [candidate], now, extra)
        return moved[0] if moved else None

    def _move(
        self, name: str, candidates: Sequence[Candidate], now: int, extra: dict[str, str]
    ) -> list[int]:
        """Take, send to ``name`` and ack the candidates; return their new ids (raises)."""
        taken = self._buckets.take(
            [LeaseCheck(c.bucket, c.id, c.lease, c.expires_at) for c in candidates],
            new_lease(),
            now + int(self._settings().visibility_timeout * 1000),
            now,
        )
        if not taken:
            return []
        stored = self._buckets.read_many([(t.bucket, t.id) for t in taken])
        messages = [stored[(t.bucket, t.id)] for t in taken if (t.bucket, t.id) in stored]
        if not messages:
            return []
        ids = self._open_queue(name).send_batch(
            [m.payload for m in messages],
            headers=[
                {
                    **m.headers,
                    HEADER_SOURCE: self._name,
                    HEADER_DELIVERIES: str(m.delivery_count),
                    HEADER_ORIGINAL_ID: str(m.id),
                    **extra,
                }
                for m in messages
            ],
            key=[m.key for m in messages],  # the dead-letter queue's lane of the same key
        )
        self._buckets.ack(taken, now)
        keyspace = self._buckets.store.keyspace
        counters.DEAD_LETTERED.labels(keyspace=keyspace, queue=self._name).inc(len(messages))
        return ids

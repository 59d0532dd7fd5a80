"""Lease changes under a receipt (LWTs), redone while a plain write stamped later shadows them.

Cassandra stamps a conditional update with its Paxos ballot, taken from the
coordinator's clock, and refuses ``USING TIMESTAMP`` on it. A receive writes
its leases with plain writes (one per bucket, DESIGN section 4), stamped by
the consumer's clock (the driver's timestamp generator); a send's rows carry
the producer's. When that clock runs ahead of the node's, a change made just
after (a ``change_visibility``, a dead-letter take, the release of a losing
Spark attempt) is judged on the row as it reads, applies, and yet its cells
lose to the older write's later timestamp: the change reports success and
never happened (issue 45, defect F).

So every such change here reads its row back after it applied (at the read
consistency: the change's commit reached a quorum). If the row still holds
the lease the condition matched (or, for a release, still its old
``visible_at``), the change was shadowed, and the same conditional update is
run again after a pause that doubles. Its condition is judged afresh on the
row as it is, so a redo overrules nothing that happened meanwhile: an ack
(``acked``), a later lease, or a lease that ran out while the caller paused
all make it miss, as they would have made the first try miss. Once the
node's clock has passed the shadowing write's timestamp, the redo's ballot
wins. A skew thus costs the caller about the skew in waiting; a change still
shadowed after ``LWT_SHADOW_PATIENCE`` is reported as not made (see each
method), never as made.

Two simpler repairs were weighed and refused. A plain write at the shadowing
cell's ``WRITETIME`` plus one wins at once, but it cannot carry a condition:
after a pause past the lease it would overrule the lease another consumer took
meanwhile. Stamping the receive's plain leases with a time the node can beat
would need each cell's write time on the scan, and still loses to a send's
rows stamped by a producer whose clock is ahead.

Renewals of a Spark step's leases (``MessageWrites.renew_leases``) are not
checked: the driver renews every third of the visibility timeout, so a renewal
after the shadowing write's time comes before the lease it shadows ends.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from spark_queue.defaults import LWT_SHADOW_PATIENCE
from spark_queue.errors import SparkQueueError
from spark_queue.store.message_values import LeaseCheck, ttl_left
from spark_queue.store.message_writes import RENEW, MessageWrites

#: ``(bucket, id)``: a message of the queue.
Key = tuple[int, int]

# Seconds before the first redo of a shadowed change, doubled after each up to the longest.
FIRST_PAUSE = 0.01
LONGEST_PAUSE = 0.5

# A dead-letter move's take: a new lease where the scan's lease still is.
TAKE = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?"
    " WHERE queue_id = ? AND bucket = ? AND id = ? IF lease = ? AND acked = false"
)
# Only while the lease holds (SQS's MessageNotInflight): a lease that ran out is not
# revived, since the lane's owner may have read the message as visible by then.
CHANGE_VISIBILITY = (
    "UPDATE {ks}.messages USING TTL ? SET lease = ?, visible_at = ?"
    " WHERE queue_id = ? AND bucket = ? AND id = ? IF lease = ? AND acked = false"
    " AND visible_at > ?"
)
LEASE_CELLS_IN = (
    "SELECT id, lease, toUnixTimestamp(visible_at) FROM {ks}.messages"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)


class LeaseChanges(MessageWrites):
    """The lightweight transactions that move a lease or its end, checked for shadowing.

    Args:
        store: The Cassandra session.
        queue_id: The incarnation (changes when a queue is deleted and re-created).
        bucket_size: Ids per bucket.
    """

    def change_visibility(
        self, check: LeaseCheck, new_lease: int, visible_at: int, now: int
    ) -> bool:
        """Move a message's visibility while ``check.lease`` is its lease and holds at ``now``.

        Returns:
            Whether the change was made (False: the receipt is stale or its lease ran out).

        Raises:
            SparkQueueError: The change stayed shadowed by a write stamped more
                than ``LWT_SHADOW_PATIENCE`` ahead of the node's clock: nothing
                changed, and the receipt still names the delivery.
        """
        key = (check.bucket, check.id)
        started = time.monotonic()

        def attempt(keys: Sequence[Key]) -> list[Key]:
            at = now + int((time.monotonic() - started) * 1000)
            row = self.store.execute(
                CHANGE_VISIBILITY,
                (
                    ttl_left(check.expires_at, at),
                    new_lease,
                    visible_at,
                    self.queue_id,
                    check.bucket,
                    check.id,
                    check.lease,
                    at,
                ),
                what="changing a message's visibility",
            ).one()
            return [key] if row and row[0] else []

        done, shadowed = self._until_seen(attempt, [key], {key: check.lease}, {})
        if shadowed:
            raise SparkQueueError(
                f"message {check.id}: its lease was written with a timestamp more than"
                f" {LWT_SHADOW_PATIENCE:g} s ahead of Cassandra's clock (a host whose clock"
                " runs ahead), so its visibility could not be changed; the receipt still names"
                " the delivery: try again, and check the hosts' clocks (NTP)"
            )
        return bool(done)

    def take(
        self, checks: Sequence[LeaseCheck], new_lease: int, visible_at: int, now: int
    ) -> list[LeaseCheck]:
        """Lease each unacked message whose lease is still ``check.lease``; return those taken.

        One lightweight transaction per message, run concurrently: for the
        rare moves that must not race (dead letters), where two consumers
        would otherwise both act on the same message. A take still shadowed
        after ``LWT_SHADOW_PATIENCE`` counts as not taken: the message stays
        under its old lease, for a later receive to move.
        """
        by_key = {(c.bucket, c.id): c for c in checks}
        started = time.monotonic()

        def attempt(keys: Sequence[Key]) -> list[Key]:
            at = now + int((time.monotonic() - started) * 1000)
            results = self.store.execute_many(
                [
                    (
                        TAKE,
                        (
                            ttl_left(c.expires_at, at),
                            new_lease,
                            visible_at,
                            self.queue_id,
                            c.bucket,
                            c.id,
                            c.lease,
                        ),
                    )
                    for c in (by_key[k] for k in keys)
                ],
                what="taking messages",
            )
            return [k for k, r in zip(keys, results, strict=True) if (row := r.one()) and row[0]]

        done, _ = self._until_seen(
            attempt, list(by_key), {k: c.lease for k, c in by_key.items()}, {}
        )
        return [LeaseCheck(b, i, new_lease, by_key[(b, i)].expires_at) for b, i in done]

    def release_leases(self, checks: Sequence[LeaseCheck], now: int) -> list[Key]:
        """Make visible at ``now`` each message still unacked under ``check.lease``.

        For leases nobody else renews (what a losing Spark attempt leased and
        the journal did not record); the lease token stays. Returns the
        messages still shadowed after ``LWT_SHADOW_PATIENCE``: they come back
        when their lease ends, a delay and not a loss.
        """
        by_key = {(c.bucket, c.id): c for c in checks}

        def attempt(keys: Sequence[Key]) -> list[Key]:
            missed = self._where_lease(
                RENEW,
                {
                    k: (ttl_left(c.expires_at, now), now, self.queue_id, c.bucket, c.id, c.lease)
                    for k in keys
                    for c in [by_key[k]]
                },
                what="releasing leases",
            )
            return [k for k in keys if k not in missed]

        leases = {k: c.lease for k, c in by_key.items()}
        _, shadowed = self._until_seen(attempt, list(by_key), leases, dict.fromkeys(by_key, now))
        return shadowed

    def _until_seen(
        self,
        attempt: Callable[[Sequence[Key]], list[Key]],
        keys: Sequence[Key],
        old_leases: Mapping[Key, int],
        visible_at: Mapping[Key, int],
    ) -> tuple[list[Key], list[Key]]:
        """Run ``attempt`` (it returns the keys it applied to) until no applied change is shadowed.

        A change is shadowed when the row read back still holds the lease its
        condition matched, and, where ``visible_at`` names the end it set
        (a change that keeps the lease), still another end. Returns the keys
        changed and those still shadowed after ``LWT_SHADOW_PATIENCE``; the
        others missed their condition.
        """
        deadline = time.monotonic() + LWT_SHADOW_PATIENCE
        pause = FIRST_PAUSE
        done: list[Key] = []
        pending = list(keys)
        while True:
            applied = attempt(pending)
            cells = self._lease_cells(applied) if applied else {}
            shadowed = [
                k
                for k in applied
                if k in cells
                and cells[k][0] == old_leases[k]
                and (k not in visible_at or cells[k][1] != visible_at[k])
            ]
            done += [k for k in applied if k not in shadowed]
            if not shadowed or time.monotonic() + pause > deadline:
                return done, shadowed
            time.sleep(pause)
            pause = min(2 * pause, LONGEST_PAUSE)
            pending = shadowed

    def _lease_cells(self, keys: Sequence[Key]) -> dict[Key, tuple[int, int]]:
        """``(bucket, id) -> (lease, visible_at)`` as a read now sees them; one read per bucket."""
        ids: dict[int, list[int]] = defaultdict(list)
        for bucket, message_id in keys:
            ids[bucket].append(message_id)
        results = self.store.execute_many(
            [(LEASE_CELLS_IN, (self.queue_id, b, i)) for b, i in ids.items()],
            what="reading leases back",
        )
        return {
            (bucket, row[0]): (row[1] or 0, row[2])
            for bucket, result in zip(ids, results, strict=True)
            for row in result
        }

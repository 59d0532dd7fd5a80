"""Acks of receipts: a plain write while the lease surely holds, a Paxos round otherwise.

An ack marks a message acked if its lease is still the one the receipt names
(``StaleReceipt`` otherwise). The obvious way is a conditional write per bucket
(``IF lease = ? AND acked = false``, ``Buckets.ack``): one request, but a Paxos
round, whose steps on a cluster are round trips between the replicas (prepare
and read, propose, commit) and writes to their Paxos state. ``ack`` with
``plain`` avoids it in the common case:

1. **Read** ``(id, lease, acked, visible_at)`` of the receipts' messages, one
   ``id IN`` query per bucket, all at once.
2. **Sort** each receipt (``plan``): its message gone, acked already or under
   another lease: **stale**, exactly as a failed condition would say. Under the
   receipt's lease, not acked, and its ``visible_at`` (the lease's deadline) at
   least ``ACK_PLAIN_MARGIN`` ahead of now: **plain**. Under its lease but near
   or past the deadline: **conditional**.
3. **Write** the plain ones with one ``UPDATE ... SET acked = true WHERE id IN``
   per bucket (the message's TTL kept), and the conditional ones through
   ``Buckets.ack`` as before.

(A receipt the acking handle leased itself skips even the read: it is written
plainly at once, see ``own_leases.py``; what follows is for every other receipt.)

When it pays: not on one node, so it is off unless asked for
(``Queue.plain_acks``). On a single node the Paxos round never leaves the
process, so one conditional request costs less than two plain ones: measured
with ``bdq bench queue --seed 7 [--plain-acks]`` on the project's single local
node, the plain path made the
ack's median slower in five of six pairs of runs (by 0.1-2.3 ms; README, "Acks:
plain or conditional"). On several nodes the
plain path is two client round trips against the Paxos round's replica round
trips; that case was not measured here, so it is not the default there either.

Why a plain write is safe there, writer by writer of ``lease`` and
``visible_at``: every receive (lanes, named buckets, redrive's) leases only what
its scan saw with ``visible_at <= now``; a move to the dead letters takes a
message with a conditional write on the lease its scan saw then; a release
touches only never-delivered messages (lease 0; IF lease = 0 on a retry); a
step renewal or reclaim keeps the step's lease and only moves ``visible_at``
later; lane ownership lives in its own table. So until the deadline the lease
can only change through the receipt's holder (``change_visibility``), and the
margin covers two consumers'
clocks disagreeing (about a second) and the time from the read to the write
landing. The plain write is sent only if the margin still holds when the read
has returned (the time is taken again then).

What remains, and why it is accepted:

* **The holder racing itself**: ``change_visibility`` with the same receipt,
  from another thread or process, between the read and the write. Both then
  succeed: the message is acked and the new receipt ``change_visibility``
  returned is stale (through the conditional path one of the two would have
  raised StaleReceipt). Nothing is lost: whoever holds the receipt declared
  the message processed, and the ack is what it said last or first; no other
  consumer's delivery is touched.
* **A lease write delayed past its scan**: plain leases (lanes, a Spark
  partition's named buckets) are written after a scan saw the message visible.
  A write held up past the message's next lease (a lane owner outliving its
  ownership by more than its slack, or a plain consumer and a Spark query on one
  queue) lands over another consumer's lease; if it lands between this read and
  this write, the message is acked by the receipt's holder, who processed it,
  and the late writer's delivery is a duplicate whose own ack is stale. The
  same race already makes one of the two deliveries a duplicate today; nothing
  is lost either way.
* **A write in flight longer than the margin** (a client frozen between the
  check and the send, a network stall): a consumer whose clock reached the
  deadline may have received the message again, and this ack would mark that
  new delivery's message acked. The margin (``defaults.ACK_PLAIN_MARGIN``) is
  chosen so that this needs a stall of seconds between two statements.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spark_queue.defaults import ACK_PLAIN_MARGIN
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import BATCH_ROWS, LeaseCheck, now_ms, ttl_left
from spark_queue.store.message_writes import ACK_IN

ACK_READ = (
    "SELECT id, lease, acked, toUnixTimestamp(visible_at) FROM {ks}.messages"
    " WHERE queue_id = ? AND bucket = ? AND id IN ?"
)

#: ``(bucket, id)``: a message of one queue incarnation.
Key = tuple[int, int]


@dataclass(frozen=True, slots=True)
class Held:
    """What an ack reads of a message: its lease, whether acked, its lease's deadline."""

    lease: int
    acked: bool
    visible_at: int | None


@dataclass(slots=True)
class AckPlan:
    """How each receipt of an ack is handled (``plan``)."""

    plain: list[LeaseCheck] = field(default_factory=list)
    conditional: list[LeaseCheck] = field(default_factory=list)
    stale: set[Key] = field(default_factory=set)


def plan(
    checks: Sequence[LeaseCheck], held: Mapping[Key, Held], now: int, margin_ms: int
) -> AckPlan:
    """Sort receipts into plain acks, conditional acks and stale ones (module doc, step 2).

    Args:
        checks: The receipts' ``(bucket, id, lease)``; of several for one
            message the last counts, as in ``Buckets.ack``.
        held: What was read of each message; a missing key is a message gone.
        now: The time (ms) after the read returned.
        margin_ms: How far ahead ``visible_at`` must be for a plain write.
    """
    by_key = {(c.bucket, c.id): c for c in checks}
    result = AckPlan()
    for key, c in by_key.items():
        h = held.get(key)
        if h is None or h.acked or h.lease != c.lease:
            result.stale.add(key)
        elif h.visible_at is not None and h.visible_at - now >= margin_ms:
            result.plain.append(c)
        else:
            result.conditional.append(c)
    return result


def ack(
    buckets: Buckets,
    checks: Sequence[LeaseCheck],
    *,
    plain: bool,
    own: Sequence[LeaseCheck] = (),
) -> set[Key]:
    """Ack each message whose current lease is the given one; return the stale ``(bucket, id)``.

    The contract of ``Buckets.ack``. ``own`` are receipts whose lease the
    caller wrote itself and surely still holds (``own_leases.py``): a plain
    write each, no read. Of ``checks``, with ``plain``, a read and a plain write
    per bucket while the leases surely hold, a conditional write for the rest
    (module doc); without, a conditional write per bucket.
    """
    write_plain(buckets, own, now_ms())
    if not checks:
        return set()
    if not plain:
        return buckets.ack(checks, now_ms())
    held = read(buckets, [(c.bucket, c.id) for c in checks])
    now = now_ms()  # after the read: the margin counts from here to the write
    sorted_ = plan(checks, held, now, int(ACK_PLAIN_MARGIN * 1000))
    write_plain(buckets, sorted_.plain, now)
    stale = sorted_.stale
    if sorted_.conditional:
        stale |= buckets.ack(sorted_.conditional, now)
    return stale


def write_plain(buckets: Buckets, checks: Sequence[LeaseCheck], now: int) -> None:
    """Mark messages acked with one unconditional ``UPDATE ... WHERE id IN`` per bucket.

    Each keeps its message's TTL, so an ``acked`` cell written to a row removed
    meanwhile goes when the message would have.
    """
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for c in checks:
        groups[(c.bucket, ttl_left(c.expires_at, now))].append(c.id)
    buckets.store.execute_many(
        [
            (ACK_IN, (ttl, buckets.queue_id, bucket, ids[i : i + BATCH_ROWS]))
            for (bucket, ttl), ids in groups.items()
            for i in range(0, len(ids), BATCH_ROWS)
        ],
        what="acking messages",
    )


def read(buckets: Buckets, keys: Sequence[Key]) -> dict[Key, Held]:
    """``(bucket, id) -> Held`` for the messages of ``keys`` still present, a query per bucket."""
    by_bucket: dict[int, list[int]] = defaultdict(list)
    for bucket, message_id in keys:
        by_bucket[bucket].append(message_id)
    reads = [
        (b, ids[i : i + BATCH_ROWS])
        for b, ids in by_bucket.items()
        for i in range(0, len(ids), BATCH_ROWS)
    ]
    results = buckets.store.execute_many(
        [(ACK_READ, (buckets.queue_id, b, ids)) for b, ids in reads], what="acking messages"
    )
    return {
        (bucket, row[0]): Held(row[1] or 0, bool(row[2]), row[3])
        for (bucket, _), result in zip(reads, results, strict=True)
        for row in result
    }

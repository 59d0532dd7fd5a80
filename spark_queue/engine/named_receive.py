"""Receiving in buckets the caller names: a Spark partition's receive, and the planner's probe.

A Spark step plans which buckets hold visible messages (``visible_buckets``)
and gives each partition its buckets (or one id slice of a busy bucket) to
itself for the step: its driver owns them (``spark/sharing.py``). So a
partition's receive ignores lanes: it scans the buckets with payloads, writes
plain leases under one token (the step part's own, ``steps.step_lease``, so a
retry can take back what a dead attempt leased) and reads back the leases,
not the payloads, of the messages delivered before: a late consumer's ack
may have landed between the scan and the write, as in a plain receive. A
first delivery has no receipt anyone could ack, and no other query leases in
the buckets its driver owns, so it costs no read. Plain consumers receive
through lanes instead (``receiving.py``) and do not look at that ownership:
one that leases the same first delivery at the same moment hands it out as
well (a duplicate, never a loss; docs/spark.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from spark_queue.engine.bounds import Bounds
from spark_queue.engine.claims import Claims, pick_oldest
from spark_queue.engine.deliveries import (
    Leased,
    LeasedColumns,
    delivery_of,
    fresh_lease,
    still_held,
)
from spark_queue.engine.lifecycle import Maintenance
from spark_queue.message import Delivery, new_lease
from spark_queue.store.buckets import Buckets
from spark_queue.store.message_values import (
    BATCH_ROWS,
    Col,
    LeaseWrite,
    StoredMessage,
    by_bucket_and_ttl,
    live_row,
    now_ms,
    stored_message,
)

#: Fewest buckets ``visible_buckets`` probes at once.
PROBE_WINDOW = 8

#: Moves the picks past ``max_deliveries`` to the dead-letter queue, returns the rest.
PastLimit = Callable[[list[StoredMessage], int], list[StoredMessage]]


class BucketReceiver:
    """Receives in named buckets for one queue handle; safe to share between threads.

    Args:
        buckets: The queue's bucket store.
        bounds: The handle's view of head, tail and idle buckets.
        maintenance: Run about once a second, on a thread of its own, by the planner's probe.
        claims: The handle's claims (their random source breaks order-hint ties).
        past_limit: The handle's dead-letter step (``Receiver.past_limit``).
    """

    def __init__(
        self,
        buckets: Buckets,
        bounds: Bounds,
        maintenance: Maintenance,
        claims: Claims,
        past_limit: PastLimit,
    ) -> None:
        self._buckets = buckets
        self._bounds = bounds
        self._maintenance = maintenance
        self._claims = claims
        self._past_limit = past_limit

    def receive(
        self,
        buckets: Sequence[int],
        count: int,
        timeout_ms: int,
        hint: int,
        *,
        ids: tuple[int, int] | None = None,
        token: int | None = None,
        reclaim: bool = False,
    ) -> list[Delivery]:
        """``lease``'s messages as deliveries, each with its receipt."""
        queue_id = self._buckets.queue_id
        leased = self.lease(buckets, count, timeout_ms, hint, ids=ids, token=token, reclaim=reclaim)
        return [delivery_of(queue_id, m, w) for m, w in leased]

    def lease(
        self,
        buckets: Sequence[int],
        count: int,
        timeout_ms: int,
        hint: int,
        *,
        ids: tuple[int, int] | None = None,
        token: int | None = None,
        reclaim: bool = False,
    ) -> list[Leased]:
        """A receive in buckets the caller has to itself (a Spark partition): plain leases.

        Two round trips, three when a message was delivered before: the scan
        reads payloads at once (the caller takes nearly all it finds); the
        leases are plain writes sharing one token (fresh, or the replayable
        step's own), so each bucket's go in one statement; and a read-back of
        the leases alone (no payloads), only of messages whose new lease counts
        a second delivery or more (``deliveries.still_held``), checks that each
        was not acked by its late consumer between the scan and the lease
        write. A message taken back from this part's dead attempt keeps that
        attempt's count: at one, only that attempt ever held it.

        Args:
            buckets: The buckets to read, in order.
            count: Most messages to return.
            timeout_ms: The visibility timeout of the leases.
            hint: K, the order hint.
            ids: Only this id slice ``ids[0] <= id < ids[1]`` of the one bucket
                (a step that split a busy bucket among several tasks).
            token: The lease token to write (a replayable step part's, see
                ``steps.step_lease``); default a fresh one.
            reclaim: First take back the unacked messages already holding
                ``token``: an earlier attempt of the same step part leased them
                and died before recording them, so nobody else can see them
                until their lease runs out.

        Returns:
            Each message won with the lease written, in id order, no receipt:
            a caller that hands out rows (the Spark source) skips encoding one.
        """
        now = now_ms()
        token = token or new_lease()
        mine = self._held_by(buckets, token, ids) if reclaim else []
        taken = {(m.bucket, m.id) for m in mine}
        want = max(count - len(mine), 0)
        if not want:
            found = []
        elif ids is None:
            found = self._visible_in(buckets, want * hint, now)
        else:
            (bucket,) = buckets
            # The scan starts at the slice's first id and reads in id order, so rows
            # past the slice come only after every visible one inside it.
            scanned = self._buckets.scan_visible(bucket, now, want * hint, after=ids[0] - 1)
            found = [m for m in scanned if m.id < ids[1]]
        found = [m for m in found if (m.bucket, m.id) not in taken]
        return self._lease_found(found, mine, want, timeout_ms, hint, now, token)

    def lease_columns(
        self,
        buckets: Sequence[int],
        count: int,
        timeout_ms: int,
        hint: int,
        *,
        token: int,
        reclaim: bool = False,
    ) -> LeasedColumns:
        """``lease`` of whole buckets, as columns: first deliveries cost no object each.

        When the scan finds only messages never delivered, no more than
        ``count`` (nothing to pick among, none past the delivery limit, none
        whose late consumer could ack it), their rows become the columns and
        the leases are written straight from them: the same leases, journal
        and rows as ``lease``, without a ``StoredMessage`` and a
        ``LeaseWrite`` per message (outside Spark, a part of 5,000 took 90 ms
        instead of 115). Otherwise, and with ``reclaim`` or traced scans,
        this is ``lease``.
        """
        if reclaim or self._buckets.tracing or not count:
            leased = self.lease(buckets, count, timeout_ms, hint, token=token, reclaim=reclaim)
            return LeasedColumns.of(leased)
        now = now_ms()
        limit = min(count * hint, self._buckets.bucket_size)
        rows = [
            (bucket, row)
            for bucket, row in self._buckets.scan_visible_rows_many(buckets, now, limit)
            if live_row(row)
        ][: count * hint]
        if len(rows) > count or any(row[Col.DELIVERY_COUNT] for _, row in rows):
            found = [m for bucket, row in rows if (m := stored_message(row, bucket)) is not None]
            leased = self._lease_found(found, [], count, timeout_ms, hint, now, token)
            return LeasedColumns.of(leased)
        fresh = sorted(
            ((b, row) for b, row in rows if row[Col.EXPIRES_AT] > now), key=lambda br: br[1][Col.ID]
        )
        visible_at = now + timeout_ms
        self._buckets.write_lease_groups(
            by_bucket_and_ttl(
                ((b, row[Col.ID], row[Col.EXPIRES_AT]) for b, row in fresh),
                now,
                (token, visible_at, 1),
                BATCH_ROWS,
            )
        )
        n = len(fresh)
        return LeasedColumns(
            ids=[row[Col.ID] for _, row in fresh],
            buckets=[b for b, _ in fresh],
            payloads=[row[Col.PAYLOAD] for _, row in fresh],
            headers=[row[Col.HEADERS] or None for _, row in fresh],
            enqueued_at=[row[Col.ENQUEUED_AT] or 0 for _, row in fresh],
            delivery_counts=[1] * n,
            keys=[row[Col.KEY] for _, row in fresh],
            leases=[token] * n,
            expires_at=[row[Col.EXPIRES_AT] for _, row in fresh],
        )

    def _lease_found(
        self,
        found: list[StoredMessage],
        mine: list[StoredMessage],
        want: int,
        timeout_ms: int,
        hint: int,
        now: int,
        token: int,
    ) -> list[Leased]:
        """``lease`` from its scan on: pick, dead-letter, lease, read back redeliveries."""
        picked = pick_oldest(found, want, hint, self._claims.rng)
        fresh = [m for m in self._past_limit(picked, now) if m.expires_at > now]
        leased = [(m, fresh_lease(m, timeout_ms, now, token)) for m in fresh]
        # Taken back: the dead attempt counted their delivery already.
        leased += [
            (m, LeaseWrite(m.bucket, m.id, token, now + timeout_ms, m.delivery_count, m.expires_at))
            for m in mine
        ]
        writes = [w for _, w in leased]
        self._buckets.write_leases_shared(writes, now)
        held = still_held(self._buckets, writes)
        return sorted(
            (mw for mw, ok in zip(leased, held, strict=True) if ok), key=lambda mw: mw[1].id
        )

    def _held_by(
        self, buckets: Sequence[int], token: int, ids: tuple[int, int] | None
    ) -> list[StoredMessage]:
        """The unacked messages of ``buckets`` (or of the slice ``ids``) leased under ``token``."""
        return [
            m
            for bucket in buckets
            for m in self._buckets.leased_under(bucket, token)
            if ids is None or ids[0] <= m.id < ids[1]
        ]

    def _visible_in(self, buckets: Sequence[int], want: int, now: int) -> list[StoredMessage]:
        """Up to ``want`` visible messages (payloads too) of ``buckets``, in their order."""
        if len(buckets) > 1 and not self._buckets.tracing:
            # Several buckets (a Spark partition over a run of them): scanned at once,
            # each up to a bucket's worth, rather than one round trip after another.
            limit = min(want, self._buckets.bucket_size)
            return self._buckets.scan_visible_many(buckets, now, limit)[:want]
        found: list[StoredMessage] = []
        for bucket in buckets:
            if len(found) >= want:
                break
            found.extend(self._buckets.scan_visible(bucket, now, want - len(found)))
        return found

    def visible_buckets(
        self, max_buckets: int, below: int | None, leased_here: Collection[int] = ()
    ) -> list[int]:
        """Live buckets holding at least one visible message, oldest first.

        The buckets not known idle are probed ``max_buckets`` (at least
        ``PROBE_WINDOW``) at a time, each window's probes at once: a drained
        stretch of buckets not dropped yet costs a round trip per window, not
        one per bucket (the Spark source asks on every trigger).
        ``leased_here``: buckets the caller's own steps in flight hold leases
        in. They are probed last, only when the others hold fewer than
        ``max_buckets`` with a visible message: a step usually leased all a
        bucket held, and the probe of a bucket without a visible message reads
        the whole partition (10 of them cost a draining source 50-200 ms a
        trigger). Found without a visible message, they are skipped for a
        while without a second read (``Bounds.note_idle_many``). The queue's
        maintenance runs on a thread of its own (``Maintenance.maybe_in_background``).
        """
        self._maintenance.maybe_in_background()
        now = now_ms()
        self._bounds.refresh_tail()
        tail = self._bounds.tail if below is None else min(self._bounds.tail, below)
        if tail <= 0:
            return []
        live = range(self._bounds.head, self._buckets.bucket_of(tail - 1) + 1)
        held = set(leased_here)
        candidates = [b for b in live if not self._bounds.skipped(b, now)]
        found = self._probe([b for b in candidates if b not in held], max_buckets, now, leased_here)
        if len(found) < max_buckets:
            found += self._probe(
                [b for b in candidates if b in held], max_buckets - len(found), now, leased_here
            )
        return sorted(found)[:max_buckets]

    def _probe(
        self, candidates: Sequence[int], wanted: int, now: int, leased_here: Collection[int]
    ) -> list[int]:
        """The ``candidates`` with a visible message, a window at a time until ``wanted`` are found.

        Those found without one are noted idle.
        """
        found: list[int] = []
        window = max(wanted, PROBE_WINDOW)
        for start in range(0, len(candidates), window):
            probed = candidates[start : start + window]
            visible = self._buckets.probe_visible(probed, now)
            found += [b for b, v in zip(probed, visible, strict=True) if v]
            self._bounds.note_idle_many(
                [b for b, v in zip(probed, visible, strict=True) if not v],
                now,
                leased_here=leased_here,
            )
            if len(found) >= wanted:
                break
        return found

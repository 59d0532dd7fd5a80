"""The queue's promises as a reference model: what each operation may return.

``PromiseModel`` is plain Python and knows nothing of the engine. It tracks
every *copy* of every message a test sent: a copy is one row of one queue
(``(queue, id)``), and a message may have several over its life (its first
send, its move to the dead-letter queue, its redrive back). Per copy it keeps
the payload, whether it is still in the queue (or acked, purged, moved), how
often it was delivered, which receipt currently names its lease and the
window in which its ``visible_at`` lies. Per handle (client and queue) it keeps
the leases that handle wrote, which decide whether an ack may take the
own-lease path (``engine/lease_memory.py``).

The state machine (``tests/test_promises_model.py``) calls the engine, then
hands each result to a ``check_*`` method here, which raises ``Violation``
when the result is not one the promises allow, and otherwise moves the model
to the state the result shows. What is checked, promise by promise
(DESIGN.md section 3, README "Guarantees"):

* **Nothing lost.** Every copy sent and not acked, purged or moved stays in
  the model as present; at teardown the test drains every queue and the model
  must end empty. A peek must show every copy surely visible.
* **No delivery under a live lease.** A receive, ending at ``e``, may return a
  copy only if its ``visible_at`` is at most ``e + MARGIN``: a lease (or a
  delay, or a ``change_visibility``) still running by more than the margin
  means a second consumer got it. The lease a receive wrote is read from the
  delivery (``Delivery.visible_at``), checked against the call's window.
* **Stale receipts change nothing.** An ack or a ``change_visibility`` whose
  receipt does not name the copy's current lease is refused, and the copy
  keeps its holder; a ``change_visibility`` is refused too once the lease ran
  out (the message is visible again), as SQS refuses a message not in flight.
  The one documented exception (``lease_memory.py``): a handle acking a
  receipt it leased itself, at least ``ACK_PLAIN_MARGIN`` before the lease's
  end, takes its memory's word for it.
* **A purge's documented window** (``tolerate_read_ahead``): rows a handle's
  receive read ahead (kept ``PREFETCH_HOLD_MS``) are leased by its next
  receive without a second look, so a message another client purged in that
  second may still be delivered once, as SQS's PurgeQueue lets messages be
  received for up to 60 s (README, Guarantees; the xfail test in
  ``tests/test_promises_model.py``). Only that sequence is let through, and
  each time it is noted in ``tolerated``.
* **Dead letters move at most once**, only past ``max_deliveries``, and a copy
  is never delivered at or past the limit. Moves and redrives are seen by
  peeking the queue they go to right after the operation that may move.
* **Counts** (``Queue.stats()``, exact with ``exact=True`` or up to
  ``COUNT_BUDGET`` live buckets): ``visible``, ``in_flight`` and ``delayed`` each
  lie between what surely and what possibly is so at the call's start and end.
  Above the budget the documented approximation makes no bound (an uncounted
  bucket counts all its ids as visible: known defect 11 over-reports after a
  drain), so only ``exact=True`` is held to the model there.

Time is wall-clock seconds (``time.time()``), the clock the engine writes
``visible_at`` with on this host.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from spark_queue.defaults import ACK_PLAIN_MARGIN, COUNT_BUDGET
from spark_queue.engine.dead_letters import (
    HEADER_DELIVERIES,
    HEADER_ORIGINAL_ID,
    HEADER_REJECT_REASON,
    HEADER_SOURCE,
)
from spark_queue.engine.receiving import PREFETCH_HOLD_MS
from spark_queue.engine.redrive import HEADER_REDRIVES, RedriveResult
from spark_queue.message import Delivery, Message, QueueStats, Receipt

#: Seconds of clock granularity and scheduling allowed around a lease's end: a receive
#: returning a copy whose lease runs more than this past the receive's end is a violation.
MARGIN = 0.2
#: Seconds of rounding allowed where the engine's time is taken inside the call (ms storage).
EPS = 0.005
#: Seconds of doubt around the own-lease deadline (monotonic vs wall clock, ms rounding).
OWN_SLACK = 0.1
#: Seconds a handle may lease rows it read ahead (``receiving.PREFETCH_HOLD_MS``), plus slack.
READ_AHEAD_HOLD = PREFETCH_HOLD_MS / 1000 + 0.2
#: The reason the model's rejects give.
REJECT_REASON = "model"

PRESENT = "present"
ACKED = "acked"
PURGED = "purged"
MOVED = "moved to the dead-letter queue"
REDRIVEN = "redriven"


class Violation(AssertionError):
    """A result that no promise allows."""


@dataclass
class Copy:
    """One row of one queue holding a message the test sent."""

    queue: str
    id: int | None  # None while a send_async has not resolved
    payload: bytes
    headers: dict[str, str]
    visible_lo: float  # visible_at lies in [visible_lo, visible_hi]
    visible_hi: float
    deliveries: int = 0
    receipt: str | None = None  # the receipt naming the current lease
    state: str = PRESENT
    may_repeat: bool = False  # a send slow enough for the delayed-write repair to re-send it
    moved_to: int | None = None  # the dead-letter copy's id, once moved
    changed: tuple[int, float] | None = None  # (client, time) of the change_visibility holding it
    purged: tuple[int, float] | None = None  # (client, time) of the purge that removed it

    def name(self) -> str:
        return f"{self.queue}#{self.id} ({self.payload.decode()!r})"


@dataclass(frozen=True)
class Issued:
    """A receipt the test holds: which copy, which lease, through which client it came."""

    receipt: str
    queue: str
    id: int
    lease: int
    client: int

    def __repr__(self) -> str:  # short, for Hypothesis's printed steps
        return f"<receipt {self.queue}#{self.id} lease {self.lease % 10000:04d} c{self.client}>"


@dataclass
class Change:
    """A setting changed: the value before and after, and when the change was made."""

    start: float
    end: float
    old: Any
    new: Any


@dataclass
class PromiseModel:
    """Every copy the test sent, and what each operation on them may return.

    Args:
        settings: Initial changeable settings per queue (``visibility_timeout``,
            ``max_deliveries``).
        refresh: Seconds a handle may keep using settings changed elsewhere
            (``SETTINGS_REFRESH`` plus slack).
        seal_delay: The queues' seal delay: a send that took half of it may be
            repaired, so a second copy of its message may show up.
    """

    settings: dict[str, dict[str, Any]]
    refresh: float
    seal_delay: float
    copies: dict[tuple[str, int], Copy] = field(default_factory=dict)
    pending: dict[bytes, Copy] = field(default_factory=dict)  # send_async, id not known yet
    history: dict[tuple[str, str], list[Change]] = field(default_factory=dict)
    own: dict[tuple[int, str], dict[int, tuple[int, float]]] = field(default_factory=dict)
    dead_letters: dict[tuple[str, int], int] = field(default_factory=dict)  # (source, id) -> copy
    broken: bool = False  # a violation was raised: the model no longer knows the state
    tolerate_read_ahead: bool = True  # READ_AHEAD_DEFECT allowed (test_promises_model.py)
    tolerated: list[str] = field(default_factory=list)  # what it let through
    last_receive: dict[tuple[int, str], float] = field(default_factory=dict)  # start times

    def violation(self, message: str) -> Violation:
        """The violation to raise; from now on the model's state is not to be trusted."""
        self.broken = True
        return Violation(message)

    # -- settings ---------------------------------------------------------------------

    def changed(self, queue: str, setting: str, new: Any, start: float, end: float) -> None:
        """``update_queue`` returned: handles of other clients may keep the old value a while."""
        old = self.settings[queue][setting]
        self.history.setdefault((queue, setting), []).append(Change(start, end, old, new))
        self.settings[queue][setting] = new

    def possible(self, queue: str, setting: str, start: float, end: float) -> set[Any]:
        """Values of ``setting`` an operation of ``queue`` running in ``[start, end]`` may use."""
        values = {self.settings[queue][setting]}
        for change in self.history.get((queue, setting), []):
            if change.end + self.refresh >= start:
                values |= {change.old, change.new}
        return values

    # -- sends ---------------------------------------------------------------------------

    def sent(
        self,
        queue: str,
        payloads: Sequence[bytes],
        headers: Sequence[dict[str, str]],
        delays: Sequence[float],
        ids: Sequence[int],
        start: float,
        end: float,
    ) -> None:
        """A send or send_batch returned these ids: each is a new, present copy."""
        if len(ids) != len(payloads) or len(set(ids)) != len(ids):
            raise self.violation(f"send to {queue}: ids {ids} for {len(payloads)} messages")
        slow = end - start >= self.seal_delay / 2
        for payload, hdrs, delay, id_ in zip(payloads, headers, delays, ids, strict=True):
            if (queue, id_) in self.copies:
                raise self.violation(f"send to {queue}: id {id_} handed out twice")
            self.copies[(queue, id_)] = Copy(
                queue, id_, payload, dict(hdrs), start + delay, end + delay, may_repeat=slow
            )

    def sending(self, queue: str, payload: bytes, headers: dict[str, str], start: float) -> None:
        """A send_async was accepted: its copy may land any time from now."""
        self.pending[payload] = Copy(queue, None, payload, dict(headers), start, math.inf)

    def resolved(self, payload: bytes, id_: int, end: float) -> None:
        """A send_async's future gave its id: the copy is present (seen by a receive, maybe)."""
        copy = self.pending.pop(payload, None)
        if copy is None:  # a receive met it first and gave it its id
            found = [c for c in self.copies.values() if c.payload == payload and c.id == id_]
            if not found:
                raise self.violation(
                    f"send_async of {payload!r}: future says id {id_}, not the id seen"
                )
            return
        if (copy.queue, id_) in self.copies:
            raise self.violation(f"send_async to {copy.queue}: id {id_} handed out twice")
        copy.id, copy.visible_hi = id_, min(copy.visible_hi, end)
        copy.may_repeat = end - copy.visible_lo >= self.seal_delay / 2
        self.copies[(copy.queue, id_)] = copy

    def has_pending(self, queue: str | None = None) -> bool:
        return any(queue is None or c.queue == queue for c in self.pending.values())

    # -- receive -------------------------------------------------------------------------

    def check_receive(
        self,
        client: int,
        queue: str,
        deliveries: Sequence[Delivery],
        timeout: float | None,
        start: float,
        end: float,
    ) -> tuple[list[Issued], list[Copy]]:
        """Check a receive's deliveries; return their receipts and the copies it may have moved.

        Args:
            client: The receiving client's number.
            queue: The queue received from.
            deliveries: What the receive returned.
            timeout: The visibility timeout passed to the receive (None: the queue's).
            start: Time before the call.
            end: Time after it returned.
        """
        timeouts = (
            {timeout}
            if timeout is not None
            else self.possible(queue, "visibility_timeout", start, end)
        )
        limits = {x for x in self.possible(queue, "max_deliveries", start, end) if x is not None}
        seen: set[int] = set()
        issued: list[Issued] = []
        for d in deliveries:
            if d.id in seen:
                raise self.violation(
                    f"receive from {queue}: message {d.id} returned twice in one call"
                )
            seen.add(d.id)
            copy = self._copy_of(queue, d, end)
            known = self._read_ahead_defect(client, queue, copy)
            if copy.state != PRESENT and not (known and copy.state == PURGED):
                raise self.violation(f"receive from {queue}: returned {copy.name()}, {copy.state}")
            if copy.visible_lo > end + MARGIN and not known:
                what = "a live lease" if copy.deliveries else "its delay"
                raise self.violation(
                    f"receive from {queue} by client {client} ended at {end:.3f} and returned"
                    f" {copy.name()} under {what}: visible from {copy.visible_lo:.3f} at the"
                    f" earliest ({copy.visible_lo - end:.3f} s later)"
                )
            if d.delivery_count != copy.deliveries + 1:
                raise self.violation(
                    f"receive from {queue}: {copy.name()} has delivery_count {d.delivery_count},"
                    f" expected {copy.deliveries + 1}"
                )
            if limits and copy.deliveries >= max(limits):
                raise self.violation(
                    f"receive from {queue}: {copy.name()} delivered {d.delivery_count} times,"
                    f" past max_deliveries {sorted(limits)}: it should have moved"
                )
            self._check_content(copy, d)
            assert d.visible_at is not None
            visible_at = d.visible_at.timestamp()
            low, high = start + min(timeouts) - EPS, end + max(timeouts) + EPS
            if not low <= visible_at <= high:
                raise self.violation(
                    f"receive from {queue}: {copy.name()} leased until {visible_at:.3f}, not in"
                    f" [{low:.3f}, {high:.3f}] (timeouts {sorted(timeouts)})"
                )
            r = Receipt.decode(d.receipt)
            if r.id != d.id or r.bucket != d.bucket:
                raise self.violation(f"receive from {queue}: receipt {r} names another message")
            copy.deliveries += 1
            copy.receipt = d.receipt
            copy.visible_lo = copy.visible_hi = visible_at
            copy.changed = None
            self.own.setdefault((client, queue), {})[d.id] = (r.lease, visible_at)
            issued.append(Issued(d.receipt, queue, d.id, r.lease, client))
        self.last_receive[(client, queue)] = start
        movable = []
        if limits:
            movable = [
                c
                for c in self.present(queue)
                if c.id not in seen and c.deliveries >= min(limits) and c.visible_lo <= end + EPS
            ]
        return issued, movable

    def _read_ahead_defect(self, client: int, queue: str, copy: Copy) -> bool:
        """Whether the known read-ahead defect explains a delivery the promises forbid.

        ``client``'s previous receive of ``queue`` may have read ``copy`` ahead, and
        another client then purged it or changed its visibility, within the hold.
        """
        event = copy.purged if copy.state == PURGED else None
        earlier = self.last_receive.get((client, queue))
        if not self.tolerate_read_ahead or event is None or earlier is None:
            return False
        if event[0] == client or not earlier <= event[1] <= earlier + READ_AHEAD_HOLD:
            return False
        self.tolerated.append(f"{copy.name()} {copy.state}, received by client {client}")
        return True

    def _copy_of(self, queue: str, m: Message, end: float) -> Copy:
        """The model's copy of a message a receive or peek returned (a send_async's, maybe)."""
        copy = self.copies.get((queue, m.id))
        if copy is not None:
            return copy
        pending = self.pending.get(m.payload)
        if pending is not None and pending.queue == queue:
            del self.pending[m.payload]
            pending.id, pending.visible_hi = m.id, min(pending.visible_hi, end)
            self.copies[(queue, m.id)] = pending
            return pending
        twins = [c for c in self.copies.values() if c.payload == m.payload and c.queue == queue]
        if twins and all(c.may_repeat for c in twins):
            # The delayed-write repair sent it again: at-least-once allows the duplicate.
            twin = twins[0]
            copy = Copy(queue, m.id, m.payload, dict(twin.headers), twin.visible_lo, end)
            self.copies[(queue, m.id)] = copy
            return copy
        raise self.violation(
            f"{queue} returned message {m.id} ({m.payload!r}, headers {dict(m.headers)}),"
            " which no send, dead-letter move or redrive explains"
        )

    def _check_content(self, copy: Copy, m: Message) -> None:
        if m.payload != copy.payload or dict(m.headers) != copy.headers:
            raise self.violation(
                f"{copy.name()}: came back as {m.payload!r} with headers {dict(m.headers)},"
                f" sent as {copy.payload!r} with {copy.headers}"
            )

    # -- dead letters and redrive --------------------------------------------------------

    def check_moves(
        self, source: str, dlq: str, movable: Sequence[Copy], peeked: Sequence[Message], end: float
    ) -> list[Copy]:
        """A peek of the dead-letter queue right after a receive of ``source`` that may move.

        Every new dead letter must be one of ``movable``, moved once; the rest of
        ``movable`` stayed. Returns the copies that moved.
        """
        candidates = {c.id: c for c in movable}
        moved: list[Copy] = []
        for m in peeked:
            if (dlq, m.id) in self.copies:
                continue
            original = m.headers.get(HEADER_ORIGINAL_ID)
            if m.headers.get(HEADER_SOURCE) != source or original is None:
                self._copy_of(dlq, m, end)  # an unexplained message: raises
                continue
            key = (source, int(original))
            if key in self.dead_letters:
                raise self.violation(
                    f"{source}#{original} moved to {dlq} twice: as {dlq}#{self.dead_letters[key]}"
                    f" and as {dlq}#{m.id}"
                )
            copy = candidates.get(int(original))
            if copy is None:
                known = self.copies.get(key)
                raise self.violation(
                    f"{dlq}#{m.id} is a dead letter of {source}#{original}, which could not move:"
                    f" {known.name() + ' ' + known.state if known else 'unknown'}"
                    f" ({known.deliveries if known else '?'} deliveries)"
                )
            expected = {
                **copy.headers,
                HEADER_SOURCE: source,
                HEADER_DELIVERIES: str(copy.deliveries),
                HEADER_ORIGINAL_ID: original,
            }
            if m.payload != copy.payload or dict(m.headers) != expected:
                raise self.violation(
                    f"{dlq}#{m.id}: dead letter of {copy.name()} came as {m.payload!r} with"
                    f" headers {dict(m.headers)}, expected {expected}"
                )
            copy.state, copy.moved_to = MOVED, m.id
            self.dead_letters[key] = m.id
            self.copies[(dlq, m.id)] = Copy(dlq, m.id, m.payload, expected, 0.0, end)
            moved.append(copy)
        return moved

    def check_redrive(
        self,
        dlq: str,
        target: str,
        result: RedriveResult,
        movable: Sequence[Copy],
        peeked: Sequence[Message],
        end: float,
    ) -> None:
        """A peek of the source queue right after a redrive: each moved dead letter came once."""
        if result.left:
            raise self.violation(
                f"redrive of {dlq} left dead letters behind: {result.left_messages}"
            )
        by_payload = {c.payload: c for c in movable}
        back = 0
        for m in peeked:
            if (target, m.id) in self.copies:
                continue
            copy = by_payload.get(m.payload)
            if copy is None or copy.state != PRESENT:
                self._copy_of(target, m, end)  # a redriven copy of no movable dead letter: raises
                continue
            expected = {k: v for k, v in copy.headers.items() if k not in _DEAD_LETTER_HEADERS}
            expected[HEADER_REDRIVES] = str(int(copy.headers.get(HEADER_REDRIVES, "0")) + 1)
            if dict(m.headers) != expected:
                raise self.violation(
                    f"{target}#{m.id}: redriven {copy.name()} has headers {dict(m.headers)},"
                    f" expected {expected}"
                )
            copy.state = REDRIVEN
            self.copies[(target, m.id)] = Copy(target, m.id, m.payload, expected, 0.0, end)
            back += 1
        if back != result.moved:
            raise self.violation(
                f"redrive of {dlq}: reported {result.moved} moved, {back} came back to {target}"
            )

    # -- acks and visibility ---------------------------------------------------------------

    def _own_path(self, client: int, r: Issued, start: float, end: float) -> tuple[bool, bool]:
        """(possible, sure): whether ``client``'s ack of ``r`` may / must skip the store's check."""
        held = self.own.get((client, r.queue), {}).get(r.id)
        if held is None or held[0] != r.lease:
            return False, False
        deadline = held[1]
        possible = deadline - start >= ACK_PLAIN_MARGIN - OWN_SLACK
        sure = deadline - end >= ACK_PLAIN_MARGIN + OWN_SLACK
        return possible, sure

    def check_ack(self, client: int, r: Issued, acked: bool, start: float, end: float) -> None:
        """An ack of ``r`` through ``client`` acked (or reported stale): was that allowed?"""
        copy = self.copies[(r.queue, r.id)]
        current = copy.state == PRESENT and copy.receipt == r.receipt
        own_possible, _ = self._own_path(client, r, start, end)
        mine = self.own.get((client, r.queue), {})
        if r.id in mine and mine[r.id][0] == r.lease:
            del mine[r.id]  # taken by this ack, or past its margin for good
        if current:
            if not acked:
                raise self.violation(
                    f"ack through client {client} of the current {r!r} for {copy.name()}:"
                    " refused as stale"
                )
            copy.state = ACKED
            return
        if acked and not own_possible:
            raise self.violation(
                f"ack through client {client} of stale {r!r}: accepted, but {copy.name()} is"
                f" {copy.state}" + (" under another lease" if copy.state == PRESENT else "")
            )
        if acked and copy.state == PRESENT:
            copy.state = ACKED  # the documented own-lease exception: its holder said it is done

    def check_change_visibility(
        self,
        client: int,
        r: Issued,
        seconds: float,
        new_receipt: str | None,
        start: float,
        end: float,
    ) -> Issued | None:
        """A change_visibility of ``r`` returned ``new_receipt`` (None: StaleReceipt)."""
        copy = self.copies[(r.queue, r.id)]
        current = copy.state == PRESENT and copy.receipt == r.receipt
        # Only while the lease holds (as SQS's MessageNotInflight): a lease that
        # surely ran out before the call is refused, one that surely holds past it
        # is not, and one that ends during the call may go either way.
        if current and new_receipt is None and copy.visible_hi <= end + MARGIN:
            return None
        if current and new_receipt is not None and copy.visible_hi < start - MARGIN:
            raise self.violation(
                f"change_visibility through client {client} of {r!r}: accepted, but its lease"
                f" ran out at {copy.visible_hi:.3f}, before the call ({start:.3f})"
            )
        if not current:
            if new_receipt is not None:
                raise self.violation(
                    f"change_visibility through client {client} of stale {r!r}: accepted, but"
                    f" {copy.name()} is {copy.state}"
                    + (" under another lease" if copy.state == PRESENT else "")
                )
            return None
        if new_receipt is None:
            raise self.violation(
                f"change_visibility through client {client} of the current {r!r} for"
                f" {copy.name()}: refused as stale"
            )
        new = Receipt.decode(new_receipt)
        copy.receipt = new_receipt
        copy.changed = (client, start)
        copy.visible_lo, copy.visible_hi = start + seconds, end + seconds
        self.own.get((client, r.queue), {}).pop(r.id, None)
        return Issued(new_receipt, r.queue, r.id, new.lease, client)

    def check_reject(
        self,
        client: int,
        r: Issued,
        moved: int | None,
        dlq: str,
        peeked: Sequence[Message],
        start: float,
        end: float,
    ) -> None:
        """A reject of ``r`` through ``client`` returned ``moved`` (None: StaleReceipt).

        ``peeked``: the dead-letter queue right after.

        As a visibility change: only while the lease holds. A moved message is in
        the dead-letter queue once, with the dead-letter headers and the reason.
        """
        copy = self.copies[(r.queue, r.id)]
        current = copy.state == PRESENT and copy.receipt == r.receipt
        if moved is None:
            if current and copy.visible_hi > end + MARGIN:
                raise self.violation(f"reject of the current {r!r} for {copy.name()}: refused")
            return
        if not current or copy.visible_hi < start - MARGIN:
            raise self.violation(
                f"reject of {r!r}: moved {copy.name()} as {dlq}#{moved}, but it was"
                f" {copy.state}" + (" under another lease" if current is False else " expired")
            )
        key = (r.queue, r.id)
        if key in self.dead_letters:
            raise self.violation(f"{copy.name()} moved to {dlq} twice")
        expected = {
            **copy.headers,
            HEADER_SOURCE: r.queue,
            HEADER_DELIVERIES: str(copy.deliveries),
            HEADER_ORIGINAL_ID: str(r.id),
            HEADER_REJECT_REASON: REJECT_REASON,
        }
        found = [m for m in peeked if m.id == moved]
        if len(found) != 1 or found[0].payload != copy.payload or found[0].headers != expected:
            raise self.violation(
                f"reject of {copy.name()}: {dlq}#{moved} is {found or 'not there'},"
                f" expected {copy.payload!r} with headers {expected}"
            )
        copy.state, copy.moved_to = MOVED, moved
        self.dead_letters[key] = moved
        self.copies[(dlq, moved)] = Copy(dlq, moved, copy.payload, expected, 0.0, end)
        self.own.get((client, r.queue), {}).pop(r.id, None)  # as its visibility change does

    # -- purge, peek, stats --------------------------------------------------------------

    def check_purge(self, client: int, queue: str, removed: int, start: float) -> None:
        """A purge of ``queue`` said it removed ``removed`` messages: every present copy goes."""
        present = self.present(queue)
        slack = sum(c.may_repeat for c in present)
        if not len(present) <= removed <= len(present) + slack:
            raise self.violation(f"purge of {queue}: removed {removed}, {len(present)} were there")
        for c in present:
            c.state, c.purged = PURGED, (client, start)
        self.own.pop((client, queue), None)

    def check_peek(self, queue: str, peeked: Sequence[Message], start: float, end: float) -> None:
        """A peek shows visible copies only, and every copy surely visible (max was ample)."""
        shown = set()
        for m in peeked:
            copy = self._copy_of(queue, m, end)
            shown.add(m.id)
            if copy.state != PRESENT or copy.visible_lo > end + MARGIN:
                raise self.violation(
                    f"peek of {queue}: shows {copy.name()}, {copy.state}, visible from"
                    f" {copy.visible_lo:.3f} (peek ended {end:.3f})"
                )
            self._check_content(copy, m)
        missing = [
            c.name()
            for c in self.present(queue)
            if c.visible_hi < start - EPS and c.id not in shown
        ]
        if missing:
            raise self.violation(f"peek of {queue}: surely visible copies missing: {missing}")

    def check_stats(
        self, queue: str, stats: QueueStats, exact: bool, start: float, end: float
    ) -> None:
        """Counts within what surely and possibly holds during the call, where they are exact.

        They are exact with ``exact`` or at most ``COUNT_BUDGET`` live buckets
        (docs/operations.md, "Counts"); above, a bucket's count may be as old as its
        last scan and an uncounted bucket is estimated as all its ids visible, so
        only the number of live buckets is checked.
        """
        if stats.buckets < 0 or stats.estimated_buckets > stats.buckets:
            raise self.violation(f"stats of {queue}: {stats}")
        if not exact and stats.buckets > COUNT_BUDGET:
            return
        if stats.estimated_buckets:
            raise self.violation(f"stats of {queue}: estimated, though exact: {stats}")
        present = self.present(queue)
        pending = [c for c in self.pending.values() if c.queue == queue]
        slack = len(pending) + sum(c.may_repeat for c in present)
        later = [c for c in present if c.visible_hi > start - EPS]  # maybe not visible yet
        surely_later = [c for c in present if c.visible_lo > end + EPS]
        bounds = {
            "visible": (len(present) - len(later), len(present) - len(surely_later) + slack),
            "in_flight": (
                sum(c.deliveries > 0 for c in surely_later),
                sum(c.deliveries > 0 for c in later) + slack,
            ),
            "delayed": (
                sum(c.deliveries == 0 for c in surely_later),
                sum(c.deliveries == 0 for c in later) + slack,
            ),
            "total": (len(present), len(present) + slack),
        }
        for what, (low, high) in bounds.items():
            value = getattr(stats, what)
            if not low <= value <= high:
                raise self.violation(
                    f"stats of {queue}: {what} = {value}, expected {low} to {high} ({stats};"
                    f" present: {[c.name() for c in present]})"
                )

    # -- what is left ----------------------------------------------------------------------

    def present(self, queue: str | None = None) -> list[Copy]:
        """The copies still in ``queue`` (or in any), known ids only."""
        return [
            c
            for c in self.copies.values()
            if c.state == PRESENT and (queue is None or c.queue == queue)
        ]

    def next_visible(self, now: float) -> float | None:
        """When the next present copy may become visible, if one is not yet."""
        ends = [c.visible_hi for c in self.present() if c.visible_hi > now]
        return min(ends) if ends else None

    def issued_current(self, queues: Iterable[str]) -> list[Copy]:
        """Present copies of ``queues`` with a receipt (their current lease is known)."""
        return [c for q in queues for c in self.present(q) if c.receipt is not None]


_DEAD_LETTER_HEADERS = frozenset(
    (HEADER_SOURCE, HEADER_DELIVERIES, HEADER_ORIGINAL_ID, HEADER_REJECT_REASON)
)

"""The history checker: a run's sends, deliveries and acks judged against the queue's promises.

Jepsen's total-queue checker, for a queue with visibility timeouts and receipts.
Producer and consumer processes log every operation with the wall-clock times
it began and ended (one host, one clock); afterwards :func:`check_history`
reads the whole history and reports:

* **lost**: a send that returned (the producer got an id) whose message no ack
  removed: never delivered, or delivered and never acked (a message leaves the
  queue only by an ack; the run ends with a drain, so one left unacked would
  have come back);
* **unexpected**: a delivery of a message no producer ever tried to send, or of a
  corrupt payload;
* **lease overlap**: two deliveries of one message id under different receipts,
  each returned before the other's lease ran out (its ``visible_at``): two
  consumers held the message at once;
* **delivered after ack**: a delivery that began after an ack of the same id
  succeeded;
* **stale ack**: an ack that succeeded with a receipt although it began after a
  later delivery of the same id (a redelivery under a new receipt) had begun.

Operations whose outcome is unknown (a send that raised, an ack cut short by a
kill) claim nothing: they are never counted as done, nor as proof of anything.
Duplicates are counted, not forbidden: a send written twice arrives under two
ids, a redelivery under the same id again.

Times are compared with a margin of :data:`MARGIN` seconds: ``visible_at`` is
kept to the millisecond and the processes read the clock a little before or
after the store does. Pure logic, no I/O but :func:`read_history`: see
tests/test_history.py.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds of slack in every comparison of times (clock granularity, ms-rounded visible_at).
MARGIN = 0.05


@dataclass(frozen=True, slots=True)
class SendOp:
    """One send attempt: ``ok`` when it returned the message's id, False when it raised."""

    process: str
    sender: int
    seq: int
    start: float
    end: float
    ok: bool
    id: int | None = None


@dataclass(frozen=True, slots=True)
class DeliveryOp:
    """One message handed out by a receive that began at ``start`` and returned at ``end``."""

    process: str
    sender: int
    seq: int
    id: int
    receipt: str
    start: float
    end: float
    visible_at: float


@dataclass(frozen=True, slots=True)
class AckOp:
    """The ack of one receipt: ``ok`` True (acked), False (stale), None (unknown).

    Unknown: the call raised, or its process died before logging its end (then
    ``end`` is its start).
    """

    process: str
    id: int
    receipt: str
    start: float
    end: float
    ok: bool | None


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken promise: which rule, and what happened, in words."""

    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.detail}"


@dataclass
class History:
    """Every operation of one run."""

    sends: list[SendOp] = field(default_factory=list)
    deliveries: list[DeliveryOp] = field(default_factory=list)
    acks: list[AckOp] = field(default_factory=list)

    def returned_sends(self) -> set[tuple[int, int]]:
        """``(sender, seq)`` of every send that returned an id."""
        return {(s.sender, s.seq) for s in self.sends if s.ok}

    def removed(self) -> set[tuple[int, int]]:
        """``(sender, seq)`` of every message an ack removed, or may have (its outcome unknown)."""
        receipts = {a.receipt for a in self.acks if a.ok is not False}
        return {(d.sender, d.seq) for d in self.deliveries if d.receipt in receipts}


@dataclass
class HistoryReport:
    """What :func:`check_history` found."""

    sent: int
    delivered: int
    deliveries: int
    #: deliveries of one id again, and extra ids of one send (written twice)
    redeliveries: int
    send_duplicates: int
    violations: list[Violation]
    #: acks begun after their lease ran out: accepted (nobody took the message
    #: meanwhile) and refused as stale
    late_acks_ok: int = 0
    late_acks_stale: int = 0

    @property
    def lost(self) -> list[Violation]:
        return [v for v in self.violations if v.rule == "lost"]

    def summary(self) -> str:
        """One line of counts."""
        return (
            f"{self.sent} sends returned, {self.delivered} of them delivered in"
            f" {self.deliveries} deliveries ({self.redeliveries} redeliveries,"
            f" {self.send_duplicates} sends written twice), {self.late_acks_ok} acks after"
            f" their lease accepted and {self.late_acks_stale} refused,"
            f" {len(self.violations)} violations"
        )

    def describe(self, limit: int = 40) -> str:
        """The summary, then each violation on a line of its own (at most ``limit``)."""
        lines = [self.summary()]
        lines += [f"  {v}" for v in self.violations[:limit]]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)


def check_history(history: History, margin: float = MARGIN) -> HistoryReport:
    """Judge a whole history against the five rules of the module docstring.

    Args:
        history: Every send, delivery and ack of the run, with their times.
        margin: Seconds of slack in each comparison of times.
    """
    violations: list[Violation] = []
    attempted = {(s.sender, s.seq) for s in history.sends}
    returned = history.returned_sends()
    delivered = {(d.sender, d.seq) for d in history.deliveries}
    for sender, seq in sorted(returned - history.removed()):
        sends = [s for s in history.sends if (s.sender, s.seq) == (sender, seq) and s.ok]
        times = sum(1 for d in history.deliveries if (d.sender, d.seq) == (sender, seq))
        fate = f"delivered {times} times, never acked" if times else "never delivered"
        violations.append(
            Violation("lost", f"send {sender}/{seq} returned id {sends[0].id}, {fate}")
        )
    for d in history.deliveries:
        if (d.sender, d.seq) not in attempted:
            what = "a corrupt payload" if d.sender < 0 else f"{d.sender}/{d.seq}, never sent"
            violations.append(
                Violation("unexpected", f"{d.process} received id {d.id}: {what} at {d.end:.3f}")
            )
    by_id: defaultdict[int, list[DeliveryOp]] = defaultdict(list)
    for d in history.deliveries:
        by_id[d.id].append(d)
    acks_by_id: defaultdict[int, list[AckOp]] = defaultdict(list)
    for a in history.acks:
        acks_by_id[a.id].append(a)
    for message_id in sorted(by_id):
        deliveries = sorted(by_id[message_id], key=lambda d: d.start)
        acks = acks_by_id.get(message_id, [])
        violations += _lease_overlaps(deliveries, acks, margin)
        violations += _deliveries_after_acks(deliveries, acks, margin)
        violations += _stale_acks(deliveries, acks, margin)
    ids_of: defaultdict[tuple[int, int], set[int]] = defaultdict(set)
    for d in history.deliveries:
        ids_of[(d.sender, d.seq)].add(d.id)
    send_duplicates = sum(len(ids) - 1 for ids in ids_of.values())
    own = {d.receipt: d for d in history.deliveries}
    late = [
        a.ok
        for a in history.acks
        if a.receipt in own and a.start > own[a.receipt].visible_at + margin
    ]
    return HistoryReport(
        sent=len(returned),
        delivered=len(returned & delivered),
        deliveries=len(history.deliveries),
        redeliveries=len(history.deliveries) - len(delivered) - send_duplicates,
        send_duplicates=send_duplicates,
        violations=violations,
        late_acks_ok=late.count(True),
        late_acks_stale=late.count(False),
    )


def _acked_before(acks: Sequence[AckOp], receipt: str, moment: float) -> bool:
    return any(a.ok and a.receipt == receipt and a.end <= moment for a in acks)


def _lease_overlaps(
    deliveries: Sequence[DeliveryOp], acks: Sequence[AckOp], margin: float
) -> list[Violation]:
    """Pairs of deliveries both returned while the other's lease still ran.

    A lease holds from the moment its receive returned (its write landed) until
    its ``visible_at``. When both receives had returned before either lease ran
    out, two consumers held the message at once, whichever wrote first. A lease
    ended by a successful ack before the other receive began is left to
    :func:`_deliveries_after_acks`.
    """
    found = []
    for i, a in enumerate(deliveries):
        for b in deliveries[i + 1 :]:
            if a.receipt == b.receipt or _acked_before(acks, a.receipt, b.start):
                continue
            both_held = max(a.end, b.end) + margin < min(a.visible_at, b.visible_at)
            if both_held:
                found.append(
                    Violation(
                        "lease overlap",
                        f"id {a.id} delivered to {a.process} at {a.end:.3f} (lease to"
                        f" {a.visible_at:.3f}) and to {b.process} at {b.end:.3f} (lease to"
                        f" {b.visible_at:.3f})",
                    )
                )
    return found


def _deliveries_after_acks(
    deliveries: Sequence[DeliveryOp], acks: Sequence[AckOp], margin: float
) -> list[Violation]:
    """Deliveries that began after an ack of the same id had succeeded."""
    found = []
    for ack in acks:
        if not ack.ok:
            continue
        for d in deliveries:
            if d.start > ack.end + margin:
                found.append(
                    Violation(
                        "delivered after ack",
                        f"id {d.id} acked by {ack.process} at {ack.end:.3f}, then delivered to"
                        f" {d.process} by a receive begun at {d.start:.3f}",
                    )
                )
    return found


def _stale_acks(
    deliveries: Sequence[DeliveryOp], acks: Sequence[AckOp], margin: float
) -> list[Violation]:
    """Acks that succeeded with a receipt whose message had been delivered again since.

    The later delivery began after the receipt's own receive and before the
    ack began: by then the receipt named an old delivery, and its ack must be
    refused (``StaleReceipt``). A later delivery whose read-back found the ack
    would not have returned the message, so one in the history means the ack
    landed over a live lease.
    """
    found = []
    first_of = {d.receipt: d for d in deliveries}
    for ack in acks:
        own = first_of.get(ack.receipt)
        if not ack.ok or own is None:
            continue
        for later in deliveries:
            redelivered = later.receipt != ack.receipt and later.start > own.start
            if redelivered and ack.start > later.start + margin:
                found.append(
                    Violation(
                        "stale ack",
                        f"id {ack.id} delivered to {own.process} at {own.end:.3f}, again to"
                        f" {later.process} by a receive begun at {later.start:.3f}; the first"
                        f" receipt's ack begun at {ack.start:.3f} succeeded",
                    )
                )
    return found


def history_lines(history_file: Path) -> Iterable[dict[str, Any]]:
    """The JSON records of one process's history file; a line cut by a SIGKILL is skipped."""
    for line in history_file.read_text().splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue  # the last line of a process killed mid-write


def read_history(folder: Path) -> History:
    """Every ``*.jsonl`` history file of ``folder`` as one :class:`History`.

    Records (one JSON object a line): ``{"op": "send", "process", "sender",
    "seq", "start", "end", "ok", "id"}``; ``{"op": "receive", "process",
    "start", "end", "deliveries": [{"sender", "seq", "id", "receipt",
    "visible_at"}]}``; ``{"op": "ack", "process", "start", "end", "acks":
    [{"id", "receipt", "ok"}]}``, after ``{"op": "ack-begin", "process",
    "start", "acks": [{"id", "receipt"}]}`` logged as the call began.
    """
    history = History()
    for path in sorted(folder.glob("*.jsonl")):
        begun: dict[str, dict[str, Any]] = {}  # by process: its ack call under way
        for r in history_lines(path):
            process, start = str(r["process"]), float(r["start"])
            end = float(r.get("end", start))
            if r["op"] == "ack-begin":
                begun[process] = r
            elif r["op"] == "send":
                history.sends.append(
                    SendOp(
                        process,
                        int(r["sender"]),
                        int(r["seq"]),
                        start,
                        end,
                        bool(r["ok"]),
                        None if r.get("id") is None else int(r["id"]),
                    )
                )
            elif r["op"] == "receive":
                for d in r["deliveries"]:
                    history.deliveries.append(
                        DeliveryOp(
                            process,
                            int(d["sender"]),
                            int(d["seq"]),
                            int(d["id"]),
                            str(d["receipt"]),
                            start,
                            end,
                            float(d["visible_at"]),
                        )
                    )
            elif r["op"] == "ack":
                begun.pop(process, None)
                for a in r["acks"]:
                    history.acks.append(
                        AckOp(process, int(a["id"]), str(a["receipt"]), start, end, a["ok"])
                    )
        for process, r in begun.items():  # killed mid-ack: it may have landed
            for a in r["acks"]:
                start = float(r["start"])
                history.acks.append(
                    AckOp(process, int(a["id"]), str(a["receipt"]), start, start, None)
                )
    return history

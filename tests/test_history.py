"""The history checker on hand-made histories: each rule passes a clean run, catches its break."""

from __future__ import annotations

import json
from pathlib import Path

from spark_queue.bench.history import (
    AckOp,
    DeliveryOp,
    History,
    SendOp,
    check_history,
    read_history,
)

VT = 1.5  # the visibility timeout of these histories, in seconds


def send(seq: int, at: float, *, ok: bool = True, sender: int = 1) -> SendOp:
    return SendOp("producer-0", sender, seq, at, at + 0.01, ok, 100 + seq if ok else None)


def delivery(
    seq: int, at: float, receipt: str, *, process: str = "consumer-0", message_id: int = 0
) -> DeliveryOp:
    """A delivery by a receive from ``at`` to ``at + 0.02``, leased for VT from its end."""
    end = at + 0.02
    return DeliveryOp(process, 1, seq, message_id or 100 + seq, receipt, at, end, end + VT)


def ack(
    seq: int, at: float, receipt: str, ok: bool | None = True, *, process: str = "consumer-0"
) -> AckOp:
    return AckOp(process, 100 + seq, receipt, at, at + 0.01, ok)


def rules(history: History) -> list[str]:
    return [v.rule for v in check_history(history).violations]


def test_a_clean_history_with_a_redelivery_after_the_lease_passes_and_counts_it() -> None:
    # Given a message received, not acked (its consumer was killed), received again
    # after its lease and acked; and a second message sent twice (a retried send)
    history = History(
        sends=[send(0, 0.0), send(1, 0.1, ok=False), send(1, 0.2)],
        deliveries=[
            delivery(0, 1.0, "r0"),
            delivery(0, 3.0, "r0b", process="consumer-1"),
            delivery(1, 1.0, "r1"),
            delivery(1, 1.1, "r1b", message_id=555),
        ],
        acks=[ack(0, 3.1, "r0b", process="consumer-1"), ack(1, 1.2, "r1")],
    )

    # When it is checked
    report = check_history(history)

    # Then nothing is broken and the duplicates are counted by kind
    assert report.violations == []
    assert (report.sent, report.delivered, report.deliveries) == (2, 2, 4)
    assert (report.redeliveries, report.send_duplicates) == (1, 1)


def test_a_returned_send_never_delivered_is_lost_but_a_failed_one_is_not() -> None:
    history = History(sends=[send(0, 0.0), send(1, 0.0, ok=False)])

    report = check_history(history)

    assert rules(history) == ["lost"]
    assert "send 1/0 returned id 100, never delivered" in report.describe()


def test_a_message_delivered_but_never_acked_is_lost_unless_an_ack_may_have_landed() -> None:
    # Given a message delivered twice whose acks were both refused as stale
    deliveries = [delivery(0, 1.0, "a"), delivery(0, 3.0, "b")]
    refused = [ack(0, 3.5, "a", ok=False), ack(0, 4.0, "b", ok=False)]
    history = History(sends=[send(0, 0.0)], deliveries=deliveries, acks=refused)

    # Then it never left the queue by an ack, and the drain did not get it back: lost
    assert rules(history) == ["lost"]
    assert "delivered 2 times, never acked" in check_history(history).describe()

    # but an ack whose outcome is unknown (it raised, or its process died) may have removed it
    unknown = History(sends=[send(0, 0.0)], deliveries=deliveries, acks=[ack(0, 4.0, "b", None)])
    assert rules(unknown) == []


def test_a_delivery_of_a_message_never_sent_is_unexpected() -> None:
    history = History(
        sends=[send(0, 0.0)],
        deliveries=[delivery(0, 1.0, "r0"), delivery(7, 1.0, "r7")],
        acks=[ack(0, 1.1, "r0"), ack(7, 1.1, "r7")],
    )

    assert rules(history) == ["unexpected"]


def test_a_second_delivery_while_the_first_lease_held_is_a_lease_overlap() -> None:
    # the second receive returns 1 s into the first 1.5 s lease
    history = History(
        sends=[send(0, 0.0)],
        deliveries=[delivery(0, 1.0, "a"), delivery(0, 2.0, "b", process="consumer-1")],
        acks=[ack(0, 2.1, "b", process="consumer-1")],
    )

    assert rules(history) == ["lease overlap"]


def test_a_second_delivery_begun_after_the_lease_ran_out_is_no_overlap() -> None:
    history = History(
        sends=[send(0, 0.0)],
        deliveries=[delivery(0, 1.0, "a"), delivery(0, 1.0 + 0.02 + VT, "b")],
        acks=[ack(0, 3.0, "b")],
    )

    assert rules(history) == []


def test_a_delivery_begun_after_a_successful_ack_is_caught() -> None:
    history = History(
        sends=[send(0, 0.0)],
        deliveries=[delivery(0, 1.0, "a"), delivery(0, 1.5, "b", process="consumer-1")],
        acks=[ack(0, 1.1, "a")],
    )

    assert rules(history) == ["delivered after ack"]


def test_a_delivery_after_a_stale_or_unknown_ack_is_fine() -> None:
    history = History(
        sends=[send(0, 0.0)],
        deliveries=[delivery(0, 1.0, "a"), delivery(0, 3.0, "b", process="consumer-1")],
        acks=[ack(0, 1.1, "a", ok=None), ack(0, 3.5, "a", ok=False), ack(0, 3.6, "b")],
    )

    assert rules(history) == []


def test_an_old_receipts_ack_begun_after_a_redelivery_must_not_succeed() -> None:
    # Given a consumer paused past its lease while another received the message
    deliveries = [delivery(0, 1.0, "a"), delivery(0, 3.0, "b", process="consumer-1")]

    # When the paused consumer's ack of its old receipt succeeds, it broke the rule
    stale_ok = History(sends=[send(0, 0.0)], deliveries=deliveries, acks=[ack(0, 3.5, "a")])
    assert rules(stale_ok) == ["stale ack"]

    # and when it is refused (StaleReceipt) and the new holder acks, all is well
    refused = History(
        sends=[send(0, 0.0)],
        deliveries=deliveries,
        acks=[ack(0, 3.5, "a", ok=False), ack(0, 3.6, "b", process="consumer-1")],
    )
    assert rules(refused) == []
    report = check_history(refused)
    assert (report.late_acks_ok, report.late_acks_stale) == (0, 1)


def test_the_margin_forgives_clock_granularity_and_nothing_more() -> None:
    # a redelivery 10 ms before the first lease's visible_at (ms-rounded, read by
    # another call of the clock) is within the margin; 200 ms before is not
    first = delivery(0, 1.0, "a")
    near = DeliveryOp("consumer-1", 1, 0, 100, "b", 2.5, first.visible_at - 0.01, 4.0)
    far = DeliveryOp("consumer-1", 1, 0, 100, "b", 2.3, first.visible_at - 0.2, 4.0)

    acks = [ack(0, 4.1, "b", process="consumer-1")]
    assert rules(History(sends=[send(0, 0.0)], deliveries=[first, near], acks=acks)) == []
    assert rules(History(sends=[send(0, 0.0)], deliveries=[first, far], acks=acks)) == [
        "lease overlap"
    ]


def test_histories_are_read_from_every_process_file_and_a_torn_line_is_skipped(
    tmp_path: Path,
) -> None:
    records = [
        {"op": "send", "process": "p", "sender": 1, "seq": 0, "start": 0.0, "end": 0.1,
            "ok": True, "id": 100},
        {"op": "receive", "process": "c", "start": 1.0, "end": 1.1, "deliveries": [
            {"sender": 1, "seq": 0, "id": 100, "receipt": "r", "visible_at": 2.6}]},
        {"op": "ack-begin", "process": "c", "start": 1.2, "acks": [{"id": 100, "receipt": "r"}]},
        {"op": "ack", "process": "c", "start": 1.2, "end": 1.3, "acks": [
            {"id": 100, "receipt": "r", "ok": True}]},
    ]  # fmt: skip
    second_send = records[0] | {"seq": 1, "id": 101}
    (tmp_path / "producer-0.jsonl").write_text(json.dumps(records[0]) + "\n")
    (tmp_path / "producer-1.jsonl").write_text(json.dumps(second_send) + "\n")
    (tmp_path / "consumer-0.jsonl").write_text(
        "\n".join(json.dumps(r) for r in records[1:]) + '\n{"op": "ack", "proc'
    )
    # and a second consumer killed during its ack: it logged the ack's beginning only
    (tmp_path / "consumer-1.jsonl").write_text(
        json.dumps({"op": "receive", "process": "d", "start": 3.0, "end": 3.1, "deliveries": [
            {"sender": 1, "seq": 1, "id": 101, "receipt": "r2", "visible_at": 4.6}]})
        + "\n"
        + json.dumps({"op": "ack-begin", "process": "d", "start": 3.2, "acks": [
            {"id": 101, "receipt": "r2"}]})
        + "\n"
    )  # fmt: skip

    history = read_history(tmp_path)

    assert history.sends == [
        SendOp("p", 1, 0, 0.0, 0.1, True, 100),
        SendOp("p", 1, 1, 0.0, 0.1, True, 101),
    ]
    assert history.deliveries == [
        DeliveryOp("c", 1, 0, 100, "r", 1.0, 1.1, 2.6),
        DeliveryOp("d", 1, 1, 101, "r2", 3.0, 3.1, 4.6),
    ]
    assert history.acks == [
        AckOp("c", 100, "r", 1.2, 1.3, True),
        AckOp("d", 101, "r2", 3.2, 3.2, None),
    ]
    assert check_history(history).violations == []

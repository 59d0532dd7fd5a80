"""Send-once under another row order (engine/send_order.py): each message keeps its first id.

Spark reads a shuffle's output in any order, so a retried, speculative or
replayed sink task may see its part's rows permuted. Send-once writes a
chunk's messages under the ids its first attempt recorded, at the first
attempt's write timestamp: by position, another order would put other payloads
under those ids at an equal timestamp, where Cassandra keeps the greater value
of each cell (messages lost, others doubled). The pure layout is explored with
Hypothesis; the staging runs on a MemoryStore and on the real node.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_queue import QueueClient, SparkQueueError
from spark_queue.engine import send_order, staging
from spark_queue.engine.send_order import arrange, row_digest
from spark_queue.engine.sending import Outgoing
from spark_queue.engine.staging import Staged

both_stores = pytest.mark.both_stores


def outgoing(payloads: list[bytes]) -> list[Outgoing]:
    return [Outgoing(p, {}, 0, -1) for p in payloads]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.binary(max_size=3), max_size=40),  # short payloads: many repeat
    size=st.integers(1, 7),
    seed=st.integers(0, 2**32 - 1),
    done=st.integers(0, 8),
)
def test_any_order_of_the_same_rows_is_laid_out_as_the_first_attempt_did(
    rows: list[bytes], size: int, seed: int, done: int
) -> None:
    # Given a first attempt that recorded some of its chunks (it died after ``done``)
    digests = [row_digest(o) for o in outgoing(rows)]
    first = arrange(digests, {}, size)
    recorded = {n: [digests[i] for i in chunk] for n, chunk in first[:done]}

    # When another attempt gets the same rows in another order
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    again = arrange([digests[i] for i in order], recorded, size)

    # Then every recorded chunk holds the same messages in the same order, and
    # every row is in exactly one chunk of at most ``size``
    laid = {n: [digests[order[i]] for i in chunk] for n, chunk in again}
    assert all(laid[n] == recorded[n] for n in recorded)
    assert sorted(i for _, chunk in again for i in chunk) == list(range(len(rows)))
    assert all(0 < len(chunk) <= size for _, chunk in again)


def test_a_recorded_row_missing_from_the_input_is_refused() -> None:
    digests = [row_digest(o) for o in outgoing([b"a", b"b"])]
    other = [row_digest(o) for o in outgoing([b"a", b"c"])]
    with pytest.raises(SparkQueueError, match=r"chunk 0: .*\(is the input deterministic\?\)"):
        arrange(other, {0: digests}, 10)


def test_the_digest_covers_payload_headers_delay_and_lane() -> None:
    base = Outgoing(b"p", {"k": "v"}, 0, -1)
    variants = [
        Outgoing(b"q", {"k": "v"}, 0, -1),
        Outgoing(b"p", {"k": "w"}, 0, -1),
        Outgoing(b"p", {}, 0, -1),
        Outgoing(b"p", {"k": "v"}, 5, -1),
        Outgoing(b"p", {"k": "v"}, 0, 3),
    ]
    assert len({row_digest(o) for o in [base, *variants]}) == 6
    assert row_digest(Outgoing(b"p", {"a": "1", "b": "2"}, 0, 0)) == row_digest(
        Outgoing(b"p", {"b": "2", "a": "1"}, 0, 0)
    )


def test_the_digest_covers_the_key_and_keeps_a_keyless_messages_digest() -> None:
    keyed = [Outgoing(b"p", {}, 0, 0, key) for key in ("a", "b", "")]
    assert len({row_digest(o) for o in keyed}) == 3
    keyless = Outgoing(b"p", {}, 0, 0)
    assert row_digest(keyless) == row_digest(keyless, with_key=False)  # as older versions
    assert row_digest(keyed[0], with_key=False) == row_digest(keyless)
    # A key is no header: a key "k" and a header that spells the same bytes differ
    assert row_digest(Outgoing(b"p", {"k": ""}, 0, 0)) != row_digest(keyed[0])


def mapping(staged: list[Staged], rows: dict[int, bytes]) -> dict[int, bytes]:
    """id -> payload, from what ``stage_part`` returned and the payload of each staged id."""
    return {i: rows[i] for s in staged for i in s.ids}


@both_stores
def test_a_retry_with_the_rows_permuted_keeps_each_message_under_its_first_id(
    client: QueueClient,
) -> None:
    # Given a first attempt that staged 25 messages in chunks of 10, then died
    queue = client.create_queue("permuted", visibility_timeout=30)
    payloads = [f"m{i}".encode() for i in range(25)]
    first = queue.staging.stage_part("w", 1, 0, outgoing(payloads), 10)
    first_ids = {
        p: i
        for s, chunk in zip(first, [payloads[:10], payloads[10:20], payloads[20:]], strict=True)
        for i, p in zip(s.ids, chunk, strict=True)
    }

    # When a retry gets the same rows in another order, and publishes
    shuffled = payloads[:]
    random.Random(7).shuffle(shuffled)
    again = queue.staging.stage_part("w", 1, 0, outgoing(shuffled), 10)
    queue.staging.publish(again)

    # Then each payload is under the id its first attempt recorded, and arrives once
    assert sorted(i for s in again for i in s.ids) == sorted(first_ids.values())
    got = queue.receive(100)
    assert sorted(d.payload for d in got) == sorted(payloads)
    assert {d.payload: d.id for d in got} == first_ids


@both_stores
def test_a_retry_keeps_each_key_under_its_first_id_when_the_payloads_are_alike(
    client: QueueClient,
) -> None:
    # Given a first attempt that staged six like payloads under six keys of one lane
    queue = client.create_queue("alike", visibility_timeout=30, lanes=1)
    rows = [Outgoing(b"same", {}, 0, 0, f"k{i}") for i in range(6)]
    (first,) = queue.staging.stage_part("w", 1, 0, rows, 10)
    first_ids = {o.key: i for o, i in zip(rows, first.ids, strict=True)}

    # When a retry gets them in the reverse order, and publishes
    again = queue.staging.stage_part("w", 1, 0, rows[::-1], 10)
    queue.staging.publish(again)

    # Then each key is under the id its first attempt gave it
    assert {d.key: d.id for d in queue.receive(10)} == first_ids


@both_stores
def test_a_retry_lays_out_keyed_rows_recorded_before_keys_were_digested(
    client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a first attempt of an older version, whose digests left the keys out
    queue = client.create_queue("older-digests", visibility_timeout=30, lanes=1)
    rows = [Outgoing(b"m%d" % i, {}, 0, 0, f"k{i}") for i in range(6)]
    current = send_order.row_digest
    with monkeypatch.context() as older:
        older.setattr(send_order, "row_digest", lambda m, with_key=True: current(m, with_key=False))
        older.setattr(staging, "row_digest", lambda m, with_key=True: current(m, with_key=False))
        (first,) = queue.staging.stage_part("w", 1, 0, rows, 10)

    # When this version retries it with the rows in the reverse order
    again = queue.staging.stage_part("w", 1, 0, rows[::-1], 10)
    queue.staging.publish(again)

    # Then it is not refused, and each message is under its first id
    first_ids = {o.payload: i for o, i in zip(rows, first.ids, strict=True)}
    assert {d.payload: d.id for d in queue.receive(10)} == first_ids


@both_stores
def test_an_attempt_at_once_with_another_order_adopts_the_recorded_one(
    client: QueueClient,
) -> None:
    # Given an attempt that reserved a chunk, and one running at once that read no
    # record yet and got the same rows in another order
    queue = client.create_queue("at-once", visibility_timeout=30)
    rows = [b"x", b"y", b"z"]
    first = queue.staging.stage(("w", 2, 0, 0), outgoing(rows))
    second = queue.staging.stage(("w", 2, 0, 0), outgoing([b"z", b"x", b"y"]))
    # Then the second writes each message under the first's id for it
    assert second.ids == first.ids
    queue.staging.publish([second])
    assert {d.payload: d.id for d in queue.receive(10)} == dict(zip(rows, first.ids, strict=True))

    # And an attempt with other messages is refused, with nothing written
    with pytest.raises(SparkQueueError, match="another attempt recorded other messages"):
        queue.staging.stage(("w", 2, 0, 0), outgoing([b"x", b"y", b"other"]))

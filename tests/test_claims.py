"""Claims and the order hint's pick: pure bookkeeping, no Cassandra."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from spark_queue.engine.claims import PRUNE_EVERY, Claims, pick_oldest


@dataclass(frozen=True)
class Row:
    bucket: int
    id: int


ROWS = [Row(i // 10, i) for i in range(40)]


def test_order_hint_one_picks_the_oldest_in_id_order() -> None:
    assert pick_oldest(ROWS, 5, 1, random.Random(1)) == ROWS[:5]


def test_larger_order_hint_picks_among_the_oldest_k_times_n() -> None:
    picked = pick_oldest(ROWS, 5, 3, random.Random(2))

    assert len(picked) == 5
    assert all(r.id < 15 for r in picked)
    assert [r.id for r in picked] == sorted(r.id for r in picked)


def test_sibling_threads_never_pick_a_claimed_message_until_its_lease_ends() -> None:
    claims = Claims(random.Random(3))

    first = claims.pick(ROWS, 10, 1, hold=30.0, clock=100.0)
    second = claims.pick(ROWS, 10, 1, hold=30.0, clock=101.0)
    after_lease = claims.pick(ROWS, 10, 1, hold=30.0, clock=131.0)

    assert first == ROWS[:10]
    assert second == ROWS[10:20]
    assert after_lease == ROWS[:10]  # the first lease ran out unacked: free again


def test_dropped_claims_are_free_at_once_and_expired_ones_are_pruned() -> None:
    claims = Claims()
    claims.pick(ROWS, 10, 1, hold=30.0, clock=0.0)
    claims.drop((r.bucket, r.id) for r in ROWS[:4])

    assert claims.pick(ROWS, 4, 1, hold=1.0, clock=0.5) == ROWS[:4]
    assert len(claims) == 10
    claims.pick([], 1, 1, hold=1.0, clock=PRUNE_EVERY + 40.0)  # everything ran out
    assert len(claims) == 0


def test_acked_claims_are_skipped_a_little_longer_but_not_counted() -> None:
    claims = Claims()
    claims.pick(ROWS, 10, 1, hold=30.0, clock=0.0)
    claims.done([(r.bucket, r.id) for r in ROWS[:10]], clock=1.0, linger=1.0)

    assert len(claims) == 0  # nothing in flight: a receive asks for no extra rows
    # a sibling's read-ahead still lists them: skipped until the linger ends
    assert claims.pick(ROWS, 5, 1, hold=30.0, clock=1.5) == ROWS[10:15]
    assert claims.pick(ROWS[:10], 5, 1, hold=30.0, clock=2.5) == ROWS[:5]


@given(
    ids=st.lists(st.integers(0, 60), max_size=80),
    count=st.integers(1, 30),
    hint=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_a_message_listed_twice_is_picked_once_at_most(
    ids: list[int], count: int, hint: int, seed: int
) -> None:
    # Given rows as two scans of one receive may list them: some more than once
    found = [Row(i // 10, i) for i in ids]

    # When a receive picks among them
    picked = Claims(random.Random(seed)).pick(found, count, hint, hold=30.0, clock=0.0)

    # Then each message is picked once at most, only from those found, as many as asked
    keys = [(r.bucket, r.id) for r in picked]
    assert len(keys) == len(set(keys))
    assert set(keys) <= {(r.bucket, r.id) for r in found}
    assert len(picked) == min(count, len(set(ids)))
    assert [r.id for r in picked] == sorted(r.id for r in picked)

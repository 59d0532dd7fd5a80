"""A part's journal record reads back as written, in the compact form and the first one.

Pure: store/journal.py's encoding alone. The journal's behaviour on the node (the first
record wins, replay, ack) is in tests/test_steps.py and tests/test_store_contract.py.
"""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from spark_queue.store.journal import JournalEntry, pack, unpack, unpack_fields

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ENTRIES = st.lists(
    st.builds(
        JournalEntry,
        bucket=st.integers(min_value=0, max_value=2**40),
        id=st.integers(min_value=0, max_value=2**50),
        lease=INT64,
        expires_at=INT64,
        delivery_count=st.integers(min_value=0, max_value=2**31 - 1),
    ),
    max_size=300,
)
# The form records had before the compact one: one big-endian record per entry.
FIRST_FORM = struct.Struct(">qqqqi")


def first_form(entries: list[JournalEntry]) -> bytes:
    return b"".join(
        FIRST_FORM.pack(e.bucket, e.id, e.lease, e.expires_at, e.delivery_count) for e in entries
    )


@given(ENTRIES)
def test_a_record_reads_back_the_entries_it_was_packed_from(entries: list[JournalEntry]) -> None:
    data = pack(entries)

    assert unpack(data) == entries
    assert unpack_fields(data) == [
        (e.bucket, e.id, e.lease, e.expires_at, e.delivery_count) for e in entries
    ]


@given(ENTRIES)
def test_a_record_in_the_first_form_still_reads_back(entries: list[JournalEntry]) -> None:
    """A step recorded by an earlier version is replayed and acked by this one."""
    assert unpack(first_form(entries)) == entries


def test_no_entries_record_nothing() -> None:
    assert pack([]) == b""
    assert unpack(b"") == []
    assert unpack(None) == []


def test_a_spark_parts_record_is_a_tenth_of_the_first_form() -> None:
    """5,000 first deliveries of five buckets under one lease: what a part records."""
    entries = [
        JournalEntry(
            bucket=120 + i // 1000,
            id=120_000 + i,
            lease=0x5EED_1234_5678_9ABC,
            expires_at=1_795_000_000_000 + 14 * 86_400_000 + 3 * i,
            delivery_count=1,
        )
        for i in range(5000)
    ]

    assert len(pack(entries)) * 10 < len(first_form(entries))

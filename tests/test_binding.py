"""The batch binder gives the driver's own bytes (store/binding.py), for any row.

No Cassandra: a prepared statement is made from column metadata, as the driver
makes it from a PREPARE answer, and every row is bound both ways.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from cassandra import cqltypes
from cassandra.protocol import ColumnMetadata
from cassandra.query import (
    UNSET_VALUE,
    BatchStatement,
    BatchType,
    BoundStatement,
    PreparedStatement,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_queue.store.binding import RowBinder, add_rows

# The columns of a message INSERT (store/message_writes.py), and a boolean and a text.
TYPES = [
    cqltypes.UUIDType,
    cqltypes.LongType,
    cqltypes.BytesType,
    cqltypes.MapType.apply_parameters([cqltypes.VarcharType, cqltypes.VarcharType]),
    cqltypes.DateType,
    cqltypes.Int32Type,
    cqltypes.VarcharType,
    cqltypes.BooleanType,
]


def prepared(types: list[Any] = TYPES, *, protocol_version: int = 5) -> PreparedStatement:
    columns = [ColumnMetadata("ks", "messages", f"c{n}", t) for n, t in enumerate(types)]
    return PreparedStatement(
        columns, b"query-id", [0, 1], "INSERT ...", "ks", protocol_version, [], None
    )


int64 = st.integers(-(2**63), 2**63 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
# Values each column takes, and some it refuses (out of range, another type).
VALUES = [
    st.uuids(),
    int64 | st.integers(2**63, 2**64),
    st.binary(max_size=64) | st.just(bytearray(b"ab")),
    st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
    int64,
    int32 | st.integers(2**31, 2**32) | st.booleans(),
    st.text(max_size=8),
    st.booleans(),
]
rows = st.tuples(*(v | st.none() | st.just(UNSET_VALUE) for v in VALUES))


def driver_bind(statement: PreparedStatement, params: Any) -> list[Any] | type[Exception]:
    try:
        return list(BoundStatement(statement).bind(params).values)
    except Exception as e:
        return type(e)


def binder_values(binder: RowBinder, params: Any, memo: dict[Any, bytes]) -> list[Any] | type:
    try:
        return binder.values(params, memo)
    except Exception as e:
        return type(e)


@settings(max_examples=300, deadline=None)
@given(st.lists(rows, min_size=1, max_size=6))
def test_each_row_serializes_to_the_driver_bind_bytes(batch_rows: list[tuple[Any, ...]]) -> None:
    # Given rows of every column type, with nulls, unset values and values a
    # column refuses, sharing one memo as the rows of a batch do
    statement = prepared()
    binder = RowBinder(statement)
    memo: dict[Any, bytes] = {}
    for params in batch_rows:
        # Then each row's bytes (or its error) are the driver's bind's
        assert binder_values(binder, params, memo) == driver_bind(statement, params)


@settings(max_examples=100, deadline=None)
@given(st.lists(rows, min_size=1, max_size=6))
def test_a_batch_of_rows_holds_what_the_driver_add_puts_there(
    batch_rows: list[tuple[Any, ...]],
) -> None:
    statement = prepared()
    expected = BatchStatement(batch_type=BatchType.UNLOGGED)
    try:
        for params in batch_rows:
            expected.add(statement, params)
    except Exception as e:
        # A row the driver refuses is refused by the binder too
        with pytest.raises(type(e)):
            add_rows(
                BatchStatement(batch_type=BatchType.UNLOGGED),
                [(RowBinder(statement), p) for p in batch_rows],
            )
        return
    binder = RowBinder(statement)
    actual = add_rows(
        BatchStatement(batch_type=BatchType.UNLOGGED), [(binder, p) for p in batch_rows]
    )
    assert actual._statements_and_parameters == expected._statements_and_parameters
    # And the batch is routed as the driver's: by its first row's partition key
    assert (actual.routing_key, actual.keyspace) == (expected.routing_key, expected.keyspace)


def test_a_short_row_is_extended_with_unset_values_as_the_driver_does() -> None:
    statement = prepared()
    short = (uuid.uuid4(), 7)
    assert RowBinder(statement).values(short, {}) == driver_bind(statement, short)


def test_a_statement_under_column_encryption_takes_the_driver_add() -> None:
    # Given a statement whose columns a column-encryption policy may cover
    statement = prepared()
    statement.column_encryption_policy = object()
    # Then the binder does not serialize its rows itself
    assert not RowBinder(statement)._fast

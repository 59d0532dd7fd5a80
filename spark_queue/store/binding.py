"""Rows added to a batch without a ``BoundStatement`` each: the bulk writes' binder.

The driver's ``BatchStatement.add(prepared, values)`` builds a
``BoundStatement`` per row, and its ``bind`` looks up the column-encryption
policy and makes a column descriptor for every value before it serializes it.
For a batch of a thousand message rows of eleven values, that bookkeeping cost
22-27 us a row, the largest client-side cost of the Spark sink's staging and of
the producer; serialized here, a row costs about 4-6 us.

``RowBinder`` serializes a row's values with the prepared statement's own
column types (``cqltypes``), as ``bind`` does, and adds them to the batch as
the driver's ``add`` would (``BatchStatement._add_statement_and_params``):

* the common values take a short path: ``int`` in a bigint, timestamp or int
  column is packed with ``struct``, ``bytes`` in a blob column is the value
  itself, and values repeated within one batch (a queue id, a bucket, an
  enqueue time, a TTL) are serialized once;
* anything else, and any value the short path refuses, goes through the
  driver's own ``bind`` for that row, so an error reads as the driver's and
  ``UNSET_VALUE`` keeps its rules;
* a statement under a column-encryption policy or with a custom payload, and
  a driver whose batch lacks the method, always take the driver's ``add``.

``tests/test_binding.py`` checks, on generated rows, that the bytes are the
driver's own.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cassandra import cqltypes
from cassandra.query import UNSET_VALUE, BatchStatement, BoundStatement, PreparedStatement

#: One row's values, in the statement's order (``session.Params``).
Params = Sequence[Any]

_INT64 = struct.Struct(">q").pack
_INT32 = struct.Struct(">i").pack
_INT64_TYPES = (cqltypes.LongType, cqltypes.DateType, cqltypes.CounterColumnType)

#: Serialized values of one batch, by (column type, value): a batch's rows repeat most of them.
Memo = dict[tuple[type, Any], bytes]


def _packer(col_type: type, protocol_version: int) -> Callable[[Any, Memo], bytes]:
    """Serialize a value of ``col_type``: ints and blobs on a short path, the rest by the driver.

    Raises ``_Slow`` where the driver's ``bind`` must decide (an ``UNSET_VALUE``, a
    value of another type than the short path's, an int out of range).
    """
    serialize = col_type.serialize  # type: ignore[attr-defined]

    if col_type in _INT64_TYPES or col_type is cqltypes.Int32Type:
        pack = _INT32 if col_type is cqltypes.Int32Type else _INT64

        def pack_int(value: Any, memo: Memo) -> bytes:
            if type(value) is not int:
                raise _Slow
            key = (col_type, value)
            data = memo.get(key)
            if data is None:
                try:
                    data = memo[key] = pack(value)
                except struct.error:
                    raise _Slow from None
            return data

        return pack_int
    if col_type is cqltypes.BytesType:

        def pack_blob(value: Any, memo: Memo) -> bytes:
            if type(value) is not bytes:
                raise _Slow
            return value

        return pack_blob
    if col_type is cqltypes.UUIDType:

        def pack_uuid(value: Any, memo: Memo) -> bytes:
            if type(value) is not uuid.UUID:
                raise _Slow
            key = (col_type, value)
            data = memo.get(key)
            if data is None:
                data = memo[key] = value.bytes  # computed from the int each time
            return data

        return pack_uuid

    def pack_other(value: Any, memo: Memo) -> bytes:
        if value is UNSET_VALUE:
            raise _Slow
        try:
            return serialize(value, protocol_version)  # type: ignore[no-any-return]
        except Exception:
            raise _Slow from None

    return pack_other


class _Slow(Exception):
    """This row's values go through the driver's ``bind``."""


class RowBinder:
    """Adds rows of one prepared statement to batches, serialized as the driver's ``bind`` would.

    Args:
        prepared: The statement; its column types and protocol version decide the bytes.
    """

    def __init__(self, prepared: PreparedStatement) -> None:
        self.prepared = prepared
        self._query_id = prepared.query_id
        self._packers = [
            _packer(column.type, prepared.protocol_version) for column in prepared.column_metadata
        ]
        self._fast = (
            prepared.column_encryption_policy is None
            and not prepared.custom_payload
            and hasattr(BatchStatement, "_add_statement_and_params")
        )

    def values(self, params: Params, memo: Memo) -> list[bytes | None]:
        """The serialized values of one row (``None`` stays a null), as ``bind`` gives them."""
        packers = self._packers
        if self._fast and len(params) == len(packers):
            try:
                return [
                    None if value is None else pack(value, memo)
                    for value, pack in zip(params, packers, strict=True)
                ]
            except _Slow:
                pass
        return list(BoundStatement(self.prepared).bind(params).values)

    def add(self, batch: BatchStatement, params: Params, memo: Memo) -> None:
        """Add one row to ``batch``; the batch's first row goes through the driver's ``add``.

        The first row sets the batch's routing key and keyspace (``add`` does
        that from the first statement that has them), so the batch is sent
        to a replica of its partition.
        """
        if not self._fast or len(batch) == 0:
            batch.add(self.prepared, params)
            return
        batch._add_statement_and_params(True, self._query_id, self.values(params, memo))


def add_rows(batch: BatchStatement, rows: Iterable[tuple[RowBinder, Params]]) -> BatchStatement:
    """Add ``(binder, values)`` rows to ``batch`` in order, with one memo for the batch."""
    memo: Memo = {}
    for binder, params in rows:
        binder.add(batch, params, memo)
    return batch

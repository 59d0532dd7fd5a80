"""The order of a send-once part: every attempt lays its rows out as the first attempt did.

Send-once (``staging.py``) keys a send by ``(writer, step, part, chunk)`` and
writes chunk ``n``'s messages under the ids its first attempt recorded, by
position. An attempt whose rows come in another order would then write other
payloads under those ids, at the same write timestamp: Cassandra keeps the
greater value of each cell, so messages could be lost and others doubled. Spark
gives no order after a shuffle: a retried task, a speculative copy or a
replayed batch reads the same rows of a shuffle's output in any order.

So the first attempt records a digest of each message (``row_digest``), and
every later attempt reads its part's records first and ``arrange``\\ s its rows
by them: each recorded chunk gets the rows whose digests it recorded, in the
recorded order; the rows left fill the chunks nobody recorded, in input order.
A recorded digest no row matches means the input itself differs (it is not
deterministic): that raises, rather than sending something else under the
recorded ids. Two attempts running at once that both found no record are
reconciled per chunk by the reservation (``Staging.stage``).
"""

from __future__ import annotations

import hashlib
import struct
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence

from spark_queue.engine.sending import Outgoing
from spark_queue.errors import SparkQueueError
from spark_queue.store.send_log import DIGEST_BYTES


def row_digest(message: Outgoing, *, with_key: bool = True) -> bytes:
    """A digest of everything a message carries: payload, headers, delay, lane and key.

    A keyless message's digest is what versions before keys were digested
    recorded; ``with_key=False`` gives that older digest of a keyed one
    (``lay_out``).
    """
    h = hashlib.blake2b(digest_size=DIGEST_BYTES)
    h.update(struct.pack(">qqi", len(message.payload), message.delay_ms, message.lane))
    h.update(message.payload)
    for name, value in sorted(message.headers.items()):
        for text in (name, value):
            data = text.encode("utf-8")
            h.update(struct.pack(">i", len(data)))
            h.update(data)
    if with_key and message.key is not None:
        data = message.key.encode("utf-8")
        h.update(struct.pack(">i", -1 - len(data)))  # no header's length: no collision
        h.update(data)
    return h.digest()


def lay_out(
    messages: Sequence[Outgoing], recorded: Mapping[int, Sequence[bytes] | None], size: int
) -> tuple[list[bytes], list[tuple[int, list[int]]]]:
    """Each message's ``row_digest``, of the kind the part's records hold, and ``arrange``'s chunks.

    Records made before keys were digested hold digests without them: when the
    rows' digests do not lay out by those records and the older ones do, the
    older ones are used (and recorded for the part's new chunks too).

    Raises:
        SparkQueueError: Neither kind of digest lays out by the records (``arrange``'s
            error, for the current kind).
    """
    digests = [row_digest(m) for m in messages]
    try:
        return digests, arrange(digests, recorded, size)
    except SparkQueueError as error:
        if not any(m.key is not None for m in messages):
            raise
        older = [row_digest(m, with_key=False) for m in messages]
        try:
            return older, arrange(older, recorded, size)
        except SparkQueueError:
            raise error from None


def arrange(
    digests: Sequence[bytes], recorded: Mapping[int, Sequence[bytes] | None], size: int
) -> list[tuple[int, list[int]]]:
    """The rows (indexes into ``digests``) of each chunk, by chunk number.

    Args:
        digests: Each input row's digest, in input order.
        recorded: The digests each chunk's record holds (None: a record made
            before digests were kept, laid out by position as then).
        size: Rows per chunk.

    Raises:
        SparkQueueError: A recorded row is not in the input.
    """
    free: defaultdict[bytes, deque[int]] = defaultdict(deque)
    for index, digest in enumerate(digests):
        free[digest].append(index)
    chunks: dict[int, list[int]] = {}
    for number in sorted(recorded):
        wanted = recorded[number]
        if wanted is None:
            continue
        rows = []
        for digest in wanted:
            if not free[digest]:
                raise SparkQueueError(
                    f"chunk {number}: a message its first attempt sent is not among this"
                    f" attempt's {len(digests)} rows; a replayed or retried write must carry"
                    " the same rows (is the input deterministic?)"
                )
            rows.append(free[digest].popleft())
        chunks[number] = rows
    rest = sorted(i for queue in free.values() for i in queue)
    number = 0
    while rest:
        if number not in chunks:
            chunks[number], rest = rest[:size], rest[size:]
        number += 1
    return sorted(chunks.items())

"""The raw baseline: what the node takes without the queue.

The same payloads go into a plain table as prepared single-row INSERTs through
the driver's concurrent execution, on the session the queue uses. The table
has the queue's partition shape (``bucket_size`` rows per partition) and is
dropped at the end. A benchmark measures it before and after its own phases,
so a neighbour's load that comes or goes during the run weighs on both sides.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType

from cassandra.concurrent import execute_concurrent_with_args

from spark_queue.config import check_int
from spark_queue.store.driver_errors import translate_errors
from spark_queue.store.session import Store

#: Concurrent requests of the raw baseline (the driver's in-flight window).
DEFAULT_CONCURRENCY = 128
#: Untimed inserts before each measure, so that no side pays for a cold start alone.
WARMUP_ROWS = 500


class RawInsertBaseline:
    """A scratch table in the store's keyspace that measures plain insert rates.

    Use it as a context manager: the table is created on entry and dropped on exit.

    Args:
        store: The session (and keyspace) the queue uses.
        name: Table name, unique to the run (letters, digits, ``_``).
        payloads: The payloads to insert at each measure.
        partition_rows: Rows per partition (the queue's bucket size).
        concurrency: Requests in flight.
    """

    def __init__(
        self,
        store: Store,
        name: str,
        payloads: Sequence[bytes],
        *,
        partition_rows: int,
        concurrency: int = DEFAULT_CONCURRENCY,
    ) -> None:
        self._store = store
        self.table = f"{store.keyspace}.{name}"
        self._payloads = payloads
        self._partition_rows = check_int("partition_rows", partition_rows, 1, 100_000)
        self._concurrency = check_int("concurrency", concurrency, 1, 4096)
        self._passes = 0
        self.rates: list[float] = []

    def __enter__(self) -> RawInsertBaseline:
        self._store.execute_ddl(
            f"CREATE TABLE IF NOT EXISTS {self.table} (k bigint, id bigint, payload blob,"
            " PRIMARY KEY ((k), id))"
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._store.execute_ddl(f"DROP TABLE IF EXISTS {self.table}")

    @property
    def rate(self) -> float | None:
        """Mean of the measured rates (inserts per second), or None before the first."""
        return sum(self.rates) / len(self.rates) if self.rates else None

    def measure(self) -> float:
        """Insert every payload once (after a short untimed warm-up); return inserts per second.

        Each pass writes its own partitions, so no pass overwrites another's rows.
        """
        insert = self._store.prepare(f"INSERT INTO {self.table} (k, id, payload) VALUES (?, ?, ?)")
        base = self._passes * 2 * (len(self._payloads) + WARMUP_ROWS)
        self._passes += 1
        count = len(self._payloads)
        warmup = [
            (self._partition(base + count + i), base + count + i, self._payloads[i % count])
            for i in range(min(WARMUP_ROWS, count))
        ]
        rows = [(self._partition(base + i), base + i, p) for i, p in enumerate(self._payloads)]
        with translate_errors("running the raw insert baseline"):
            self._run(insert, warmup)
            started = time.perf_counter()
            self._run(insert, rows)
            elapsed = time.perf_counter() - started
        rate = count / elapsed
        self.rates.append(rate)
        return rate

    def _partition(self, row_id: int) -> int:
        return row_id // self._partition_rows

    def _run(self, insert: object, rows: list[tuple[int, int, bytes]]) -> None:
        results = execute_concurrent_with_args(
            self._store.session,
            insert,
            rows,
            concurrency=self._concurrency,
            raise_on_first_error=True,
            results_generator=True,  # no need to keep every result set
        )
        # The generator yields as requests complete: the work is done once it is drained.
        deque(results, maxlen=0)

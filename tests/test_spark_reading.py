"""The source's executor side: grouped partitions, queue handles reused briefly (real Cassandra)."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.errors import QueueNotFound
from spark_queue.spark import worker_handles
from spark_queue.spark.options import SourceOptions, connector_options
from spark_queue.spark.source import BdqStreamReader

pytestmark = pytest.mark.cassandra


def test_a_handle_is_kept_across_refreshes_until_the_queue_is_recreated(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_handles, "QUEUE_REFRESH", 0.0)  # look up again at every call
    with QueueClient(settings=keyspace) as client:
        client.create_queue("handles")
        first = worker_handles.open_queue(keyspace, "handles")
        # Looked up again, the same incarnation: the same handle (its id block kept).
        assert worker_handles.open_queue(keyspace, "handles") is first
        client.delete_queue("handles")
        with pytest.raises(QueueNotFound, match="handles"):
            worker_handles.open_queue(keyspace, "handles")
        recreated = client.create_queue("handles")
        assert worker_handles.open_queue(keyspace, "handles").queue_id == recreated.queue_id

        monkeypatch.setattr(worker_handles, "QUEUE_REFRESH", 3600.0)
        kept = worker_handles.open_queue(keyspace, "handles")
        client.delete_queue("handles")
        assert worker_handles.open_queue(keyspace, "handles") is kept  # within the refresh: no read
        assert first.queue_id != kept.queue_id


def test_a_step_reads_its_buckets_in_the_partitions_its_offset_names(
    keyspace: ConnectionSettings,
) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("grouped", bucket_size=10).send_batch([b"x"] * 40)
        options = SourceOptions.parse({**connector_options(keyspace), "queue": "grouped"})
        reader = BdqStreamReader(options)
        try:
            start = reader.initialOffset()
            end = reader.latestOffset(start, ReadMaxRows(40))
            assert end["partitions"] == [0, 0, 0, 0]  # 40 messages: one task
            (part,) = reader.partitions(start, end)
            assert (part.buckets, part.max_messages, part.part) == ((0, 1, 2, 3), 40, 0)
            rows = sum(batch.num_rows for batch in reader.read(part))
            assert rows == 40
            # an offset written before buckets were grouped replays one bucket per task
            old = {k: v for k, v in end.items() if k != "partitions"}
            assert [p.buckets for p in reader.partitions(start, old)] == [(0,), (1,), (2,), (3,)]
            reader.commit(end)  # the ack runs on the reader's ack thread...
            reader.latestOffset(end, ReadMaxRows(40))  # ...and the next plan waits for it
            assert client.queue("grouped").stats(exact=True).total == 0
        finally:
            reader.stop()

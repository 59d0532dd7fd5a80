"""The ``bdq`` Python data source: a Cassandra-backed queue as a Spark source and sink."""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_queue.errors import InvalidSetting
from spark_queue.spark.options import SinkOptions, SourceOptions
from spark_queue.spark.sink import BdqBatchWriter, BdqStreamWriter, check_sink_schema
from spark_queue.spark.source import SCHEMA, BdqBatchReader, BdqStreamReader


class BdqDataSource(DataSource):
    """Read and write spark-queue queues: ``format("bdq")``.

    Source (``spark.readStream`` receives and acks on commit; ``spark.read`` peeks).
    Output schema: ``queue string, id bigint, bucket bigint, payload binary,
    headers map<string,string>, enqueued_at timestamp, delivery_count int``.

    Source options (names are case-insensitive):
        queue: Queue to read. Required.
        visibilityTimeout: Lease of a micro-batch's messages, such as ``'60s'``:
            longer than a batch takes from read to commit. Default: the queue's.
        maxMessagesPerTrigger: Most messages per micro-batch. Default: no
            option (at most 100000 per batch).
        orderHint: K of each receive. Default: the queue's.

    Sink options:
        queue: Target queue of rows without a ``queue`` column value.
        writerId: Stable identity of this writer: with it a retried task or a
            replayed batch adds no duplicates. Default: none (at-least-once).
        Sink columns: ``payload`` (binary or string, required), ``queue``,
        ``headers`` (map<string,string>), ``delay_ms`` (bigint).

    Connection options (both): ``hosts`` (comma list of host[:port]),
    ``keyspace``, ``localDc``, ``username``, ``password``, ``consistency``.
    Each defaults to its ``BDQ_*`` environment variable, then to the local
    node (127.0.0.1:9042, keyspace ``bdq``).
    """

    @classmethod
    def name(cls) -> str:
        return "bdq"

    def schema(self) -> StructType:
        return SCHEMA

    def _source_options(self, schema: StructType) -> SourceOptions:
        options = SourceOptions.parse(self.options)
        if schema is not None and schema != SCHEMA:
            raise InvalidSetting(
                f"schema {schema.simpleString()}: the bdq source has a fixed schema,"
                f" {SCHEMA.simpleString()}; drop .schema(...) and cast columns instead"
            )
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        return BdqBatchReader(self._source_options(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return BdqStreamReader(self._source_options(schema))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = SinkOptions.parse(self.options)
        if overwrite:
            raise InvalidSetting("save mode 'overwrite': the bdq sink only appends messages")
        check_sink_schema(schema, options)
        return BdqBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = SinkOptions.parse(self.options)
        check_sink_schema(schema, options)
        return BdqStreamWriter(options)

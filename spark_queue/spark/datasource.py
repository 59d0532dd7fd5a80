"""The ``bdq`` Python data source: a Cassandra-backed queue as a Spark source and sink."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from spark_queue.errors import InvalidSetting
from spark_queue.spark import stopping
from spark_queue.spark.options import (
    CONNECTION_OPTIONS,
    SINK_OPTIONS,
    SOURCE_OPTIONS,
    SinkOptions,
    SourceOptions,
)
from spark_queue.spark.source import SCHEMA, BdqBatchReader, BdqStreamReader
from spark_queue.spark.worker_gc import settled


class BdqDataSource(DataSource):
    """Read and write spark-queue queues: ``format("bdq")``.

    Source (``spark.readStream`` receives and acks on commit; ``spark.read`` peeks).
    Output schema: ``queue string, id bigint, bucket bigint, payload binary,
    headers map<string,string>, enqueued_at timestamp, delivery_count int,
    key string`` (``key`` null for a message sent without one).

    Source options (names are case-insensitive):
        queue: Queue to read, or a comma list of queues. Required unless
            ``queuePattern`` is given.
        queuePattern: Regular expression over the keyspace's queue names;
            queues created while the query runs join it.
        visibilityTimeout: Lease of a micro-batch's messages, such as ``'60s'``;
            the driver renews it until the batch is acked. Default: the queue's.
        maxMessagesPerTrigger: Most messages per micro-batch. Default: no
            option (at most 100000 per batch).
        minMessagesPerTrigger: Fewest messages a micro-batch waits for, unless
            ``maxTriggerDelay`` (default ``'15m'``) passed since the last batch.
        failOnDataLoss: Fail when a replayed micro-batch finds messages gone,
            or a queue was deleted and re-created under the stream (default
            true); false logs them and goes on.
        maxBytesPerTrigger: Most payload bytes per micro-batch ('10m'), at
            least one message. Default: no byte limit.
        minPartitions: Fewest input partitions per micro-batch (1 to 64): the
            busiest buckets are split into id slices read by different tasks.
            Default: each bucket is one partition.
        orderHint: K of each receive. Default: the queue's.

    Sink options:
        queue: Target queue of rows without a ``queue`` column value.
        writerId: Stable identity of this writer: with it a retried task or a
            replayed batch adds no duplicates. Default: none (at-least-once).
        Sink columns: ``payload`` (binary or string, required), ``queue``,
        ``headers`` (map<string,string>), ``delay_ms`` (bigint), ``key``
        (string: the unit of order; the source's ``key`` column passes on as is).

    Connection options (both): ``hosts`` (comma list of host[:port]),
    ``keyspace``, ``localDc``, ``username``, ``password``, ``authProvider``,
    ``consistency``, ``protocolVersion`` (default: negotiated), ``tls``,
    ``tlsCaFile``, ``tlsCertFile``, ``tlsKeyFile``, ``tlsCheckHostname``
    (default true). Each option the query does not set comes from the
    session's ``spark.bdq.<option>`` conf (after ``register(spark)``), then
    from the Spark Cassandra Connector's key of the same meaning, then from
    its ``BDQ_*`` environment variable on the driver, then from the default
    (the local node 127.0.0.1:9042, keyspace ``bdq``).
    """

    #: Options that apply when a query does not set them: the session's
    #: ``spark.bdq.*`` (and Spark Cassandra Connector) conf, set by ``register``.
    defaults: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return "bdq"

    @classmethod
    def with_defaults(cls, defaults: Mapping[str, str]) -> type[BdqDataSource]:
        """This data source with ``defaults`` under the options each query sets."""
        lowered = {key.lower(): value for key, value in defaults.items()}
        return type(cls.__name__, (cls,), {"defaults": lowered, "__module__": cls.__module__})

    def _options(self, own: tuple[str, ...]) -> dict[str, str]:
        # A default belongs to the source, the sink or both: each takes its own.
        known = {name.lower() for name in (*own, *CONNECTION_OPTIONS)}
        given = {key.lower(): value for key, value in self.options.items()}
        return {**{k: v for k, v in self.defaults.items() if k in known}, **given}

    def schema(self) -> StructType:
        return SCHEMA

    def _source_options(self, schema: StructType) -> SourceOptions:
        options = SourceOptions.parse(self._options(SOURCE_OPTIONS))
        if schema is not None and schema != SCHEMA:
            raise InvalidSetting(
                f"schema {schema.simpleString()}: the bdq source has a fixed schema,"
                f" {SCHEMA.simpleString()}; drop .schema(...) and cast columns instead"
            )
        return options

    @settled
    def reader(self, schema: StructType) -> DataSourceReader:
        return BdqBatchReader(self._source_options(schema))

    @settled
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        # pyspark calls this in the process that hosts the reader (and in planner
        # workers, which stop_on_sigterm leaves alone): see spark.stopping.
        reader = BdqStreamReader(self._source_options(schema))
        stopping.stop_on_sigterm(reader.stop)
        return reader

    # The sink is imported where it is used: a source query's runner process
    # never writes, and the sink's imports are part of every query's start.

    @settled
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_queue.spark.sink import BdqBatchWriter, check_sink_schema

        options = SinkOptions.parse(self._options(SINK_OPTIONS))
        if overwrite:
            raise InvalidSetting("save mode 'overwrite': the bdq sink only appends messages")
        check_sink_schema(schema, options)
        return BdqBatchWriter(options)

    @settled
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_queue.spark.sink import BdqStreamWriter, check_sink_schema

        options = SinkOptions.parse(self._options(SINK_OPTIONS))
        check_sink_schema(schema, options)
        return BdqStreamWriter(options)

"""Connection settings from the Spark conf: spark.bdq.* and the Cassandra connector keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.errors import InvalidSetting
from spark_queue.spark import BdqDataSource, register
from spark_queue.spark.options import options_from_spark_conf


def test_bdq_keys_win_over_the_connectors_and_ports_join_bare_hosts() -> None:
    conf = {
        "spark.cassandra.connection.host": "cass1, cass2:9142",
        "spark.cassandra.connection.port": "9043",
        "spark.cassandra.auth.username": "scc-user",
        "spark.cassandra.connection.ssl.enabled": "true",
        "spark.bdq.username": "bdq-user",
        "spark.bdq.visibilityTimeout": "90s",
        "spark.app.name": "ignored",
    }

    options = options_from_spark_conf(conf)

    assert options == {
        "hosts": "cass1:9043,cass2:9142",
        "username": "bdq-user",
        "tls": "true",
        "visibilitytimeout": "90s",
    }


def test_an_unknown_bdq_key_is_named() -> None:
    with pytest.raises(InvalidSetting, match=r"Spark conf 'spark.bdq.hostz': no such bdq option"):
        options_from_spark_conf({"spark.bdq.hostz": "x"})


@pytest.fixture
def conf_keys(spark: SparkSession) -> Iterator[dict[str, str]]:
    """Spark conf keys a test sets; unset afterwards, and the plain source registered again."""
    keys: dict[str, str] = {}
    yield keys
    for key in keys:
        spark.conf.unset(key)
    spark.dataSource.register(BdqDataSource)


@pytest.mark.spark
@pytest.mark.cassandra
def test_register_takes_connection_settings_from_the_session_conf(
    spark: SparkSession, keyspace: ConnectionSettings, conf_keys: dict[str, str]
) -> None:
    # Given the cluster named only in the session's conf, as spark-defaults.conf would
    (host,) = keyspace.hosts
    conf_keys.update(
        {
            "spark.cassandra.connection.host": host.host,
            "spark.cassandra.connection.port": str(host.port),
            "spark.bdq.keyspace": keyspace.keyspace,
        }
    )
    for key, value in conf_keys.items():
        spark.conf.set(key, value)
    with QueueClient(settings=keyspace) as client:
        client.create_queue("from-conf").send_batch([b"x", b"y"])

    # When the source is registered and read with nothing but the queue
    register(spark)
    rows = spark.read.format("bdq").option("queue", "from-conf").load().collect()

    # Then the conf told it where the queue lives
    assert sorted(r.payload for r in rows) == [b"x", b"y"]

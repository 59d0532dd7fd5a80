"""Keyspace creation, dropping and version probes against the test cluster."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings, parse_hosts
from spark_queue.errors import BackendUnavailable
from spark_queue.local import cql
from spark_queue.store.schema import TABLES


@pytest.fixture
def fresh(cassandra: ConnectionSettings) -> Iterator[ConnectionSettings]:
    """Settings naming a keyspace that does not exist yet; dropped after the test."""
    settings = cassandra.with_keyspace(f"t_{uuid.uuid4().hex[:8]}")
    yield settings
    cql.drop_keyspace(settings)


def test_ensure_keyspace_creates_once_with_the_replication_factor(
    fresh: ConnectionSettings,
) -> None:
    # When the keyspace is ensured twice
    created = cql.ensure_keyspace(fresh)
    again = cql.ensure_keyspace(fresh)
    # Then the first call created it with replication factor 1 and the second left it
    assert (created, again) == (True, False)
    with cql.connect(fresh) as session:
        row = session.execute(
            "SELECT replication FROM system_schema.keyspaces WHERE keyspace_name = %s",
            (fresh.keyspace,),
        ).one()
    replication = dict(row.replication)
    strategy = replication.pop("class").rsplit(".", 1)[-1]
    if fresh.local_dc:
        assert (strategy, replication) == ("NetworkTopologyStrategy", {fresh.local_dc: "1"})
    else:
        assert (strategy, replication) == ("SimpleStrategy", {"replication_factor": "1"})


def test_drop_keyspace_removes_it_and_is_idempotent(fresh: ConnectionSettings) -> None:
    cql.ensure_keyspace(fresh)
    cql.drop_keyspace(fresh)
    cql.drop_keyspace(fresh)
    with cql.connect(fresh) as session:
        assert fresh.keyspace not in session.cluster.metadata.keyspaces


def test_keyspace_fixture_gives_a_fresh_keyspace(keyspace: ConnectionSettings) -> None:
    assert keyspace.keyspace.startswith("t_")
    with cql.connect(keyspace) as session:
        tables = session.cluster.metadata.keyspaces[keyspace.keyspace].tables
    # created on purpose with the queue tables, holding no queue
    assert set(tables) == set(TABLES)
    with QueueClient(settings=keyspace) as client:
        assert client.list_queues() == []


def test_release_version_of_a_live_and_a_dead_host(cassandra: ConnectionSettings) -> None:
    assert (cql.release_version(cassandra, cassandra.hosts[0]) or "").startswith("5.0.")
    assert cql.release_version(cassandra, parse_hosts("127.0.0.1:9")[0]) is None


def test_unreachable_cluster_names_the_hosts_and_the_fix() -> None:
    settings = ConnectionSettings(hosts=parse_hosts("127.0.0.1:9"), connect_timeout=2)
    with (
        pytest.raises(BackendUnavailable, match=r"127\.0\.0\.1:9: no host answered") as caught,
        cql.connect(settings),
    ):
        pass
    assert "bdq cassandra start" in str(caught.value)

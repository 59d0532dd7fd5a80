"""A store reads its own keyspace's schema and no other (``store/schema.py``, ``Store``).

The driver's full schema fetch cost every connect 60-120 ms, so a store's
cluster fetches none: it checks its tables in ``system_schema`` and loads only
its keyspace's replication, which token-aware routing needs.
"""

from __future__ import annotations

import uuid

import pytest

from spark_queue.config import ConnectionSettings
from spark_queue.store.schema import missing_schema
from spark_queue.store.session import Store

pytestmark = pytest.mark.cassandra


def test_a_store_loads_only_its_keyspace_and_still_routes_by_token(
    keyspace: ConnectionSettings,
) -> None:
    store = Store(keyspace)
    try:
        metadata = store.cluster.metadata
        assert set(metadata.keyspaces) == {keyspace.keyspace}
        statement = store.prepare("SELECT next_id FROM {ks}.sequences WHERE queue_id = ?")
        key = statement.bind((uuid.uuid4(),)).routing_key
        replicas = metadata.get_replicas(keyspace.keyspace, key)
        assert [h.address for h in replicas] == [keyspace.hosts[0].host]
    finally:
        store.close()


def test_what_a_keyspace_lacks_is_read_after_each_change(
    fresh_keyspace: ConnectionSettings,
) -> None:
    store = Store(fresh_keyspace)
    try:
        name = fresh_keyspace.keyspace
        assert missing_schema(store.session, name) == ([], [])
        store.execute_ddl(f"DROP TABLE {name}.lane_ownership")
        store.execute_ddl(f"ALTER TABLE {name}.messages DROP key")
        assert missing_schema(store.session, name.upper()) == (
            ["lane_ownership"],
            ["messages.key"],
        )
        assert missing_schema(store.session, f"{name}_none") is None
    finally:
        store.close()

"""A process's shared stores (``Store.shared``) and their shutdown before the process exits.

A cluster still open when Python exits may have the driver's scheduler thread
submit a task to an executor Python already shut down, which prints ``RuntimeError:
cannot schedule new futures after shutdown``; the suite shuts them down at its end
(``pytest_sessionfinish``).
"""

from __future__ import annotations

import pytest

from spark_queue.config import ConnectionSettings
from spark_queue.store.session import Store

pytestmark = pytest.mark.cassandra


def test_closing_the_shared_stores_shuts_them_down_and_the_next_use_opens_another(
    keyspace: ConnectionSettings,
) -> None:
    first = Store.shared(keyspace)
    assert Store.shared(keyspace) is first

    Store.close_shared()

    assert first.cluster.is_shutdown
    second = Store.shared(keyspace)
    try:
        assert second is not first
        assert not second.cluster.is_shutdown
    finally:
        Store.close_shared()

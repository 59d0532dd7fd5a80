"""``bdq keyspace create`` and what a missing keyspace does to every other command, on a real node.

Only an explicit creation creates anything: a look (``bdq queue list``) at a
missing keyspace fails in one line naming the command that creates it, and
leaves the cluster as it was.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings, KeyspaceNotFound, QueueClient
from spark_queue.cli import main
from spark_queue.local import cql
from spark_queue.store.keyspace import current_replication

if TYPE_CHECKING:
    from cassandra.cluster import Session

pytestmark = pytest.mark.cassandra


def bdq(settings: ConnectionSettings, *args: str, keyspace: bool = True) -> tuple[int, str, str]:
    """Run ``bdq ARGS`` against ``settings``' hosts (and keyspace, unless the command names it)."""
    connection = ["--hosts", ",".join(str(h) for h in settings.hosts)]
    if keyspace:
        connection += ["--keyspace", settings.keyspace]
    result = CliRunner().invoke(main, [*args, *connection], env={"BDQ_KEYSPACE": None})
    return result.exit_code, result.stdout, result.stderr


def one_line_error(err: str) -> str:
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    return err


@pytest.fixture
def missing(cassandra: ConnectionSettings, _cql_session: Session) -> Iterator[ConnectionSettings]:
    """Settings naming a keyspace that does not exist (dropped after, should a test make it)."""
    settings = cassandra.with_keyspace(f"t_{uuid.uuid4().hex[:8]}")
    try:
        yield settings
    finally:
        cql.drop_keyspace(settings, session=_cql_session)


def exists(session: Session, keyspace: str) -> bool:
    return current_replication(session, keyspace) is not None


def test_a_look_at_a_missing_keyspace_fails_in_one_line_and_creates_nothing(
    missing: ConnectionSettings, _cql_session: Session
) -> None:
    ks = missing.keyspace
    for args in (("queue", "list"), ("queue", "stats", "q"), ("send", "q", "x"), ("top", "--once")):
        # When a command that only uses the keyspace runs on a missing one
        code, out, err = bdq(missing, *args)
        # Then it exits 1 with one line naming the command that creates it
        assert code == 1, (args, out, err)
        assert f"keyspace {ks!r} not found" in one_line_error(err), args
        assert f"`bdq keyspace create {ks} --dc DC=N ...`" in err
    # And the cluster has no such keyspace
    assert not exists(_cql_session, ks)
    # And the Python client refuses the same way
    with pytest.raises(KeyspaceNotFound, match=f"keyspace '{ks}' not found"):
        QueueClient(settings=missing)
    assert not exists(_cql_session, ks)


def test_keyspace_create_takes_the_replication_and_says_what_it_made(
    missing: ConnectionSettings, _cql_session: Session
) -> None:
    ks = missing.keyspace
    dc = _cql_session.execute("SELECT data_center FROM system.local").one()[0]
    # When the keyspace is created with a replication per data center
    code, out, err = bdq(missing, "keyspace", "create", ks, "--dc", f"{dc}=1", "--json",
                         keyspace=False)  # fmt: skip
    # Then the report names the strategy, the factors and every table made
    assert code == 0, err
    report = json.loads(out)
    assert report["created"] is True
    assert report["replication"] == {"class": "NetworkTopologyStrategy", dc: 1}
    assert "queues" in report["tables_created"] and "messages" in report["tables_created"]
    assert report["columns_added"] == []
    # And the keyspace is usable at once
    assert bdq(missing, "queue", "create", "q")[0] == 0
    code, out, _ = bdq(missing, "queue", "list", "--json")
    assert [q["name"] for q in json.loads(out)] == ["q"]

    # When it is created again: refused without --exist-ok, and with another replication
    code, _, err = bdq(missing, "keyspace", "create", ks, "--simple", "1", keyspace=False)
    assert code == 1 and "already exists" in one_line_error(err) and "--exist-ok" in err
    code, _, err = bdq(missing, "keyspace", "create", ks, "--simple", "1", "--exist-ok",
                       keyspace=False)  # fmt: skip
    assert code == 1
    assert f"NetworkTopologyStrategy, {dc}=1, not the requested SimpleStrategy" in one_line_error(
        err
    )
    # And with --exist-ok alone it keeps the keyspace and has nothing to make
    code, out, _ = bdq(missing, "keyspace", "create", ks, "--exist-ok", keyspace=False)
    assert code == 0 and "every queue table in place" in out


def test_keyspace_create_exist_ok_completes_an_older_schema(
    missing: ConnectionSettings, _cql_session: Session
) -> None:
    ks = missing.keyspace
    code, out, _ = bdq(missing, "keyspace", "create", ks, "--simple", "1", keyspace=False)
    assert code == 0 and f"keyspace {ks} created (SimpleStrategy, replication factor 1)" in out
    # Given a keyspace of an older version: a table and a column missing
    _cql_session.execute(f"DROP TABLE {ks}.lane_ownership")
    _cql_session.execute(f"ALTER TABLE {ks}.messages DROP lane")
    # Then a look refuses it by name, without changing it
    code, _, err = bdq(missing, "queue", "list")
    assert code == 1 and "lacks the queue tables lane_ownership" in one_line_error(err)
    assert f"`bdq keyspace create {ks} --exist-ok`" in err
    # And the explicit upgrade makes exactly what was missing
    code, out, _ = bdq(missing, "keyspace", "create", ks, "--exist-ok", "--json", keyspace=False)
    assert code == 0
    report = json.loads(out)
    assert (report["created"], report["tables_created"]) == (False, ["lane_ownership"])
    assert report["columns_added"] == ["messages.lane"]
    assert bdq(missing, "queue", "list")[0] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give the replication of the new keyspace"),
        (("--simple", "1", "--dc", "dc1=3"), "--dc and --simple: give one of them"),
        (("--dc", "dc1"), "must be DC=N"),
        (("--simple", "0"), "--simple"),
    ],
)
def test_keyspace_create_usage_errors_exit_2(
    missing: ConnectionSettings, _cql_session: Session, args: tuple[str, ...], message: str
) -> None:
    code, _, err = bdq(missing, "keyspace", "create", missing.keyspace, *args, keyspace=False)
    assert code == 2 and message in err
    assert not exists(_cql_session, missing.keyspace)


def test_queue_create_makes_the_keyspace_only_when_told(
    missing: ConnectionSettings, _cql_session: Session
) -> None:
    # Without --create-keyspace: the one-line refusal, nothing made
    code, _, err = bdq(missing, "queue", "create", "q")
    assert code == 1 and "not found" in one_line_error(err)
    # A replication flag alone is a usage error
    assert bdq(missing, "queue", "create", "q", "--simple", "1")[0] == 2
    assert bdq(missing, "queue", "create", "q", "--create-keyspace")[0] == 2
    assert not exists(_cql_session, missing.keyspace)
    # With it, the keyspace and the queue are made, and the keyspace's report is on stderr
    code, out, err = bdq(missing, "queue", "create", "q", "--create-keyspace", "--simple", "1")
    assert code == 0 and "queue 'q' ready" in out
    assert f"keyspace {missing.keyspace} created" in err
    # And again (the keyspace exists now): the keyspace is kept, the queue name taken
    code, _, err = bdq(missing, "queue", "create", "q", "--create-keyspace", "--simple", "1")
    assert code == 1 and "queue 'q': already exists; pass --exist-ok" in one_line_error(err)


def test_python_create_keyspace(missing: ConnectionSettings, _cql_session: Session) -> None:
    # Given no keyspace: exist_ok without a replication cannot create one
    with pytest.raises(KeyspaceNotFound, match="creating it needs its replication"):
        QueueClient.create_keyspace(exist_ok=True, settings=missing)
    # When it is created with a whole number (SimpleStrategy)
    report = QueueClient.create_keyspace(1, settings=missing)
    # Then the report says so, and a client opens it
    assert report.created and str(report.replication) == "SimpleStrategy, replication factor 1"
    with QueueClient(settings=missing) as client:
        assert client.list_queues() == []
    again = QueueClient.create_keyspace(1, exist_ok=True, settings=missing)
    assert not again.created and again.tables_created == ()

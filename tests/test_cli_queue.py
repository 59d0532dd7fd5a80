"""``bdq queue``, ``send``, ``receive``, ``peek``, ``ack`` against a real node."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.cli import main

pytestmark = pytest.mark.cassandra


def bdq(settings: ConnectionSettings, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    connection = [
        "--hosts",
        ",".join(str(h) for h in settings.hosts),
        "--keyspace",
        settings.keyspace,
    ]
    # the connection flags belong to each leaf command: put them after its arguments
    result = CliRunner().invoke(main, [*args, *connection], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_queue_life_cycle_and_messages(keyspace: ConnectionSettings) -> None:
    assert bdq(keyspace, "queue", "create", "jobs", "--visibility-timeout", "60")[0] == 0
    code, out, _ = bdq(keyspace, "queue", "list", "--json")
    assert code == 0 and [q["name"] for q in json.loads(out)] == ["jobs"]

    code, out, _ = bdq(keyspace, "send", "jobs", "first", "second", "-H", "k=v", "--json")
    assert code == 0 and len(json.loads(out)["ids"]) == 2
    code, out, _ = bdq(keyspace, "send", "jobs", "-", stdin="third\nfourth\n")
    assert code == 0 and "sent 2 message(s)" in out

    code, out, _ = bdq(keyspace, "peek", "jobs", "-n", "10", "--json")
    assert [m["payload"] for m in json.loads(out)] == ["first", "second", "third", "fourth"]
    assert json.loads(out)[0]["headers"] == {"k": "v"}

    code, out, _ = bdq(keyspace, "receive", "jobs", "-n", "1", "--json")
    (received,) = json.loads(out)
    assert received["payload"] == "first"
    assert bdq(keyspace, "ack", "jobs", received["receipt"])[0] == 0
    code, _, err = bdq(keyspace, "ack", "jobs", received["receipt"])
    assert code == 1 and "no longer name the current delivery" in err

    code, out, _ = bdq(keyspace, "receive", "jobs", "-n", "2", "--ack", "--json")
    assert [m["payload"] for m in json.loads(out)] == ["second", "third"]
    code, out, _ = bdq(keyspace, "queue", "stats", "jobs", "--json")
    assert json.loads(out)["visible"] == 1
    assert bdq(keyspace, "queue", "purge", "jobs", "--yes")[0] == 0
    assert bdq(keyspace, "queue", "delete", "jobs", "--yes")[0] == 0
    with QueueClient(settings=keyspace) as client:
        assert client.list_queues() == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("queue", "stats", "missing"), "queue 'missing': does not exist"),
        (("send", "missing", "x"), "queue 'missing': does not exist"),
        (("send", "jobs", "x", "-H", "novalue"), "header 'novalue': must be key=value"),
        (("receive", "missing"), "create it with `bdq queue create`"),
    ],
)
def test_errors_exit_1_with_the_rule_on_stderr(
    keyspace: ConnectionSettings, args: tuple[str, ...], message: str
) -> None:
    bdq(keyspace, "queue", "create", "jobs")

    code, out, err = bdq(keyspace, *args)

    assert code == 1
    assert message in err
    assert "Traceback" not in err + out


def test_send_dash_streams_stdin_lines_through_the_producer(keyspace: ConnectionSettings) -> None:
    bdq(keyspace, "queue", "create", "lines", "--bucket-size", "100")
    lines = [f"line {n}" for n in range(1200)]

    code, out, _ = bdq(
        keyspace, "send", "lines", "-", "-H", "k=v", "--json", stdin="\n".join(lines)
    )

    assert code == 0
    ids = json.loads(out)["ids"]
    assert len(set(ids)) == 1200 and ids == sorted(ids)  # one id per line, in line order
    with QueueClient(settings=keyspace) as client:
        queue = client.queue("lines")
        received = []
        while deliveries := queue.receive(500):
            received += [(d.id, d.payload.decode(), d.headers) for d in deliveries]
            queue.ack_batch([d.receipt for d in deliveries])
    assert sorted(received) == [(i, line, {"k": "v"}) for i, line in zip(ids, lines, strict=True)]


def test_send_dash_stops_at_a_bad_line_and_keeps_the_lines_before_it(
    keyspace: ConnectionSettings,
) -> None:
    bdq(keyspace, "queue", "create", "small", "--max-message-bytes", "10")

    code, _, err = bdq(keyspace, "send", "small", "-", stdin="one\ntwo\n" + "x" * 11 + "\nfour\n")

    assert code == 1
    assert "line 3 of stdin: payload of 11 bytes: over queue 'small'" in err
    assert "the 2 line(s) before it were sent" in err
    with QueueClient(settings=keyspace) as client:
        assert [m.payload for m in client.queue("small").peek(10)] == [b"one", b"two"]


def test_create_exist_ok_refuses_other_settings_by_name(keyspace: ConnectionSettings) -> None:
    # Given a queue with a 99 s visibility timeout and 8 lanes
    assert (
        bdq(keyspace, "queue", "create", "q", "--visibility-timeout", "99", "--lanes", "8")[0] == 0
    )
    # When it is created again with other values of those settings
    code, out, err = bdq(
        keyspace, "queue", "create", "q", "--exist-ok", "--visibility-timeout", "10", "--lanes", "2"
    )
    # Then it is refused in one line naming each setting, its current and requested value
    assert code == 1 and "ready" not in out
    assert err.startswith("Error: ") and err.count("\n") == 1
    assert "--visibility-timeout 99.0 (requested 10.0)" in err
    assert "--lanes 8 (requested 2)" in err
    assert "--order-hint" not in err  # a flag left out is not compared
    # And the queue is unchanged
    with QueueClient(settings=keyspace) as client:
        settings = client.queue("q").settings
    assert (settings.visibility_timeout, settings.lanes) == (99.0, 8)
    # While the same values, or no setting flag at all, are accepted
    assert bdq(keyspace, "queue", "create", "q", "--exist-ok", "--visibility-timeout", "99")[0] == 0
    assert bdq(keyspace, "queue", "create", "q", "--exist-ok")[0] == 0

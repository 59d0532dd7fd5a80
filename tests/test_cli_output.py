"""What ``bdq`` prints, at 80 columns and as JSON, and its errors in the words of its flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest
from click.testing import CliRunner

from spark_queue import ConnectionSettings
from spark_queue.cli import main
from spark_queue.cli.wording import for_command
from spark_queue.engine.lanes import KEYLESS, lane_of

pytestmark = pytest.mark.cassandra

RECEIPTS_HEADING = "receipts, in the table's order (bdq ack QUEUE RECEIPT...):"
LONG_NAME = "orders-of-the-european-warehouses-" + "x" * 60  # wider than its column at 80


def connection(settings: ConnectionSettings) -> list[str]:
    hosts = ",".join(str(h) for h in settings.hosts)
    return ["--hosts", hosts, "--keyspace", settings.keyspace]


def bdq(settings: ConnectionSettings, *args: str) -> tuple[int, str, str]:
    """Run ``bdq ARGS`` in this process, as a user's 80-column terminal would."""
    result = CliRunner().invoke(main, [*args, *connection(settings)], terminal_width=80)
    return result.exit_code, result.stdout, result.stderr


def bdq_at_80_columns(settings: ConnectionSettings, *args: str) -> str:
    """Run ``bdq ARGS`` as its own process with COLUMNS=80; its stdout."""
    env = {**os.environ, "COLUMNS": "80", "LINES": "40"}
    done = subprocess.run(
        [sys.executable, "-m", "spark_queue.cli", *args, *connection(settings)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def cells(out: str, border: str) -> list[str]:
    """The text of each column of a rich table, over every line starting with ``border``.

    Spaces are dropped, so a cell folded or wrapped over several lines reads as one.
    """
    columns: list[str] = []
    for line in out.splitlines():
        if not line.startswith(border):
            continue
        parts = line.split(border)[1:-1]
        columns += [""] * (len(parts) - len(columns))
        for i, part in enumerate(parts):
            columns[i] += part.replace(" ", "")
    return columns


def test_receive_prints_each_receipt_whole_on_its_own_line(keyspace: ConnectionSettings) -> None:
    # Given a queue with two messages whose payloads are wider than the terminal
    assert bdq(keyspace, "queue", "create", "jobs")[0] == 0
    assert bdq(keyspace, "send", "jobs", "a" * 120, "b" * 120)[0] == 0
    # When they are received in an 80-column terminal
    out = bdq_at_80_columns(keyspace, "receive", "jobs", "-n", "2")
    # Then nothing is cut, and each receipt is a line of its own, whole
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    lines = out.splitlines()
    receipts = lines[lines.index(RECEIPTS_HEADING) + 1 :]
    assert len(receipts) == 2 and all(len(r) > 40 and " " not in r for r in receipts)
    # And they are what `bdq ack` takes, as the README shows
    code, acked, _ = bdq(keyspace, "ack", "jobs", *receipts, "--json")
    assert code == 0 and json.loads(acked) == {"queue": "jobs", "acked": 2}
    code, stats, _ = bdq(keyspace, "queue", "stats", "jobs", "--json")
    assert (json.loads(stats)["visible"], json.loads(stats)["in_flight"]) == (0, 0)


def test_peek_and_receive_show_each_message_s_key_and_lane(keyspace: ConnectionSettings) -> None:
    # Given a queue of 4 lanes with a keyed and a keyless message
    assert bdq(keyspace, "queue", "create", "jobs", "--lanes", "4")[0] == 0
    assert bdq(keyspace, "send", "jobs", "keyed", "--key", "customer-7")[0] == 0
    assert bdq(keyspace, "send", "jobs", "keyless")[0] == 0
    lane = lane_of("customer-7", 4)
    # When they are peeked as JSON
    code, out, _ = bdq(keyspace, "peek", "jobs", "--json")
    # Then each carries its key (null: none) and its lane (-1: keyless, in no lane)
    assert code == 0
    assert [(m["payload"], m["key"], m["lane"]) for m in json.loads(out)] == [
        ("keyed", "customer-7", lane),
        ("keyless", None, KEYLESS),
    ]
    # And so when they are received as JSON
    code, out, _ = bdq(keyspace, "receive", "jobs", "-n", "2", "--json", "--release")
    assert code == 0
    assert sorted((m["key"] or "", m["lane"]) for m in json.loads(out)) == [
        ("", KEYLESS),
        ("customer-7", lane),
    ]
    # And the table shows the key, its receipts still whole at 80 columns
    out = bdq_at_80_columns(keyspace, "receive", "jobs", "-n", "2")
    assert cells(out, "┃")[:3] == ["id", "deliveries", "key"]
    assert cells(out, "│")[2] in {"customer-7-", "-customer-7"}  # "-": keyless
    lines = out.splitlines()
    receipts = lines[lines.index(RECEIPTS_HEADING) + 1 :]
    assert len(receipts) == 2 and all(len(r) > 40 and " " not in r for r in receipts)


def test_queue_list_and_top_show_names_and_headers_whole_at_80_columns(
    keyspace: ConnectionSettings,
) -> None:
    # Given a queue whose name is wider than its column
    assert bdq(keyspace, "queue", "create", LONG_NAME)[0] == 0
    # When the queues are listed in an 80-column terminal
    listed = bdq_at_80_columns(keyspace, "queue", "list")
    # Then the name and every header read whole, folded rather than cut
    assert "…" not in listed
    assert cells(listed, "│")[0] == LONG_NAME
    assert cells(listed, "┃") == [
        h.replace(" ", "")
        for h in ("queue", "bucket size", "visibility", "K", "ttl", "max deliveries", "DLQ")
    ]
    # And so in bdq top
    top = bdq_at_80_columns(keyspace, "top", "--once", "--interval", "0.1")
    assert "…" not in top
    assert max(len(line) for line in top.splitlines()) <= 80
    assert cells(top, "│")[0] == LONG_NAME
    assert cells(top, "┃") == [
        "queue", "visible", "inflight", "delayed", "oldest", "sent/s", "consumed/s", "buckets"
    ]  # fmt: skip


def test_create_purge_delete_and_ack_print_one_json_object(keyspace: ConnectionSettings) -> None:
    code, out, _ = bdq(keyspace, "queue", "create", "jobs", "--visibility-timeout", "30", "--json")
    created = json.loads(out)
    assert code == 0 and created["name"] == "jobs" and created["visibility_timeout"] == 30.0
    assert len(created["queue_id"]) == 36  # the incarnation's UUID
    bdq(keyspace, "send", "jobs", "one", "two", "three")
    code, out, _ = bdq(keyspace, "receive", "jobs", "--json")
    (delivery,) = json.loads(out)
    code, out, _ = bdq(keyspace, "ack", "jobs", delivery["receipt"], "--json")
    assert code == 0 and json.loads(out) == {"queue": "jobs", "acked": 1}
    code, out, _ = bdq(keyspace, "queue", "purge", "jobs", "--yes", "--json")
    assert code == 0 and json.loads(out) == {"name": "jobs", "purged": 2}
    code, out, _ = bdq(keyspace, "queue", "delete", "jobs", "-y", "--json")
    assert code == 0 and json.loads(out) == {"name": "jobs", "deleted": True}


def test_json_times_are_iso_8601_in_utc(keyspace: ConnectionSettings) -> None:
    bdq(keyspace, "queue", "create", "jobs")
    bdq(keyspace, "send", "jobs", "one", "two")

    _, peeked, _ = bdq(keyspace, "peek", "jobs", "--json")
    _, received, _ = bdq(keyspace, "receive", "jobs", "--json", "--visibility-timeout", "60")

    stamps = [m["enqueued_at"] for m in json.loads(peeked) + json.loads(received)]
    stamps.append(json.loads(received)[0]["visible_at"])
    for stamp in stamps:
        assert "T" in stamp and stamp.endswith(("Z", "+00:00")), stamp
        assert datetime.fromisoformat(stamp).utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("receive", "jobs", "-n", "0"), "Invalid value for '-n' / '--max': 0 is not in the range"),
        (("peek", "jobs", "--max", "0"), "Invalid value for '-n' / '--max': 0 is not in the range"),
        (("receive", "jobs", "--visibility-timeout", "-5"), "Invalid value for '--visibility-ti"),
        (("receive", "jobs", "--wait", "-1"), "Invalid value for '--wait'"),
    ],
)
def test_usage_errors_name_the_flag_with_exit_2(
    keyspace: ConnectionSettings, args: tuple[str, ...], message: str
) -> None:
    bdq(keyspace, "queue", "create", "jobs")

    code, out, err = bdq(keyspace, *args)

    assert code == 2 and message in err and "Traceback" not in err + out


@pytest.mark.parametrize(
    ("args", "message", "python"),
    [
        (("queue", "create", "jobs"), "pass --exist-ok to accept it", "exist_ok=True"),
        (("ack", "jobs", "not-a-receipt"), "exactly as `bdq receive` printed it", "Delivery."),
        (("peek", "missing"), "create it with `bdq queue create`", "create_queue"),
    ],
)  # fmt: skip
def test_library_errors_name_the_flags_and_commands(
    keyspace: ConnectionSettings, args: tuple[str, ...], message: str, python: str
) -> None:
    bdq(keyspace, "queue", "create", "jobs")

    code, out, err = bdq(keyspace, *args)

    assert code == 1 and err.startswith("Error: ") and err.count("\n") == 1
    assert message in err
    assert python not in err.replace(message, "")
    assert "Traceback" not in err + out


@pytest.mark.parametrize(
    "message",
    [
        "keyspace 'k' not found at 127.0.0.1:9042: create it with `bdq keyspace create k`",
        "username and password: give both or neither",
        "queue 'q': does not exist; nothing to update",
    ],
)
def test_messages_that_name_no_flag_are_left_alone(message: str) -> None:
    flags = {"keyspace": "--keyspace", "username": "--username", "queue": "--queue"}
    assert for_command(message, flags) == message

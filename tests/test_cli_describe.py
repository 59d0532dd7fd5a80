"""``bdq queue describe`` and the operator's commands around it, against a real node.

Also: ``receive --release``, ``change-visibility``, ``dlq sources``, the
confirmation of ``purge`` and ``delete``, and ``top`` when nothing matches.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from click.testing import CliRunner, Result

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.cli import main
from spark_queue.store.owners import OwnerTable

pytestmark = pytest.mark.cassandra


def bdq(settings: ConnectionSettings, *args: str, stdin: str | None = None) -> Result:
    # the connection flags on the group, before the command (issue 21.7)
    hosts = ",".join(str(h) for h in settings.hosts)
    group = ["--hosts", hosts, "--keyspace", settings.keyspace]
    return CliRunner().invoke(main, [*group, *args], input=stdin, terminal_width=120)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def last_error_line(result: Result, code: int) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    line = result.stderr.splitlines()[-1]
    assert line.startswith("Error: ")
    return line


def test_describe_shows_each_lane_s_owner_backlog_and_oldest_and_keyless_messages(
    keyspace: ConnectionSettings,
) -> None:
    # Given a queue of two lanes with keyed messages, one of them received by a live consumer
    name = f"describe-{uuid.uuid4().hex[:6]}"
    assert bdq(keyspace, "queue", "create", name, "--lanes", "2").exit_code == 0
    with QueueClient(settings=keyspace) as client:
        q = client.queue(name)
        q.send_batch([b"a1", b"a2"], key="a")
        q.send_batch([b"b1"], key="b")
        (leased,) = q.receive(1, visibility_timeout=60)
        owned = q.lanes.owned()
        # and a keyless message in the stored form being introduced (a negative lane)
        q.buckets.store.session.execute(
            f"INSERT INTO {keyspace.keyspace}.messages (queue_id, bucket, id, payload, headers,"
            " enqueued_at, visible_at, expires_at, delivery_count, lease, acked, payload_bytes,"
            " lane) VALUES (%s, 0, 999, 0x00, {}, toTimestamp(now()), toTimestamp(now()),"
            " '2100-01-01', 0, 0, false, 1, -1)",
            (q.queue_id,),
        )
        # and a bucket slice owned by a Spark query
        OwnerTable(q.buckets.store, q.queue_id, "ownership").insert_free("query-1", [(0, 3)], 30)
        time.sleep(0.05)  # a measurable age of the oldest message

        # When it is described, while the consumer holds its lane
        described = as_json(bdq(keyspace, "queue", "describe", name, "--json"))
        text = bdq(keyspace, "queue", "describe", name)

    # Then each lane shows its owner, its backlog and its oldest message
    lanes = {str(lane["lane"]): lane for lane in described["lanes"]}
    assert set(lanes) == {"0", "1", "keyless"}
    assert sum(lane["backlog"] for lane in lanes.values()) == 4
    assert sum(lane["in_flight"] for lane in lanes.values()) == 1
    (held,) = [lane for lane in lanes.values() if lane["owner"] is not None]
    assert held["lane"] in owned and held["in_flight"] == 1
    assert held["owner"] == q.lanes.owner and 0 < held["expires_in_seconds"] <= 60
    assert held["oldest_age_seconds"] > 0 and held["renewed_at"].endswith("+00:00")
    assert lanes["keyless"]["visible"] == 1 and lanes["keyless"]["owner"] is None
    assert described["buckets"] == [
        {"bucket": 0, "slice": 3, "owner": "query-1", "renewed_at": described["buckets"][0][
            "renewed_at"], "expires_in_seconds": described["buckets"][0]["expires_in_seconds"]}
    ]  # fmt: skip
    assert described["consumers"][q.lanes.owner] == {"lanes": [held["lane"]], "buckets": []}
    assert described["consumers"]["query-1"] == {"lanes": [], "buckets": ["0/3"]}
    assert described["settings"]["lanes"] == 2 and leased.payload in (b"a1", b"b1")
    # And the table says the same
    assert text.exit_code == 0, text.output
    assert "keyless" in text.stdout and q.lanes.owner in text.stdout.replace("\n", "")


def test_describe_of_a_missing_queue_is_one_line(keyspace: ConnectionSettings) -> None:
    line = last_error_line(bdq(keyspace, "queue", "describe", "nosuch"), 1)
    assert "queue 'nosuch': does not exist" in line


def test_receive_release_and_change_visibility(keyspace: ConnectionSettings) -> None:
    name = f"visibility-{uuid.uuid4().hex[:6]}"
    bdq(keyspace, "queue", "create", name)
    bdq(keyspace, "send", name, "one")

    # --release: received (counted as a delivery) and visible again at once, no receipt shown
    (released,) = as_json(bdq(keyspace, "receive", name, "--release", "--json"))
    assert released["delivery_count"] == 1 and "receipt" not in released
    (peeked,) = as_json(bdq(keyspace, "peek", name, "--json"))
    assert (peeked["id"], peeked["delivery_count"]) == (released["id"], 1)

    # change-visibility: hidden for 2 minutes under a new receipt; the old one is stale
    (received,) = as_json(bdq(keyspace, "receive", name, "--json"))
    changed = as_json(bdq(keyspace, "change-visibility", name, received["receipt"], "2m", "--json"))
    assert changed["visible_in_seconds"] == 120.0 and changed["receipt"] != received["receipt"]
    assert as_json(bdq(keyspace, "peek", name, "--json")) == []
    stale = bdq(keyspace, "ack", name, received["receipt"])
    assert "no longer name the current delivery" in last_error_line(stale, 1)
    assert bdq(keyspace, "ack", name, changed["receipt"]).exit_code == 0


def test_dlq_sources_and_redrive_of_a_queue_that_is_no_dead_letter_queue(
    keyspace: ConnectionSettings,
) -> None:
    dlq, source = f"dead-{uuid.uuid4().hex[:6]}", f"live-{uuid.uuid4().hex[:6]}"
    bdq(keyspace, "queue", "create", dlq)
    args = ["--max-deliveries", "2", "--dead-letter-queue", dlq]
    assert bdq(keyspace, "queue", "create", source, *args).exit_code == 0
    bdq(keyspace, "send", source, "x", "y")

    assert as_json(bdq(keyspace, "dlq", "sources", dlq, "--json"))["sources"] == [source]
    assert bdq(keyspace, "dlq", "sources", dlq).stdout == f"{source}\n"
    assert as_json(bdq(keyspace, "dlq", "sources", source, "--json"))["sources"] == []
    assert "does not exist" in last_error_line(bdq(keyspace, "dlq", "sources", "nosuch"), 1)

    # a redrive of the source queue is refused by name before any progress bar or lease
    refused = bdq(keyspace, "dlq", "redrive", source)
    assert "is not a dead-letter queue" in last_error_line(refused, 1)
    assert "redriving" not in refused.stderr and refused.stderr.count("\n") == 1
    assert as_json(bdq(keyspace, "queue", "stats", source, "--json", "--exact"))["visible"] == 2


def test_purge_and_delete_ask_first_unless_yes(keyspace: ConnectionSettings) -> None:
    name = f"confirm-{uuid.uuid4().hex[:6]}"
    bdq(keyspace, "queue", "create", name)
    bdq(keyspace, "send", name, "keep")

    # No answer (CI has no terminal), or "n": nothing happens, exit 1
    assert "not purged; answer y, or pass --yes" in last_error_line(
        bdq(keyspace, "queue", "purge", name), 1
    )
    declined = bdq(keyspace, "queue", "delete", name, stdin="n\n")
    assert "not deleted" in last_error_line(declined, 1)
    assert "Delete queue" in declined.stderr and "1 message(s)" in declined.stderr
    assert len(as_json(bdq(keyspace, "peek", name, "--json"))) == 1
    # "y" answers the question; --yes skips it
    assert as_json(bdq(keyspace, "queue", "purge", name, "--json", stdin="y\n"))["purged"] == 1
    assert bdq(keyspace, "queue", "delete", name, "--yes").exit_code == 0
    assert name not in [q["name"] for q in as_json(bdq(keyspace, "queue", "list", "--json"))]


def test_top_says_when_no_queue_matches(keyspace: ConnectionSettings) -> None:
    result = bdq(keyspace, "top", "--once", "--interval", "0.1", "--queue", "nosuch*")
    assert result.stderr == (
        f"Error: --queue 'nosuch*': no queue of keyspace '{keyspace.keyspace}' matches;"
        " `bdq queue list` shows them\n"
    )
    assert result.exit_code == 1

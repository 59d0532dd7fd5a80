"""``bdq bench sqs``: its arithmetic and arguments, and a short run against ``bdq serve``.

Only the structure of the result is checked, never its timings.
"""

from __future__ import annotations

import click
import pytest

from spark_queue.bench.sqs_bench import run_sqs_bench
from spark_queue.bench.sqs_load import Load, batches
from spark_queue.bench.sqs_results import SqsBenchResult, TargetResult, percentile
from spark_queue.bench.sqs_targets import elasticmq_pom
from spark_queue.cli.bench_sqs import parse_servers
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings


def _target(name: str, **given: object) -> TargetResult:
    values: dict[str, object] = {
        "name": name, "processes": 1, "sent": 1000, "send_seconds": 2.0, "received": 1000,
        "distinct": 1000, "receive_seconds": 4.0, "wake_ms": (),
    }  # fmt: skip
    values.update(given)
    return TargetResult(**values)  # type: ignore[arg-type]


def test_percentile_is_the_nearest_rank() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0
    assert percentile([float(v) for v in range(1, 101)], 50) == 50.0
    assert percentile([float(v) for v in range(1, 101)], 99) == 99.0
    assert percentile([3.0, 1.0, 2.0], 100) == 3.0
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)


def test_rates_loss_and_duplicates() -> None:
    t = _target("bdq-1", sent=1000, received=1003, distinct=998, wake_ms=(10.0, 30.0, 20.0))

    assert (t.send_rate, t.receive_rate) == (500.0, 249.5)
    assert (t.lost, t.duplicates) == (2, 5)
    assert (t.wake_p50, t.wake_p99) == (20.0, 30.0)
    assert _target("empty", send_seconds=0.0).send_rate == 0.0
    assert _target("cpu", generator_cpu=3.0).generator_cores == 0.5  # 3 s of CPU over 2 + 4 s


def test_ratios_are_to_elasticmq_and_absent_without_it() -> None:
    base = _target("elasticmq", send_seconds=1.0, receive_seconds=2.0, wake_ms=(5.0,))
    bdq = _target("bdq-2", processes=2, send_seconds=2.0, receive_seconds=2.5, wake_ms=(40.0,))

    both = SqsBenchResult((base, bdq))
    alone = SqsBenchResult((bdq,))

    assert both.send_ratio(bdq) == 0.5
    assert both.receive_ratio(bdq) == 0.8
    assert both.wake_p50_over(bdq) == 35.0
    assert both.send_ratio(base) == 1.0
    assert alone.send_ratio(bdq) is None and alone.wake_p50_over(bdq) is None
    row = both.as_json()["targets"][1]  # type: ignore[index]
    assert row["name"] == "bdq-2" and row["receive_ratio"] == 0.8 and row["lost"] == 0


def test_batches_cover_every_message_in_tens() -> None:
    parts = batches(25)

    assert [len(p) for p in parts] == [10, 10, 5]
    assert [i for p in parts for i in p] == list(range(25))


def test_arguments_are_checked() -> None:
    assert parse_servers("1,2") == (1, 2)
    assert parse_servers(" 2 ") == (2,)
    for bad in ("", "0", "1,x", "9"):
        with pytest.raises(click.BadParameter, match="comma list of server counts"):
            parse_servers(bad)
    with pytest.raises(ValueError, match="connections = 0"):
        Load(connections=0)
    assert "<version>1.6.14</version>" in elasticmq_pom("1.6.14")


@pytest.mark.cassandra
def test_a_short_run_against_bdq_serve(keyspace: ConnectionSettings) -> None:
    # Given a few hundred messages and one bdq serve
    load = Load(messages=300, connections=8, wake_rounds=2, idle_seconds=30.0)

    # When the benchmark runs without ElasticMQ
    result = run_sqs_bench(keyspace, load, servers=(1,), with_elasticmq=False)

    # Then every message came back once, with a wake-up sample per round, and no queue is left
    [t] = result.targets
    assert (t.name, t.processes, t.sent, t.lost, t.duplicates) == ("bdq-1", 1, 300, 0, 0)
    assert len(t.wake_ms) == 2 and t.send_rate > 0 and t.receive_rate > 0
    with QueueClient(settings=keyspace) as client:
        assert client.list_queues() == []

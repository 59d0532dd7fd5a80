"""``bdq bench spark``: a small run on real Spark and Cassandra, plus its pure parts.

The run's figures depend on the machine, so nothing here asserts a rate or a
latency: only that every phase moved every message and reported its counts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import replace

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.bench.source_floor import floor_batch, floor_parts
from spark_queue.bench.spark_bench import _session_conf, run_spark_bench
from spark_queue.bench.spark_bench_params import (
    CHECKPOINT_MANAGER,
    FILESYSTEM_CHECKPOINTS,
    SparkBenchParams,
)
from spark_queue.bench.spark_bench_results import (
    LatencyPhase,
    SparkBenchResult,
    StreamPhase,
    WarmUp,
    WritePhase,
)
from spark_queue.cli import main
from spark_queue.cli.bench_spark import _spark_title
from spark_queue.errors import InvalidSetting
from spark_queue.local import cql

# -- a real run --------------------------------------------------------------------------


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def _tables(settings: ConnectionSettings) -> set[str]:
    with cql.connect(settings) as session:
        rows = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s",
            (settings.keyspace,),
        )
        return {row[0] for row in rows}


@pytest.mark.spark
@pytest.mark.cassandra
@pytest.mark.slow
def test_a_small_run_moves_every_message_through_every_phase(
    spark: SparkSession, keyspace: ConnectionSettings, client: QueueClient
) -> None:
    # Given the tables of an empty keyspace
    tables_before = _tables(keyspace)

    # When a small run goes through every phase
    result = run_spark_bench(
        keyspace,
        messages=500,
        payload_bytes=256,
        max_per_trigger=200,
        latency_messages=40,
        latency_rate=20.0,
        seed=7,
        spark_conf={"spark.sql.streaming.minBatchesToRetain": "50"},
        floor_seconds=3.0,
        spark=spark,
    )

    # Then the warm-up ran, the sink stored every row, and the source and pipeline
    # drained their input
    assert result.warmup.write_seconds > 0 and result.warmup.drain_seconds > 0
    assert result.sink.stored == 500
    assert result.source.rows == 500
    assert result.source.left == 0
    assert result.source.batches >= math.ceil(500 / 200)  # maxMessagesPerTrigger held
    assert result.pipeline.rows == 500
    assert result.pipeline.delivered == 500
    assert result.pipeline.left == 0
    # And every latency message came through, each with a latency
    assert result.latency.sent == result.latency.arrived == 40
    assert result.latency.p50_ms is not None and result.latency.p99_ms is not None
    assert result.latency.max_ms is not None
    assert result.latency.p50_ms <= result.latency.p99_ms <= result.latency.max_ms
    assert result.latency.trigger_p50_ms is not None and result.latency.trigger_p50_ms > 0
    # And where a trigger's time went, part by part, with the whole among them
    parts = result.latency.trigger_parts_p50_ms
    assert {"latestOffset", "addBatch", "walCommit"} <= parts.keys()
    assert parts["triggerExecution"] == result.latency.trigger_p50_ms
    # And the floor (a no-op Python stream on the same trigger) ran and was timed
    assert result.floor is not None and result.floor.batches > 0
    assert result.floor.trigger_p50_ms is not None and result.floor.trigger_p50_ms > 0
    assert result.floor.trigger_parts_p50_ms["triggerExecution"] == result.floor.trigger_p50_ms
    # And the source floor (a Python source with no queue) drained as many rows, a
    # trigger's worth at a time, and the source's rate has a ratio to it
    assert result.source_floor is not None
    assert result.source_floor.rows == 500 and result.source_floor.left == 0
    assert result.source_floor.batches >= math.ceil(500 / 200)
    assert result.source_floor_ratio is not None and result.source_floor_ratio > 0
    # And the baseline was measured before and after, so every ratio and target has a value
    assert len(result.baseline_rates) == 2
    assert None not in (result.sink_ratio, result.source_ratio, result.pipeline_ratio)
    assert None not in (
        result.sink_met,
        result.source_met,
        result.pipeline_met,
        result.latency_met,
        result.latency_p99_met,
    )
    # And the result reads back as JSON with its parameters, ratios and targets
    values = json.loads(json.dumps(result.to_dict()))
    assert values["params"]["messages"] == 500
    assert values["source_floor_ratio"] == result.source_floor_ratio
    # And it says whether the session's pyspark.zip holds bytecode (it has one to look at)
    assert values["pyspark_zip_bytecode"] in (True, False)
    # And it records the session settings it ran with (its default and the one given),
    # and the session has its own settings back
    assert dict(values["params"]["spark_conf"]) == {
        CHECKPOINT_MANAGER: FILESYSTEM_CHECKPOINTS,
        "spark.sql.streaming.minBatchesToRetain": "50",
    }
    assert spark.conf.get(CHECKPOINT_MANAGER, None) is None
    assert spark.conf.get("spark.sql.streaming.minBatchesToRetain") == "100"
    assert set(values["ratios"]) == {"sink", "source", "pipeline"}
    assert set(values["targets"]) == {"sink", "source", "pipeline", "latency_p50", "latency_p99"}
    # And the run removed its queues and its baseline table
    assert client.list_queues() == []
    assert _tables(keyspace) == tables_before


# -- pure parts ------------------------------------------------------------------------


def _stream(rows: int, rate: float) -> StreamPhase:
    return StreamPhase(
        seconds=rows / rate,
        rate=rate,
        batch_seconds=0.0,
        rows=rows,
        batches=1,
        empty_batches=1,
        duration_ms={},
        left=0,
    )


def _result(
    *, sink: float, source: float, p50_ms: float | None, baseline: float | None
) -> SparkBenchResult:
    return SparkBenchResult(
        params=SparkBenchParams(seed=1),
        spark_version="test",
        warmup=WarmUp(write_seconds=1.0, drain_seconds=1.0),
        sink=WritePhase(seconds=1.0, rate=sink, stored=100),
        source=_stream(100, source),
        pipeline=_stream(100, source),
        latency=LatencyPhase(
            sent=10,
            arrived=10 if p50_ms is not None else 0,
            send_seconds=1.0,
            send_rate=10.0,
            p50_ms=p50_ms,
            p99_ms=p50_ms,
            max_ms=p50_ms,
            batches=1,
        ),
        baseline_rate=baseline,
        baseline_rates=[] if baseline is None else [baseline],
    )


def test_targets_compare_each_rate_with_the_baseline() -> None:
    # Given a sink at 2.1x and a source (and pipeline) at 1.0x of a 1000 msgs/s
    # baseline, p50 and p99 at 250 ms
    result = _result(sink=2100.0, source=1000.0, p50_ms=250.0, baseline=1000.0)

    # Then the sink and the pipeline meet their targets; the source and latency miss theirs
    assert result.sink_ratio == pytest.approx(2.1)
    assert (result.sink_met, result.source_met, result.latency_met) == (True, False, False)
    assert (result.pipeline_met, result.latency_p99_met) == (True, True)
    assert result.to_dict()["targets"]["source"] == {"min_ratio": 1.3, "met": False}


def test_without_baseline_or_arrivals_targets_are_unknown() -> None:
    result = _result(sink=700.0, source=400.0, p50_ms=None, baseline=None)

    assert (result.sink_ratio, result.source_ratio, result.pipeline_ratio) == (None, None, None)
    assert (result.sink_met, result.source_met, result.latency_met) == (None, None, None)
    assert result.source.batch_rate is None  # no trigger time recorded


def test_the_title_names_the_bytecode_each_python_process_would_compile() -> None:
    result = _result(sink=700.0, source=400.0, p50_ms=None, baseline=None)

    assert "without bytecode" not in _spark_title(replace(result, pyspark_zip_bytecode=True))
    assert "pyspark.zip without bytecode" in _spark_title(
        replace(result, pyspark_zip_bytecode=False)
    )
    assert "; 7 spark-queue modules without bytecode (`make bytecode`" in _spark_title(
        replace(result, package_lacking_bytecode=7)
    )
    assert replace(result, package_lacking_bytecode=7).to_dict()["package_lacking_bytecode"] == 7


@pytest.mark.parametrize(
    ("name", "value"),
    [("messages", 0), ("latency_rate", 0.0), ("trigger_interval", -1.0), ("master", " ")],
)
def test_bad_parameters_are_refused_before_anything_runs(name: str, value: object) -> None:
    with pytest.raises(InvalidSetting, match=name):
        SparkBenchParams(**{name: value})  # type: ignore[arg-type]


@pytest.mark.spark
def test_session_settings_hold_for_the_run_and_are_put_back(spark: SparkSession) -> None:
    # Given a session with one setting of its own
    own = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        # When a run sets that one and the checkpoint manager
        conf = {"spark.sql.shuffle.partitions": "7", CHECKPOINT_MANAGER: FILESYSTEM_CHECKPOINTS}
        with _session_conf(spark, conf):
            # Then both hold during the run
            assert spark.conf.get("spark.sql.shuffle.partitions") == "7"
            assert spark.conf.get(CHECKPOINT_MANAGER) == FILESYSTEM_CHECKPOINTS
        # And afterwards the session's own value is back and the other is unset
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert spark.conf.get(CHECKPOINT_MANAGER, None) is None

        # And a setting a running session cannot change is refused by name
        refused = _session_conf(spark, {"spark.executor.memory": "3g"})
        with pytest.raises(InvalidSetting, match=r"spark\.executor\.memory"), refused:
            pass
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", own)


@pytest.mark.parametrize("conf", [(("sql.x", "1"),), (("", "1"),)])
def test_session_settings_must_be_spark_keys(conf: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(InvalidSetting, match="spark conf"):
        SparkBenchParams(spark_conf=conf)


def test_cli_refuses_a_spark_conf_without_a_value() -> None:
    result = CliRunner().invoke(main, ["bench", "spark", "--spark-conf", "spark.sql.x"])

    assert result.exit_code != 0
    assert "'spark.sql.x'" in result.output and "KEY=VALUE" in result.output


def test_cli_lists_every_parameter() -> None:
    result = CliRunner().invoke(main, ["bench", "spark", "--help"])

    assert result.exit_code == 0, result.output
    for flag in (
        "--messages",
        "--payload-bytes",
        "--max-per-trigger",
        "--partitions",
        "--latency-messages",
        "--latency-rate",
        "--trigger-interval",
        "--visibility-timeout",
        "--bucket-size",
        "--master",
        "--spark-conf",
        "--floor-seconds",
        "--no-source-floor",
        "--seed",
        "--no-baseline",
        "--keyspace",
        "--json",
    ):
        assert flag in result.output


def test_payloads_are_made_in_the_executors_in_make_payloads_format() -> None:
    import pyarrow as pa

    from spark_queue.bench.consistency import parse_payload
    from spark_queue.bench.spark_bench import payload_batches

    ids = [pa.RecordBatch.from_arrays([pa.array(range(5, 9), pa.int64())], ["id"])]
    first = list(payload_batches(iter(ids), size=64, seed=7))
    again = list(payload_batches(iter(ids), size=64, seed=7))
    other = list(payload_batches(iter(ids), size=64, seed=8))

    payloads = first[0].column("payload").to_pylist()
    assert [len(p) for p in payloads] == [64] * 4
    assert [parse_payload(p) for p in payloads] == [(0, 5), (0, 6), (0, 7), (0, 8)]
    assert first[0].equals(again[0]) and not first[0].equals(other[0])  # seeded, repeatable


@given(
    start=st.integers(0, 10**6),
    rows=st.integers(0, 30_000),
    most=st.integers(1, 10_000),
)
def test_the_source_floor_splits_a_step_into_consecutive_parts_of_at_most_most_rows(
    start: int, rows: int, most: int
) -> None:
    parts = floor_parts(start, start + rows, most)

    assert [n for low, high in parts for n in range(low, high)] == list(range(start, start + rows))
    assert all(0 < high - low <= most for low, high in parts)
    assert len(parts) == math.ceil(rows / most)


def test_a_source_floor_batch_has_the_sources_schema_and_its_rows() -> None:
    from spark_queue.spark.reading import ARROW_SCHEMA

    batch = floor_batch(40, 45, 128)

    assert batch.schema.equals(ARROW_SCHEMA)
    assert batch.column("id").to_pylist() == [40, 41, 42, 43, 44]
    assert {len(p) for p in batch.column("payload").to_pylist()} == {128}
    assert batch.column("headers").to_pylist() == [[]] * 5

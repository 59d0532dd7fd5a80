"""The jobs in ``jobs/``: settings, sample orders, the validation rules, and whole runs.

Whole runs use real Spark and a real Cassandra keyspace: the producer fills
``orders``, the pipeline drains it, and every order must be in ``shipments``
or ``orders-rejected`` exactly once, with ``orders`` empty afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs import demo, order_producer, pipeline
from jobs import orders as rules
from jobs.order_producer import produce
from jobs.order_routing import route_orders
from jobs.orders import DEFECTS, SampleOrder, sample_orders
from jobs.pipeline_run import (
    WRITER_ID_FILE,
    PipelineSummary,
    ensure_queues,
    run_pipeline,
    writer_identity,
)
from jobs.settings import (
    DEFAULT_CONFIG,
    JobConfig,
    ProducerSettings,
    connection_settings,
    job_settings,
    load_config,
    read_spark_defaults,
)
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import InvalidSetting
from spark_queue.spark.options import connector_options

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "jobs"


@pytest.fixture
def config(tmp_path: Path) -> JobConfig:
    """The shipped configuration, with checkpoints under the test's folder."""
    shipped = load_config()
    return dataclasses.replace(
        shipped,
        pipeline=dataclasses.replace(shipped.pipeline, checkpoint_dir=tmp_path / "checkpoints"),
    )


@pytest.fixture
def client(keyspace: ConnectionSettings) -> Iterator[QueueClient]:
    with QueueClient(settings=keyspace) as c:
        yield c


def _run_job(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    # Workers of a checkout find spark_queue through the repo; an install needs nothing.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("PYSPARK_PYTHON", None)  # the job picks its own interpreter
    return subprocess.run(
        [sys.executable, str(JOBS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def _hosts(settings: ConnectionSettings) -> str:
    return ",".join(str(h) for h in settings.hosts)


# -- settings ------------------------------------------------------------------------------


def test_shipped_config_and_spark_defaults_load() -> None:
    config = load_config(DEFAULT_CONFIG)

    assert [q.name for q in config.queues()] == ["orders", "shipments", "orders-rejected"]
    assert config.connection["keyspace"] == "bdq"
    spark_conf = read_spark_defaults()
    assert spark_conf["spark.master"] == "local[2]"
    assert spark_conf["spark.ui.enabled"] == "false"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[pipline]\n", "unknown key 'pipline'"),
        ("[queues.orders]\nbucket_size = 0\n", "bucket_size 0"),
        ("[queues.orders]\nname = 'bad name'\n", "queue name 'bad name'"),
        ("[queues.shipments]\nname = 'orders'\n", "the three queues must differ"),
        ("[producer]\nmalformed_fraction = 2\n", "malformed_fraction = 2"),
        ("[pipeline]\nmax_messages_per_trigger = 0\n", "max_messages_per_trigger = 0"),
        ("[connection]\nconsistency = 'SOME'\n", "consistency = 'SOME'"),
        ("[connection]\npassword = 'x'\n", "unknown key 'password'"),
        ("not toml [", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key_and_the_rule(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "pipeline.toml"
    file.write_text(text)

    with pytest.raises(InvalidSetting, match=message.replace("[", r"\[")):
        load_config(file)


def test_flags_win_over_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    file = tmp_path / "pipeline.toml"
    file.write_text(
        "[connection]\nhosts = '10.0.0.1'\nkeyspace = 'from_file'\n"
        "[producer]\ncount = 7\n[pipeline]\nmax_messages_per_trigger = 9\n"
    )
    config = load_config(file)
    env = {"BDQ_KEYSPACE": "from_env", "BDQ_LOCAL_DC": ""}  # an empty variable is unset

    def values(job: Any, *argv: str, env: dict[str, str]) -> Mapping[str, Any]:
        args = job.build_parser().parse_args(["--config", str(file), *argv])
        return job_settings(args, config, env=env)

    bare = values(demo, env={})
    from_env = values(demo, env=env)
    flagged = values(demo, "--keyspace", "from_flag", "--orders", "3", env=env)

    # The file beats the built-in defaults, and fills what no flag or variable gives
    assert connection_settings(bare, env={}).keyspace == "from_file"
    assert bare["count"] == 7
    assert bare["malformed"] == ProducerSettings().malformed_fraction  # not in the file
    # A BDQ_* variable beats the file; a flag beats the variable
    assert connection_settings(from_env, env=env).keyspace == "from_env"
    assert connection_settings(from_env, env=env).local_dc is None
    assert connection_settings(flagged, env=env).keyspace == "from_flag"
    assert flagged["count"] == 3
    # The pipeline's own flags go the same way
    assert values(pipeline, env={})["max_messages_per_trigger"] == 9
    assert (
        values(pipeline, "--max-messages-per-trigger", "4", env={})["max_messages_per_trigger"] == 4
    )
    assert values(order_producer, "--rate", "12.5", env={})["rate"] == 12.5
    options = connector_options(connection_settings(flagged, env=env))
    assert options == {
        "hosts": "10.0.0.1:9042",
        "keyspace": "from_flag",
        "consistency": "LOCAL_QUORUM",
    }


# -- sample orders and the writer identity ---------------------------------------------------


def test_sample_orders_are_malformed_in_the_share_asked_with_every_defect() -> None:
    orders = list(sample_orders(200, 0.1, seed=3, prefix="t"))

    bad = [o for o in orders if o.reason is not None]
    assert len(bad) == 20
    assert {o.reason for o in bad} == {reason for reason, _ in DEFECTS}
    assert len({o.order_id for o in orders}) == 200
    for order in orders:
        if order.reason is None:
            assert json.loads(order.payload)["order_id"] == order.order_id


def test_writer_identity_is_kept_per_checkpoint(tmp_path: Path) -> None:
    first = writer_identity(str(tmp_path / "a"), "my app")

    assert writer_identity(str(tmp_path / "a"), "my app") == first
    assert (tmp_path / "a" / WRITER_ID_FILE).read_text().strip() == first
    assert first.startswith("my-app.")
    assert writer_identity(str(tmp_path / "b"), "my app") != first
    with pytest.raises(InvalidSetting, match="--writer-id"):
        writer_identity("s3a://bucket/checkpoints", "app")


# -- command lines -----------------------------------------------------------------------------


@pytest.mark.parametrize("script", ["pipeline.py", "order_producer.py", "demo.py"])
def test_each_job_has_help(script: str) -> None:
    result = _run_job(script, "--help", timeout=60)

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {script}")


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("pipeline.py", ["--trigger-interval", "5s"], "applies to --continuous runs only"),
        (
            "pipeline.py",
            ["--continuous", "--trigger-interval", "5 parsecs"],
            "'--trigger-interval' = '5 parsecs': must be a positive duration",
        ),
        ("pipeline.py", ["--keyspace", "1st"], "keyspace '1st': must start with a letter"),
        ("order_producer.py", ["--rate", "-3"], "--rate -3.0: must be a finite number"),
        (
            "order_producer.py",
            ["--malformed", "1.5"],
            "--malformed 1.5: must be a share from 0 to 1",
        ),
        ("demo.py", ["--orders", "-1"], "--orders -1: must be a whole number >= 0"),
    ],
)
def test_bad_arguments_fail_before_anything_runs(
    script: str, args: list[str], message: str
) -> None:
    result = _run_job(script, *args, timeout=60)

    assert result.returncode != 0
    assert message in result.stderr


# -- the validation rules, on a plain DataFrame (no Cassandra) ---------------------------------

ITEM = {"sku": "A-1", "qty": 2, "price": 2.5}
VALID = {"order_id": "o-1", "customer": "c-1", "items": [ITEM, {**ITEM, "qty": 1}]}
CASES: list[tuple[str, str | None]] = [
    (json.dumps(VALID), None),
    ("{", rules.REASON_NOT_JSON),
    ("", rules.REASON_NOT_JSON),
    ("[1, 2]", rules.REASON_NOT_JSON),
    ("42", rules.REASON_NOT_JSON),
    ("{}", rules.REASON_NO_ORDER_ID),
    (json.dumps({**VALID, "items": [{**ITEM, "qty": 1.5}]}), rules.REASON_WRONG_TYPE),
    (json.dumps({**VALID, "items": {"sku": "A-1"}}), rules.REASON_WRONG_TYPE),
    (json.dumps({**VALID, "order_id": "  "}), rules.REASON_NO_ORDER_ID),
    (json.dumps({**VALID, "customer": None}), rules.REASON_NO_CUSTOMER),
    (json.dumps({**VALID, "items": []}), rules.REASON_NO_ITEMS),
    (json.dumps({k: v for k, v in VALID.items() if k != "items"}), rules.REASON_NO_ITEMS),
    (json.dumps({**VALID, "items": [ITEM, None]}), rules.REASON_NO_SKU),
    (json.dumps({**VALID, "items": [{**ITEM, "sku": ""}]}), rules.REASON_NO_SKU),
    (json.dumps({**VALID, "items": [{**ITEM, "qty": -1}]}), rules.REASON_BAD_QTY),
    (json.dumps({**VALID, "items": [{"sku": "A-1", "price": 1.0}]}), rules.REASON_BAD_QTY),
    (json.dumps({**VALID, "items": [{**ITEM, "price": -0.01}]}), rules.REASON_BAD_PRICE),
    # Values whose sums would overflow (failing the whole batch under ANSI SQL) are rejected
    (json.dumps({**VALID, "items": [{**ITEM, "qty": 2**31 - 1}] * 2}), rules.REASON_BAD_QTY),
    (json.dumps({**VALID, "items": [{**ITEM, "price": 1e300}]}), rules.REASON_BAD_PRICE),
    (json.dumps({**VALID, "items": [{"sku": "A-1", "qty": 1}]}), rules.REASON_BAD_PRICE),
    # Spark's JSON reader takes NaN for a number; JSON does not, and neither does the pipeline
    (json.dumps({**VALID, "items": [{**ITEM, "price": float("nan")}]}), rules.REASON_NOT_JSON),
]


def test_route_orders_gives_each_message_its_queue_and_reason(spark: SparkSession) -> None:
    frame = spark.createDataFrame(
        [(i, text.encode(), f"k{i % 2}") for i, (text, _) in enumerate(CASES)],
        "id bigint, payload binary, key string",
    )

    routed = route_orders(frame, "ship", "reject")

    actual = routed.select(
        F.col("headers")[rules.HEADER_SOURCE_ID].cast("bigint").alias("id"),
        "queue",
        F.col("headers")[rules.HEADER_REASON].alias("reason"),
        "key",
    )
    expected = spark.createDataFrame(
        [(i, "ship" if r is None else "reject", r, f"k{i % 2}") for i, (_, r) in enumerate(CASES)],
        actual.schema,
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)
    shipment = json.loads(routed.filter("queue = 'ship'").first()["payload"])
    assert shipment["item_count"] == 3
    assert shipment["line_count"] == 2
    assert shipment["total"] == 7.5
    assert shipment["source_id"] == 0
    assert set(rules.ENRICHED_FIELDS) <= set(shipment)
    rejected = routed.filter("queue = 'reject'").collect()
    assert {bytes(r["payload"]) for r in rejected} == {t.encode() for t, r in CASES if r}


# -- whole runs: real Spark, real Cassandra ------------------------------------------------------


def _drain_view(client: QueueClient, name: str) -> list[tuple[bytes, dict[str, str]]]:
    """Every message of a queue, peeked (the queue keeps them)."""
    return [(m.payload, dict(m.headers)) for m in client.queue(name).peek(10_000)]


def _check_outputs(client: QueueClient, sent: list[SampleOrder]) -> None:
    valid = {o.order_id: o for o in sent if o.reason is None}
    shipments = _drain_view(client, "shipments")
    by_id = Counter(json.loads(payload)["order_id"] for payload, _ in shipments)
    assert by_id == Counter(list(valid)), "every valid order in shipments exactly once"
    for payload, headers in shipments:
        shipment = json.loads(payload)
        order = valid[shipment["order_id"]]
        assert headers[rules.HEADER_ORDER_ID] == order.order_id
        assert shipment["total"] == pytest.approx(order.total, abs=0.005)
        assert shipment["item_count"] == sum(i["qty"] for i in json.loads(order.payload)["items"])
        assert set(rules.ENRICHED_FIELDS) <= set(shipment)

    rejected = _drain_view(client, "orders-rejected")
    expected = Counter((o.payload, o.reason) for o in sent if o.reason is not None)
    assert Counter((p, h[rules.HEADER_REASON]) for p, h in rejected) == expected
    assert client.queue("orders").stats().total == 0, "orders is empty afterwards"


def test_pipeline_sends_every_order_once_and_drains_orders(
    spark: SparkSession,
    keyspace: ConnectionSettings,
    client: QueueClient,
    config: JobConfig,
    tmp_path: Path,
) -> None:
    # Given 300 orders in 'orders', 10% malformed (each defect at least three times)
    ensure_queues(keyspace, config)
    sent = list(sample_orders(300, 0.1, seed=11, prefix="t"))
    seeded = produce(client.queue("orders"), sent, batch_size=100)
    assert seeded.sent == 300 and seeded.malformed == 30

    # When the pipeline drains it in batches of at most 120
    lines: list[str] = []
    checkpoint = str(tmp_path / "checkpoint")
    summary = run_pipeline(
        spark,
        config,
        keyspace,
        checkpoint=checkpoint,
        max_messages_per_trigger=120,
        echo=lines.append,
    )

    # Then each order went to exactly one place, and the summary says so
    _check_outputs(client, sent)
    assert (summary.messages_in, summary.shipped, summary.rejected) == (300, 270, 30)
    assert summary.batches >= 3
    assert summary.queue_depths == {"orders": 0, "shipments": 270, "orders-rejected": 30}
    assert "messages in         300" in summary.render()

    # And a second run from the same checkpoint finds nothing and sends nothing
    again = run_pipeline(spark, config, keyspace, checkpoint=checkpoint, echo=lines.append)
    assert again.messages_in == 0
    _check_outputs(client, sent)


def test_producer_paces_to_the_rate(client: QueueClient, config: JobConfig) -> None:
    queue = client.create_queue("orders")

    summary = produce(queue, sample_orders(None, 0.0), rate=200, count=100, batch_size=50)

    assert summary.sent == 100
    assert 0.4 <= summary.elapsed < 5  # 100 orders at 200/s take about half a second
    assert queue.stats().total == 100


@pytest.mark.slow
@pytest.mark.spark  # in its own JVM, so no `spark` fixture marks it
def test_demo_seeds_runs_and_prints_the_summary(
    keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    # The command `make run` runs, on a fresh keyspace and checkpoint
    result = _run_job(
        "demo.py",
        "--orders",
        "200",
        "--malformed",
        "0.05",
        "--hosts",
        _hosts(keyspace),
        "--keyspace",
        keyspace.keyspace,
        "--checkpoint",
        str(tmp_path / "checkpoint"),
    )

    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "sent 200 orders (10 malformed)" in out
    summary = out[out.index("pipeline summary") :]
    assert "messages in         200" in summary
    assert "out                 190" in summary
    assert "rejected             10" in summary
    assert "msgs/s" in summary
    # and the command that runs the same pipeline on a cluster
    assert "spark-submit --master spark://<master>:7077" in out
    assert f"--keyspace {keyspace.keyspace}" in out
    # One registration path: Spark's own discovery, not replaced by the job
    assert "replaced a statically registered data source" not in result.stderr


def test_summary_rate_is_messages_over_elapsed() -> None:
    summary = PipelineSummary("availableNow", messages_in=500, shipped=490, rejected=10, elapsed=4)

    assert summary.rate == 125
    assert "125.0 msgs/s" in summary.render()

"""Settings of the jobs: ``conf/pipeline.toml``, the ``BDQ_*`` environment and command-line flags.

One precedence order for every value: a flag wins over its ``BDQ_*``
environment variable, which wins over the file, which wins over the library's
defaults. ``job_settings`` is the one place that says so, as the layers of a
``collections.ChainMap`` looked up in that order; the jobs keep their argparse
command lines (spark-submit runs them as plain scripts) and read every value
through it. The file is read and checked once; a bad value fails before
anything touches Spark or Cassandra, with a message naming the file, the key
and the rule.
"""

from __future__ import annotations

import argparse
import math
import os
import tomllib
from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_queue import defaults
from spark_queue.client import QueueClient
from spark_queue.config import (
    CONSISTENCY_LEVELS,
    ENV_VARS,
    ConnectionSettings,
    QueueSettings,
    check_queue_name,
    parse_duration,
)
from spark_queue.errors import InvalidSetting, QueueExists, QueueNotFound
from spark_queue.queue import Queue

#: The repository this module lives in (jobs run from a checkout).
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "conf" / "pipeline.toml"
SPARK_DEFAULTS = REPO_ROOT / "conf" / "spark-defaults.conf"

#: Connection keys the file may set (credentials only through the environment).
_FILE_CONNECTION_KEYS = ("hosts", "keyspace", "local_dc", "consistency")
_QUEUE_ROLES = ("orders", "shipments", "rejected")


@dataclass(frozen=True)
class QueueSpec:
    """A queue a job uses, and the settings it gets when the job creates it.

    Attributes:
        name: The queue's name.
        bucket_size: Ids per bucket, used only when the queue is created.
        visibility_timeout: Seconds, used only when the queue is created.
    """

    name: str
    bucket_size: int = defaults.BUCKET_SIZE
    visibility_timeout: float = 60.0

    def open(self, client: QueueClient) -> Queue:
        """The queue, created with these settings if it is missing; an existing one keeps its own.

        Not ``create_queue(exist_ok=True)``, which refuses a queue whose settings
        differ: an operator may have changed them (``bdq queue update``) since.
        """
        try:
            return client.queue(self.name)
        except QueueNotFound:
            pass
        try:
            return client.create_queue(
                self.name, bucket_size=self.bucket_size, visibility_timeout=self.visibility_timeout
            )
        except QueueExists:  # another job created it meanwhile
            return client.queue(self.name)


@dataclass(frozen=True)
class PipelineSettings:
    """The ``[pipeline]`` table: how the streaming query runs.

    Attributes:
        app_name: Spark application name; also names the checkpoint and the writer.
        checkpoint_dir: Folder of checkpoints; each query uses
            ``<checkpoint_dir>/<keyspace>/<app_name>``.
        trigger_interval: Micro-batch interval of ``--continuous``, such as ``'5s'``.
        visibility_timeout: The source's lease per micro-batch, such as ``'120s'``.
        max_messages_per_trigger: Most orders per micro-batch.
    """

    app_name: str = "bdq-orders-pipeline"
    checkpoint_dir: Path = Path(".bdq/checkpoints")
    trigger_interval: str = "5s"
    visibility_timeout: str = "120s"
    max_messages_per_trigger: int = 5000


@dataclass(frozen=True)
class ProducerSettings:
    """The ``[producer]`` table: defaults of ``order_producer.py`` and ``demo.py``.

    Attributes:
        rate: Messages per second; 0 sends as fast as the queue takes them.
        count: Orders per run.
        batch_size: Most messages per ``send_batch``.
        malformed_fraction: Share of orders made malformed on purpose, 0 to 1.
    """

    rate: float = 500.0
    count: int = 2000
    batch_size: int = 200
    malformed_fraction: float = 0.05


@dataclass(frozen=True)
class JobConfig:
    """Everything ``conf/pipeline.toml`` holds, checked.

    Attributes:
        connection: Connection values from the file (field name -> value).
        orders: Queue the pipeline reads and the producer fills.
        shipments: Queue of valid, enriched orders.
        rejected: Queue of malformed orders, each with the reason in a header.
        pipeline: The ``[pipeline]`` table.
        producer: The ``[producer]`` table.
        source: The file it came from (for messages), or None for built-in defaults.
    """

    connection: Mapping[str, str]
    orders: QueueSpec
    shipments: QueueSpec
    rejected: QueueSpec
    pipeline: PipelineSettings
    producer: ProducerSettings
    source: Path | None = None

    def queues(self) -> tuple[QueueSpec, QueueSpec, QueueSpec]:
        """The three queues, in pipeline order."""
        return (self.orders, self.shipments, self.rejected)

    def flag_values(self) -> dict[str, Any]:
        """The file's value (its built-in default when the file has none) of each job flag.

        Keyed by the flag's argparse ``dest``: ``--max-messages-per-trigger`` is
        ``max_messages_per_trigger``, and every job's ``--malformed`` is the
        ``[producer]`` table's ``malformed_fraction``. Connection keys appear only
        when the file sets them, so that ``ConnectionSettings`` keeps its defaults.
        """
        return {
            **self.connection,
            "count": self.producer.count,
            "rate": self.producer.rate,
            "batch_size": self.producer.batch_size,
            "malformed": self.producer.malformed_fraction,
            "trigger_interval": self.pipeline.trigger_interval,
            "max_messages_per_trigger": self.pipeline.max_messages_per_trigger,
        }


def _bad(where: str, key: str, value: object, rule: str) -> InvalidSetting:
    return InvalidSetting(f"{where}: {key} = {value!r}: {rule}")


def _table(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise _bad(where, key, value, "must be a table ([...])")
    return value


def _check_keys(table: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in allowed:
            raise InvalidSetting(f"{where}: unknown key {key!r}; known keys: {', '.join(allowed)}")


def _number(table: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise _bad(where, key, value, "must be a finite number >= 0")
    return float(value)


def _whole(table: Mapping[str, Any], key: str, default: int, where: str) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(where, key, value, "must be a whole number >= 0")
    return value


def _text(table: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise _bad(where, key, value, "must be a non-empty string")
    return value


def _duration(table: Mapping[str, Any], key: str, default: str | float, where: str) -> str:
    """A duration as every front end writes it (``config.parse_duration``), kept as text."""
    value = table.get(key, default)
    parse_duration(f"{where}: {key} =", value)
    return str(value)


def _queue_spec(table: Mapping[str, Any], role: str, where: str) -> QueueSpec:
    _check_keys(table, ("name", "bucket_size", "visibility_timeout"), where)
    name = _text(table, "name", {"rejected": "orders-rejected"}.get(role, role), where)
    try:
        check_queue_name(name)
        spec = QueueSpec(
            name,
            _whole(table, "bucket_size", defaults.BUCKET_SIZE, where),
            parse_duration(f"{where}: visibility_timeout =", table.get("visibility_timeout", 60.0)),
        )
        # The library checks the rest (bucket size range, positive timeout).
        QueueSettings(bucket_size=spec.bucket_size, visibility_timeout=spec.visibility_timeout)
    except InvalidSetting as e:
        raise InvalidSetting(f"{where}: {e}") from e
    return spec


def load_config(path: Path | str | None = None) -> JobConfig:
    """Read and check a jobs configuration file (default ``conf/pipeline.toml``).

    Raises:
        InvalidSetting: The file is missing, is not TOML, or a value breaks its rule.
    """
    file = Path(path) if path is not None else DEFAULT_CONFIG
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise InvalidSetting(f"config {str(file)!r}: no such file") from e
    except tomllib.TOMLDecodeError as e:
        raise InvalidSetting(f"config {str(file)!r}: not valid TOML: {e}") from e
    _check_keys(data, ("connection", "queues", "pipeline", "producer"), str(file))

    where = f"{file} [connection]"
    connection = _table(data, "connection", str(file))
    _check_keys(connection, _FILE_CONNECTION_KEYS, where)
    conn = {key: _text(connection, key, "", where) for key in connection}
    if "consistency" in conn and conn["consistency"].upper() not in CONSISTENCY_LEVELS:
        raise _bad(
            where, "consistency", conn["consistency"], f"must be one of {CONSISTENCY_LEVELS}"
        )

    queues = _table(data, "queues", str(file))
    _check_keys(queues, _QUEUE_ROLES, f"{file} [queues]")
    specs = {
        role: _queue_spec(_table(queues, role, f"{file} [queues]"), role, f"{file} [queues.{role}]")
        for role in _QUEUE_ROLES
    }
    names = [spec.name for spec in specs.values()]
    if len(set(names)) != len(names):
        raise InvalidSetting(f"{file} [queues]: names {names}: the three queues must differ")

    where = f"{file} [pipeline]"
    table = _table(data, "pipeline", str(file))
    defaults = PipelineSettings()
    _check_keys(table, tuple(PipelineSettings.__dataclass_fields__), where)
    max_rows = _whole(table, "max_messages_per_trigger", defaults.max_messages_per_trigger, where)
    if max_rows < 1:
        raise _bad(where, "max_messages_per_trigger", max_rows, "must be a whole number >= 1")
    pipeline = PipelineSettings(
        app_name=_text(table, "app_name", defaults.app_name, where),
        checkpoint_dir=Path(_text(table, "checkpoint_dir", str(defaults.checkpoint_dir), where)),
        trigger_interval=_duration(table, "trigger_interval", defaults.trigger_interval, where),
        visibility_timeout=_duration(
            table, "visibility_timeout", defaults.visibility_timeout, where
        ),
        max_messages_per_trigger=max_rows,
    )

    where = f"{file} [producer]"
    table = _table(data, "producer", str(file))
    _check_keys(table, tuple(ProducerSettings.__dataclass_fields__), where)
    fallback = ProducerSettings()
    producer = ProducerSettings(
        rate=_number(table, "rate", fallback.rate, where),
        count=_whole(table, "count", fallback.count, where),
        batch_size=_whole(table, "batch_size", fallback.batch_size, where),
        malformed_fraction=_number(table, "malformed_fraction", fallback.malformed_fraction, where),
    )
    if not 1 <= producer.batch_size <= 10_000:
        raise _bad(where, "batch_size", producer.batch_size, "must be from 1 to 10000")
    if producer.malformed_fraction > 1:
        raise _bad(where, "malformed_fraction", producer.malformed_fraction, "must be from 0 to 1")

    return JobConfig(
        connection=conn,
        orders=specs["orders"],
        shipments=specs["shipments"],
        rejected=specs["rejected"],
        pipeline=pipeline,
        producer=producer,
        source=file,
    )


# -- connection flags --------------------------------------------------------------------


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and the connection flags every job shares."""
    group = parser.add_argument_group(
        "connection",
        "Each flag wins over its BDQ_* environment variable, which wins over the config file."
        " Credentials come from BDQ_CASSANDRA_USERNAME / BDQ_CASSANDRA_PASSWORD.",
    )
    group.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="PATH",
        help="queue and connection settings (default: %(default)s)",
    )
    group.add_argument("--hosts", help="contact points, a comma list of host[:port]")
    group.add_argument("--keyspace", help="keyspace that holds the queues")
    group.add_argument("--local-dc", help="data center of the load-balancing policy")
    group.add_argument("--consistency", help=f"one of {', '.join(CONSISTENCY_LEVELS)}")


def job_settings(
    args: argparse.Namespace, config: JobConfig, env: Mapping[str, str] | None = None
) -> ChainMap[str, Any]:
    """Every setting of a job by its flag's ``dest``, in the jobs' one precedence order.

    The layers, looked up first to last: the flags given on the command line
    (argparse leaves the others None), the ``BDQ_*`` variables of the connection
    flags (an empty one counts as unset), then ``config``: the file's values over
    the built-in defaults (``JobConfig.flag_values``).

    Args:
        args: The parsed command line.
        config: The checked ``--config`` file.
        env: The environment to read (default ``os.environ``).
    """
    env = os.environ if env is None else env
    given = {dest: value for dest, value in vars(args).items() if value is not None}
    from_env = {key: env[ENV_VARS[key]] for key in _FILE_CONNECTION_KEYS if env.get(ENV_VARS[key])}
    return ChainMap(given, from_env, config.flag_values())


def connection_settings(
    settings: Mapping[str, Any], env: Mapping[str, str] | None = None
) -> ConnectionSettings:
    """The connection of ``job_settings``; credentials and TLS come from ``BDQ_*`` variables only.

    Args:
        settings: What ``job_settings`` returned.
        env: The same environment it read (default ``os.environ``).
    """
    return ConnectionSettings.from_env(
        env, **{key: settings.get(key) for key in _FILE_CONNECTION_KEYS}
    )


def read_spark_defaults(path: Path = SPARK_DEFAULTS) -> dict[str, str]:
    """``key value`` lines of a ``spark-defaults.conf`` file (``#`` starts a comment)."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.replace("\t", " ").partition(" ")
        if not key.startswith("spark.") or not value.strip():
            raise InvalidSetting(
                f"{path}:{number}: {line!r}: must be 'spark.<name> <value>' (or a # comment)"
            )
        values[key] = value.strip()
    return values

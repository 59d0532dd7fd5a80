"""Options of the ``bdq`` data source, parsed once into typed, picklable values.

Option names are case-insensitive. A bad value fails when the query starts,
with a message naming the option, the value and what is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_queue import config, defaults
from spark_queue.config import ConnectionSettings, check_queue_name
from spark_queue.errors import InvalidSetting

#: Connection options, by their spelling in the docs, with the settings field behind each.
CONNECTION_OPTIONS = {
    "hosts": "hosts",
    "keyspace": "keyspace",
    "localDc": "local_dc",
    "username": "username",
    "password": "password",
    "consistency": "consistency",
    "authProvider": "auth_provider",
    "protocolVersion": "protocol_version",
    "tls": "tls",
    "tlsCaFile": "tls_ca_file",
    "tlsCertFile": "tls_cert_file",
    "tlsKeyFile": "tls_key_file",
    "tlsCheckHostname": "tls_check_hostname",
}
SOURCE_OPTIONS = (
    "queue",
    "queuePattern",
    "visibilityTimeout",
    "maxMessagesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "minPartitions",
    "orderHint",
    "failOnDataLoss",
)
SINK_OPTIONS = ("queue", "writerId")
#: Spark's own options, which it passes on to sources and sinks.
SPARK_OPTIONS = frozenset({"path", "checkpointlocation", "queryname"})

#: Most partitions ``minPartitions`` may ask for (the source's MAX_PARTITIONS per step).
MAX_MIN_PARTITIONS = 64
#: Messages one micro-batch leases when no limit is set (bounds executor memory).
DEFAULT_MAX_MESSAGES_PER_TRIGGER = 100_000
#: Seconds a stream waits for ``minMessagesPerTrigger`` before it runs a smaller batch
#: (Kafka's ``maxTriggerDelay`` default).
DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0

_BYTES = re.compile(r"\s*(\d+)\s*(b|k|kb|m|mb|g|gb)?\s*", re.IGNORECASE)
_UNIT_BYTES = {None: 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
#: Largest maxBytesPerTrigger (1 TiB): anything larger is a typo, not a batch.
MAX_BYTES_PER_TRIGGER = 1024**4


_NO_OFFSETS = (
    "a queue has no offsets to start or end at: a stream receives what is visible and"
    " acked messages are gone; start a new checkpoint to begin afresh, bound a run with"
    " trigger(availableNow=True), or read without consuming with spark.read.format('bdq')"
)
#: Spark's Kafka source and sink options with why bdq does not take each (a Kafka
#: user's first guesses get an answer, not just "unknown").
KAFKA_OPTIONS = {
    "subscribe": "use option 'queue' (a name or a comma list of names)",
    "subscribePattern": "use option 'queuePattern'",
    "assign": "queues have no partitions to assign: use option 'queue'; queries reading one"
    " queue split its buckets among themselves",
    "topic": "use option 'queue' (or a 'queue' column to route each row)",
    "startingOffsets": _NO_OFFSETS,
    "endingOffsets": _NO_OFFSETS,
    "startingTimestamp": _NO_OFFSETS,
    "startingOffsetsByTimestamp": _NO_OFFSETS,
    "endingOffsetsByTimestamp": _NO_OFFSETS,
    "startingOffsetsByTimestampStrategy": _NO_OFFSETS,
    "maxOffsetsPerTrigger": "use option 'maxMessagesPerTrigger'",
    "minOffsetsPerTrigger": "use option 'minMessagesPerTrigger' (with 'maxTriggerDelay')",
    "maxRecordsPerPartition": "a partition reads one bucket (at most a bucket's worth);"
    " use option 'minPartitions' or a smaller bucket_size for more, smaller partitions",
    "includeHeaders": "the 'headers' column (map<string,string>) is always there",
    "groupIdPrefix": "queries share a queue through bucket ownership, not consumer groups:"
    " there is no group id to set",
    "fetchOffset.numRetries": "there are no offsets to fetch; the driver retries Cassandra"
    " requests itself (connection option 'consistency', the cluster's timeouts)",
    "fetchOffset.retryIntervalMs": "there are no offsets to fetch",
    "kafkaConsumer.pollTimeoutMs": "a task reads its bucket in one receive: nothing to poll",
}
_KAFKA_LOWER = {name.lower(): name for name in KAFKA_OPTIONS}
#: Prefixes of Kafka client settings (``kafka.bootstrap.servers``, ``kafka.group.id``, ...).
_KAFKA_PREFIX = (
    "kafka.",
    "use the connection options ('hosts', 'keyspace', 'localDc', 'username', 'password',"
    " 'tls...') or the BDQ_* environment",
)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in options.items() if v is not None}


def _check_known(options: Mapping[str, str], own: tuple[str, ...], role: str) -> None:
    names = [*own, *CONNECTION_OPTIONS]
    allowed = {n.lower() for n in names} | SPARK_OPTIONS
    for key in options:
        name = _KAFKA_LOWER.get(key, key)
        reason = KAFKA_OPTIONS.get(name)
        if reason is None and key.startswith(_KAFKA_PREFIX[0]):
            reason = _KAFKA_PREFIX[1]
        if reason is not None and key not in allowed:
            raise InvalidSetting(
                f"option {name!r}: a Kafka option the bdq {role} does not take: {reason}"
            )
        if key not in allowed:
            raise InvalidSetting(
                f"option {key!r}: unknown for the bdq {role}; known options: {', '.join(names)}"
            )


def parse_duration(option: str, value: str) -> float:
    """Seconds from a positive duration option, in the syntax of ``config.parse_duration``."""
    return config.parse_duration(f"option {option!r} =", value)


def parse_bytes(option: str, value: str) -> int:
    """Bytes from '1048576', '512k', '10m' or '1g' (binary units, as Spark's sizes)."""
    match = _BYTES.fullmatch(str(value))
    number = int(match[1]) * _UNIT_BYTES[(match[2] or "b")[0].lower()] if match else 0
    if not 1 <= number <= MAX_BYTES_PER_TRIGGER:
        raise InvalidSetting(
            f"option {option!r} = {value!r}: must be a size from 1 byte to 1 TiB, such as"
            " '1048576', '512k', '10m' or '1g'"
        )
    return number


def parse_positive_int(option: str, value: str, high: int) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if not 1 <= number <= high:
        raise InvalidSetting(
            f"option {option!r} = {value!r}: must be a whole number from 1 to {high}"
        )
    return number


#: Spark conf prefix of bdq options: ``spark.bdq.<option>`` (names case-insensitive).
SPARK_CONF_PREFIX = "spark.bdq."
#: Spark Cassandra Connector keys that mean the same as a bdq option.
SCC_KEYS = {
    "spark.cassandra.connection.host": "hosts",
    "spark.cassandra.connection.localdc": "localDc",
    "spark.cassandra.auth.username": "username",
    "spark.cassandra.auth.password": "password",
    "spark.cassandra.connection.ssl.enabled": "tls",
}
_SCC_PORT = "spark.cassandra.connection.port"


def options_from_spark_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """bdq options from a Spark conf: ``spark.bdq.<option>``, then the SCC's equivalent keys.

    ``spark.cassandra.connection.port`` applies to SCC hosts given without a
    port. Keys are returned lower-cased, as the data source sees option names.
    """
    found: dict[str, str] = {}
    lowered = {key.lower(): value for key, value in conf.items()}
    port = lowered.get(_SCC_PORT.lower())
    for key, option in SCC_KEYS.items():
        value = lowered.get(key)
        if value is None:
            continue
        if option == "hosts" and port:
            value = ",".join(
                h.strip() if ":" in h else f"{h.strip()}:{port}" for h in value.split(",")
            )
        found[option.lower()] = value
    names = [*CONNECTION_OPTIONS, *dict.fromkeys(SOURCE_OPTIONS + SINK_OPTIONS)]
    known = {name.lower() for name in names}
    for key, value in lowered.items():
        if key.startswith(SPARK_CONF_PREFIX):
            option = key[len(SPARK_CONF_PREFIX) :]
            if option not in known:
                raise InvalidSetting(
                    f"Spark conf {key!r}: no such bdq option; known options: {', '.join(names)}"
                )
            found[option] = value
    return found


def connection_settings(options: Mapping[str, str]) -> ConnectionSettings:
    """Connection settings from the options; the BDQ_* environment fills the gaps."""
    given: dict[str, Any] = {
        field: options.get(name.lower()) for name, field in CONNECTION_OPTIONS.items()
    }
    try:
        return ConnectionSettings.from_env(**given)
    except InvalidSetting as e:
        raise InvalidSetting(f"bdq connection options: {e}") from e


def connector_options(settings: ConnectionSettings) -> dict[str, str]:
    """The ``format("bdq")`` options that point executors at ``settings``' cluster.

    Executors do not see the driver's environment, so every setting travels
    as an option: the inverse of ``connection_settings``.
    """
    options = {
        "hosts": ",".join(str(h) for h in settings.hosts),
        "keyspace": settings.keyspace,
        "consistency": settings.consistency,
    }
    if settings.local_dc:
        options["localDc"] = settings.local_dc
    if settings.username is not None and settings.password is not None:
        options["username"] = settings.username
        options["password"] = settings.password
    defaults = ConnectionSettings()
    for option, name in CONNECTION_OPTIONS.items():
        value = getattr(settings, name)
        if option not in options and value is not None and value != getattr(defaults, name):
            options[option] = str(value).lower() if isinstance(value, bool) else str(value)
    return options


def parse_bool(option: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidSetting(f"option {option!r} = {value!r}: must be 'true' or 'false'")
    return lowered == "true"


def parse_queues(value: str) -> tuple[str, ...]:
    """A comma list of queue names, each checked, in the order given, without repeats."""
    names = [name.strip() for name in str(value).split(",")]
    if not all(names):
        raise InvalidSetting(
            f"option 'queue' = {value!r}: must be one queue name or a comma list of names"
        )
    return tuple(dict.fromkeys(check_queue_name(name) for name in names))


def parse_pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise InvalidSetting(
            f"option 'queuePattern' = {value!r}: not a regular expression ({e})"
        ) from e
    return value


@dataclass(frozen=True)
class SourceOptions:
    """Options of ``spark.readStream.format("bdq")`` and ``spark.read.format("bdq")``.

    Attributes:
        queue: Queue to read: the first of ``queues``, or, in the options an
            input partition carries, that partition's queue ("" with a
            pattern before it is resolved).
        connection: Where the queue lives.
        visibility_timeout: Lease per micro-batch in seconds; None for the queue's.
        max_messages_per_trigger: Most messages per micro-batch; None for no
            option (Spark's ReadAllAvailable, capped at 100000 per batch).
        order_hint: K per receive; None for the queue's.
        queues: Every queue named by the ``queue`` option (a comma list).
        queue_pattern: Regular expression over the keyspace's queue names
            (``queuePattern``), matched in full; None with ``queue``.
        min_messages_per_trigger: Fewest messages a micro-batch waits for,
            unless ``max_trigger_delay`` passed since the last batch.
        max_trigger_delay: Seconds (see above).
        fail_on_data_loss: Fail the query when a replayed micro-batch finds
            messages gone; False logs them and goes on.
        max_bytes_per_trigger: Most payload bytes per micro-batch (at least
            one message); None for no byte limit.
        min_partitions: Fewest input partitions a micro-batch is split into
            (busy buckets split into id slices); None to read each bucket whole.
    """

    queue: str
    connection: ConnectionSettings
    visibility_timeout: float | None
    max_messages_per_trigger: int | None
    order_hint: int | None
    queues: tuple[str, ...] = ()
    queue_pattern: str | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY
    fail_on_data_loss: bool = True
    max_bytes_per_trigger: int | None = None
    min_partitions: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = _lower(options)
        _check_known(opts, SOURCE_OPTIONS, "source")
        if ("queue" in opts) == ("queuepattern" in opts):
            raise InvalidSetting(
                "option 'queue' is required: the name of the queue to read, a comma list"
                " of names, or instead option 'queuePattern' (a regular expression);"
                " not both"
            )
        queues = parse_queues(opts["queue"]) if "queue" in opts else ()
        pattern = parse_pattern(opts["queuepattern"]) if "queuepattern" in opts else None
        vt = opts.get("visibilitytimeout")
        limit = opts.get("maxmessagespertrigger")
        minimum = opts.get("minmessagespertrigger")
        delay = opts.get("maxtriggerdelay")
        hint = opts.get("orderhint")
        fail = opts.get("failondataloss")
        max_bytes = opts.get("maxbytespertrigger")
        partitions = opts.get("minpartitions")
        if delay is not None and minimum is None:
            raise InvalidSetting(
                f"option 'maxTriggerDelay' = {delay!r}: applies only with 'minMessagesPerTrigger'"
            )
        min_messages = (
            None
            if minimum is None
            else parse_positive_int("minMessagesPerTrigger", minimum, 10_000_000)
        )
        max_messages = (
            None
            if limit is None
            else parse_positive_int("maxMessagesPerTrigger", limit, 10_000_000)
        )
        if min_messages and min_messages > (max_messages or DEFAULT_MAX_MESSAGES_PER_TRIGGER):
            raise InvalidSetting(
                f"option 'minMessagesPerTrigger' = {minimum!r}: must not exceed"
                f" maxMessagesPerTrigger ({max_messages or DEFAULT_MAX_MESSAGES_PER_TRIGGER})"
            )
        return cls(
            queue=queues[0] if queues else "",
            queues=queues,
            queue_pattern=pattern,
            min_messages_per_trigger=min_messages,
            max_trigger_delay=DEFAULT_MAX_TRIGGER_DELAY
            if delay is None
            else parse_duration("maxTriggerDelay", delay),
            fail_on_data_loss=True if fail is None else parse_bool("failOnDataLoss", fail),
            max_bytes_per_trigger=None
            if max_bytes is None
            else parse_bytes("maxBytesPerTrigger", max_bytes),
            min_partitions=None
            if partitions is None
            else parse_positive_int("minPartitions", partitions, MAX_MIN_PARTITIONS),
            connection=connection_settings(opts),
            visibility_timeout=None if vt is None else parse_duration("visibilityTimeout", vt),
            max_messages_per_trigger=max_messages,
            order_hint=None
            if hint is None
            else parse_positive_int("orderHint", hint, defaults.MAX_ORDER_HINT),
        )


@dataclass(frozen=True)
class SinkOptions:
    """Options of ``df.writeStream.format("bdq")`` and ``df.write.format("bdq")``.

    Attributes:
        queue: Default target queue; None when every row names one in a ``queue`` column.
        connection: Where the queues live.
        writer_id: Stable identity of the writer. With it, a retried task or a
            replayed micro-batch never adds duplicate messages.
    """

    queue: str | None
    connection: ConnectionSettings
    writer_id: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = _lower(options)
        _check_known(opts, SINK_OPTIONS, "sink")
        writer_id = opts.get("writerid")
        if writer_id is not None and not re.fullmatch(r"[A-Za-z0-9_.:\-]{1,200}", writer_id):
            raise InvalidSetting(
                f"option 'writerId' = {writer_id!r}: must be 1-200 letters, digits or '_.:-'"
            )
        queue = opts.get("queue")
        return cls(
            queue=None if queue is None else check_queue_name(queue),
            connection=connection_settings(opts),
            writer_id=writer_id,
        )

"""SQS queue attributes, mapped onto the queue's settings and the service's own row.

| attribute | kept as |
| --- | --- |
| VisibilityTimeout | ``visibility_timeout`` (0 is kept as 1 ms: a lease must be positive) |
| MessageRetentionPeriod | ``message_ttl`` |
| MaximumMessageSize | ``max_message_bytes`` (the service counts attributes in, as SQS does) |
| DelaySeconds, ReceiveMessageWaitTimeSeconds | the ``sqs_queues`` row |
| QueueArn | made from the region the client signs for, the account and the name |
| ApproximateNumberOf* | ``Queue.stats()``: visible, in flight, delayed |
| CreatedTimestamp, LastModifiedTimestamp | the ``sqs_queues`` row |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_queue.config import QueueSettings
from spark_queue.message import QueueStats
from spark_queue.service.protocol import SqsError
from spark_queue.store.sqs_queues import SqsQueueRow

#: Attributes a client may set: (lowest, highest, SQS's default for a new queue).
SETTABLE: Mapping[str, tuple[int, int, int]] = {
    "VisibilityTimeout": (0, 43_200, 30),
    "MessageRetentionPeriod": (60, 1_209_600, 345_600),
    "DelaySeconds": (0, 900, 0),
    "MaximumMessageSize": (1_024, 1_048_576, 1_048_576),
    "ReceiveMessageWaitTimeSeconds": (0, 20, 0),
}
READ_ONLY = (
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
)
#: SQS attributes this service does not take yet (docs/service.md lists them).
NOT_BUILT = (
    "Policy",
    "RedrivePolicy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
)
_STATS = READ_ONLY[1:4]
#: Smallest lease a queue takes: SQS's VisibilityTimeout 0 is kept as this.
_SHORTEST_LEASE = 0.001


@dataclass(frozen=True, slots=True)
class Wanted:
    """Attributes a request sets, checked: each None when not given."""

    visibility_timeout: int | None = None
    retention: int | None = None
    delay: int | None = None
    max_size: int | None = None
    receive_wait: int | None = None

    def settings(self) -> dict[str, Any]:
        """The queue settings they change, as ``create_queue``/``update_queue`` keywords."""
        changes: dict[str, Any] = {}
        if self.visibility_timeout is not None:
            changes["visibility_timeout"] = float(self.visibility_timeout or _SHORTEST_LEASE)
        if self.retention is not None:
            changes["message_ttl"] = self.retention
        if self.max_size is not None:
            changes["max_message_bytes"] = self.max_size
        return changes

    def with_defaults(self) -> Wanted:
        """SQS's default for each attribute not given (a new queue)."""
        return Wanted(
            *(
                SETTABLE[name][2] if value is None else value
                for name, value in zip(SETTABLE, self._values(), strict=True)
            )
        )

    def _values(self) -> tuple[int | None, ...]:
        return (
            self.visibility_timeout,
            self.retention,
            self.delay,
            self.max_size,
            self.receive_wait,
        )

    def differences(self, settings: QueueSettings, row: SqsQueueRow) -> list[str]:
        """Names of the attributes given here whose current value differs."""
        current = current_values(settings, row)
        return [
            name
            for name, value in zip(SETTABLE, self._values(), strict=True)
            if value is not None and current[name] != value
        ]


def parse_wanted(given: object) -> Wanted:
    """``Attributes`` of CreateQueue or SetQueueAttributes, checked (string values, as SQS's)."""
    if given is None:
        return Wanted()
    if not isinstance(given, dict):
        raise SqsError("InvalidAttributeValue", "Attributes must map attribute names to strings.")
    values: dict[str, int] = {}
    for name, value in given.items():
        if name in NOT_BUILT:
            raise SqsError(
                "InvalidAttributeName",
                f"Attribute {name} is not supported by bdq serve yet (see docs/service.md).",
            )
        if name not in SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        low, high, _ = SETTABLE[name]
        text = value if isinstance(value, str) else None
        if text is None or not text.strip().isdigit() or not low <= int(text) <= high:
            raise SqsError(
                "InvalidAttributeValue",
                f"Invalid value for the parameter {name}: {value!r} must be a whole number"
                f" from {low} to {high}.",
            )
        values[name] = int(text)
    return Wanted(*(values.get(name) for name in SETTABLE))


def current_values(settings: QueueSettings, row: SqsQueueRow) -> dict[str, int]:
    """The settable attributes' current values."""
    return {
        "VisibilityTimeout": int(settings.visibility_timeout),
        "MessageRetentionPeriod": settings.message_ttl,
        "DelaySeconds": row.delay_seconds,
        "MaximumMessageSize": settings.max_message_bytes,
        "ReceiveMessageWaitTimeSeconds": row.receive_wait_seconds,
    }


def asked_names(names: Iterable[str]) -> list[str]:
    """GetQueueAttributes' ``AttributeNames`` expanded (``All``), checked."""
    asked = list(names)
    everything = [*SETTABLE, *READ_ONLY]
    if "All" in asked:
        return everything
    for name in asked:
        if name not in everything and name not in NOT_BUILT:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
    return [n for n in asked if n in everything]  # not-built ones are left out, as unset


def describe(
    names: Iterable[str],
    settings: QueueSettings,
    row: SqsQueueRow,
    arn: str,
    stats: QueueStats | None,
) -> dict[str, str]:
    """The attributes ``names`` (already expanded), as SQS answers them: every value a string."""
    current = current_values(settings, row)
    answer: dict[str, str] = {}
    for name in names:
        if name in current:
            answer[name] = str(current[name])
        elif name == "QueueArn":
            answer[name] = arn
        elif name in _STATS and stats is not None:
            count = {
                "ApproximateNumberOfMessages": stats.visible,
                "ApproximateNumberOfMessagesNotVisible": stats.in_flight,
                "ApproximateNumberOfMessagesDelayed": stats.delayed,
            }[name]
            answer[name] = str(count)
        elif name == "CreatedTimestamp" and row.created_at is not None:
            answer[name] = str(int(row.created_at.timestamp()))
        elif name == "LastModifiedTimestamp" and row.modified_at is not None:
            answer[name] = str(int(row.modified_at.timestamp()))
    return answer


def needs_stats(names: Iterable[str]) -> bool:
    """Whether answering ``names`` needs the queue's counts (a read of its buckets)."""
    return any(n in _STATS for n in names)

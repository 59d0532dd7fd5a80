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
| FifoQueue | the name (``.fifo``), fixed at creation |
| ContentBasedDeduplication | the ``sqs_queues`` row (FIFO queues only) |
| DeduplicationScope, FifoThroughputLimit | their one supported value (FIFO queues only) |
| RedrivePolicy | ``dead_letter_queue`` and ``max_deliveries`` (``redrive_policy.py``) |
| RedriveAllowPolicy | the ``sqs_queues`` row |
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from spark_queue.config import QueueSettings
from spark_queue.message import QueueStats
from spark_queue.service.protocol import SqsError
from spark_queue.service.redrive_policy import (
    RedrivePolicy,
    parse_allow_policy,
    parse_redrive_policy,
)
from spark_queue.store.sqs_queues import SqsQueueRow

#: Attributes a client may set: (lowest, highest, SQS's default for a new queue).
SETTABLE: Mapping[str, tuple[int, int, int]] = {
    "VisibilityTimeout": (0, 43_200, 30),
    "MessageRetentionPeriod": (60, 1_209_600, 345_600),
    "DelaySeconds": (0, 900, 0),
    "MaximumMessageSize": (1_024, 1_048_576, 1_048_576),
    "ReceiveMessageWaitTimeSeconds": (0, 20, 0),
}
#: Dead-letter attributes: answered only when set.
REDRIVE = ("RedrivePolicy", "RedriveAllowPolicy")
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
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
)
#: FIFO queues' attributes that take one value only: the value, and what it means here.
FIFO_FIXED: Mapping[str, str] = {"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue"}
#: Every attribute of a FIFO queue beyond a standard queue's.
FIFO_ONLY = ("ContentBasedDeduplication", *FIFO_FIXED)
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
    content_dedup: bool | None = field(default=None, kw_only=True)
    #: Whether RedrivePolicy was given; ``redrive`` None then removes the policy.
    redrive_given: bool = field(default=False, kw_only=True)
    redrive: RedrivePolicy | None = field(default=None, kw_only=True)
    #: A checked RedriveAllowPolicy as canonical JSON ("" removes it); None: not given.
    redrive_allow: str | None = field(default=None, kw_only=True)

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
            ),
            content_dedup=bool(self.content_dedup),
            redrive_given=self.redrive_given,
            redrive=self.redrive,
            redrive_allow=self.redrive_allow,
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
        differ = [
            name
            for name, value in zip(SETTABLE, self._values(), strict=True)
            if value is not None and current[name] != value
        ]
        if self.content_dedup is not None and self.content_dedup != row.content_dedup:
            differ.append("ContentBasedDeduplication")
        if self.redrive_allow is not None and self.redrive_allow != (row.redrive_allow or ""):
            differ.append("RedriveAllowPolicy")
        return differ


def parse_wanted(given: object, *, fifo: bool, creating: bool) -> Wanted:
    """``Attributes`` of CreateQueue or SetQueueAttributes, checked (string values, as SQS's).

    Args:
        given: The request's ``Attributes``.
        fifo: Whether the queue is (or, when creating, is named as) a FIFO queue.
        creating: CreateQueue (FifoQueue may be given) rather than SetQueueAttributes.
    """
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise SqsError("InvalidAttributeValue", "Attributes must map attribute names to strings.")
    _check_fifo_flag(given.get("FifoQueue"), fifo=fifo, creating=creating)
    values: dict[str, int] = {}
    content_dedup: bool | None = None
    redrive: dict[str, Any] = {}
    for name, value in given.items():
        if name == "FifoQueue":
            continue  # checked above
        if name == "RedrivePolicy":
            redrive.update(redrive_given=True, redrive=parse_redrive_policy(value))
            continue
        if name == "RedriveAllowPolicy":
            redrive["redrive_allow"] = parse_allow_policy(value)
            continue
        if name in FIFO_ONLY and not fifo:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        if name in FIFO_FIXED:
            if value != FIFO_FIXED[name]:
                raise SqsError(
                    "InvalidAttributeValue",
                    f"Invalid value for the parameter {name}: {value!r}; bdq serve supports"
                    f" {FIFO_FIXED[name]!r} only (see docs/service.md).",
                )
            continue
        if name == "ContentBasedDeduplication":
            content_dedup = _boolean(name, value)
            continue
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
    return Wanted(*(values.get(name) for name in SETTABLE), content_dedup=content_dedup, **redrive)


def _boolean(name: str, value: object) -> bool:
    if value not in ("true", "false"):
        raise SqsError(
            "InvalidAttributeValue",
            f"Invalid value for the parameter {name}: {value!r} must be true or false.",
        )
    return value == "true"


def _check_fifo_flag(value: object, *, fifo: bool, creating: bool) -> None:
    """FifoQueue: given at creation only, and true exactly when the name ends with .fifo."""
    if value is None:
        if creating and fifo:
            raise SqsError(
                "InvalidParameterValue",
                "The name of a FIFO queue needs the attribute FifoQueue=true; a standard"
                " queue's name can only include alphanumeric characters, hyphens, or"
                " underscores.",
            )
        return
    if not creating:
        raise SqsError(
            "InvalidAttributeName", "Attribute FifoQueue can only be set when the queue is created."
        )
    if _boolean("FifoQueue", value) != fifo:
        raise SqsError(
            "InvalidParameterValue",
            "The name of a FIFO queue must end with the .fifo suffix, and only a FIFO queue's"
            f" name may (FifoQueue={value}).",
        )


def current_values(settings: QueueSettings, row: SqsQueueRow) -> dict[str, int]:
    """The settable attributes' current values."""
    return {
        "VisibilityTimeout": int(settings.visibility_timeout),
        "MessageRetentionPeriod": settings.message_ttl,
        "DelaySeconds": row.delay_seconds,
        "MaximumMessageSize": settings.max_message_bytes,
        "ReceiveMessageWaitTimeSeconds": row.receive_wait_seconds,
    }


def asked_names(names: Iterable[str], *, fifo: bool) -> list[str]:
    """GetQueueAttributes' ``AttributeNames`` expanded (``All``), checked."""
    asked = list(names)
    everything = [*SETTABLE, *READ_ONLY, *REDRIVE, *(("FifoQueue", *FIFO_ONLY) if fifo else ())]
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
    redrive: str | None = None,
) -> dict[str, str]:
    """The attributes ``names`` (already expanded), as SQS answers them: every value a string.

    ``redrive``: the queue's RedrivePolicy (``redrive_policy.describe_redrive``), if any.
    """
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
        elif name == "RedrivePolicy" and redrive is not None:
            answer[name] = redrive
        elif name == "RedriveAllowPolicy" and row.redrive_allow:
            answer[name] = row.redrive_allow
        elif name == "FifoQueue":
            answer[name] = "true"
        elif name == "ContentBasedDeduplication":
            answer[name] = "true" if row.content_dedup else "false"
        elif name in FIFO_FIXED:
            answer[name] = FIFO_FIXED[name]
    return answer


def needs_stats(names: Iterable[str]) -> bool:
    """Whether answering ``names`` needs the queue's counts (a read of its buckets)."""
    return any(n in _STATS for n in names)

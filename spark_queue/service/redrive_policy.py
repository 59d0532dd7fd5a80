"""Dead letters in SQS's words: RedrivePolicy, RedriveAllowPolicy, ListDeadLetterSourceQueues.

``RedrivePolicy`` (``{"deadLetterTargetArn": ..., "maxReceiveCount": N}``) is the
queue's ``dead_letter_queue`` and ``max_deliveries``: a receive that picks a
message already received N times moves it to the dead-letter queue instead, as
SQS moves one whose receive count exceeds ``maxReceiveCount``. The target must be
a queue of the caller's account, of the same type (FIFO or standard), whose
``RedriveAllowPolicy`` lets the source in. ``RedriveAllowPolicy`` is kept, checked
and canonical, in the ``sqs_queues`` row and enforced when a source names the
queue (``allowAll``, ``denyAll``, ``byQueue`` with up to 10 source ARNs, compared
by account and name). As on SQS, it is not checked again for sources set before.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from spark_queue.config import QueueSettings
from spark_queue.service.protocol import SqsError, integer, text
from spark_queue.service.queue_urls import (
    Caller,
    bdq_name,
    check_sqs_name,
    is_fifo,
    parse_queue_url,
    sqs_name,
)
from spark_queue.service.queues import QueueBook, sqs_errors

MAX_RECEIVE_COUNT = 1000
MAX_ALLOWED_SOURCES = 10
_PERMISSIONS = ("allowAll", "denyAll", "byQueue")


@dataclass(frozen=True, slots=True)
class RedrivePolicy:
    """A checked RedrivePolicy: the dead-letter queue (the target's SQS name) and the count."""

    target: str
    max_receive_count: int


def _bad(name: str, value: object, reason: str) -> SqsError:
    return SqsError(
        "InvalidParameterValue",
        f"Value {str(value)[:200]!r} for parameter {name} is invalid. Reason: {reason}",
    )


def arn_queue(arn: object, caller: Caller, name: str) -> str:
    """The SQS name of the caller's queue that ``arn`` names (``name``: the parameter)."""
    parts = arn.split(":") if isinstance(arn, str) else []
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"]:
        raise _bad(name, arn, "must be a queue ARN, arn:aws:sqs:<region>:<account>:<queue>.")
    if parts[4] != caller.account:
        raise _bad(name, arn, f"the queue must be of your own account, {caller.account}.")
    return check_sqs_name(parts[5])


def parse_redrive_policy(value: object) -> RedrivePolicy | None:
    """A RedrivePolicy attribute's value, checked in form; None for "" (remove the policy)."""
    if value == "":
        return None
    try:
        policy = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        policy = None
    if not isinstance(policy, dict) or set(policy) - {"deadLetterTargetArn", "maxReceiveCount"}:
        raise _bad(
            "RedrivePolicy", value, "must be JSON with deadLetterTargetArn, maxReceiveCount."
        )
    count = policy.get("maxReceiveCount")
    if isinstance(count, str) and count.isdigit():
        count = int(count)
    if not isinstance(count, int) or isinstance(count, bool):
        raise _bad("RedrivePolicy", value, "maxReceiveCount must be a whole number.")
    if not 1 <= count <= MAX_RECEIVE_COUNT:
        raise _bad("RedrivePolicy", value, f"maxReceiveCount must be 1 to {MAX_RECEIVE_COUNT}.")
    arn = policy.get("deadLetterTargetArn")
    if not isinstance(arn, str):
        raise _bad("RedrivePolicy", value, "deadLetterTargetArn must be a queue ARN.")
    return RedrivePolicy(arn, count)


def parse_allow_policy(value: object) -> str:
    """A RedriveAllowPolicy, checked, as canonical JSON ("" when given as "")."""
    if value == "":
        return ""
    try:
        policy = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        policy = None
    if not isinstance(policy, dict) or set(policy) - {"redrivePermission", "sourceQueueArns"}:
        raise _bad(
            "RedriveAllowPolicy", value, "must be JSON with redrivePermission, sourceQueueArns."
        )
    permission = policy.get("redrivePermission")
    arns = policy.get("sourceQueueArns")
    if permission not in _PERMISSIONS:
        raise _bad("RedriveAllowPolicy", value, f"redrivePermission must be one of {_PERMISSIONS}.")
    if permission == "byQueue":
        if (
            not isinstance(arns, list)
            or not 1 <= len(arns) <= MAX_ALLOWED_SOURCES
            or not all(isinstance(a, str) for a in arns)
        ):
            raise _bad(
                "RedriveAllowPolicy",
                value,
                f"byQueue needs sourceQueueArns, 1 to {MAX_ALLOWED_SOURCES} queue ARNs.",
            )
        return json.dumps({"redrivePermission": permission, "sourceQueueArns": arns})
    if arns is not None:
        raise _bad("RedriveAllowPolicy", value, "sourceQueueArns goes with byQueue only.")
    return json.dumps({"redrivePermission": permission})


def _allows(allow_policy: str | None, caller: Caller, source: str) -> bool:
    """Whether a dead-letter queue's RedriveAllowPolicy lets ``source`` (an SQS name) in."""
    if not allow_policy:
        return True
    policy = json.loads(allow_policy)
    if policy["redrivePermission"] == "allowAll":
        return True
    if policy["redrivePermission"] == "denyAll":
        return False
    # Compared by account and name: the region of an ARN is the signer's, not the queue's.
    wanted = f":{caller.account}:{source}"
    return any(arn.endswith(wanted) for arn in policy["sourceQueueArns"])


def redrive_settings(
    book: QueueBook, caller: Caller, source: str, policy: RedrivePolicy | None
) -> dict[str, Any]:
    """The queue settings a RedrivePolicy sets on queue ``source`` (an SQS name), all checked."""
    if policy is None:
        return {"dead_letter_queue": None, "max_deliveries": None}
    target = arn_queue(policy.target, caller, "RedrivePolicy")
    url = caller.url(target)
    try:
        _, row = book.open(bdq_name(caller.account, target), url)
    except SqsError as e:
        if e.shape != "QueueDoesNotExist":
            raise
        raise _bad("RedrivePolicy", policy.target, "Dead letter target does not exist.") from e
    if is_fifo(target) != is_fifo(source):
        raise _bad(
            "RedrivePolicy",
            policy.target,
            "the dead-letter queue of a FIFO queue must be a FIFO queue, and of a standard"
            " queue a standard queue.",
        )
    if not _allows(row.redrive_allow, caller, source):
        raise _bad(
            "RedrivePolicy",
            policy.target,
            f"its RedriveAllowPolicy does not let queue {source} use it as a dead-letter queue.",
        )
    return {
        "dead_letter_queue": bdq_name(caller.account, target),
        "max_deliveries": policy.max_receive_count,
    }


def describe_redrive(settings: QueueSettings, caller: Caller) -> str | None:
    """The RedrivePolicy of a queue's settings, None when it has none (or one of no SQS name)."""
    if settings.dead_letter_queue is None or settings.max_deliveries is None:
        return None
    target = sqs_name(caller.account, settings.dead_letter_queue)
    if target is None:
        return None
    return json.dumps(
        {"deadLetterTargetArn": caller.arn(target), "maxReceiveCount": settings.max_deliveries}
    )


def list_dead_letter_source_queues(
    book: QueueBook, caller: Caller, params: Mapping[str, Any]
) -> dict[str, Any]:
    """ListDeadLetterSourceQueues: the account's queues whose dead-letter queue this is."""
    url = text(params, "QueueUrl") or ""
    name = parse_queue_url(url, caller.account)
    limit = integer(params, "MaxResults", 1, 1000)
    after = text(params, "NextToken", optional=True)
    book.open(name, url)
    with sqs_errors(url):
        names = sorted(
            n
            for n in (sqs_name(caller.account, q) for q in book.client.dead_letter_sources(name))
            if n is not None and (after is None or n > after)
        )
    page = names[: limit or 1000]
    answer: dict[str, Any] = {"queueUrls": [caller.url(n) for n in page]}
    if limit is not None and len(names) > limit:
        answer["NextToken"] = page[-1]
    return answer

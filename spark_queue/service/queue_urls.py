"""An account's queues: their SQS names, URLs and ARNs, the bdq queues they are, the caller.

SQS queue ``orders`` of account ``acme`` is the bdq queue ``acme.orders``: account
names hold no ``.`` and SQS names none but FIFO's ``.fifo`` suffix, so the first
dot splits every bdq name in one way and two accounts' queues never share one
(``acme.orders.fifo`` is account ``acme``'s FIFO queue ``orders.fifo``). A queue
made with ``bdq queue create acme.orders`` is therefore account ``acme``'s queue
``orders`` too, and a Spark job reads what SDKs send by naming it so. Its URL is
``<scheme>://<host>/<account>/<queue>``, the host as the client reached it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from spark_queue.service.protocol import SqsError, invalid

FIFO_SUFFIX = ".fifo"
#: A standard queue's name, or a FIFO queue's: 1 to 80 characters with the suffix.
_SQS_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo")


def check_sqs_name(name: object) -> str:
    """Return ``name`` if it is a valid SQS queue name (standard, or FIFO with ``.fifo``)."""
    if not isinstance(name, str) or not _SQS_NAME.fullmatch(name):
        raise invalid(
            f"Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in"
            f" length, with the suffix .fifo for a FIFO queue (queue name {name!r})."
        )
    return name


def is_fifo(name: str) -> bool:
    """Whether the queue (an SQS or a bdq name) is a FIFO queue: its name says so."""
    return name.endswith(FIFO_SUFFIX)


def bdq_name(account: str, queue: str) -> str:
    """The bdq queue that is ``account``'s SQS queue ``queue``."""
    return f"{account}.{queue}"


def sqs_name(account: str, bdq_queue: str) -> str | None:
    """The SQS name of a bdq queue if it is ``account``'s, else None."""
    prefix = account + "."
    if not bdq_queue.startswith(prefix):
        return None
    rest = bdq_queue[len(prefix) :]
    return rest if _SQS_NAME.fullmatch(rest) else None


def queue_url(base: str, account: str, queue: str) -> str:
    """The URL of ``account``'s queue ``queue`` on the server ``base`` (scheme://host)."""
    return f"{base}/{account}/{queue}"


def parse_queue_url(url: object, account: str) -> str:
    """The bdq queue a ``QueueUrl`` names, if it is ``account``'s.

    A URL of another account's queue gets QueueDoesNotExist, whether the queue
    exists or not: a key learns nothing of other accounts.
    """
    if not isinstance(url, str) or not url:
        raise SqsError("MissingParameter", "The request must contain the parameter QueueUrl.")
    parts = [p for p in urlsplit(url).path.split("/") if p]
    if len(parts) != 2:
        raise SqsError(
            "InvalidAddress",
            f"QueueUrl {url!r}: must be http(s)://<host>/<account>/<queue>, as CreateQueue"
            " and GetQueueUrl answer it",
        )
    owner, queue = parts
    if owner != account or not _SQS_NAME.fullmatch(queue):
        raise SqsError("QueueDoesNotExist", f"The specified queue does not exist: {url}")
    return bdq_name(account, queue)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: the key's account, the region it signed for, the server's URL as reached."""

    account: str
    region: str
    base_url: str

    def url(self, queue: str) -> str:
        """The URL of this account's queue ``queue``."""
        return queue_url(self.base_url, self.account, queue)

    def arn(self, queue: str) -> str:
        """The ARN of this account's queue ``queue``."""
        return f"arn:aws:sqs:{self.region}:{self.account}:{queue}"

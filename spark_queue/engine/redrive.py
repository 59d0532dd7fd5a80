"""Redrive: moving dead letters back to the queue they came from (SQS's StartMessageMoveTask).

A redrive receives dead letters under a lease, sends each to its target (the
queue named by its ``bdq-dead-letter-source`` header, or the one given) and then
acks it in the dead-letter queue. The send is idempotent, keyed by the dead
letter's own id (``Queue.send_batch_once`` with writer ``redrive:<dead-letter
queue id>``): a run killed between the send and the ack leaves the message in
the dead-letter queue, where it shows again once its lease ends, and the next
run finds its send done and only acks it. So each dead letter reaches its
target at most once, and none is lost, however often a redrive is killed and
run again (with the same target).

The message keeps its payload, its key and its headers, minus the dead-letter
headers, plus ``bdq-redrive-count`` (how many times it has been redriven).

Only a dead-letter queue (one that some queue names as its
``dead_letter_queue``) is redriven to its sources; any other queue is refused
before anything is leased, unless the run is given a target (``to``). A
message that cannot go back (no source, its target gone, or refused by the
target: too large for its ``max_message_bytes`` now, say) is left in the
dead-letter queue, visible again when the run ends, and reported with its
reason; it does not stop the run.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from spark_queue.config import check_int, check_queue_name, check_seconds
from spark_queue.engine import counters
from spark_queue.engine.dead_letters import (
    HEADER_DELIVERIES,
    HEADER_ORIGINAL_ID,
    HEADER_REJECT_REASON,
    HEADER_SOURCE,
)
from spark_queue.errors import InvalidMessage, InvalidSetting, QueueNotFound, SparkQueueError

if TYPE_CHECKING:
    from spark_queue.engine.sending import Headers, Keys, Payload
    from spark_queue.message import Delivery

log = logging.getLogger(__name__)

HEADER_REDRIVES = "bdq-redrive-count"
#: Headers that say why a message is a dead letter; a redrive removes them.
DEAD_LETTER_HEADERS = frozenset(
    (HEADER_SOURCE, HEADER_DELIVERIES, HEADER_ORIGINAL_ID, HEADER_REJECT_REASON)
)
#: Dead letters received per round.
REDRIVE_BATCH = 100
#: Idempotent sends in flight at once.
SEND_THREADS = 8


class DeadLetterSource(Protocol):
    """What a redrive needs of the dead-letter queue it empties (``Queue`` is one)."""

    @property
    def queue_id(self) -> uuid.UUID: ...

    def receive(
        self,
        max_messages: int = 10,
        visibility_timeout: float | None = None,
        order_hint: int | None = None,
        wait: float = 0.0,
        *,
        buckets: Sequence[int] | None = None,
    ) -> list[Delivery]: ...

    @property
    def name(self) -> str: ...

    def ack_batch(self, receipts: Sequence[str], *, strict: bool = True) -> list[str]: ...

    def change_visibility(self, receipt: str, seconds: float) -> str: ...


class RedriveTarget(Protocol):
    """What a redrive needs of a queue it sends dead letters back to (``Queue`` is one)."""

    @property
    def name(self) -> str: ...

    def send_batch_once(
        self,
        writer: str,
        step: int,
        part: int,
        payloads: Sequence[Payload],
        headers: Headers = None,
        delay: float | Sequence[float] = 0.0,
        *,
        chunk: int = 0,
        key: Keys = None,
    ) -> list[int]: ...


@dataclass
class RedriveResult:
    """What a redrive did.

    Attributes:
        moved: Dead letters sent to their target and acked.
        by_target: ``moved`` per target queue.
        left: Dead letters left in the dead-letter queue, per reason (no
            source header and no ``to``, target queue missing, refused by
            the target).
        left_messages: The id of each dead letter left, with its reason.
    """

    moved: int = 0
    by_target: Counter[str] = field(default_factory=Counter)
    left: Counter[str] = field(default_factory=Counter)
    left_messages: dict[int, str] = field(default_factory=dict)


def redriven_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A dead letter's headers as it goes back: no dead-letter headers, one more redrive."""
    try:
        count = int(headers.get(HEADER_REDRIVES, "0"))
    except ValueError:
        count = 0
    kept = {k: v for k, v in headers.items() if k not in DEAD_LETTER_HEADERS}
    kept[HEADER_REDRIVES] = str(count + 1)
    return kept


def redrive(
    dead_letters: DeadLetterSource,
    open_queue: Callable[[str], RedriveTarget],
    *,
    sources: Callable[[], Sequence[str]],
    to: str | None = None,
    max_messages: int | None = None,
    rate: float | None = None,
    visibility_timeout: float = 30.0,
    progress: Callable[[int], None] | None = None,
    keyspace: str = "",
) -> RedriveResult:
    """Move dead letters to their target queues, each at most once (see the module docstring).

    Args:
        dead_letters: The dead-letter queue.
        open_queue: Opens a queue by name (``QueueClient.queue``).
        sources: The queues that name ``dead_letters`` as their dead-letter
            queue (asked only when there is no ``to``).
        to: Send every message here instead of its source queue.
        max_messages: Stop after moving this many.
        rate: Most messages moved per second.
        visibility_timeout: Lease of the dead letters while they are moved: a
            killed run's messages show again after it.
        progress: Called with the number moved after each round.
        keyspace: The keyspace of the queues, for this process's counters.

    Raises:
        InvalidSetting: No ``to``, and no queue names ``dead_letters`` as its
            dead-letter queue (nothing is leased).
    """
    if to is not None:
        check_queue_name(to)
        open_queue(to)  # QueueNotFound before anything moves
    elif not sources():
        raise InvalidSetting(
            f"queue {dead_letters.name!r}: is not a dead-letter queue (no queue names it as its"
            " dead_letter_queue), so it has no dead letters to send back; give a target queue"
            " (to=..., or --to) to move its messages there"
        )
    limit = None if max_messages is None else check_int("max_messages", max_messages, 1, 2**62)
    pace = None if rate is None else _check_rate(rate)
    lease = check_seconds("visibility_timeout", visibility_timeout)
    result = RedriveResult()
    writer = f"redrive:{dead_letters.queue_id}"
    targets: dict[str, RedriveTarget | None] = {}
    left_ids: dict[int, str] = {}  # left behind by this run (receipts): counted once, shown again
    began = time.monotonic()
    with ThreadPoolExecutor(SEND_THREADS, thread_name_prefix="bdq-redrive") as pool:
        while limit is None or result.moved < limit:
            want = REDRIVE_BATCH if limit is None else min(REDRIVE_BATCH, limit - result.moved)
            if pace is not None:
                want = min(want, max(1, math.ceil(pace)))  # about a second's worth per round
            deliveries = dead_letters.receive(want, visibility_timeout=lease)
            fresh = [d for d in deliveries if d.id not in left_ids]
            if not fresh:
                break  # nothing visible, or only what this run already left behind
            movable: list[tuple[Delivery, RedriveTarget]] = []
            for d in fresh:
                name = to or d.headers.get(HEADER_SOURCE)
                target = _target(name, targets, open_queue)
                if target is None:
                    reason = (
                        "no source header (use --to)" if name is None else f"queue {name!r} missing"
                    )
                    _leave(result, left_ids, d, reason)
                    continue
                movable.append((d, target))
            refusals = list(pool.map(lambda pair: _send_back(writer, *pair), movable))
            for (d, target), refusal in zip(movable, refusals, strict=True):
                if refusal is not None:
                    _leave(result, left_ids, d, f"refused by queue {target.name!r}", refusal)
            movable = [pair for pair, refusal in zip(movable, refusals, strict=True) if not refusal]
            # Acked only after every send returned: a crash before leaves them to the next run.
            dead_letters.ack_batch([d.receipt for d, _ in movable], strict=False)
            result.moved += len(movable)
            for _, target in movable:
                result.by_target[target.name] += 1
            _note_redriven(movable, keyspace)
            if progress is not None:
                progress(result.moved)
            if pace is not None:
                ahead = result.moved / pace - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
    _show_again(dead_letters, left_ids.values())
    return result


def _send_back(writer: str, dead_letter: Delivery, target: RedriveTarget) -> str | None:
    """Send one dead letter to its target once; None, or why the target refused it."""
    try:
        target.send_batch_once(
            writer,
            dead_letter.id,
            0,
            [dead_letter.payload],
            headers=[redriven_headers(dead_letter.headers)],
            key=dead_letter.key,
        )
    except (InvalidSetting, InvalidMessage) as e:  # the message, not the cluster: skip it
        return str(e)
    return None


def _leave(
    result: RedriveResult,
    left: dict[int, str],
    dead_letter: Delivery,
    reason: str,
    detail: str | None = None,
) -> None:
    """Count a dead letter this run leaves behind, and keep its receipt to show it again."""
    left[dead_letter.id] = dead_letter.receipt
    result.left[reason] += 1
    result.left_messages[dead_letter.id] = reason if detail is None else f"{reason}: {detail}"


def _show_again(dead_letters: DeadLetterSource, receipts: Iterable[str]) -> None:
    """Make the dead letters a run left visible at once: the run held them only to move past."""
    for receipt in receipts:
        try:
            dead_letters.change_visibility(receipt, 0)
        except (
            SparkQueueError
        ):  # its lease ran out meanwhile, or Cassandra hiccuped: it shows anyway
            log.warning("redrive: a dead letter left behind shows again only when its lease ends")


def _target(
    name: str | None,
    targets: dict[str, RedriveTarget | None],
    open_queue: Callable[[str], RedriveTarget],
) -> RedriveTarget | None:
    if name is None:
        return None
    if name not in targets:
        try:
            targets[name] = open_queue(name)
        except QueueNotFound:
            targets[name] = None
    return targets[name]


def _note_redriven(moved: Sequence[tuple[Delivery, RedriveTarget]], keyspace: str) -> None:
    """Count the moves into the process's counters, per target queue."""
    for name, count in Counter(target.name for _, target in moved).items():
        counters.REDRIVEN.labels(keyspace=keyspace, queue=name).inc(count)


def _check_rate(rate: object) -> float:
    ok = isinstance(rate, int | float) and not isinstance(rate, bool)
    if not ok or not 0 < float(rate) < math.inf:  # type: ignore[arg-type]
        raise InvalidSetting(f"rate {rate!r}: must be a positive number of messages per second")
    return float(rate)  # type: ignore[arg-type]

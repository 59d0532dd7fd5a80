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

The message keeps its payload and headers, minus the dead-letter headers, plus
``bdq-redrive-count`` (how many times it has been redriven).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from spark_queue.config import check_int, check_queue_name, check_seconds
from spark_queue.engine import counters
from spark_queue.engine.dead_letters import HEADER_DELIVERIES, HEADER_ORIGINAL_ID, HEADER_SOURCE
from spark_queue.errors import InvalidSetting, QueueNotFound

if TYPE_CHECKING:
    from spark_queue.engine.sending import Headers, Keys, Payload
    from spark_queue.message import Delivery

HEADER_REDRIVES = "bdq-redrive-count"
#: Headers that say why a message is a dead letter; a redrive removes them.
DEAD_LETTER_HEADERS = frozenset((HEADER_SOURCE, HEADER_DELIVERIES, HEADER_ORIGINAL_ID))
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

    def ack_batch(self, receipts: Sequence[str], *, strict: bool = True) -> list[str]: ...


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
            source header and no ``to``, target queue missing).
    """

    moved: int = 0
    by_target: Counter[str] = field(default_factory=Counter)
    left: Counter[str] = field(default_factory=Counter)


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
    to: str | None = None,
    max_messages: int | None = None,
    rate: float | None = None,
    visibility_timeout: float = 30.0,
    progress: Callable[[int], None] | None = None,
) -> RedriveResult:
    """Move dead letters to their target queues, each at most once (see the module docstring).

    Args:
        dead_letters: The dead-letter queue.
        open_queue: Opens a queue by name (``QueueClient.queue``).
        to: Send every message here instead of its source queue.
        max_messages: Stop after moving this many.
        rate: Most messages moved per second.
        visibility_timeout: Lease of the dead letters while they are moved: a
            killed run's messages show again after it.
        progress: Called with the number moved after each round.
    """
    if to is not None:
        check_queue_name(to)
        open_queue(to)  # QueueNotFound before anything moves
    limit = None if max_messages is None else check_int("max_messages", max_messages, 1, 2**62)
    pace = None if rate is None else _check_rate(rate)
    lease = check_seconds("visibility_timeout", visibility_timeout)
    result = RedriveResult()
    writer = f"redrive:{dead_letters.queue_id}"
    targets: dict[str, RedriveTarget | None] = {}
    left_ids: set[int] = set()  # left behind by this run: not counted twice if seen again
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
                    left_ids.add(d.id)
                    result.left[
                        "no source header (use --to)" if name is None else f"queue {name!r} missing"
                    ] += 1
                    continue
                movable.append((d, target))
            list(
                pool.map(
                    lambda pair: pair[1].send_batch_once(
                        writer, pair[0].id, 0, [pair[0].payload],
                        headers=[redriven_headers(pair[0].headers)],
                    ),
                    movable,
                )
            )  # fmt: skip
            # Acked only after every send returned: a crash before leaves them to the next run.
            dead_letters.ack_batch([d.receipt for d, _ in movable], strict=False)
            result.moved += len(movable)
            for _, target in movable:
                result.by_target[target.name] += 1
            _note_redriven(movable)
            if progress is not None:
                progress(result.moved)
            if pace is not None:
                ahead = result.moved / pace - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
    return result


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


def _note_redriven(moved: Sequence[tuple[Delivery, RedriveTarget]]) -> None:
    """Count the moves into the process's metrics, per target queue."""
    for name, count in Counter(target.name for _, target in moved).items():
        counters.REDRIVEN.labels(queue=name).inc(count)


def _check_rate(rate: object) -> float:
    ok = isinstance(rate, int | float) and not isinstance(rate, bool)
    if not ok or not 0 < float(rate) < math.inf:  # type: ignore[arg-type]
        raise InvalidSetting(f"rate {rate!r}: must be a positive number of messages per second")
    return float(rate)  # type: ignore[arg-type]

"""The order producer: sends sample JSON orders to the ``orders`` queue at a given rate.

::

    python jobs/order_producer.py --count 2000                 # 2000 orders at the configured rate
    python jobs/order_producer.py --rate 200 --duration 30     # 200 orders/s for 30 s
    python jobs/order_producer.py --count 5000 --rate 0        # as fast as the queue takes them

It uses the Python client (no Spark): orders go out in ``send_batch`` calls of
``--batch-size`` messages, paced so that the average rate stays at ``--rate``.
A share of them (``--malformed``) is malformed on purpose, one defect after
another (see ``jobs/orders.py``), so that the pipeline has something to reject.
It always stops by itself: after ``--count`` orders or ``--duration`` seconds,
whichever comes first.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

if __package__ in (None, ""):
    # Run as a script: make `jobs` (and a checkout's spark_queue) importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.orders import SampleOrder, sample_orders
from jobs.settings import (
    JobConfig,
    add_connection_flags,
    connection_settings,
    job_settings,
    load_config,
)
from spark_queue.client import QueueClient
from spark_queue.errors import InvalidSetting, SparkQueueError
from spark_queue.queue import Queue

#: Sends per second to aim for when pacing: batches shrink at low rates to stay smooth.
SENDS_PER_SECOND = 20


@dataclass
class ProducerSummary:
    """What one run sent.

    Attributes:
        queue: The queue the orders went to.
        sent: Orders sent.
        malformed: Of which malformed on purpose.
        elapsed: Seconds from the first send to the last.
    """

    queue: str
    sent: int = 0
    malformed: int = 0
    elapsed: float = 0.0

    @property
    def rate(self) -> float:
        """Orders per second achieved."""
        return self.sent / self.elapsed if self.elapsed > 0 else 0.0

    def render(self) -> str:
        """One line for the terminal."""
        return (
            f"producer: sent {self.sent} orders ({self.malformed} malformed) to {self.queue!r}"
            f" in {self.elapsed:.1f} s ({self.rate:.0f} msgs/s)"
        )


def _check(name: str, value: float | None, rule: str, ok: bool) -> None:
    if value is not None and not ok:
        raise InvalidSetting(f"{name} {value!r}: {rule}")


def check_bounds(
    rate: float | None, count: int | None, duration: float | None, batch_size: int
) -> None:
    """Check the producer's numbers before anything is sent (InvalidSetting names the flag)."""
    _check(
        "--rate",
        rate,
        "must be a finite number of orders per second >= 0",
        rate is None or (math.isfinite(rate) and rate >= 0),
    )
    _check("--count", count, "must be a whole number >= 0", count is None or count >= 0)
    _check(
        "--duration",
        duration,
        "must be a finite, positive number of seconds",
        duration is None or (math.isfinite(duration) and duration > 0),
    )
    _check(
        "--batch-size",
        batch_size,
        "must be a whole number from 1 to 10000",
        1 <= batch_size <= 10_000,
    )


def produce(
    queue: Queue,
    orders: Iterable[SampleOrder],
    *,
    rate: float | None = None,
    count: int | None = None,
    duration: float | None = None,
    batch_size: int = 200,
    on_batch: Callable[[list[SampleOrder]], None] | None = None,
) -> ProducerSummary:
    """Send ``orders`` to ``queue`` at an average ``rate`` until one of the bounds is reached.

    Args:
        queue: Where the orders go.
        orders: The orders (``sample_orders()``, or any others).
        rate: Orders per second; None or 0 for as fast as possible.
        count: Stop after this many orders.
        duration: Stop after this many seconds.
        batch_size: Most orders per ``send_batch``.
        on_batch: Called with each batch once it is durable (tests record them here).

    An endless ``orders`` needs ``count`` or ``duration``; it is the caller's bound.

    Raises:
        InvalidSetting: The rate, a bound or the batch size breaks its rule.
    """
    check_bounds(rate, count, duration, batch_size)
    per_send = batch_size
    if rate:
        per_send = max(1, min(batch_size, round(rate / SENDS_PER_SECOND)))
    source: Iterator[SampleOrder] = iter(orders)
    if count is not None:
        source = islice(source, count)
    summary = ProducerSummary(queue.name)
    started = time.monotonic()
    deadline = None if duration is None else started + duration
    while True:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            break
        take = batch_size
        if rate:
            # Pace on the schedule of the whole run: wait until a send's worth is due,
            # then send everything due (a slow send is caught up by the next one).
            ready = started + (summary.sent + per_send) / rate
            wait = (ready if deadline is None else min(ready, deadline)) - now
            if wait > 0:
                time.sleep(wait)
                continue
            take = min(batch_size, max(per_send, int((now - started) * rate) - summary.sent))
        batch = list(islice(source, take))
        if not batch:
            break
        queue.send_batch([order.payload for order in batch])
        summary.sent += len(batch)
        summary.malformed += sum(order.reason is not None for order in batch)
        if on_batch is not None:
            on_batch(batch)
    summary.elapsed = time.monotonic() - started
    return summary


def open_orders_queue(client: QueueClient, config: JobConfig) -> Queue:
    """The orders queue, created with the configured settings if it is missing."""
    return config.orders.open(client)


def build_parser() -> argparse.ArgumentParser:
    """The producer's command line."""
    parser = argparse.ArgumentParser(
        prog="order_producer.py",
        description=(
            "Send sample JSON orders to the 'orders' queue at a given rate, a share of them"
            " malformed on purpose. Stops after --count orders or --duration seconds."
        ),
        epilog="Without --count and --duration it sends [producer] count orders from --config.",
    )
    parser.add_argument(
        "--rate",
        type=float,
        metavar="MSGS_PER_S",
        help="orders per second, 0 for as fast as possible (default: from config)",
    )
    parser.add_argument("--count", type=int, metavar="N", help="stop after N orders")
    parser.add_argument("--duration", type=float, metavar="SECONDS", help="stop after SECONDS")
    parser.add_argument(
        "--malformed",
        type=float,
        metavar="FRACTION",
        help="share of malformed orders, 0 to 1 (default: from config)",
    )
    parser.add_argument(
        "--batch-size", type=int, metavar="N", help="most orders per send (default: from config)"
    )
    parser.add_argument("--seed", type=int, help="seed of the random order contents")
    add_connection_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the producer from the command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        values = job_settings(args, config)
        settings = connection_settings(values)
        count = args.count
        if count is None and args.duration is None:  # --duration alone: no count from the file
            count = values["count"]
        fraction = values["malformed"]
        _check("--malformed", fraction, "must be a share from 0 to 1", 0 <= fraction <= 1)
        rate, batch_size = values["rate"], values["batch_size"]
        check_bounds(rate, count, args.duration, batch_size)
        orders = sample_orders(None, fraction, seed=args.seed, prefix=f"o-{uuid.uuid4().hex[:8]}")
        with QueueClient(settings=settings) as client:
            summary = produce(
                open_orders_queue(client, config),
                orders,
                rate=rate,
                count=count,
                duration=args.duration,
                batch_size=batch_size,
            )
    except SparkQueueError as e:
        print(f"order_producer.py: error: {e}", file=sys.stderr)
        return 1
    print(summary.render())
    return 0


if __name__ == "__main__":
    sys.exit(main())

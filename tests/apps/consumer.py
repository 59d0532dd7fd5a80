"""A queue consumer run as its own process, for the competing-consumer tests.

It receives and acks until the queue stays empty for ``--idle`` seconds and
prints one line per delivery: ``<id> <acked|stale>``. With ``--hold`` it
receives that many messages, prints ``held <id>`` for each, and then sleeps
without acking (the test kills it with SIGKILL).
"""

from __future__ import annotations

import argparse
import sys
import time

from spark_queue import QueueClient


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--idle", type=float, default=2.0)
    parser.add_argument("--hold", type=int, default=0)
    parser.add_argument("--start-at", type=float, default=0.0, help="wall time to start at")
    parser.add_argument("--lane-period", type=float, default=0.0, help="seconds lanes are owned")
    args = parser.parse_args(argv)
    with QueueClient(hosts=args.hosts, keyspace=args.keyspace) as client:
        queue = client.queue(args.queue)
        if args.lane_period:
            queue.lanes.period = args.lane_period
        if args.hold:
            held = queue.receive(args.hold, wait=10.0)
            for d in held:
                print(f"held {d.id}", flush=True)
            print("holding", flush=True)
            time.sleep(3600)
            return 0
        time.sleep(max(0.0, args.start_at - time.time()))
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < args.idle:
            deliveries = queue.receive(args.batch)
            if not deliveries:
                time.sleep(0.05)
                continue
            idle_since = time.monotonic()
            stale = set(queue.ack_batch([d.receipt for d in deliveries], strict=False))
            for d in deliveries:
                print(f"{d.id} {'stale' if d.receipt in stale else 'acked'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sending side of ``bdq bench faults``: paced single-message sends, and a producer process.

``send_paced`` runs a level's sender threads inside the bench's process, retrying
each send until it succeeds. The history run (:mod:`spark_queue.bench.history_run`)
needs producers it can pause with SIGSTOP, so this module is also a producer
process: ``python -m spark_queue.bench.faults_senders --hosts ... --keyspace ...
--queue Q --history FILE --seed S --rate R``. It sends one message at a time at
``R`` per second until SIGTERM, payloads carrying sender ``S`` (each spawn gets
its own seed from the supervisor) and a sequence number, every other one with a
key (so lanes and keyless shares are both used). Each attempt is logged as one
JSON line (start and end times, the id on success); an attempt that raised is
logged as such and not retried: its message may or may not have landed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import sys
import threading
import time

from spark_queue.bench.consistency import make_payload
from spark_queue.bench.faults_params import FaultsParams
from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable, SparkQueueError
from spark_queue.queue import Queue


def send_paced(
    queue: Queue, params: FaultsParams, rate: float, seconds: float, seed: int
) -> tuple[set[tuple[int, int]], list[float], int]:
    """Paced single-message sends; returns the acknowledged (sender, seq), times (ms), errors."""
    threads = max(params.senders, math.ceil(rate / 100))
    per_thread = rate / threads
    sent: set[tuple[int, int]] = set()
    times: list[float] = []
    errors = [0]
    lock = threading.Lock()
    start = time.monotonic()

    def sender(index: int) -> None:
        rng = random.Random(seed + index)
        seq = 0
        while True:
            due = start + seq / per_thread
            if due - start >= seconds:
                return
            time.sleep(max(0.0, due - time.monotonic()))
            payload = make_payload(seq, index, params.payload_bytes, rng)
            while True:  # a send that failed may have landed: a retry can duplicate, never lose
                began = time.monotonic()
                try:
                    queue.send(payload)
                    break
                except BackendUnavailable:
                    with lock:
                        errors[0] += 1
                    time.sleep(0.1)
            took = (time.monotonic() - began) * 1000
            with lock:
                sent.add((index, seq))
                times.append(took)
            seq += 1

    workers = [threading.Thread(target=sender, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sent, times, errors[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--keyspace", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--seed", type=int, required=True, help="also the payloads' sender")
    parser.add_argument("--rate", type=float, default=20.0, help="sends per second")
    parser.add_argument("--payload-bytes", type=int, default=64)
    args = parser.parse_args(argv)

    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    rng = random.Random(args.seed)
    name = f"producer-{os.getpid()}"
    settings = ConnectionSettings.from_env({}, hosts=args.hosts, keyspace=args.keyspace)
    with QueueClient(settings=settings) as client, open(args.history, "a") as history:
        queue = client.queue(args.queue)
        seq = 0
        began = time.monotonic()
        while not stopping:
            # paced from the start, so a pause is followed by a burst that catches up
            time.sleep(max(0.0, began + seq / args.rate - time.monotonic()))
            payload = make_payload(seq, args.seed, args.payload_bytes, rng)
            start = time.time()
            message_id: int | None = None
            # one that raised is logged as not returned: the checker neither expects nor forbids it
            with contextlib.suppress(SparkQueueError):
                message_id = queue.send(payload, key=f"k{seq % 7}" if seq % 2 else None)
            record = {
                "op": "send", "process": name, "sender": args.seed, "seq": seq,
                "start": start, "end": time.time(), "ok": message_id is not None,
                "id": message_id,
            }  # fmt: skip
            history.write(json.dumps(record) + "\n")
            history.flush()
            seq += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

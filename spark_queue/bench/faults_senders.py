"""The sending side of a ``bdq bench faults`` level: paced single-message sends, retried."""

from __future__ import annotations

import math
import random
import threading
import time

from spark_queue.bench.consistency import make_payload
from spark_queue.bench.faults_params import FaultsParams
from spark_queue.errors import BackendUnavailable
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

"""Drain marks kept by one handle shared between threads (``engine/drains.py``).

A handle's receives and acks may run in many threads at once: a receive
settles the buckets acked in while a sibling's ack adds to them. Found in CI
as a receive that raised ``RuntimeError: Set changed size during iteration``
after it had leased its messages, so they came back only after their
visibility timeout. Python switches threads every few milliseconds; the test
makes it switch at almost every bytecode so the interleaving shows up at once.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from spark_queue.client import QueueClient
from spark_queue.engine.bounds import Bounds
from spark_queue.engine.drains import Drains
from spark_queue.store.memory import MemoryStore

ROUNDS = 1000


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Let threads switch after about every bytecode, for the test's length."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.mark.usefixtures("busy_switching")
def test_settling_while_sibling_threads_ack_raises_nothing() -> None:
    # Given a queue's drain marks, with every bucket still unfinished so none is probed
    store = MemoryStore()
    with QueueClient(store=store) as client:
        queue = client.create_queue("drains", bucket_size=10)
        bounds = Bounds(queue.buckets)
        bounds.note_tail(10 * ROUNDS)
        drains = Drains(queue.buckets, bounds, lambda: queue.settings, lambda: range(ROUNDS))
        errors: list[BaseException] = []

        def run(step: Callable[[int], object]) -> None:
            try:
                for i in range(ROUNDS):
                    step(i)
            except BaseException as e:  # reported below
                errors.append(e)

        # When one thread acks in ever new buckets while two others settle
        threads = [
            threading.Thread(target=run, args=(lambda i: drains.acked([i]),)),
            threading.Thread(target=run, args=(lambda i: drains.settle(),)),
            threading.Thread(target=run, args=(lambda i: drains.settle(),)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)

    # Then no call failed
    assert not errors, errors

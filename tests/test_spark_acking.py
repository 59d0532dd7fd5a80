"""StepAcks: the source's acks run off Spark's commit path, one at a time (pure logic)."""

from __future__ import annotations

import pickle
import threading

import pytest

from spark_queue.errors import BackendUnavailable
from spark_queue.spark.commit_acks import StepAcks


def test_an_ack_runs_in_the_background_and_the_next_waits_for_it() -> None:
    acks = StepAcks()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        release.wait(10)
        order.append("first")

    acks.submit(first)
    assert order == []  # submit returned while the first ack still runs
    threading.Timer(0.2, release.set).start()
    acks.submit(lambda: order.append("second"))
    assert order[0] == "first"  # the second was submitted only once the first was done
    acks.close()
    assert order == ["first", "second"]


def test_a_failed_ack_fails_the_next_submit_or_wait_with_its_own_error() -> None:
    acks = StepAcks()

    def fail() -> None:
        raise BackendUnavailable("acking messages: no host available")

    acks.submit(fail)
    with pytest.raises(BackendUnavailable, match="no host available"):
        acks.wait()
    acks.wait()  # reported once
    acks.submit(fail)
    with pytest.raises(BackendUnavailable):
        acks.submit(lambda: None)
    acks.close()


def test_a_pickled_copy_has_no_thread_and_nothing_pending() -> None:
    acks = StepAcks()
    acks.submit(lambda: None)
    copy = pickle.loads(pickle.dumps(acks))
    assert copy._pending is None and copy._pool is None
    copy.close()
    acks.close()

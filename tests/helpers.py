"""Small helpers shared by the tests that talk to a real queue."""

from __future__ import annotations

from spark_queue.message import Delivery
from spark_queue.queue import Queue


def drain_deliveries(queue: Queue, *, batch: int = 100, wait: float = 0.0) -> list[Delivery]:
    """Receive and ack until the queue has nothing visible; return every delivery."""
    got: list[Delivery] = []
    while deliveries := queue.receive(batch, wait=wait):
        got += deliveries
        queue.ack_batch([d.receipt for d in deliveries])
    return got


def drain(queue: Queue, *, batch: int = 100, wait: float = 0.0) -> list[bytes]:
    """Receive and ack until the queue has nothing visible; return the payloads."""
    return [d.payload for d in drain_deliveries(queue, batch=batch, wait=wait)]

"""Parameters of one ``bdq bench queue`` run, named as in the BlueDove paper where it names them."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from spark_queue import defaults
from spark_queue.bench.baseline import DEFAULT_CONCURRENCY as BASELINE_CONCURRENCY
from spark_queue.bench.consistency import MIN_PAYLOAD_BYTES
from spark_queue.config import check_int, check_seconds
from spark_queue.errors import InvalidSetting


@dataclass(frozen=True, kw_only=True)
class QueueBenchParams:
    """One run's parameters (the paper's names in brackets).

    Attributes:
        messages: Messages sent and expected back in all [M].
        payload_bytes: Size of each payload [L].
        queues: Queues, each with its own sender and receiver threads [Q].
        send_threads: Sender threads per queue [Tsend].
        recv_threads: Receiver threads per queue [Trecv].
        order_hint: Receive among the oldest K visible messages per message asked [K].
        visibility_timeout: Seconds a received message stays invisible.
        receive_delay: Seconds of "processing" per received message [δrecv].
        send_batch: Messages per send operation (1: ``send``; more: ``send_batch``).
        async_send: Send single messages with ``send_async`` (the handle's
            producer batches them) and wait for every future at the end.
        receive_batch: ``max_messages`` of each receive.
        bucket_size: Ids per bucket of the queues.
        seed: Seed of the random payloads (chosen at random when not given).
        baseline: Measure the raw insert baseline too.
        baseline_concurrency: In-flight requests of the raw baseline.
        recv_processes: Run each receiver in its own process instead of a thread.
        kill_receiver: SIGKILL one receiver (a process) once half the messages were
            seen, and report when the messages it held were taken over.
        plain_acks: Receivers ack with a read and a plain write while the lease
            surely holds (``Queue.plain_acks``), whatever the cluster's size;
            False keeps the handles' default.
    """

    messages: int = 20_000
    payload_bytes: int = 2048
    queues: int = 1
    send_threads: int = 3
    recv_threads: int = 3
    order_hint: int = defaults.ORDER_HINT
    visibility_timeout: float = defaults.VISIBILITY_TIMEOUT
    receive_delay: float = 0.0
    send_batch: int = 1
    async_send: bool = False
    receive_batch: int = 10
    bucket_size: int = defaults.BUCKET_SIZE
    seed: int = field(default_factory=lambda: random.randrange(2**32))
    baseline: bool = True
    baseline_concurrency: int = BASELINE_CONCURRENCY
    recv_processes: bool = False
    kill_receiver: bool = False
    plain_acks: bool = False

    def __post_init__(self) -> None:
        check_int("messages", self.messages, 1, 100_000_000)
        check_int("payload_bytes", self.payload_bytes, MIN_PAYLOAD_BYTES, 16 * 1024 * 1024)
        check_int("queues", self.queues, 1, 1000)
        check_int("send_threads", self.send_threads, 1, 1000)
        check_int("recv_threads", self.recv_threads, 1, 1000)
        check_int("order_hint", self.order_hint, 1, defaults.MAX_ORDER_HINT)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("receive_delay", self.receive_delay, allow_zero=True)
        check_int("send_batch", self.send_batch, 1, 10_000)
        check_int("receive_batch", self.receive_batch, 1, 10_000)
        check_int("bucket_size", self.bucket_size, 1, 100_000)
        check_int("seed", self.seed, 0, 2**63 - 1)
        check_int("baseline_concurrency", self.baseline_concurrency, 1, 4096)
        if self.kill_receiver and self.recv_threads * self.queues < 2:
            raise InvalidSetting(
                f"kill_receiver with recv_threads {self.recv_threads}: needs at least 2"
                " receivers, one to kill and one to take over"
            )
        if self.async_send and self.send_batch != 1:
            raise InvalidSetting(
                f"send_batch {self.send_batch}: async_send sends single messages (its producer"
                " batches them); drop one of the two"
            )
        if self.messages < self.queues * self.send_threads:
            raise InvalidSetting(
                f"messages {self.messages}: fewer than the {self.queues * self.send_threads}"
                " sender threads (queues x send_threads); send more or use fewer threads"
            )

    @property
    def stall_timeout(self) -> float:
        """Seconds without a new message after which the receive phase gives up.

        Long enough for a lost lease to expire and its message to come back,
        and for a receiver to process one whole batch.
        """
        return max(10.0, 2 * self.visibility_timeout, 2 * self.receive_delay * self.receive_batch)

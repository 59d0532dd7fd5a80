"""What ``bdq bench queue`` measured: one run's rates, response times and consistency, or a sweep.

A sweep (``--sweep-k``) is one full run per order hint K, summed up as one row
per K: the paper's trade-off between order and duplication.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from spark_queue.bench.queue_bench_params import QueueBenchParams


@dataclass(frozen=True, kw_only=True)
class QueueBenchResult:
    """What one run measured. Rates are messages per second, times milliseconds per operation.

    Attributes:
        params: The run's parameters.
        send_seconds: Length of the send phase.
        receive_seconds: Length of the receive phase.
        send_rate: Messages sent per second.
        receive_rate: Distinct messages received and acked per second (receive+ack rate).
        delivery_rate: Deliveries (duplicates included) per second.
        send_ops: Send operations (``send`` or ``send_batch`` calls).
        receive_ops: Receives that returned messages.
        empty_receives: Receives that returned nothing.
        send_p50_ms: Median send response time.
        send_p99_ms: 99th percentile send response time.
        receive_p50_ms: Median receive response time (receives that returned messages).
        receive_p99_ms: 99th percentile receive response time.
        ack_p50_ms: Median ``ack_batch`` response time.
        ack_p99_ms: 99th percentile ``ack_batch`` response time.
        deliveries: Deliveries received, duplicates and corrupt ones included.
        distinct: Distinct intact messages received.
        corrupt: Deliveries whose checksum failed.
        stale_acks: Receipts ``ack_batch`` reported stale (lost a race to a duplicate).
        errors: Backend errors that were retried.
        stalled: The receive phase ended by the stall timeout, not by seeing every message.
        duplication_rate: Deliveries beyond the first per message, over M [λ].
        loss_rate: Messages missing or corrupt, over M [ε].
        out_of_order_rate: Messages outside their sender's longest increasing subsequence.
        average_displacement: Mean distance from the correct position, per message.
        baseline_rate: Raw prepared inserts per second (mean of the measures before
            and after the queue phases), or None when not measured.
        baseline_rates: Each measure of the raw baseline, in the order taken.
        killed_held: Messages the killed receiver held (received, unacked) when
            killed, or None without ``kill_receiver``.
        takeover_seconds: From the kill until every held message was delivered to
            another receiver; None without a kill or if some never came back.
        lost_held: Held messages never delivered again before the phase ended
            (counted in ``loss_rate``).
    """

    params: QueueBenchParams
    send_seconds: float
    receive_seconds: float
    send_rate: float
    receive_rate: float
    delivery_rate: float
    send_ops: int
    receive_ops: int
    empty_receives: int
    send_p50_ms: float | None
    send_p99_ms: float | None
    receive_p50_ms: float | None
    receive_p99_ms: float | None
    ack_p50_ms: float | None
    ack_p99_ms: float | None
    deliveries: int
    distinct: int
    corrupt: int
    stale_acks: int
    errors: int
    stalled: bool
    duplication_rate: float
    loss_rate: float
    out_of_order_rate: float
    average_displacement: float
    baseline_rate: float | None
    baseline_rates: list[float]
    killed_held: int | None = None
    takeover_seconds: float | None = None
    lost_held: int = 0

    @property
    def send_ratio(self) -> float | None:
        """Send rate over the raw baseline."""
        return self.send_rate / self.baseline_rate if self.baseline_rate else None

    @property
    def receive_ratio(self) -> float | None:
        """Receive+ack rate over the raw baseline."""
        return self.receive_rate / self.baseline_rate if self.baseline_rate else None

    def to_dict(self) -> dict[str, Any]:
        """Every field and ratio as plain JSON-ready values."""
        values = asdict(self)
        values["send_ratio"] = self.send_ratio
        values["receive_ratio"] = self.receive_ratio
        return values


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One order hint of an order sweep: the paper's order/duplication trade-off.

    Attributes:
        order_hint: K.
        duplication_rate: Deliveries beyond the first per message, over M.
        out_of_order_rate: Messages out of their sender's order.
        average_displacement: Mean distance from the correct position.
        receive_rate: Distinct messages received and acked per second.
        loss_rate: Messages missing or corrupt, over M.
    """

    order_hint: int
    duplication_rate: float
    out_of_order_rate: float
    average_displacement: float
    receive_rate: float
    loss_rate: float


@dataclass(frozen=True, slots=True)
class OrderSweep:
    """An order sweep: one full run per K.

    Attributes:
        rows: One row per order hint, in the order run.
        runs: The complete result of each run.
        baseline_rate: Raw prepared inserts per second (from the first run), or None.
    """

    rows: list[SweepRow]
    runs: list[QueueBenchResult]
    baseline_rate: float | None

    def to_dict(self) -> dict[str, Any]:
        """Rows, runs and baseline as plain JSON-ready values."""
        return {
            "baseline_rate": self.baseline_rate,
            "rows": [asdict(row) for row in self.rows],
            "runs": [run.to_dict() for run in self.runs],
        }

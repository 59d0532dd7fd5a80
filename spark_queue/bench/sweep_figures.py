"""The receiver sweep's arithmetic: ideal rates, ratios, shares, the saturation point and why.

Issue 22's measure of competing consumers: N receivers, each doing ``work_ms``
of simulated work per message, should receive about N times what one receiver
does alone, until the machine saturates. **One worker's rate** is the rate of
the sweep's N = 1 point (its receives and acks included, not only the work),
the **ideal** at N is N times that, and the sweep **saturates** at the first N
whose rate falls under ``SATURATION_RATIO`` of its ideal. Why it saturated is
read from the CPU counters of that point (``cpu_meter``): the machine's cores
all busy, or one client interpreter's core (threads share its lock), or
neither, when the receivers waited for messages rather than for a CPU.

Nothing here talks to Cassandra: the run is ``receiver_sweep``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

#: A point whose rate is under this share of its ideal is saturated (issue 22's target).
SATURATION_RATIO = 0.8
#: Cores this busy (a share of all of them, or of one for a lone interpreter) count as full.
BUSY_SHARE = 0.85
#: Fewest messages of a sweep point, whatever its expected length.
MIN_MESSAGES = 200
#: What one receiver without simulated work is taken to do before it was measured (msgs/s).
UNWORKED_RATE = 500.0


def messages_for(receivers: int, rate: float, seconds: float) -> int:
    """Messages for a point of ``receivers`` that should last about ``seconds`` at ``rate`` each.

    ``max(MIN_MESSAGES, ceil(receivers x rate x seconds))``: a point that scales
    takes ``seconds``; one that does not, longer.
    """
    return max(MIN_MESSAGES, math.ceil(receivers * rate * seconds))


def work_rate(work_ms: float) -> float:
    """What one receiver could do if receiving and acking cost nothing (msgs/s)."""
    return 1000.0 / work_ms if work_ms > 0 else UNWORKED_RATE


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """What one N of the sweep measured (CPU figures in seconds of CPU; None: not measured).

    Attributes:
        receivers: N, the receivers (threads or processes) of this point.
        messages: Messages sent before the receive phase (M of this point).
        seconds: Length of the receive phase, from every receiver ready to the last done.
        distinct: Distinct intact messages received.
        deliveries: Deliveries, duplicates and corrupt ones included.
        corrupt: Deliveries whose checksum failed.
        per_receiver: Deliveries of each receiver.
        empty_receives: Receives that returned nothing.
        stalled: The phase gave up waiting for missing messages.
        load: The machine's 1-minute load average as the point started.
        client_cpu: CPU of the client: the benchmark's process and its receiver processes.
        cassandra_cpu: CPU of the local Cassandra node.
        machine_cpu: Busy time of all the machine's cores.
        cores: Cores of the machine.
        receive_p50_ms: Median time of a receive that returned messages.
        receive_p99_ms: Its 99th percentile.
        ack_p50_ms: Median time of an ``ack_batch``.
        ack_p99_ms: Its 99th percentile.
    """

    receivers: int
    messages: int
    seconds: float
    distinct: int
    deliveries: int
    corrupt: int
    per_receiver: tuple[int, ...]
    empty_receives: int
    stalled: bool
    load: float | None
    client_cpu: float | None
    cassandra_cpu: float | None
    machine_cpu: float | None
    cores: int
    receive_p50_ms: float | None = None
    receive_p99_ms: float | None = None
    ack_p50_ms: float | None = None
    ack_p99_ms: float | None = None

    @property
    def throughput(self) -> float:
        """Distinct messages received and acked per second."""
        return self.distinct / self.seconds if self.seconds > 0 else 0.0

    @property
    def duplicates(self) -> int:
        """Intact deliveries beyond the first of each message."""
        return self.deliveries - self.corrupt - self.distinct

    @property
    def lost(self) -> int:
        """Messages sent and never received intact."""
        return self.messages - self.distinct

    @property
    def shares(self) -> list[float]:
        """Each receiver's part of the deliveries (0 to 1; they add up to 1)."""
        total = sum(self.per_receiver)
        return [n / total if total else 0.0 for n in self.per_receiver]

    @property
    def share_min(self) -> float:
        """The smallest receiver's part of the deliveries."""
        return min(self.shares, default=0.0)

    @property
    def share_max(self) -> float:
        """The largest receiver's part of the deliveries."""
        return max(self.shares, default=0.0)

    @property
    def idle_receivers(self) -> int:
        """Receivers that got nothing at all."""
        return sum(1 for n in self.per_receiver if n == 0)

    def cores_used(self, cpu: float | None) -> float | None:
        """CPU seconds spread over the phase: how many cores ``cpu`` kept busy on average."""
        return None if cpu is None or self.seconds <= 0 else cpu / self.seconds

    @property
    def cpu_ms_per_message(self) -> float | None:
        """Client CPU per delivery, in milliseconds."""
        if self.client_cpu is None or not self.deliveries:
            return None
        return self.client_cpu * 1000 / self.deliveries

    def to_dict(self) -> dict[str, Any]:
        """Every field and derived figure as plain JSON-ready values."""
        values = asdict(self)
        values["per_receiver"] = list(self.per_receiver)
        values.update(
            throughput=self.throughput,
            duplicates=self.duplicates,
            lost=self.lost,
            share_min=self.share_min,
            share_max=self.share_max,
            idle_receivers=self.idle_receivers,
            cpu_ms_per_message=self.cpu_ms_per_message,
            client_cores=self.cores_used(self.client_cpu),
            cassandra_cores=self.cores_used(self.cassandra_cpu),
            machine_cores=self.cores_used(self.machine_cpu),
        )
        return values


@dataclass(frozen=True, kw_only=True)
class ReceiverSweep:
    """A sweep over receivers: one point per N, judged against N x one worker's rate.

    Attributes:
        points: One per N, in increasing N; the first has N = 1.
        work_ms: Simulated work per message.
        processes: Receivers were processes (else threads of one interpreter).
        settings: The other parameters of every point (payload, batches, senders, seed).
    """

    points: list[SweepPoint]
    work_ms: float
    processes: bool
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.points or self.points[0].receivers != 1:
            raise ValueError("a receiver sweep starts with its N = 1 point, the reference")

    @property
    def one_worker_rate(self) -> float:
        """The N = 1 point's rate: what one receiver does alone."""
        return self.points[0].throughput

    def ideal(self, point: SweepPoint) -> float:
        """N x one worker's rate."""
        return point.receivers * self.one_worker_rate

    def ratio(self, point: SweepPoint) -> float:
        """Actual over ideal (1.0: perfect scaling)."""
        ideal = self.ideal(point)
        return point.throughput / ideal if ideal > 0 else 0.0

    @property
    def saturated_at(self) -> SweepPoint | None:
        """The first point whose ratio is under ``SATURATION_RATIO``; None if none is."""
        return next((p for p in self.points if self.ratio(p) < SATURATION_RATIO), None)

    @property
    def why(self) -> str:
        """Where the sweep saturates and, as far as the counters tell, why."""
        point = self.saturated_at
        if point is None:
            last = self.points[-1]
            return (
                f"no saturation up to N = {last.receivers}: every point reached at least"
                f" {SATURATION_RATIO:g} of N x one worker's rate"
            )
        head = (
            f"saturates at N = {point.receivers}"
            f" ({self.ratio(point):.2f} of N x one worker's rate): "
        )
        return head + saturation_cause(point, processes=self.processes)

    def to_dict(self) -> dict[str, Any]:
        """The sweep's settings, reference rate, verdict and every point with its ideal."""
        saturated = self.saturated_at
        return {
            "work_ms": self.work_ms,
            "processes": self.processes,
            "settings": dict(self.settings),
            "one_worker_rate": self.one_worker_rate,
            "saturation_ratio": SATURATION_RATIO,
            "saturated_at": None if saturated is None else saturated.receivers,
            "why": self.why,
            "points": [
                {**p.to_dict(), "ideal": self.ideal(p), "ratio": self.ratio(p)} for p in self.points
            ],
        }


def saturation_cause(point: SweepPoint, *, processes: bool) -> str:
    """What kept ``point`` from scaling, from its CPU counters and its receivers' shares."""
    machine = point.cores_used(point.machine_cpu)
    client = point.cores_used(point.client_cpu)
    cassandra = point.cores_used(point.cassandra_cpu)
    per_message = point.cpu_ms_per_message
    parts = []
    if client is not None:
        cost = f", {per_message:.2f} ms of CPU per delivery" if per_message is not None else ""
        parts.append(f"client {client:.2f} cores{cost}")
    if cassandra is not None:
        parts.append(f"Cassandra {cassandra:.2f} cores")
    if machine is not None and client is not None and cassandra is not None:
        # the node is shared too: what others ask of it is in its share, not here
        parts.append(f"other processes {max(0.0, machine - client - cassandra):.2f} cores")
    spent = f" ({'; '.join(parts)})" if parts else ""
    if machine is not None and machine >= BUSY_SHARE * point.cores:
        return f"CPU: the machine's {point.cores} cores were {machine:.2f} cores busy{spent}"
    if not processes and client is not None and client >= BUSY_SHARE:
        return (
            f"the client's interpreter: its receiver threads kept {client:.2f} of a core busy,"
            f" and one interpreter runs Python on one core at a time (the GIL){spent}"
        )
    if machine is None:
        return f"unknown: no CPU counters of the machine (/proc){spent}"
    waits = ""
    if point.receive_p50_ms is not None and point.ack_p50_ms is not None:
        waits = f", receive p50 {point.receive_p50_ms:.0f} ms, ack p50 {point.ack_p50_ms:.0f} ms"
    return (
        f"not CPU ({machine:.2f} of {point.cores} cores busy{spent}): the receivers waited"
        f"{waits}, {point.empty_receives} empty receives, smallest share"
        f" {point.share_min * point.receivers:.2f} of an even one"
    )

"""What each level of ``bdq bench faults`` measured, and the saturation point of the load steps."""

from __future__ import annotations

from dataclasses import dataclass, field

from spark_queue.bench.faults_params import FaultsParams

#: Response time p99 past which the load steps stop (the paper's Fig. 4 reads 200 ms).
SATURATION_MS = 200.0


@dataclass
class LevelResult:
    """What one level measured; times in ms, rates in messages per second."""

    fault: str
    level: str
    offered: float
    seconds: float
    sent: int = 0
    send_errors: int = 0
    deliveries: int = 0
    distinct: int = 0
    lost: int = 0
    corrupt: int = 0
    duplication: float = 0.0
    #: extra copies of a send (one send under several ids), and deliveries again of one id
    send_duplicates: int = 0
    redeliveries: int = 0
    out_of_order: float = 0.0
    displacement: float = 0.0
    send_p50: float | None = None
    send_p99: float | None = None
    recv_p50: float | None = None
    recv_p99: float | None = None
    restarts: int = 0
    #: client requests the network fault's proxies relayed, and connections they dropped
    requests: int = 0
    drops: int = 0
    #: received messages per whole second since the level began
    throughput: list[int] = field(default_factory=list)
    #: (seconds since the level began, what happened)
    events: list[tuple[float, str]] = field(default_factory=list)

    @property
    def send_rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


@dataclass
class FaultsResult:
    params: FaultsParams
    levels: list[LevelResult]

    @property
    def lost(self) -> int:
        return sum(level.lost for level in self.levels)

    @property
    def saturation(self) -> float | None:
        """The highest offered load step whose p99 response times stayed within 200 ms."""
        fine = [
            level.offered
            for level in self.levels
            if level.fault == "load" and within_saturation(level)
        ]
        return max(fine, default=None)


def within_saturation(level: LevelResult) -> bool:
    """Send and receive p99 within :data:`SATURATION_MS` and the senders kept up."""
    p99s = [t for t in (level.send_p99, level.recv_p99) if t is not None]
    return all(t <= SATURATION_MS for t in p99s) and level.send_rate >= 0.8 * level.offered

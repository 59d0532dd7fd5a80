"""What ``bdq bench sqs`` measured, and the arithmetic on it: rates, percentiles, ratios.

Pure values with no I/O, so the figures' arithmetic is tested without a server.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

#: The target the others are compared with, when it ran.
BASELINE = "elasticmq"


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) by the nearest-rank method; None without values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q!r}: must be between 0 and 100")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class TargetResult:
    """One target's run: a send phase, a receive+delete phase and long-poll wake-ups.

    Attributes:
        name: ``elasticmq``, or ``bdq-1`` and ``bdq-2`` for one or two ``bdq serve``.
        processes: Server processes the load was spread over.
        sent: Messages whose batch send succeeded.
        send_seconds: Wall time of the send phase.
        received: Messages received (a duplicate counts each time).
        distinct: Distinct messages received.
        receive_seconds: Wall time of the receive+delete phase, to the last delete.
        wake_ms: Per round, from a send's start to the answer of the long poll it woke.
        generator_cpu: CPU seconds the load generator spent over the send and
            receive+delete phases.
    """

    name: str
    processes: int
    sent: int
    send_seconds: float
    received: int
    distinct: int
    receive_seconds: float
    wake_ms: tuple[float, ...] = field(default=())
    generator_cpu: float = 0.0

    @property
    def send_rate(self) -> float:
        return self.sent / self.send_seconds if self.send_seconds > 0 else 0.0

    @property
    def receive_rate(self) -> float:
        """Distinct messages received and deleted per second."""
        return self.distinct / self.receive_seconds if self.receive_seconds > 0 else 0.0

    @property
    def generator_cores(self) -> float:
        """Cores the load generator kept busy on average over the two timed phases."""
        seconds = self.send_seconds + self.receive_seconds
        return self.generator_cpu / seconds if seconds > 0 else 0.0

    @property
    def lost(self) -> int:
        return self.sent - self.distinct

    @property
    def duplicates(self) -> int:
        return self.received - self.distinct

    @property
    def wake_p50(self) -> float | None:
        return percentile(self.wake_ms, 50)

    @property
    def wake_p99(self) -> float | None:
        return percentile(self.wake_ms, 99)


@dataclass(frozen=True, slots=True)
class SqsBenchResult:
    """Every target of one run, in the order they ran."""

    targets: tuple[TargetResult, ...]

    @property
    def baseline(self) -> TargetResult | None:
        return next((t for t in self.targets if t.name == BASELINE), None)

    def send_ratio(self, target: TargetResult) -> float | None:
        """``target``'s send rate over ElasticMQ's; None without a baseline."""
        base = self.baseline
        return _ratio(target.send_rate, base.send_rate if base else None)

    def receive_ratio(self, target: TargetResult) -> float | None:
        """``target``'s receive+delete rate over ElasticMQ's; None without a baseline."""
        base = self.baseline
        return _ratio(target.receive_rate, base.receive_rate if base else None)

    def wake_p50_over(self, target: TargetResult) -> float | None:
        """Milliseconds ``target``'s wake-up p50 exceeds ElasticMQ's (the issue's target: 50)."""
        base = self.baseline
        mine, theirs = target.wake_p50, base.wake_p50 if base else None
        return None if mine is None or theirs is None else mine - theirs

    def as_json(self) -> dict[str, object]:
        """The figures, derived ones included, for ``--json``."""
        return {
            "targets": [
                {
                    "name": t.name,
                    "processes": t.processes,
                    "sent": t.sent,
                    "received": t.received,
                    "distinct": t.distinct,
                    "lost": t.lost,
                    "duplicates": t.duplicates,
                    "send_rate": t.send_rate,
                    "receive_rate": t.receive_rate,
                    "wake_p50_ms": t.wake_p50,
                    "wake_p99_ms": t.wake_p99,
                    "generator_cores": t.generator_cores,
                    "send_ratio": self.send_ratio(t),
                    "receive_ratio": self.receive_ratio(t),
                    "wake_p50_over_ms": self.wake_p50_over(t),
                }
                for t in self.targets
            ]
        }


def _ratio(mine: float, theirs: float | None) -> float | None:
    return None if not theirs else mine / theirs

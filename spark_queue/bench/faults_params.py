"""Parameters of one ``bdq bench faults`` run, and the names of the faults it can inject."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from spark_queue.config import check_int, check_seconds
from spark_queue.errors import InvalidSetting


@dataclass(frozen=True, kw_only=True)
class FaultsParams:
    """One ``bdq bench faults`` run.

    Attributes:
        rate: Offered load of the fault runs, messages per second in all.
        seconds: Sending time of each fault level.
        senders: Sender threads per 100 msgs/s of offered load (at least this many).
        receivers: Receiver processes.
        payload_bytes: Size of each payload [L].
        receive_batch: ``max_messages`` of each receive.
        visibility_timeout: Seconds a received message stays invisible.
        drop_levels: Connection drop probabilities per client request.
        crash_levels: Receiver crash probabilities per received batch.
        mttf: Mean seconds between node crashes.
        mttr: Seconds a crashed node stays down before its restart begins.
        node_seconds: Sending time of the node-crash run.
        load_steps: Offered loads (msgs/s) of the Fig. 4 run, in order.
        load_seconds: Sending time of each load step.
        seed: Seed of payloads, crash draws and node choices.
    """

    rate: float = 200.0
    seconds: float = 60.0
    senders: int = 3
    receivers: int = 3
    payload_bytes: int = 2048
    receive_batch: int = 10
    visibility_timeout: float = 10.0
    drop_levels: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1)
    crash_levels: tuple[float, ...] = (0.0, 0.01, 0.05, 0.1)
    mttf: float = 100.0
    mttr: float = 10.0
    node_seconds: float = 300.0
    load_steps: tuple[float, ...] = (100, 200, 400, 800, 1600, 3200)
    load_seconds: float = 20.0
    seed: int = field(default_factory=lambda: random.randrange(2**31))

    def __post_init__(self) -> None:
        check_seconds("rate", self.rate)
        check_seconds("seconds", self.seconds)
        check_int("senders", self.senders, 1, 64)
        check_int("receivers", self.receivers, 1, 32)
        check_int("payload_bytes", self.payload_bytes, 16, 1024 * 1024)
        check_int("receive_batch", self.receive_batch, 1, 1000)
        check_seconds("visibility_timeout", self.visibility_timeout)
        check_seconds("mttf", self.mttf)
        check_seconds("mttr", self.mttr)
        check_seconds("node_seconds", self.node_seconds)
        check_seconds("load_seconds", self.load_seconds)
        for what, levels in (("crash", self.crash_levels), ("drop", self.drop_levels)):
            for p in levels:
                if not 0 <= p <= 1:
                    raise InvalidSetting(f"{what} level {p}: must be a probability from 0 to 1")

    @classmethod
    def quick(cls, seed: int | None = None) -> FaultsParams:
        """Shorter levels and node faults (MTTF 20 s, MTTR 5 s): a few minutes in all."""
        return cls(
            rate=100.0,
            seconds=15.0,
            visibility_timeout=5.0,
            drop_levels=(0.0, 0.05),
            crash_levels=(0.0, 0.1),
            mttf=20.0,
            mttr=5.0,
            node_seconds=40.0,
            load_steps=(50, 100, 200, 400, 800),
            load_seconds=8.0,
            **({} if seed is None else {"seed": seed}),
        )


FAULTS = ("network", "receiver", "node", "load")
#: Faults of the Spark relay (spark_queue.bench.faults_levels), checked by source id.
PIPELINE_FAULTS = ("skew", "pause", "speculation", "stage-retry")


def check_faults(names: Sequence[str]) -> list[str]:
    """``names`` if each is one of :data:`FAULTS` or :data:`PIPELINE_FAULTS`, at least one."""
    known = FAULTS + PIPELINE_FAULTS
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise InvalidSetting(
            f"faults {','.join(names)!r}: must be a comma list of {', '.join(known)}"
        )
    return list(names)

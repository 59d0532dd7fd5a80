"""CPU time spent over a timed phase: this process, the Cassandra node, the whole machine.

A benchmark that stops scaling should say why. The usual answer on a small
machine is CPU, and three counters tell whose: this process's own CPU time
(``time.process_time``, every thread of the interpreter), the Cassandra
node's (``utime + stime`` of its pid in ``/proc/<pid>/stat``, when the node is
local and its pid known) and the machine's busy time (``/proc/stat``: all
cores, every process: user, system and interrupts). Where ``/proc`` is missing
(not Linux) the last two are None; nothing here needs psutil.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from spark_queue.local.node_conf import default_home
from spark_queue.local.processes import live_pid

#: Clock ticks per second of the /proc counters.
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) ``pid`` has used so far, or None if it cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: count fields after its ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def machine_busy() -> float | None:
    """CPU seconds all cores have been busy since boot (not idle, not waiting on I/O)."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in first[1:8])
    # Steal (time the hypervisor gave to others) is not our work; guest is inside user.
    return (user + nice + system + irq + softirq) / _TICKS


def local_node_pid() -> int | None:
    """The pid of the local node ``node1`` (``bdq cassandra start``), if it runs here."""
    return live_pid(default_home() / "node1" / "cassandra.pid")


@dataclass(frozen=True, slots=True)
class CpuUse:
    """CPU spent over one phase (seconds of CPU, summed over cores; None: not measured).

    Attributes:
        seconds: Wall time of the phase.
        client: This process's CPU time (all its threads).
        cassandra: The Cassandra node's CPU time.
        machine: Busy time of all the machine's cores, every process.
        cores: Cores of the machine.
    """

    seconds: float
    client: float
    cassandra: float | None
    machine: float | None
    cores: int


class CpuMeter:
    """Reads the counters at ``start()`` and ``stop()``; ``use`` is what was spent between.

    Args:
        cassandra_pid: The node's pid, None when it is not a local process.
    """

    def __init__(self, cassandra_pid: int | None) -> None:
        self.cassandra_pid = cassandra_pid
        self._start: tuple[float, float, float | None, float | None] | None = None
        self.use: CpuUse | None = None

    def _read(self) -> tuple[float, float, float | None, float | None]:
        node = process_cpu(self.cassandra_pid) if self.cassandra_pid is not None else None
        return time.perf_counter(), time.process_time(), node, machine_busy()

    def start(self) -> None:
        """Take the counters as the phase starts."""
        self._start = self._read()

    def stop(self) -> None:
        """Take them again as it ends and keep the difference in ``use``."""
        if self._start is None:
            return
        wall, client, node, busy = self._read()
        wall0, client0, node0, busy0 = self._start
        self.use = CpuUse(
            seconds=wall - wall0,
            client=client - client0,
            cassandra=None if node is None or node0 is None else node - node0,
            machine=None if busy is None or busy0 is None else busy - busy0,
            cores=os.cpu_count() or 1,
        )

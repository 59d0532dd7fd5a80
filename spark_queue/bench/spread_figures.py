"""How evenly a queue's writes spread over the nodes: shares per window and busy nodes (pure).

``bdq bench spread`` reads, every window, each node's count of local writes to
the ``messages`` table (a counter that only grows while the node runs). This
module turns two consecutive readings into each node's share of that window's
writes, and a run's windows into the figures issue 44 is judged by: the
busiest node's share and the effective number of busy nodes, ``1 / sum(share**2)``
(the inverse Herfindahl index: ``k`` nodes taking equal shares give ``k``, one
node taking everything gives 1).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from spark_queue.errors import SparkQueueError


@dataclass(frozen=True)
class Window:
    """One window's local writes to the messages table on each node.

    Attributes:
        start: Seconds since the run began, at the reading that opens the window.
        writes: Local writes per node in the window, in the order of the nodes.
    """

    start: float
    writes: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.writes)

    @property
    def shares(self) -> tuple[float, ...]:
        """Each node's share of the window's writes (all 0 in an empty window)."""
        total = self.total
        return tuple(w / total if total else 0.0 for w in self.writes)

    @property
    def busiest_share(self) -> float:
        return max(self.shares)

    @property
    def effective_nodes(self) -> float:
        """``1 / sum(share**2)``: how many equally busy nodes the window's writes amount to."""
        return effective_nodes(self.shares)


def effective_nodes(shares: Sequence[float]) -> float:
    """The effective number of busy nodes of ``shares`` (which sum to 1).

    Raises:
        SparkQueueError: No share is above 0 (a window without writes has no busy node).
    """
    squares = sum(s * s for s in shares)
    if squares <= 0:
        raise SparkQueueError(f"shares {list(shares)!r}: need at least one share above 0")
    return 1.0 / squares


def windows(readings: Sequence[tuple[float, Sequence[int]]]) -> list[Window]:
    """The windows between consecutive ``(seconds, counts per node)`` readings.

    Raises:
        SparkQueueError: Readings of different node counts, or a count that went
            down (its node restarted and its counter began again at 0: the
            window's writes are unknown, so the run cannot be judged).
    """
    result = []
    for (start, before), (_, after) in itertools.pairwise(readings):
        if len(before) != len(after):
            raise SparkQueueError(
                f"readings {list(before)!r} and {list(after)!r}: must count the same nodes"
            )
        writes = tuple(b - a for a, b in zip(before, after, strict=True))
        if any(w < 0 for w in writes):
            raise SparkQueueError(
                f"readings {list(before)!r} then {list(after)!r} at {start:.2f} s: a node's"
                " write count went down (the node restarted); run the benchmark again"
            )
        result.append(Window(start, writes))
    return result


@dataclass(frozen=True)
class SpreadFigures:
    """A run's spread, over its windows with at least one write.

    Attributes:
        windows: Windows with writes.
        idle_windows: Windows without any write (left out of the figures).
        busiest_share_p50: Median over windows of the busiest node's share.
        effective_p50: Median over windows of the effective number of busy nodes.
        effective_p10: Its 10th percentile (the concentrated windows).
        effective_p90: Its 90th percentile.
        node_shares: Each node's share of all the run's writes.
    """

    windows: int
    idle_windows: int
    busiest_share_p50: float
    effective_p50: float
    effective_p10: float
    effective_p90: float
    node_shares: tuple[float, ...]


def spread_figures(all_windows: Sequence[Window]) -> SpreadFigures:
    """Summarise ``all_windows``.

    Raises:
        SparkQueueError: No window saw a write (nothing was measured).
    """
    busy = [w for w in all_windows if w.total > 0]
    if not busy:
        raise SparkQueueError(
            f"windows: none of the {len(all_windows)} windows saw a write to the messages"
            " table; were messages sent, and are the counted nodes the cluster's?"
        )
    effective = sorted(w.effective_nodes for w in busy)
    totals = [sum(column) for column in zip(*(w.writes for w in busy), strict=True)]
    overall = sum(totals)
    return SpreadFigures(
        windows=len(busy),
        idle_windows=len(all_windows) - len(busy),
        busiest_share_p50=statistics.median(w.busiest_share for w in busy),
        effective_p50=statistics.median(effective),
        effective_p10=_percentile(effective, 0.10),
        effective_p90=_percentile(effective, 0.90),
        node_shares=tuple(t / overall for t in totals),
    )


def _percentile(ordered: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of a sorted, non-empty sequence."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]

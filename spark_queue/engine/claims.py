"""Claims: what the threads sharing one queue handle hold, so they step around each other.

A receive that chose messages claims them until their lease ends; sibling
threads of the same handle skip claimed messages instead of racing for them
(a race they would settle only by reading their leases back). Claims live in
memory, cost no round trip, and are dropped on ack or change of visibility.
Pure bookkeeping, no Cassandra: see tests/test_claims.py.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

#: Seconds between two prunes of claims whose lease ran out.
PRUNE_EVERY = 1.0


class Keyed(Protocol):
    @property
    def bucket(self) -> int: ...

    @property
    def id(self) -> int: ...


K = TypeVar("K", bound=Keyed)


class Claims:
    """Messages held by the threads of one handle, by ``(bucket, id)``, until a monotonic time.

    Args:
        rng: Randomness of the pick among the oldest ``count * hint`` (seedable for tests).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._lock = threading.Lock()
        self._until: dict[tuple[int, int], float] = {}
        self._done: dict[tuple[int, int], float] = {}  # acked, skipped a little longer
        self._pruned_at = 0.0
        self.rng = rng or random.Random()

    def __len__(self) -> int:
        """Claims of messages still in flight (acked ones lingering not counted)."""
        return len(self._until)

    def pick(self, found: Sequence[K], count: int, hint: int, hold: float, clock: float) -> list[K]:
        """Pick ``count`` among the oldest ``count * hint`` unclaimed; claim them for ``hold`` s.

        A message ``found`` lists twice (two scans of one receive read it: a
        share held and the same share taken again, ``shares.py``) is one
        candidate, picked once at most.

        Returns:
            The picked ones, in id order.
        """
        with self._lock:
            if (self._until or self._done) and clock >= self._pruned_at + PRUNE_EVERY:
                # Leases that ran out unacked; at most once a second, not per receive.
                self._until = {k: t for k, t in self._until.items() if t > clock}
                self._done = {k: t for k, t in self._done.items() if t > clock}
                self._pruned_at = clock
            once = list({(m.bucket, m.id): m for m in found}.values())  # first place kept
            chosen = pick_oldest(self._free(once, clock), count, hint, self.rng)
            for m in chosen:
                self._until[(m.bucket, m.id)] = clock + hold
        return chosen

    def free(self, found: Sequence[K], clock: float) -> list[K]:
        """The messages of ``found`` that no thread of the handle holds or just acked."""
        with self._lock:
            return self._free(found, clock)

    def _free(self, found: Sequence[K], clock: float) -> list[K]:
        return [
            m
            for m in found
            if self._until.get((m.bucket, m.id), 0.0) <= clock
            and self._done.get((m.bucket, m.id), 0.0) <= clock
        ]

    def drop(self, keys: Iterable[tuple[int, int]]) -> None:
        """Forget claims (lost to another consumer, or made visible again)."""
        with self._lock:
            for key in keys:
                self._until.pop(key, None)

    def done(self, keys: Iterable[tuple[int, int]], clock: float, linger: float) -> None:
        """Acked: keep skipping them ``linger`` more seconds at most, then forget them.

        Rows a sibling thread read ahead before the ack may still list these
        messages as visible (``receiving.py``, read-ahead): the claim outlives
        that read, and no longer, so the map does not grow with throughput.
        """
        with self._lock:
            for key in keys:
                until = self._until.pop(key, None)
                if until is not None:
                    self._done[key] = min(until, clock + linger)


def pick_oldest(found: Sequence[K], count: int, hint: int, rng: random.Random) -> list[K]:
    """BlueDove's pick: ``count`` at random among the oldest ``count * hint``, in id order."""
    window = list(found[: count * hint])
    chosen = window if len(window) <= count else rng.sample(window, count)
    return sorted(chosen, key=lambda m: m.id)

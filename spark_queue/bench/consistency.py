"""The benchmark's payloads and consistency metrics, as pure functions (no I/O).

Definitions follow the BlueDove paper (seed 000, section V.A):

* A payload is ``L`` random bytes that carry the sender, a sequence number and
  a checksum, so the receiver can tell corruption from a good message.
* Duplication rate: deliveries beyond the first of each message, over ``M``.
* Loss rate: messages never received, or received only corrupt, over ``M``.
* Out-of-order rate: the fewest messages that must move to restore the order,
  over the messages; that is ``n`` minus the longest increasing subsequence.
* Average displacement: the mean distance between a message's position in the
  received order and in the correct order.

Duplicates are measured separately, so the two order metrics see each message
once, at its first arrival.
"""

from __future__ import annotations

import math
import random
import struct
import zlib
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# sender (u32), sequence number (u64); the crc32 of everything before it closes the payload.
_HEADER = struct.Struct(">IQ")
_CHECKSUM = struct.Struct(">I")

#: Smallest payload that holds the sender, the sequence number and the checksum.
MIN_PAYLOAD_BYTES = _HEADER.size + _CHECKSUM.size


def make_payload(seq: int, sender: int, size: int, rng: random.Random) -> bytes:
    """A payload of ``size`` bytes: header, random filler, then a crc32 of the rest.

    Args:
        seq: The message's sequence number within its sender's stream (>= 0).
        sender: The sending thread's id (>= 0).
        size: Total length in bytes, at least ``MIN_PAYLOAD_BYTES``.
        rng: Source of the random filler (seed it for repeatable runs).

    Returns:
        The payload bytes.
    """
    if size < MIN_PAYLOAD_BYTES:
        raise ValueError(f"payload size {size}: must be at least {MIN_PAYLOAD_BYTES} bytes")
    body = _HEADER.pack(sender, seq) + rng.randbytes(size - MIN_PAYLOAD_BYTES)
    return body + _CHECKSUM.pack(zlib.crc32(body))


def parse_payload(data: bytes) -> tuple[int, int] | None:
    """``(sender, seq)`` of a payload made by ``make_payload``; None if it is corrupt.

    Args:
        data: The payload as received.
    """
    if len(data) < MIN_PAYLOAD_BYTES:
        return None
    body, (checksum,) = data[: -_CHECKSUM.size], _CHECKSUM.unpack(data[-_CHECKSUM.size :])
    if zlib.crc32(body) != checksum:
        return None
    sender, seq = _HEADER.unpack_from(body)
    return sender, seq


def first_arrivals(received: Iterable[int]) -> list[int]:
    """``received`` with every repeat of an earlier value removed (duplicates excluded)."""
    seen: set[int] = set()
    unique: list[int] = []
    for value in received:
        if value not in seen:
            seen.add(value)
            unique.append(value)
    return unique


def longest_increasing_subsequence(values: Sequence[int]) -> int:
    """Length of the longest strictly increasing subsequence, in O(n log n).

    Patience sorting: ``tails[i]`` is the smallest last value of any increasing
    subsequence of length ``i + 1`` seen so far.
    """
    tails: list[int] = []
    for value in values:
        at = bisect_left(tails, value)
        if at == len(tails):
            tails.append(value)
        else:
            tails[at] = value
    return len(tails)


def out_of_order_rate(received_seqs: Sequence[int]) -> float:
    """Fraction of messages outside the longest increasing subsequence of one stream.

    Args:
        received_seqs: Sequence numbers of one sender's stream in arrival order;
            repeats (duplicates) are ignored.

    Returns:
        A rate in ``[0, 1)``; 0.0 for an empty stream.
    """
    unique = first_arrivals(received_seqs)
    return _out_of_order_count(unique) / len(unique) if unique else 0.0


def _out_of_order_count(unique: Sequence[int]) -> int:
    return len(unique) - longest_increasing_subsequence(unique)


def average_displacement(received_seqs: Sequence[int]) -> float:
    """Mean distance between each message's received position and its correct one.

    The correct order is the sequence numbers sorted; messages that never
    arrived are left out of both (they count as loss instead).

    Args:
        received_seqs: Sequence numbers of one sender's stream in arrival order;
            repeats (duplicates) are ignored.

    Returns:
        The mean displacement in positions; 0.0 for an empty stream.
    """
    unique = first_arrivals(received_seqs)
    return _displacement_sum(unique) / len(unique) if unique else 0.0


def _displacement_sum(unique: Sequence[int]) -> int:
    correct = {seq: position for position, seq in enumerate(sorted(unique))}
    return sum(abs(position - correct[seq]) for position, seq in enumerate(unique))


@dataclass(frozen=True, slots=True)
class OrderStats:
    """Order metrics over several sender streams, each stream weighted by its size.

    Attributes:
        messages: Distinct messages seen across the streams.
        out_of_order: Messages outside their stream's longest increasing subsequence.
        out_of_order_rate: ``out_of_order / messages``.
        average_displacement: Total displacement over ``messages``.
    """

    messages: int
    out_of_order: int
    out_of_order_rate: float
    average_displacement: float


def order_stats(arrivals: Iterable[tuple[int, int]]) -> OrderStats:
    """Order metrics of ``(sender, seq)`` arrivals, computed per sender stream.

    Each sender has its own correct order (its sequence numbers), so the
    streams are measured apart and the totals summed: the result is the
    per-stream rates averaged with each stream weighted by its message count.

    Args:
        arrivals: ``(sender, seq)`` in global arrival order, duplicates included.
    """
    streams: dict[int, list[int]] = defaultdict(list)
    for sender, seq in arrivals:
        streams[sender].append(seq)
    messages = out_of_order = displacement = 0
    for seqs in streams.values():
        unique = first_arrivals(seqs)
        messages += len(unique)
        out_of_order += _out_of_order_count(unique)
        displacement += _displacement_sum(unique)
    return OrderStats(
        messages=messages,
        out_of_order=out_of_order,
        out_of_order_rate=out_of_order / messages if messages else 0.0,
        average_displacement=displacement / messages if messages else 0.0,
    )


def duplication_rate(deliveries: int, distinct: int, total: int) -> float:
    """Deliveries beyond the first of each message, over the messages sent.

    Args:
        deliveries: Every delivery received, repeats included.
        distinct: Distinct messages among them.
        total: Messages sent (the paper's M).
    """
    if total <= 0:
        raise ValueError(f"total {total}: must be the positive number of messages sent")
    return (deliveries - distinct) / total


def loss_rate(total: int, received_intact: int) -> float:
    """Messages missing or received only corrupt, over the messages sent.

    Args:
        total: Messages sent (the paper's M).
        received_intact: Distinct messages received with a good checksum.
    """
    if total <= 0:
        raise ValueError(f"total {total}: must be the positive number of messages sent")
    return max(total - received_intact, 0) / total


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between closest ranks.

    Args:
        values: The samples, in any order; at least one.
        q: The percentile, from 0 (the minimum) to 100 (the maximum).
    """
    if not values:
        raise ValueError("percentile of no values: give at least one sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q}: must be between 0 and 100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)

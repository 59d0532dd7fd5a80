"""Fast unit tests of the benchmark's payloads and metrics (no Cassandra)."""

from __future__ import annotations

import random

import pytest

from spark_queue.bench.consistency import (
    MIN_PAYLOAD_BYTES,
    average_displacement,
    duplication_rate,
    first_arrivals,
    longest_increasing_subsequence,
    loss_rate,
    make_payload,
    order_stats,
    out_of_order_rate,
    parse_payload,
    percentile,
)

# -- payloads ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [MIN_PAYLOAD_BYTES, 100, 2048])
def test_payload_has_the_asked_size_and_parses_back(size: int) -> None:
    # Given a payload made for sender 7, sequence number 123456789
    data = make_payload(123_456_789, 7, size, random.Random(1))

    # Then it is exactly the asked size and carries both numbers
    assert len(data) == size
    assert parse_payload(data) == (7, 123_456_789)


def test_payloads_are_random_and_repeatable_with_a_seed() -> None:
    first = make_payload(1, 0, 256, random.Random(42))
    again = make_payload(1, 0, 256, random.Random(42))
    other = make_payload(1, 0, 256, random.Random(43))
    assert first == again
    assert first != other


@pytest.mark.parametrize("position", [0, 5, 100, 2047])
def test_a_flipped_bit_anywhere_is_detected(position: int) -> None:
    # Given a good payload with one bit flipped (in the header, body or checksum)
    data = bytearray(make_payload(3, 1, 2048, random.Random(0)))
    data[position] ^= 0x10

    # Then it parses as corrupt
    assert parse_payload(bytes(data)) is None


def test_truncated_and_empty_payloads_are_corrupt() -> None:
    data = make_payload(3, 1, 64, random.Random(0))
    assert parse_payload(data[:-1]) is None
    assert parse_payload(b"") is None
    assert parse_payload(b"x" * (MIN_PAYLOAD_BYTES - 1)) is None


def test_payload_below_the_minimum_size_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        make_payload(0, 0, MIN_PAYLOAD_BYTES - 1, random.Random(0))


# -- order -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], 0),
        ([5], 1),
        ([1, 2, 3, 4, 5], 5),
        ([5, 4, 3, 2, 1], 1),
        ([2, 1, 3, 4, 5], 4),
        ([3, 1, 4, 1, 5, 9, 2, 6], 4),  # 1 4 5 9 / 1 4 5 6 / 3 4 5 6 ...
        ([10, 9, 2, 5, 3, 7, 101, 18], 4),
        ([0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15], 6),
        ([1, 1, 1], 1),  # strictly increasing: repeats do not extend it
    ],
)
def test_longest_increasing_subsequence(values: list[int], expected: int) -> None:
    assert longest_increasing_subsequence(values) == expected


def test_lis_matches_brute_force_on_random_sequences() -> None:
    rng = random.Random(7)

    def brute(values: list[int]) -> int:
        best = [1] * len(values)
        for i in range(len(values)):
            for j in range(i):
                if values[j] < values[i]:
                    best[i] = max(best[i], best[j] + 1)
        return max(best, default=0)

    for _ in range(200):
        values = rng.sample(range(50), rng.randint(0, 30))
        assert longest_increasing_subsequence(values) == brute(values)


def test_paper_example_one_message_swapped() -> None:
    # {m2, m1, m3, m4, m5}: only m1 must move; displacement (1+1+0+0+0)/5
    received = [2, 1, 3, 4, 5]
    assert out_of_order_rate(received) == pytest.approx(0.2)
    assert average_displacement(received) == pytest.approx(0.4)


def test_paper_example_first_message_last() -> None:
    # {m2, m3, m4, m5, m1}: still only m1 must move, but it moved far: (1+1+1+1+4)/5
    received = [2, 3, 4, 5, 1]
    assert out_of_order_rate(received) == pytest.approx(0.2)
    assert average_displacement(received) == pytest.approx(1.6)


def test_in_order_stream_has_no_disorder() -> None:
    assert out_of_order_rate(list(range(100))) == 0.0
    assert average_displacement(list(range(100))) == 0.0
    assert out_of_order_rate([]) == 0.0
    assert average_displacement([]) == 0.0


def test_duplicates_are_excluded_from_the_order_metrics() -> None:
    # Given an in-order stream in which m1 and m3 arrive a second time later
    received = [1, 2, 3, 1, 4, 3, 5]

    # Then order is judged on the first arrivals only: perfect
    assert first_arrivals(received) == [1, 2, 3, 4, 5]
    assert out_of_order_rate(received) == 0.0
    assert average_displacement(received) == 0.0


def test_lost_messages_do_not_count_as_disorder() -> None:
    # m3 never arrived: the rest are in order
    assert out_of_order_rate([1, 2, 4, 5]) == 0.0
    assert average_displacement([1, 2, 4, 5]) == 0.0


def test_order_stats_judges_each_sender_by_its_own_sequence() -> None:
    # Given two senders, interleaved: sender 0 in order, sender 1 as the paper's second example
    arrivals = [(0, 0), (1, 2), (0, 1), (1, 3), (1, 4), (0, 2), (1, 5), (1, 1), (0, 3), (0, 1)]

    stats = order_stats(arrivals)

    # Then sender 0 (4 distinct) is perfect and sender 1 (5) has 1 out of order, displacement 8
    assert stats.messages == 9
    assert stats.out_of_order == 1
    assert stats.out_of_order_rate == pytest.approx(1 / 9)
    assert stats.average_displacement == pytest.approx(8 / 9)


def test_order_stats_of_nothing() -> None:
    stats = order_stats([])
    assert (stats.messages, stats.out_of_order_rate, stats.average_displacement) == (0, 0.0, 0.0)


# -- duplication, loss, percentiles -------------------------------------------------------


def test_duplication_and_loss_rates() -> None:
    assert duplication_rate(deliveries=110, distinct=100, total=100) == pytest.approx(0.1)
    assert duplication_rate(deliveries=100, distinct=100, total=100) == 0.0
    assert loss_rate(total=100, received_intact=97) == pytest.approx(0.03)
    assert loss_rate(total=100, received_intact=100) == 0.0
    with pytest.raises(ValueError, match="positive"):
        loss_rate(total=0, received_intact=0)
    with pytest.raises(ValueError, match="positive"):
        duplication_rate(deliveries=0, distinct=0, total=0)


def test_percentile_interpolates_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100, shuffled below
    random.Random(3).shuffle(values)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([4.0], 99) == 4.0


def test_percentile_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="at least one"):
        percentile([], 50)
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 101)

"""``bdq bench spread``: its arithmetic from hand-made counter readings, and its flags.

No test here starts a cluster or sends a message: the run itself is a benchmark
(docs/benchmarks.md), and the suite's one three-node cluster is the fault tests'.
"""

from __future__ import annotations

import threading
import time

import pytest
from click.testing import CliRunner

from spark_queue.bench.spread_bench import WINDOW, Senders, SpreadParams, read_windows
from spark_queue.bench.spread_figures import Window, effective_nodes, spread_figures, windows
from spark_queue.cli import main
from spark_queue.config import HostPort
from spark_queue.errors import InvalidSetting, SparkQueueError


def test_a_window_s_shares_are_each_node_s_writes_over_the_window_s_total() -> None:
    # Given readings of three nodes' cumulative write counts, a quarter second apart
    readings = [(0.0, [100, 50, 7]), (0.25, [400, 50, 7]), (0.5, [500, 150, 107])]
    # When they become windows
    first, second = windows(readings)
    # Then each window holds each node's new writes, and their shares
    assert first == Window(0.0, (300, 0, 0))
    assert first.shares == (1.0, 0.0, 0.0)
    assert second.writes == (100, 100, 100)
    assert second.shares == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert second.start == 0.25


def test_effective_busy_nodes_is_one_over_the_sum_of_squared_shares() -> None:
    # One node taking everything is one busy node; three equal ones are three
    assert effective_nodes((1.0, 0.0, 0.0)) == 1.0
    assert effective_nodes((1 / 3, 1 / 3, 1 / 3)) == pytest.approx(3.0)
    # Half, quarter, quarter: 1 / (0.25 + 0.0625 + 0.0625)
    assert effective_nodes((0.5, 0.25, 0.25)) == pytest.approx(1 / 0.375)
    assert Window(0.0, (2, 1, 1)).effective_nodes == pytest.approx(1 / 0.375)
    assert Window(0.0, (2, 1, 1)).busiest_share == 0.5
    with pytest.raises(SparkQueueError, match=r"need at least one share above 0"):
        effective_nodes((0.0, 0.0, 0.0))


def test_the_figures_are_medians_over_windows_with_writes_idle_ones_apart() -> None:
    # Given four windows on one node at a time, one spread evenly, and one without writes
    run = [
        Window(0.0, (10, 0, 0)),
        Window(0.25, (0, 10, 0)),
        Window(0.5, (0, 0, 10)),
        Window(0.75, (0, 0, 0)),
        Window(1.0, (10, 10, 10)),
    ]
    # When they are summarised
    figures = spread_figures(run)
    # Then the idle window is left out of the medians but counted
    assert (figures.windows, figures.idle_windows) == (4, 1)
    # And the busiest share's median is that of 1, 1, 1 and 1/3
    assert figures.busiest_share_p50 == 1.0
    # And the effective nodes' median is that of 1, 1, 1 and 3; p10 and p90 by nearest rank
    assert figures.effective_p50 == 1.0
    assert figures.effective_p10 == 1.0
    assert figures.effective_p90 == pytest.approx(3.0)
    # And over the whole run every node took a third of the writes
    assert figures.node_shares == pytest.approx((1 / 3, 1 / 3, 1 / 3))


def test_a_run_without_writes_or_with_a_restarted_node_is_refused() -> None:
    with pytest.raises(SparkQueueError, match=r"none of the 2 windows saw a write"):
        spread_figures([Window(0.0, (0, 0)), Window(0.25, (0, 0))])
    with pytest.raises(SparkQueueError, match=r"a node's write count went down"):
        windows([(0.0, [5, 9]), (0.25, [6, 2])])
    with pytest.raises(SparkQueueError, match=r"must count the same nodes"):
        windows([(0.0, [5, 9]), (0.25, [6])])


def test_bad_parameters_are_refused_naming_the_value_and_the_rule() -> None:
    with pytest.raises(InvalidSetting, match=r"replication_factor 4: must be a whole number"
                       r" from 1 to 3, the nodes counted \(the three local nodes\)"):  # fmt: skip
        SpreadParams(replication_factor=4)
    one_host = (HostPort("10.0.0.1"),)
    with pytest.raises(InvalidSetting, match=r"replication_factor 3: must be a whole number"
                       r" from 1 to 1, the nodes counted \(the 1 hosts listed\)"):  # fmt: skip
        SpreadParams(replication_factor=3, hosts=one_host)
    with pytest.raises(InvalidSetting, match=r"rate -1: must be a whole number from 0"):
        SpreadParams(rate=-1)
    with pytest.raises(InvalidSetting, match=r"seconds 0.3: must be at least 0.5"):
        SpreadParams(seconds=0.3)
    with pytest.raises(InvalidSetting, match=r"lanes 0: must be a whole number from 1"):
        SpreadParams(lanes=0)
    with pytest.raises(InvalidSetting, match=r"hosts '10.0.0.1:9042, 10.0.0.1:9042':"
                       r" must name each node once"):  # fmt: skip
        SpreadParams(hosts=one_host * 2)


def test_the_command_refuses_bad_flags_in_its_own_words_before_starting_anything() -> None:
    # Given an RF above the nodes counted, and a negative rate
    runner = CliRunner()
    existing = ["bench", "spread", "--existing", "--hosts", "10.0.0.1", "--rf", "3"]
    # When the command runs
    result = runner.invoke(main, existing)
    # Then it fails with the flag's name, the value and the rule (no node was asked)
    assert result.exit_code == 1
    assert "--rf 3: must be a whole number from 1 to 1" in result.output
    result = runner.invoke(main, ["bench", "spread", "--rate", "-5"])
    assert result.exit_code == 1
    assert "--rate -5: must be a whole number from 0 to" in result.output


class SlowSends:
    """A stand-in for the queue's send (no queue is under test): each send takes 0.3 s."""

    def __init__(self) -> None:
        self.sent = 0
        self._lock = threading.Lock()

    def send(self, payload: bytes) -> None:
        time.sleep(0.3)
        with self._lock:
            self.sent += 1


def test_readings_stop_with_the_send_schedule_not_with_a_send_still_in_flight() -> None:
    # Given two sender threads at full speed for one second, whose sends take 0.3 s
    # (so the last one of each returns after the second is up)
    sends = SlowSends()
    params = SpreadParams(rate=0, seconds=1.0, threads=2)
    senders = Senders(sends, params)  # type: ignore[arg-type]
    # When the windows are read while they send
    readings = read_windows(senders, lambda: (sends.sent, 0, 0), params.seconds)
    # Then there is one reading before the sends, one per window of the second, and
    # one after the last send returned (no trailing windows while a send is in flight)
    assert len(readings) == round(params.seconds / WINDOW) + 1
    # And the last reading counts every send
    assert readings[-1][1][0] == sends.sent == senders.sent

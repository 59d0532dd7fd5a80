"""``bdq bench queue --sweep-receivers``: its arithmetic (fast) and one tiny real run.

The arithmetic is checked on made-up points: the ideal, the ratio, the first
saturated N, the shares and the cause read from the CPU counters. The real
run only checks what the report holds and that nothing was lost; rates are
never asserted (a benchmark's figures belong in the docs, not in tests).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.bench.cpu_meter import CpuMeter, machine_busy, process_cpu
from spark_queue.bench.receiver_sweep import run_receiver_sweep, sweep_receivers
from spark_queue.bench.sweep_figures import (
    MIN_MESSAGES,
    ReceiverSweep,
    SweepPoint,
    messages_for,
    saturation_cause,
    work_rate,
)
from spark_queue.bench.sweep_plot import require_matplotlib, write_sweep_plot
from spark_queue.cli import main
from spark_queue.cli.bench_receivers import sweep_table
from spark_queue.errors import InvalidSetting, SparkQueueError


def point(receivers: int, rate: float, **overrides: Any) -> SweepPoint:
    """A point of ``receivers`` that moved ``rate`` msgs/s for 10 s, evenly, without loss."""
    distinct = int(rate * 10)
    values: dict[str, Any] = {
        "receivers": receivers,
        "messages": distinct,
        "seconds": 10.0,
        "distinct": distinct,
        "deliveries": distinct,
        "corrupt": 0,
        "per_receiver": tuple(
            distinct // receivers + (1 if i < distinct % receivers else 0) for i in range(receivers)
        ),
        "empty_receives": 0,
        "stalled": False,
        "load": 0.5,
        "client_cpu": 2.0,
        "cassandra_cpu": 3.0,
        "machine_cpu": 6.0,
        "cores": 2,
    }
    values.update(overrides)
    return SweepPoint(**values)


# -- the arithmetic ----------------------------------------------------------------------


def test_ideal_and_ratio_are_against_n_times_the_n1_rate() -> None:
    # Given one worker at 50 msgs/s, 4 at 190 and 16 at 480
    sweep = ReceiverSweep(
        points=[point(1, 50), point(4, 190), point(16, 480)], work_ms=20, processes=False
    )

    # Then the ideal is N x 50 and the ratio actual / ideal
    assert sweep.one_worker_rate == pytest.approx(50)
    assert [sweep.ideal(p) for p in sweep.points] == pytest.approx([50, 200, 800])
    assert [sweep.ratio(p) for p in sweep.points] == pytest.approx([1.0, 0.95, 0.6])


def test_saturation_is_the_first_n_under_the_threshold() -> None:
    # Given N = 4 under 0.8 of its ideal, N = 8 above again (noise), N = 16 under
    points = [point(1, 100), point(4, 300), point(8, 700), point(16, 900)]
    sweep = ReceiverSweep(points=points, work_ms=10, processes=True)

    saturated = sweep.saturated_at
    assert saturated is not None and saturated.receivers == 4  # 0.75: the first under 0.8
    assert sweep.why.startswith("saturates at N = 4 (0.75 of N x one worker's rate)")
    assert sweep.to_dict()["saturated_at"] == 4


def test_exactly_the_threshold_is_not_saturated() -> None:
    sweep = ReceiverSweep(points=[point(1, 100), point(5, 400)], work_ms=10, processes=False)

    assert sweep.saturated_at is None
    assert sweep.why.startswith("no saturation up to N = 5")
    assert sweep.to_dict()["saturated_at"] is None


def test_a_sweep_must_start_with_its_reference() -> None:
    with pytest.raises(ValueError, match="N = 1"):
        ReceiverSweep(points=[point(2, 100)], work_ms=10, processes=False)


def test_shares_duplicates_and_loss() -> None:
    # Given 3 receivers, 100 messages sent, 98 received intact, 3 duplicates, 1 corrupt
    p = point(
        3,
        10,
        messages=100,
        distinct=98,
        deliveries=102,
        corrupt=1,
        per_receiver=(51, 34, 17),
    )

    assert p.duplicates == 3
    assert p.lost == 2
    assert p.shares == pytest.approx([0.5, 1 / 3, 1 / 6])
    assert (p.share_min, p.share_max) == pytest.approx((1 / 6, 0.5))
    assert p.idle_receivers == 0
    idle = point(3, 10, per_receiver=(60, 40, 0))
    assert idle.idle_receivers == 1 and idle.share_min == 0.0


def test_cpu_figures_per_message_and_cores() -> None:
    p = point(2, 100, client_cpu=2.5, deliveries=1000, seconds=10.0, cassandra_cpu=None)

    assert p.cpu_ms_per_message == pytest.approx(2.5)
    assert p.cores_used(p.client_cpu) == pytest.approx(0.25)
    assert p.cores_used(p.cassandra_cpu) is None
    values = p.to_dict()
    assert values["client_cores"] == pytest.approx(0.25) and values["cassandra_cores"] is None


@pytest.mark.parametrize(
    ("cpu", "processes", "cause"),
    [
        ({"machine_cpu": 19.0, "client_cpu": 8.0, "cassandra_cpu": 9.0}, True, "CPU: the machine"),
        (
            {"machine_cpu": 12.0, "client_cpu": 9.5, "cassandra_cpu": 2.0},
            False,
            "the client's interpreter",
        ),
        ({"machine_cpu": 12.0, "client_cpu": 9.5, "cassandra_cpu": 2.0}, True, "not CPU"),
        ({"machine_cpu": None, "client_cpu": 1.0, "cassandra_cpu": None}, True, "unknown"),
    ],
)
def test_the_cause_is_read_from_the_cpu_counters(
    cpu: dict[str, Any], processes: bool, cause: str
) -> None:
    # 10 s phases on 2 cores: 19 s of busy CPU is 1.9 cores, over 0.85 of both
    text = saturation_cause(point(8, 100, **cpu), processes=processes)

    assert text.startswith(cause)
    if cpu["machine_cpu"] is not None:
        others = cpu["machine_cpu"] - cpu["client_cpu"] - cpu["cassandra_cpu"]
        assert f"other processes {others / 10:.2f} cores" in text


def test_the_waits_are_named_when_the_cpu_was_not_the_limit() -> None:
    waited = point(8, 100, machine_cpu=8.0, receive_p50_ms=41.0, ack_p50_ms=12.0)

    text = saturation_cause(waited, processes=True)

    assert text.startswith("not CPU (0.80 of 2 cores busy")
    assert "receive p50 41 ms, ack p50 12 ms" in text


def test_messages_per_point_scale_with_n_and_have_a_floor() -> None:
    assert work_rate(20) == pytest.approx(50)
    assert messages_for(1, 50, 5) == 250
    assert messages_for(32, 45.5, 5) == 7280
    assert messages_for(1, 10, 1) == MIN_MESSAGES
    assert work_rate(0) > 0  # no work: a default guess, never a division by zero


def test_the_points_always_start_at_n_1() -> None:
    assert sweep_receivers([32, 4, 16, 4]) == [1, 4, 16, 32]
    assert sweep_receivers([1]) == [1]
    with pytest.raises(InvalidSetting, match="sweep_receivers 0"):
        sweep_receivers([0, 4])
    with pytest.raises(InvalidSetting, match="at least one"):
        sweep_receivers([])


# -- CPU counters, plot and flags ----------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads Linux's /proc")
def test_the_cpu_meter_reads_this_process_and_the_machine() -> None:
    meter = CpuMeter(cassandra_pid=os.getpid())  # any pid will do: ours
    meter.start()
    sum(i * i for i in range(200_000))  # some CPU to count
    meter.stop()

    use = meter.use
    assert use is not None and use.seconds > 0 and use.client > 0
    assert use.cassandra is not None and use.cassandra >= 0
    assert use.machine is not None and use.machine >= 0 and use.cores >= 1
    assert process_cpu(2**22 + 12345) is None  # no such process
    assert (machine_busy() or 0) > 0


def test_without_matplotlib_the_plot_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError

    with pytest.raises(SparkQueueError, match=r"--plot: .*matplotlib.*'dev' extra") as caught:
        require_matplotlib()
    assert "\n" not in str(caught.value)


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    sweep = ReceiverSweep(
        points=[point(1, 50), point(4, 190), point(16, 480)], work_ms=20, processes=False
    )

    path = write_sweep_plot(sweep, tmp_path / "plots" / "sweep.png", "a title")

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_table_fits_a_pipe_uncut() -> None:
    # Given a sweep with wide figures (N = 128, thousands of messages, 4-digit p50s)
    sweep = ReceiverSweep(
        points=[point(1, 45), point(128, 1234.5, receive_p50_ms=1161.0, ack_p50_ms=114.0)],
        work_ms=20,
        processes=True,
        settings={
            "send_threads": 1,
            "payload_bytes": 2048,
            "receive_batch": 10,
            "order_hint": 1,
            "seed": 22,
        },
    )
    console = Console(width=120, record=True, file=io.StringIO())

    console.print(sweep_table(sweep))

    text = console.export_text()
    assert "…" not in text  # no cell cut short
    assert "1,234" in text and "1161/114" in text and "0.21x" in text
    assert "saturates at N = 128" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plot", "x.png"], "--plot: only with --sweep-receivers"),
        (["--sweep-receivers", "1,4", "--recv-threads", "4"], "--recv-threads: not with"),
        (["--sweep-receivers", "1,4", "--kill-receiver"], "--kill-receiver: not with"),
        (["--sweep-receivers", "1,4", "--sweep-k"], "--sweep-k: one sweep at a time"),
        (["--work-ms", "5", "--receive-delay", "0.1"], "give only --work-ms"),
        (["--sweep-receivers", "1,x"], "receiver counts separated by commas"),
        (["--sweep-receivers", "0,4"], "must be 1 or more"),
    ],
)
def test_flags_that_do_not_go_together_are_refused_before_any_run(
    args: list[str], message: str
) -> None:
    # An unreachable host: reaching Cassandra would be a failure of its own
    result = CliRunner().invoke(main, ["bench", "queue", "--hosts", "127.0.0.1:1", *args])

    assert result.exit_code != 0
    assert message in result.output


# -- a tiny real run ---------------------------------------------------------------------


@pytest.mark.cassandra
@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_a_tiny_sweep_loses_nothing_and_every_receiver_gets_a_share(
    keyspace: ConnectionSettings, processes: bool
) -> None:
    # Given one sender thread, 300 keyless messages per point, 5 ms of work per message
    sweep = run_receiver_sweep(
        keyspace,
        receivers=(2,),
        work_ms=5,
        messages=300,
        recv_processes=processes,
        receive_batch=5,
        seed=7,
    )

    # Then N = 1 ran first as the reference, and both points are complete
    assert [p.receivers for p in sweep.points] == [1, 2]
    for p in sweep.points:
        assert p.messages == 300 and p.distinct == 300
        assert p.lost == 0 and p.corrupt == 0 and not p.stalled
        assert p.deliveries == 300 + p.duplicates
        assert len(p.per_receiver) == p.receivers
        assert all(n > 0 for n in p.per_receiver), p.per_receiver  # everyone did a share
        assert sum(p.per_receiver) == p.deliveries
        assert p.client_cpu is not None and p.client_cpu > 0
        assert p.receive_p50_ms is not None and p.ack_p50_ms is not None
    report = sweep.to_dict()
    assert report["one_worker_rate"] > 0 and report["work_ms"] == 5
    assert report["processes"] is processes and report["settings"]["send_threads"] == 1
    for row in report["points"]:
        for name in ("throughput", "ideal", "ratio", "duplicates", "lost", "share_min"):
            assert name in row
        assert row["share_max"] >= row["share_min"] > 0
    with QueueClient(settings=keyspace) as client:
        assert client.list_queues() == []  # every point's queue removed

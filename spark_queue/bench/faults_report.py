"""The ``bdq bench faults --report DIR`` output: a Markdown report and matplotlib PNG plots.

Three plots, as the issue asks: response time against offered load (the Fig. 4
shape), received throughput over time with the faults marked, and duplication
and loss per fault level. The Markdown lists every level's figures with the
command that produced them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_queue.bench.faults_results import FaultsResult, LevelResult
from spark_queue.errors import InvalidSetting


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise InvalidSetting(
            "--report: the plots need matplotlib; install it (pip install matplotlib)"
        ) from e
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def level_row(level: LevelResult) -> list[str]:
    """One level's figures as table cells (shared by the terminal table and the report)."""
    return [
        level.fault,
        level.level,
        f"{level.sent:,}",
        f"{level.send_rate:,.0f}/s",
        str(level.lost),
        f"{level.duplication:.2%}",
        f"{level.send_duplicates} / {level.redeliveries}",
        f"{level.out_of_order:.2%}",
        f"{level.displacement:.3f}",
        f"{_ms(level.send_p50)} / {_ms(level.send_p99)}",
        f"{_ms(level.recv_p50)} / {_ms(level.recv_p99)}",
        str(level.send_errors),
        str(level.restarts),
        f"{level.drops} / {level.requests:,}" if level.fault == "network" else "-",
    ]


HEADERS = [
    "fault",
    "level",
    "sent",
    "send rate",
    "lost",
    "duplication",
    "written twice / redelivered",
    "out-of-order",
    "avg displ.",
    "send p50 / p99 ms",
    "receive p50 / p99 ms",
    "send errors",
    "receiver restarts",
    "dropped / requests",
]


def write_report(result: FaultsResult, folder: Path, command: str) -> list[Path]:
    """Write ``report.md`` and the PNGs into ``folder``; return the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    files = [
        _load_plot(plt, result, folder / "faults-load.png"),
        _throughput_plot(plt, result, folder / "faults-throughput.png"),
        _duplication_plot(plt, result, folder / "faults-duplication.png"),
    ]
    pictures = [f for f in files if f is not None]
    p = result.params
    lines = [
        "# `bdq bench faults` report",
        "",
        f"Command: `{command}` (seed {p.seed}).",
        "",
        f"Workload: payloads of {p.payload_bytes} bytes (sender, sequence number, CRC32),"
        f" single-message sends retried until they succeed, {p.receivers} receiver processes"
        f" (batches of {p.receive_batch}, visibility timeout {p.visibility_timeout:g} s),"
        f" fault levels of {p.seconds:g} s at {p.rate:g} msgs/s offered, node crashes"
        f" with MTTF {p.mttf:g} s and MTTR {p.mttr:g} s over {p.node_seconds:g} s,"
        f" load steps of {p.load_seconds:g} s.",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + " --- |" * len(HEADERS),
        *("| " + " | ".join(level_row(level)) + " |" for level in result.levels),
        "",
        f"Lost messages in all: **{result.lost}**.",
        "",
    ]
    if result.saturation is not None:
        lines += [
            f"Saturation (Fig. 4 shape): **{result.saturation:g} msgs/s** offered, the highest"
            " load step whose send and receive response time p99 stayed within 200 ms.",
            "",
        ]
    events = [(level, e) for level in result.levels for e in level.events]
    if events:
        lines += ["Fault events (seconds since the level began):", ""]
        lines += [f"- {level.fault} {level.level}: {t:g} s {what}" for level, (t, what) in events]
        lines.append("")
    lines += [f"![{f.stem}]({f.name})" for f in pictures]
    report = folder / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return [report, *pictures]


def _load_plot(plt: Any, result: FaultsResult, path: Path) -> Path | None:
    steps = [level for level in result.levels if level.fault == "load"]
    if not steps:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    offered = [level.offered for level in steps]
    for name, attr in (("send p50", "send_p50"), ("receive p50", "recv_p50")):
        ax.plot(offered, [getattr(level, attr) or 0 for level in steps], marker="o", label=name)
    for name, attr in (("send p99", "send_p99"), ("receive p99", "recv_p99")):
        values = [getattr(level, attr) or 0 for level in steps]
        ax.plot(offered, values, marker=".", linestyle="--", label=name)
    ax.axhline(200, color="grey", linewidth=0.8)
    if result.saturation is not None:
        ax.axvline(result.saturation, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("offered load (msgs/s)")
    ax.set_ylabel("response time (ms)")
    ax.set_title("Response time vs offered load (no fault)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _throughput_plot(plt: Any, result: FaultsResult, path: Path) -> Path | None:
    faulty = [level for level in result.levels if level.fault != "load"]
    if not faulty:
        return None
    fig, axes = plt.subplots(len(faulty), 1, figsize=(7, 1.8 * len(faulty) + 0.6), squeeze=False)
    for ax, level in zip(axes[:, 0], faulty, strict=True):
        ax.plot(range(len(level.throughput)), level.throughput, linewidth=1)
        for t, what in level.events:
            ax.axvline(t, color="red" if "killed" in what else "green", linewidth=0.8)
        ax.set_ylabel("msgs/s")
        ax.set_title(f"{level.fault} {level.level}", fontsize=9)
    axes[-1, 0].set_xlabel("seconds since the level began (red: node killed, green: back)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _duplication_plot(plt: Any, result: FaultsResult, path: Path) -> Path | None:
    faulty = [level for level in result.levels if level.fault != "load"]
    if not faulty:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [f"{level.fault}\n{level.level}" for level in faulty]
    positions = range(len(faulty))
    ax.bar(positions, [100 * level.duplication for level in faulty], label="duplication %")
    ax.bar(
        positions,
        [100 * level.lost / max(level.sent, 1) for level in faulty],
        label="loss %",
        color="red",
    )
    ax.set_xticks(list(positions), names, fontsize=8)
    ax.set_ylabel("% of messages sent")
    ax.set_title("Duplication and loss per fault level")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path

"""The receiver sweep's plot: throughput and its ideal against N, as a PNG (``--plot PATH``).

matplotlib comes with the ``dev`` extra, not with the core install, so it is
imported only when a plot is asked for; ``require_matplotlib`` lets the
command fail before a sweep of minutes rather than after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_queue.bench.sweep_figures import SATURATION_RATIO, ReceiverSweep
from spark_queue.errors import SparkQueueError


def require_matplotlib() -> Any:
    """matplotlib's pyplot on the file-only backend.

    Raises:
        SparkQueueError: matplotlib is not installed (it comes with the 'dev' extra).
    """
    try:
        import matplotlib
    except ImportError as e:
        raise SparkQueueError(
            "--plot: the plot needs matplotlib, which the 'dev' extra installs:"
            " pip install 'spark-queue[dev]' (or pip install matplotlib)"
        ) from e
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def write_sweep_plot(sweep: ReceiverSweep, path: Path, title: str) -> Path:
    """Draw measured and ideal throughput against N (log-log), the saturation point marked.

    Returns:
        ``path``, written.
    """
    plt = require_matplotlib()
    from matplotlib import ticker

    ns = [p.receivers for p in sweep.points]
    measured = [p.throughput for p in sweep.points]
    ideal = [sweep.ideal(p) for p in sweep.points]
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    try:
        ax.plot(ns, ideal, "--", color="grey", label="ideal: N x one worker's rate")
        ax.plot(
            ns,
            [r * SATURATION_RATIO for r in ideal],
            ":",
            color="grey",
            label=f"{SATURATION_RATIO:g} x ideal",
        )
        ax.plot(ns, measured, "o-", color="tab:blue", label="measured (receive + work + ack)")
        for n, rate, p in zip(ns, measured, sweep.points, strict=True):
            ax.annotate(
                f"{sweep.ratio(p):.2f}",
                (n, rate),
                textcoords="offset points",
                xytext=(4, -12),
                fontsize=8,
            )
        saturated = sweep.saturated_at
        if saturated is not None:
            ax.axvline(saturated.receivers, color="tab:red", alpha=0.4)
            ax.text(
                saturated.receivers,
                min(measured),
                f" saturates at N = {saturated.receivers}",
                color="tab:red",
                fontsize=8,
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel("receivers N" + (" (processes)" if sweep.processes else " (threads)"))
        ax.set_ylabel("messages / s")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path

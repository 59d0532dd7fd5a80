"""``notebooks/walkthrough.ipynb`` runs top to bottom against a real node and draws its plot."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_queue.config import ConnectionSettings

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "walkthrough.ipynb"
#: Seconds any one cell may take (the streaming cell takes well under a minute).
CELL_TIMEOUT = 600

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cassandra]


def test_walkthrough_runs_and_plots(
    keyspace: ConnectionSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Given a fresh keyspace and the cluster the tests use, seen by the kernel's environment
    monkeypatch.setenv("BDQ_KEYSPACE", keyspace.keyspace)
    monkeypatch.setenv("BDQ_CASSANDRA_HOSTS", ",".join(str(h) for h in keyspace.hosts))
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core warns without it
    repo = str(NOTEBOOK.parents[1])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    )

    # When it runs top to bottom in a kernel started from the notebooks folder
    client = nbclient.NotebookClient(
        notebook,
        timeout=CELL_TIMEOUT,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()  # raises CellExecutionError, with the cell's traceback, on any error

    # Then no cell failed, one drew a PNG plot, and the last one cleaned up
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    assert any("image/png" in out.get("data", {}) for out in outputs), "no plot in the outputs"
    assert "done" in "".join(out.get("text", "") for out in notebook.cells[-1].outputs)

"""jobs/pipeline.py on a Spark standalone cluster, submitted with spark-submit as the README says.

The module starts a master and two workers from the pip installation of pyspark
(``spark-class org.apache.spark.deploy.master.Master`` and ``...worker.Worker``)
on 127.0.0.1 with ports of their own, submits the pipeline with
``spark-submit --master spark://...``, checks its output queues, and stops the
cluster (each process in its own group, executors included).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs import orders as sample
from spark_queue import ConnectionSettings, QueueClient

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.cassandra]

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    master: str
    processes: list[subprocess.Popen[bytes]]
    logs: Path


def _spark_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,  # executors run the interpreter with spark-queue
        SPARK_NO_DAEMONIZE="1",
    )
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    env.pop("SPARK_HOME", None)  # spark-class finds the pip installation itself
    return env


def _wait_for(logs: Path, name: str, text: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    log = logs / f"{name}.log"
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{name} did not log {text!r}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = _spark_env()
    port = free_port()
    master = f"spark://127.0.0.1:{port}"
    cluster = Cluster(master, [], logs)

    def launch(name: str, *args: str) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as out:
            process = subprocess.Popen(
                [str(BIN / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=logs,
                start_new_session=True,  # its own group: stopping it stops its executors
            )
        cluster.processes.append(process)
        return process

    try:
        web = str(free_port())
        process = launch("master", "org.apache.spark.deploy.master.Master", "--host",
                         "127.0.0.1", "--port", str(port), "--webui-port", web)  # fmt: skip
        _wait_for(logs, "master", "I have been elected leader", process)
        for index in (1, 2):
            name = f"worker{index}"
            process = launch(name, "org.apache.spark.deploy.worker.Worker", master, "--host",
                             "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port",
                             str(free_port()), "--work-dir", str(logs / name))  # fmt: skip
            _wait_for(logs, name, "Successfully registered with master", process)
        yield cluster
    finally:
        for process in reversed(cluster.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in cluster.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def test_pipeline_runs_on_a_standalone_cluster_with_spark_submit(
    standalone: Cluster, keyspace: ConnectionSettings, tmp_path: Path
) -> None:
    # Given 60 orders (6 malformed) in the queue
    orders = list(sample.sample_orders(60, 0.1, seed=8))
    with QueueClient(settings=keyspace) as client:
        client.create_queue("orders", exist_ok=True).send_batch([o.payload for o in orders])

    # When the job is submitted to the cluster the way the README shows
    hosts = ",".join(str(h) for h in keyspace.hosts)
    command = [
        str(BIN / "spark-submit"),
        "--master", standalone.master,
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", "spark.executor.memory=512m",
        "--conf", "spark.cores.max=2",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        str(REPO / "jobs" / "pipeline.py"),
        "--hosts", hosts,
        "--keyspace", keyspace.keyspace,
        "--checkpoint", str(tmp_path / "checkpoint"),
    ]  # fmt: skip
    result = subprocess.run(
        command, capture_output=True, text=True, env=_spark_env(), timeout=600, check=False
    )

    # Then every order went to one of the output queues, once
    assert result.returncode == 0, result.stderr[-4000:]
    with QueueClient(settings=keyspace) as client:
        shipped = client.queue("shipments").stats().visible
        rejected = client.queue("orders-rejected").stats().visible
        left = client.queue("orders").stats()
    assert shipped == sum(o.reason is None for o in orders)
    assert rejected == 6
    assert left.visible == 0 and left.in_flight == 0
    assert "replaced a statically registered data source" not in result.stderr

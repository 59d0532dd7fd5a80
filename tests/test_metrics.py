"""Metrics (spark_queue.engine.counters, ``bdq metrics serve``) scraped by a real Prometheus server.

Prometheus is Debian's ``prometheus`` package: when it is missing, this module's
set-up installs it once with apt-get (that takes a while), skipping with the
reason where it cannot (no apt-get, not root) and failing under CI=true.
Everything listens on free loopback ports, never Prometheus's default 9090.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.ops.prometheus import REGISTRY, QueueCollector, matches, serve

APT_TIMEOUT = 900


@pytest.fixture
def keyspace(shared_keyspace: ConnectionSettings) -> ConnectionSettings:
    """This module's tests share one keyspace, emptied of queues after each."""
    return shared_keyspace


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _unavailable(reason: str) -> None:
    if _in_ci():
        pytest.fail(f"{reason} (CI=true: a missing backend fails the run)", pytrace=False)
    pytest.skip(reason)


def _install_prometheus() -> str | None:
    """Debian's prometheus binary, installed with apt-get when missing (root only)."""
    found = shutil.which("prometheus")
    if found is not None:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print("\n[tests] installing Debian's prometheus with apt-get...", file=sys.stderr)
    subprocess.run(["apt-get", "update", "-q"], env=env, check=False, timeout=APT_TIMEOUT)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", "prometheus"],
        env=env,
        check=False,
        timeout=APT_TIMEOUT,
    )
    return shutil.which("prometheus")


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    binary = _install_prometheus()
    if binary is None:
        _unavailable(
            "Prometheus is not installed and could not be (needs apt-get as root):"
            " apt-get install prometheus"
        )
    assert binary is not None
    return binary


def http_get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read())


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.fixture
def prometheus(
    prometheus_binary: str, tmp_path: Path
) -> Iterator[Callable[[list[int]], Callable[[str], dict[str, float]]]]:
    """Start Prometheus scraping the given loopback ports every second; yield a PromQL runner."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(targets: list[int]) -> Callable[[str], dict[str, float]]:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: bdq\n    static_configs:\n"
            f"      - targets: {json.dumps([f'127.0.0.1:{t}' for t in targets])}\n"
        )
        with (tmp_path / "prometheus.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [
                        prometheus_binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={tmp_path / 'data'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_get(f"{base}/-/ready").startswith(b"Prometheus"), 60, "Prometheus")

        def query(promql: str) -> dict[str, float]:
            url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
            answer = json.loads(http_get(url))
            assert answer["status"] == "success", answer
            return {
                json.dumps(r["metric"], sort_keys=True): float(r["value"][1])
                for r in answer["data"]["result"]
            }

        return query

    yield start
    for process in processes:
        process.terminate()
        process.wait(30)


def test_queue_patterns_are_globs() -> None:
    assert matches("orders-eu", ["orders-*"]) and matches("x", None)
    assert not matches("other", ["orders-*", "shipments"])


@pytest.mark.cassandra
def test_the_collector_reads_gauges_from_the_cheap_counts(keyspace: ConnectionSettings) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("a").send_batch([b"1", b"2", b"3"])
        client.create_queue("b").send(b"x", delay=60)
        families = {f.name: f for f in QueueCollector(client, ["a", "b"]).collect()}
    visible = {s.labels["queue"]: s.value for s in families["bdq_visible_messages"].samples}
    delayed = {s.labels["queue"]: s.value for s in families["bdq_delayed_messages"].samples}
    assert visible == {"a": 3.0, "b": 0.0}
    assert delayed == {"a": 0.0, "b": 1.0}


@pytest.mark.cassandra
@pytest.mark.slow
def test_prometheus_scrapes_queue_gauges_and_client_counters(
    keyspace: ConnectionSettings,
    prometheus: Callable[[list[int]], Callable[[str], dict[str, float]]],
    tmp_path: Path,
) -> None:
    # Given a queue with a dead-letter queue, another queue, and this process as a worker
    name = f"metrics-{uuid.uuid4().hex[:8]}"
    dlq = f"{name}-dlq"
    with QueueClient(settings=keyspace) as client:
        client.create_queue(dlq)
        client.create_queue("unwatched").send(b"x")
        orders = client.create_queue(name, max_deliveries=1, dead_letter_queue=dlq)

        # When the worker sends 10, receives 4 and acks 3, one runs out of its lease and
        # moves to the dead-letter queue on the next receive, 2 more are received, and
        # an ack comes too late
        orders.send_batch([b"m%d" % i for i in range(10)])
        first = orders.receive(4, visibility_timeout=0.3)
        orders.ack_batch([d.receipt for d in first[:3]])
        time.sleep(0.4)
        assert orders.receive(1) == []  # the lapsed one went to the dead-letter queue
        assert len(orders.receive(2, visibility_timeout=120)) == 2
        assert orders.ack_batch([first[0].receipt], strict=False) == [first[0].receipt]

        worker_port, exporter_port = free_port(), free_port()
        worker = serve(worker_port)
        bdq = str(Path(sys.executable).with_name("bdq"))
        exporter_log = tmp_path / "exporter.log"
        with exporter_log.open("wb") as err:  # the child keeps its own copy
            exporter = subprocess.Popen(
                [
                    bdq, "metrics", "serve", "--port", str(exporter_port), "--queue", f"{name}*",
                    "--hosts", ",".join(map(str, keyspace.hosts)), "--keyspace", keyspace.keyspace,
                ],
                stderr=err,
            )  # fmt: skip
        try:
            wait_for(
                lambda: b"bdq_visible_messages" in http_get(f"http://127.0.0.1:{exporter_port}/"),
                60,
                "bdq metrics serve",
            )
            scraped = {
                f.name: f
                for f in text_string_to_metric_families(
                    http_get(f"http://127.0.0.1:{exporter_port}/metrics").decode()
                )
            }
            assert {s.labels["queue"] for s in scraped["bdq_visible_messages"].samples} == {
                name,
                dlq,
            }

            query = prometheus([worker_port, exporter_port])

            # Then PromQL sees the queue's gauges and the worker's counters
            expected = {
                f'bdq_visible_messages{{queue="{name}"}}': 4.0,
                f'bdq_in_flight_messages{{queue="{name}"}}': 2.0,
                f'bdq_dead_letters{{queue="{name}"}}': 1.0,
                f'sum(bdq_sent_total{{queue="{name}"}})': 10.0,
                f'sum(bdq_sent_total{{queue="{dlq}"}})': 1.0,
                f'sum(bdq_received_total{{queue="{name}"}})': 6.0,
                f'sum(bdq_acked_total{{queue="{name}"}})': 3.0,
                f'sum(bdq_stale_acks_total{{queue="{name}"}})': 1.0,
                f'sum(bdq_dead_lettered_total{{queue="{name}"}})': 1.0,
            }
            seen: dict[str, list[float]] = {}

            def all_there() -> bool:
                for promql in expected:
                    seen[promql] = list(query(promql).values())
                return all(seen[q] == [v] for q, v in expected.items())

            try:
                wait_for(all_there, 60, "Prometheus to scrape the expected values")
            except AssertionError as e:
                raise AssertionError(f"{e}: last answers {seen}") from None
            age = query(f'bdq_oldest_message_age_seconds{{queue="{name}"}}')
            assert next(iter(age.values())) > 0
            assert query('bdq_visible_messages{queue="unwatched"}') == {}
        finally:
            exporter.send_signal(signal.SIGINT)
            code = exporter.wait(30)
            worker.shutdown()
            worker.server_close()
        assert code == 0, exporter_log.read_text()


def test_the_grafana_dashboard_queries_only_metrics_that_exist() -> None:
    dashboard = json.loads(
        (Path(__file__).parents[1] / "conf" / "grafana" / "spark-queue-dashboard.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\b(bdq_[a-z_]+)", e)}
    counters = {f"{m.name}_total" for m in REGISTRY.collect()}
    gauges = {m.name for m in QueueCollector(None, []).describe()}  # type: ignore[arg-type]
    assert used <= counters | gauges, used - counters - gauges
    assert {"bdq_visible_messages", "bdq_oldest_message_age_seconds", "bdq_dead_letters"} <= used

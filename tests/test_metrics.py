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
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from spark_queue import ConnectionSettings, QueueClient
from spark_queue.message import QueueStats
from spark_queue.ops.prometheus import REGISTRY, Look, QueueCollector, matches, serve

APT_TIMEOUT = 900


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


def samples(families: dict[str, Metric], name: str) -> dict[str, float]:
    """``{queue: value}`` of one family's samples named ``name`` (``bdq_x_total``, ...)."""
    family = families[name.removesuffix("_total")]
    return {s.labels["queue"]: s.value for s in family.samples if s.name == name}


@pytest.mark.cassandra
def test_the_collector_reads_gauges_from_the_cheap_counts(keyspace: ConnectionSettings) -> None:
    with QueueClient(settings=keyspace) as client:
        client.create_queue("a").send_batch([b"1", b"2", b"3"])
        client.create_queue("b").send(b"x", delay=60)
        families = {f.name: f for f in QueueCollector(client, ["a", "b"]).collect()}
    assert samples(families, "bdq_visible_messages") == {"a": 3.0, "b": 0.0}
    assert samples(families, "bdq_delayed_messages") == {"a": 0.0, "b": 1.0}
    for family in families.values():
        assert {s.labels["keyspace"] for s in family.samples} <= {keyspace.keyspace}, family.name
    assert {s.labels["keyspace"] for s in families["bdq_visible_messages"].samples} == {
        keyspace.keyspace
    }


@pytest.mark.cassandra
def test_the_collector_counts_sends_and_consumption_of_every_process(
    keyspace: ConnectionSettings,
) -> None:
    # Given a queue that another process (another client, its own id blocks) sends to
    with QueueClient(settings=keyspace) as watcher, QueueClient(settings=keyspace) as worker:
        orders = worker.create_queue("orders")
        collector = QueueCollector(watcher, ["orders"])
        before = {f.name: f for f in collector.collect()}

        # When the worker sends 40, receives 25 and acks 20 of them
        orders.send_batch([b"m%d" % i for i in range(40)])
        got = orders.receive(max_messages=25, wait=5)
        orders.ack_batch([d.receipt for d in got[:20]])
        after = {f.name: f for f in collector.collect()}
        tail = watcher.queue("orders").tail

    # Then the watcher's collector saw them, from the store alone: sends are the ids the
    # sequence handed out (in blocks, so at least the 40 sent), consumed what left the queue
    assert samples(before, "bdq_queue_sent_total") == {"orders": 0.0}
    assert samples(before, "bdq_queue_consumed_total") == {"orders": 0.0}
    assert len(got) == 25
    sent = samples(after, "bdq_queue_sent_total")["orders"]
    assert sent == tail >= 40
    assert samples(after, "bdq_queue_consumed_total") == {"orders": sent - 20}
    assert after["bdq_queue_sent"].type == after["bdq_queue_consumed"].type == "counter"


def test_consumed_never_goes_down_within_a_queue_incarnation() -> None:
    collector = QueueCollector(None, [])  # type: ignore[arg-type]
    first, second = uuid.uuid4(), uuid.uuid4()

    def look(tail: int, backlog: int, queue_id: uuid.UUID) -> Look:
        return Look(QueueStats(visible=backlog, in_flight=0, delayed=0, buckets=1), tail, queue_id)

    assert collector.consumed("q", look(100, 30, first)) == 70
    # an older count of a bucket makes the backlog look larger for a while
    assert collector.consumed("q", look(100, 40, first)) == 70
    assert collector.consumed("q", look(120, 10, first)) == 110
    # the queue deleted and created again: a new counter, from 0
    assert collector.consumed("q", look(16, 16, second)) == 0


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


DASHBOARD = Path(__file__).parents[1] / "conf" / "grafana" / "spark-queue-dashboard.json"
#: PromQL words that are no metric name: aggregation modifiers and operators.
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
                "and", "or", "unless", "inf", "nan"}  # fmt: skip


def metric_names(promql: str) -> set[str]:
    """The metric names a PromQL expression (or a label_values() query) reads."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)  # strings: label values, regexes
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", text)  # grouping labels
    text = re.sub(r"\b\d+(?:\.\d+)?[a-z]*\b", " ", text)  # numbers and durations (5m)
    text = re.sub(r"\blabel_values\(\s*([a-zA-Z_:][\w:]*)\s*,[^)]*\)", r"\1", text)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][\w:]*", text):
        following = text[match.end() :].lstrip()[:1]
        word = match.group()
        if following != "(" and word.lower() not in PROMQL_WORDS:
            names.add(word)
    return names


def exported_metric_names() -> set[str]:
    """Every series name this package exports: process counters and the collector's families."""
    names = set()
    for family in [*REGISTRY.collect(), *QueueCollector(None, []).describe()]:  # type: ignore[arg-type]
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def test_promql_metric_names_are_parsed_out_of_expressions() -> None:
    assert metric_names(
        'sum by (keyspace, queue) (rate(bdq_acked_total{queue=~"$queue", x="a}b"}[1m]))'
        " / on (queue) group_left bdq_visible_messages offset 5m > 0"
    ) == {"bdq_acked_total", "bdq_visible_messages"}
    assert metric_names('label_values(bdq_x{keyspace=~"$keyspace"}, queue)') == {"bdq_x"}


def test_the_grafana_dashboard_provisions_and_reads_only_exported_metrics() -> None:
    # Given the dashboard as checked in
    text = DASHBOARD.read_text()
    dashboard = json.loads(text)  # valid JSON
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    source = {"type": "prometheus", "uid": "${datasource}"}

    # Then nothing in it needs the UI's Import to resolve
    assert "__inputs" not in dashboard
    assert "${DS_" not in text and "$DS_" not in text
    # and the data source is a variable, and keyspace and queue can be chosen
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"keyspace", "queue"} <= variables.keys()
    for name in ("keyspace", "queue"):
        assert variables[name]["datasource"] == source, name
    # and every panel and query reads that data source, metrics that exist, per keyspace
    exported = exported_metric_names()
    queried = set()
    for panel in dashboard["panels"]:
        assert panel["datasource"] == source, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == source, panel["title"]
            assert 'keyspace=~"$keyspace"' in target["expr"], target["expr"]
            names = metric_names(target["expr"])
            assert names and names <= exported, (panel["title"], names - exported)
            queried |= names
    for name in ("keyspace", "queue"):
        assert metric_names(variables[name]["definition"]) <= exported
    assert {"bdq_visible_messages", "bdq_oldest_message_age_seconds", "bdq_dead_letters",
            "bdq_queue_sent_total", "bdq_queue_consumed_total"} <= queried  # fmt: skip
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])

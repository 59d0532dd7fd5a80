"""The faults ``bdq bench faults`` injects from outside: dropped connections and node crashes.

The network fault routes the clients through fault-injecting proxies; the node
fault kills a random node of the local cluster now and then and restarts it.
The receiver fault is the receivers' own (``faults_receiver``).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import random
import threading
from collections.abc import Callable

from spark_queue.bench.faultproxy import FaultProxy
from spark_queue.bench.faults_params import FaultsParams
from spark_queue.config import ConnectionSettings, parse_hosts
from spark_queue.errors import LocalNodeError
from spark_queue.local.node import LocalCluster


def network_proxy(
    settings: ConnectionSettings, first: str, drop: float, seed: int, params: FaultsParams
) -> FaultProxy:
    """Proxies for every contact point on ``first`` and the next addresses (not started)."""
    base = ipaddress.ip_address(first)
    routes = {str(base + i): (h.host, h.port) for i, h in enumerate(settings.hosts)}
    # bounded: the level's sending, its drain and the receivers' stop fit well within
    lifetime = params.seconds + max(30.0, 4 * params.visibility_timeout) + 600
    return FaultProxy(routes, drop=drop, seed=seed, lifetime=lifetime)


class NodeChaos:
    """Kills a random node after Exp(MTTF) seconds, restarts it MTTR seconds later, repeats."""

    def __init__(self, cluster: LocalCluster, params: FaultsParams, rng: random.Random) -> None:
        self.cluster = cluster
        self.params = params
        self.rng = rng

    def run(self, stop: threading.Event, mark: Callable[[str], None]) -> None:
        # The first crash comes within a third of the level, so every node run has one.
        wait = min(self.rng.expovariate(1 / self.params.mttf), self.params.node_seconds / 3)
        while not stop.wait(wait):
            node = self.rng.randint(1, 3)
            self.cluster.kill(node)
            mark(f"node {node} killed")
            stop.wait(self.params.mttr)  # down for MTTR even when the level ends meanwhile
            mark(self._restart(node))
            wait = self.rng.expovariate(1 / self.params.mttf)

    def _restart(self, node: int) -> str:
        """Start the killed node again; what became of it, for the level's events."""
        # On a loaded host the commit log replay can outlast one start's wait: the
        # process keeps starting, so waiting again a few times is enough.
        failure: LocalNodeError | None = None
        for _ in range(3):
            try:
                self.cluster.start(nodes=3, echo=lambda line: None)
                return f"node {node} back"
            except LocalNodeError as e:
                failure = e
        return f"node {node} still not back after 3 starts ({failure})"


def through_proxies(net: FaultProxy, settings: ConnectionSettings) -> ConnectionSettings:
    """``settings`` with the proxies as contact points, at protocol v4 (frames they can read)."""
    hosts = ",".join(f"{listen}:{port}" for listen, (_, port) in net.routes.items())
    return dataclasses.replace(settings, hosts=parse_hosts(hosts), protocol_version=4)

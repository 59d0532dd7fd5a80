"""A fault-injecting TCP proxy for the network-drop fault of ``bdq bench faults``.

One asyncio listener per Cassandra node, on a loopback address of its own and
the node's CQL port; each accepted connection is relayed to its node. The proxy
reads the client's side as CQL frames (protocol v3/v4: a 9-byte header whose
last four bytes are the body's length) and, with probability ``drop`` per
client request (QUERY, PREPARE, EXECUTE or BATCH; never the handshake or the
driver's OPTIONS heartbeats), drops the connection: both sides are aborted. Half
of the drops happen before the request is forwarded (the node never sees it),
half right after (the node may run it, its response is lost), the two cases a
client cannot tell apart. Protocol v5 wraps frames in checksummed segments
after the handshake, so the bench pins v4 on proxied clients; a connection
speaking anything else is relayed with the drop drawn per chunk read instead.

The driver is routed through the proxies by an ``AddressTranslator`` (node
address -> proxy address) and the proxies as contact points, so peer discovery
keeps working without touching the nodes' configuration. The proxy runs its
own event loop in a daemon thread, only on loopback, and stops by itself after
``lifetime`` seconds if nobody stopped it before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from cassandra.policies import AddressTranslator

from spark_queue.client import QueueClient
from spark_queue.config import ConnectionSettings
from spark_queue.errors import BackendUnavailable, InvalidSetting

#: Opcodes of the requests a drop may hit (native protocol spec, section 2.4).
REQUEST_OPCODES = frozenset({0x07, 0x09, 0x0A, 0x0D})
HEADER = 9  # v3/v4 frame header: version, flags, stream (2), opcode, length (4)


@dataclass
class ProxyStats:
    """What the proxy saw: accepted connections, client requests, connections dropped."""

    connections: int = 0
    requests: int = 0
    drops: int = 0


class ProxyTranslator(AddressTranslator):  # type: ignore[misc]
    """The driver's view of the proxies: a node's address becomes its proxy's."""

    def __init__(self, routes: Mapping[str, str]) -> None:
        self.routes = dict(routes)

    def translate(self, addr: str) -> str:
        return self.routes.get(addr, addr)


def _loopback(address: str) -> str:
    try:
        if ipaddress.ip_address(address).is_loopback:
            return address
    except ValueError:
        pass
    raise InvalidSetting(f"proxy address {address!r}: must be a loopback IP (127.0.0.0/8)")


class FaultProxy:
    """Relays ``listen address -> node`` on the node's port, dropping connections at random.

    Args:
        routes: Listen address of each proxy -> (node address, port); every
            address must be loopback. Port 0 in ``listen_port`` binds any port.
        drop: Probability of dropping the connection per client request.
        seed: Seed of the drop draws.
        lifetime: Seconds after which the proxy stops by itself.
        listen_port: Port of every listener; None listens on each node's port.
    """

    def __init__(
        self,
        routes: Mapping[str, tuple[str, int]],
        *,
        drop: float,
        seed: int,
        lifetime: float = 3600.0,
        listen_port: int | None = None,
    ) -> None:
        if not 0 <= drop <= 1:
            raise InvalidSetting(f"drop {drop!r}: must be a probability from 0 to 1")
        if lifetime <= 0:
            raise InvalidSetting(f"lifetime {lifetime!r}: must be a positive number of seconds")
        self.routes = {
            _loopback(listen): (_loopback(node), port) for listen, (node, port) in routes.items()
        }
        self.drop = drop
        self.lifetime = lifetime
        self.listen_port = listen_port
        self.stats = ProxyStats()
        #: (listen address, bound port) of each listener, once started
        self.listening: list[tuple[str, int]] = []
        self._rng = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="bdq-fault-proxy", daemon=True)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._done: asyncio.Event | None = None

    def translator(self) -> ProxyTranslator:
        """Node address -> proxy address, for the driver's ``address_translator``."""
        return ProxyTranslator({node: listen for listen, (node, _) in self.routes.items()})

    def start(self) -> FaultProxy:
        """Bind every listener (raises if one cannot be bound) and start relaying."""
        self._thread.start()
        self._ready.wait()
        if self._failure is not None:
            self._thread.join()
            raise InvalidSetting(f"fault proxy: cannot listen ({self._failure})")
        return self

    def stop(self) -> None:
        """Close the listeners and every relayed connection; idempotent."""
        if self._thread.is_alive() and self._done is not None:
            self._loop.call_soon_threadsafe(self._done.set)
            self._thread.join()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._done = asyncio.Event()
        servers: list[asyncio.Server] = []
        tasks: set[asyncio.Task[None]] = set()

        def track(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (node, port) = self.routes[writer.get_extra_info("sockname")[0]]
            task = asyncio.ensure_future(self._relay(reader, writer, node, port))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        try:
            for listen, (_, port) in self.routes.items():
                server = await asyncio.start_server(
                    track, listen, port if self.listen_port is None else self.listen_port
                )
                servers.append(server)
                self.listening.append(server.sockets[0].getsockname()[:2])
        except OSError as e:
            self._failure = e
        self._ready.set()
        if self._failure is None:
            # past the lifetime, stop by ourselves
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), self.lifetime)
        for server in servers:
            server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            await server.wait_closed()

    async def _relay(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, node: str, port: int
    ) -> None:
        self.stats.connections += 1
        writers = [client_w]
        try:
            try:
                node_r, node_w = await asyncio.open_connection(node, port)
            except OSError:
                return  # node down: the client sees its connection closed
            writers.append(node_w)
            upstream = asyncio.ensure_future(self._requests(client_r, node_w))
            downstream = asyncio.ensure_future(_copy(node_r, client_w))
            try:
                await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (upstream, downstream):
                    task.cancel()
                await asyncio.gather(upstream, downstream, return_exceptions=True)
        finally:
            # abort (a reset, as a cut network gives) and wait until the sockets are
            # really closed, also when the proxy stops and cancels this relay
            for writer in writers:
                writer.transport.abort()
            for writer in writers:
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Client -> node, frame by frame; returns when a side closed or a drop happened."""
        try:
            while True:
                header = await reader.readexactly(HEADER)
                version = header[0] & 0x7F
                if version not in (3, 4):
                    await self._chunks(header + await reader.read(65536), reader, writer)
                    return
                body = await reader.readexactly(int.from_bytes(header[5:9], "big"))
                frame = header + body
                if header[4] in REQUEST_OPCODES:
                    self.stats.requests += 1
                    if self._rng.random() < self.drop:
                        if self._rng.random() < 0.5:  # after forwarding: the response is lost
                            writer.write(frame)
                            await writer.drain()
                        self.stats.drops += 1
                        return
                writer.write(frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def _chunks(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Not v3/v4 framing: each chunk read counts as a request."""
        chunk = first
        while chunk:
            self.stats.requests += 1
            if self._rng.random() < self.drop:
                self.stats.drops += 1
                return
            writer.write(chunk)
            await writer.drain()
            chunk = await reader.read(65536)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        return


def open_queue(settings: ConnectionSettings, name: str, *, attempts: int = 50) -> QueueClient:
    """A client on ``settings`` holding queue ``name``, retried while the proxies drop its setup.

    Connecting runs a few requests (the driver's control queries, the schema
    check, the queue's lookup), each of which the proxies may drop.

    Raises:
        BackendUnavailable: Still failing after ``attempts`` tries.
    """
    for attempt in range(attempts):
        client = None
        try:
            client = QueueClient(settings=settings)
            client.queue(name)
            return client
        except BackendUnavailable:
            if client is not None:
                client.close()
            if attempt == attempts - 1:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")

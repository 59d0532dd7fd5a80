"""The network-drop proxy of ``bdq bench faults`` against a small v4-framed echo node."""

from __future__ import annotations

import gc
import socket
import threading
from collections.abc import Iterator

import pytest

from spark_queue.bench.faultproxy import FaultProxy
from spark_queue.errors import InvalidSetting

NODE = "127.0.0.1"
LISTEN = "127.0.0.7"
OPTIONS, QUERY = 0x05, 0x07


def frame(opcode: int, body: bytes, stream: int = 0) -> bytes:
    """A v4 request frame: version, flags, stream, opcode, body length, body."""
    header = bytes([4, 0]) + stream.to_bytes(2, "big") + bytes([opcode])
    return header + len(body).to_bytes(4, "big") + body


@pytest.fixture
def echo_node() -> Iterator[tuple[int, list[bytes]]]:
    """A node that echoes every byte it gets and remembers what it got."""
    server = socket.create_server((NODE, 0))
    port = server.getsockname()[1]
    received: list[bytes] = []

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    received.append(data)
                    conn.sendall(data)
            except ConnectionError:  # the proxy aborted this connection: a drop
                return

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield port, received
    server.close()


def exchange(address: tuple[str, int], frames: list[bytes]) -> bytes:
    """Send the frames one by one, each after the previous one's echo; what came back."""
    got = b""
    with socket.create_connection(address, timeout=5) as sock:
        try:
            for f in frames:
                sock.sendall(f)
                want = len(got) + len(f)
                while len(got) < want:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return got
                    got += chunk
        except ConnectionError:  # the proxy aborted the connection (a reset)
            pass
    return got


def test_relays_everything_when_the_drop_chance_is_zero(
    echo_node: tuple[int, list[bytes]],
) -> None:
    port, _ = echo_node
    frames = [frame(OPTIONS, b""), *(frame(QUERY, bytes([i]) * 300, i) for i in range(20))]
    with FaultProxy({LISTEN: (NODE, port)}, drop=0.0, seed=1, listen_port=0) as proxy:
        assert exchange(proxy.listening[0], frames) == b"".join(frames)
        assert (proxy.stats.connections, proxy.stats.requests, proxy.stats.drops) == (1, 20, 0)


def test_drops_the_connection_on_a_request_but_never_on_a_heartbeat(
    echo_node: tuple[int, list[bytes]],
) -> None:
    port, received = echo_node
    heartbeat = frame(OPTIONS, b"")
    with FaultProxy({LISTEN: (NODE, port)}, drop=1.0, seed=1, listen_port=0) as proxy:
        address = proxy.listening[0]
        # heartbeats pass at drop chance 1, the first request closes the connection
        # (a request forwarded before the drop may still echo back: its response raced it)
        query = frame(QUERY, b"select")
        got = exchange(address, [heartbeat, heartbeat, query, heartbeat])
        assert got in (heartbeat * 2, heartbeat * 2 + query)
        # and a new connection works again, up to its first request
        assert exchange(address, [heartbeat, frame(QUERY, b"again")]).startswith(heartbeat)
        assert (proxy.stats.connections, proxy.stats.requests, proxy.stats.drops) == (2, 2, 2)
    # the node saw no frame after a dropped request
    assert heartbeat in b"".join(received) and b"select" + heartbeat not in b"".join(received)


def test_a_seeded_drop_chance_drops_about_that_share_of_requests(
    echo_node: tuple[int, list[bytes]],
) -> None:
    port, _ = echo_node
    with FaultProxy({LISTEN: (NODE, port)}, drop=0.25, seed=7, listen_port=0) as proxy:
        for _ in range(100):
            exchange(proxy.listening[0], [frame(QUERY, b"q")] * 4)
        stats = proxy.stats
    # each connection ends at its first drop: 1 - 0.75**4 = 68% of them drop (sd 4.7)
    assert 50 <= stats.drops <= 86 and stats.drops < stats.requests
    assert stats.connections == 100


def test_stops_by_itself_after_its_lifetime(echo_node: tuple[int, list[bytes]]) -> None:
    port, _ = echo_node
    proxy = FaultProxy({LISTEN: (NODE, port)}, drop=0.0, seed=1, lifetime=0.2, listen_port=0)
    proxy.start()
    proxy._thread.join(timeout=10)
    assert not proxy._thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(proxy.listening[0], timeout=2)


def test_refuses_an_address_off_loopback() -> None:
    with pytest.raises(InvalidSetting, match=r"10\.0\.0\.1.*loopback"):
        FaultProxy({"10.0.0.1": (NODE, 9042)}, drop=0.1, seed=1)
    with pytest.raises(InvalidSetting, match=r"drop 1\.5"):
        FaultProxy({LISTEN: (NODE, 9042)}, drop=1.5, seed=1)


def test_stopping_closes_the_connections_it_relays(echo_node: tuple[int, list[bytes]]) -> None:
    port, _ = echo_node
    heartbeat = frame(OPTIONS, b"")
    proxy = FaultProxy({LISTEN: (NODE, port)}, drop=0.0, seed=1, listen_port=0).start()
    with socket.create_connection(proxy.listening[0], timeout=5) as sock:
        sock.sendall(heartbeat)
        assert sock.recv(65536) == heartbeat
        proxy.stop()
        # the proxy closed the connection (a reset or an end of stream)
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        assert data == b""
    gc.collect()

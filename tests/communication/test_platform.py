"""Production runs on the real platform: ``time``, ``threading`` and TCP, with nothing in between."""

from __future__ import annotations

import threading
import time

from pytimely.communication.cluster import Cluster
from pytimely.communication.platform import REAL, REAL_CLOCK, REAL_THREADS
from pytimely.communication.transport import TCP, SocketConnection, SocketListener, TcpTransport
from pytimely.config import Config
from pytimely.worker import Worker


def test_the_real_platform_is_time_threading_and_tcp_themselves() -> None:
    # The clock's functions are time's own (no wrapper to call through), the locks threading's.
    assert REAL_CLOCK.monotonic is time.monotonic
    assert REAL_CLOCK.sleep is time.sleep
    assert type(REAL_THREADS.lock()) is type(threading.Lock())
    assert isinstance(REAL_THREADS.condition(), threading.Condition)
    assert isinstance(REAL_THREADS.event(), threading.Event)
    assert REAL.clock is REAL_CLOCK and REAL.threads is REAL_THREADS and REAL.transport is TCP
    assert isinstance(TCP, TcpTransport)


def test_a_cluster_process_and_its_workers_default_to_the_real_platform() -> None:
    cluster = Cluster(Config(secret=b"s" * 16))
    try:
        assert cluster.platform is REAL
        allocator = cluster.allocator(0)
        worker = Worker(allocator)
        assert worker._clock is REAL_CLOCK
        assert type(cluster.wake_event(0)) is threading.Event
        assert isinstance(cluster._lock, threading.Condition)
    finally:
        cluster.close()


def test_the_tcp_transport_moves_bytes_over_real_sockets() -> None:
    listener = TCP.listen("127.0.0.1", 0, 4)
    assert isinstance(listener, SocketListener)
    port = listener.sock.getsockname()[1]
    client = TCP.connect("127.0.0.1", port, 5.0)
    got = listener.accept(5.0)
    assert got is not None
    server, _ = got
    try:
        assert isinstance(client, SocketConnection) and isinstance(server, SocketConnection)
        client.start_streaming()
        server.start_streaming()
        assert client.same_host() is True
        assert server.recv_into(memoryview(bytearray(8))) is None  # nothing yet, and no wait
        assert client.send([memoryview(b"hello")]) == 5
        assert server.wait_readable(5.0)
        buffer = bytearray(8)
        assert server.recv_into(memoryview(buffer)) == 5 and bytes(buffer[:5]) == b"hello"
        client.shutdown()
        assert server.wait_readable(5.0) and server.recv_into(memoryview(buffer)) == 0
    finally:
        client.close()
        server.close()
        listener.close()

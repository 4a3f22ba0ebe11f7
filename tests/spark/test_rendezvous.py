"""The driver's rendezvous registry with real sockets and real threads standing in for barrier tasks."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from pytimely.errors import SparkRendezvousError
from pytimely.signed_lines import encode
from pytimely.spark.rendezvous import Registry, Ticket, meet
from tests.waiting import wait_until


@pytest.fixture
def registry() -> Any:
    reg = Registry("127.0.0.1", timeout=3.0)
    yield reg
    reg.close()


def in_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run every call on its own thread; each one's result, or the exception it raised."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_every_task_gets_every_address_in_partition_order(registry: Registry) -> None:
    ticket = registry.ticket(b"s" * 32, timeout=10)
    n = 4
    started = time.perf_counter()
    results = in_threads(
        [lambda p=p: meet(ticket, "7.0", p, n, f"127.0.0.1:{9000 + p}") for p in reversed(range(n))]  # type: ignore[misc]
    )
    elapsed = time.perf_counter() - started
    expected = [f"127.0.0.1:{9000 + p}" for p in range(n)]
    assert results == [expected] * n
    assert elapsed < 1.0  # the point of the registry: no second-long polling
    assert registry.waiting == 0


def test_stage_attempts_and_runs_are_never_mixed(registry: Registry) -> None:
    first = registry.ticket(b"a" * 32, timeout=10)
    second = registry.ticket(b"b" * 32, timeout=10)
    results = in_threads(
        [
            lambda: meet(first, "1.0", 0, 2, "h:1"),
            lambda: meet(second, "1.0", 1, 2, "h:2"),
            lambda: meet(first, "1.1", 1, 2, "h:3"),
            lambda: meet(first, "1.0", 1, 2, "h:4"),
            lambda: meet(second, "1.0", 0, 2, "h:5"),
            lambda: meet(first, "1.1", 0, 2, "h:6"),
        ]
    )
    assert results[0] == results[3] == ["h:1", "h:4"]
    assert results[1] == results[4] == ["h:5", "h:2"]
    assert results[2] == results[5] == ["h:6", "h:3"]


def test_an_incomplete_group_times_out_with_a_clear_error(registry: Registry) -> None:
    ticket = registry.ticket(b"s" * 32, timeout=10)
    started = time.perf_counter()
    with pytest.raises(SparkRendezvousError, match=r"only 1 of 2 tasks arrived within 3 s"):
        meet(ticket, "3.0", 0, 2, "h:1")
    assert 2.5 < time.perf_counter() - started < 8
    assert registry.waiting == 0


def test_a_task_gives_up_on_its_own_timeout(registry: Registry) -> None:
    ticket = Ticket(registry.host, registry.port, registry.ticket(b"s" * 32).run, b"s" * 32, 0.5)
    with pytest.raises(SparkRendezvousError, match=r"did not arrive within 0.5 s"):
        meet(ticket, "3.0", 1, 2, "h:1")
    wait_until(lambda: registry.waiting == 0, 30, "the registry to forget the task that left")


def test_announcements_signed_with_another_secret_are_ignored(registry: Registry) -> None:
    ticket = registry.ticket(b"right" * 8, timeout=10)
    forged = Ticket(ticket.host, ticket.port, ticket.run, b"wrong" * 8, 2.0)
    with pytest.raises(SparkRendezvousError, match="without a valid reply"):
        meet(forged, "1.0", 0, 1, "evil:1")
    # The forged announcement did not take partition 0's place.
    assert in_threads([lambda: meet(ticket, "1.0", 0, 2, "h:0"), lambda: meet(ticket, "1.0", 1, 2, "h:1")]) == [
        ["h:0", "h:1"],
        ["h:0", "h:1"],
    ]


def test_a_reply_not_signed_by_the_driver_is_refused() -> None:
    secret = b"k" * 32
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def impostor() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            body = {"run": "r", "stage": "1.0", "addresses": ["evil:1"], "error": None}
            conn.sendall(encode(b"x" * 32, "rendezvous-reply", body))

    thread = threading.Thread(target=impostor)
    thread.start()
    try:
        with pytest.raises(SparkRendezvousError, match="not signed by the driver"):
            meet(Ticket("127.0.0.1", port, "r", secret, 5.0), "1.0", 0, 1, "h:0")
    finally:
        thread.join(timeout=5)
        server.close()


def test_no_registry_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SparkRendezvousError, match="cannot reach the driver's rendezvous"):
        meet(Ticket("127.0.0.1", port, "r", b"s" * 32, 2.0), "1.0", 0, 2, "h:0")


def test_a_forgotten_run_is_refused(registry: Registry) -> None:
    ticket = registry.ticket(b"s" * 32, timeout=2)
    registry.forget(ticket.run)
    with pytest.raises(SparkRendezvousError, match="without a valid reply"):
        meet(ticket, "1.0", 0, 1, "h:0")


def test_closing_stops_the_thread_and_tells_waiting_tasks() -> None:
    reg = Registry("127.0.0.1", timeout=30)
    ticket = reg.ticket(b"s" * 32, timeout=10)
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.extend(in_threads([lambda: meet(ticket, "1.0", 0, 2, "h:0")])))
    waiter.start()
    wait_until(lambda: reg.waiting > 0, 30, "a task waiting at the registry")
    reg.close()
    waiter.join(timeout=10)
    assert isinstance(results[0], SparkRendezvousError)
    assert not reg._thread.is_alive()


def registry_sockets(port: int) -> int:
    """How many of this process's descriptors are TCP sockets on ``port``, at either end.

    Counted by inode through ``/proc/net/tcp*``, so descriptors other parts of the test process open
    meanwhile (Spark's gateway, a gRPC channel) are not counted.
    """
    import os

    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                ends = (fields[1], fields[2])
                if any(int(end.rsplit(":", 1)[1], 16) == port for end in ends):
                    inodes.add(fields[9])
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:[") and target[8:-1] in inodes:
                count += 1
    return count


def test_a_finished_meeting_leaves_no_open_sockets(registry: Registry) -> None:
    ticket = registry.ticket(b"s" * 32, timeout=10)
    for stage in range(5):
        results = in_threads(
            [lambda s=stage, p=p: meet(ticket, f"{s}.1", p, 2, f"h:{p}") for p in range(2)]  # type: ignore[misc]
        )
        assert results == [["h:0", "h:1"]] * 2
    # The registry closes its side after replying, on its own thread: give it a moment, not forever.
    wait_until(lambda: registry_sockets(registry.port) == 1, 30, "the registry's listener alone")


def test_a_second_announcement_of_a_partition_takes_the_first_ones_place(registry: Registry) -> None:
    ticket = registry.ticket(b"s" * 32, timeout=10)
    early: list[Any] = []
    late: list[Any] = []
    first = threading.Thread(target=lambda: early.extend(in_threads([lambda: meet(ticket, "1.0", 0, 2, "old:0")])))
    first.start()
    wait_until(lambda: registry.waiting > 0, 30, "a task waiting at the registry")
    second = threading.Thread(target=lambda: late.extend(in_threads([lambda: meet(ticket, "1.0", 0, 2, "new:0")])))
    second.start()
    first.join(timeout=10)  # the old announcement is told it was replaced, so the new one is in place
    assert isinstance(early[0], SparkRendezvousError)
    assert "another task announced the same partition" in str(early[0])
    assert meet(ticket, "1.0", 1, 2, "h:1") == ["new:0", "h:1"]
    second.join(timeout=10)
    assert late == [["new:0", "h:1"]]


def test_a_silent_or_endless_client_is_dropped_and_holds_nothing() -> None:
    reg = Registry("127.0.0.1", timeout=30, line_timeout=0.5)
    try:
        ticket = reg.ticket(b"s" * 32, timeout=10)
        silent = socket.create_connection((reg.host, reg.port))
        endless = socket.create_connection((reg.host, reg.port))
        silent.settimeout(10)
        endless.settimeout(10)
        dropped = False
        with silent, endless:
            try:
                for _ in range(64):  # 4 MiB without a newline: far past the 64 KiB limit
                    endless.sendall(b"x" * 65536)
            except OSError:
                dropped = True
            assert max((len(b._data) for b in list(reg._buffers.values())), default=0) <= 1 << 17
            assert dropped or endless.recv(1) == b""
            started = time.monotonic()
            assert silent.recv(1) == b""  # closed by the registry once its line deadline passed
            assert time.monotonic() - started < 5
            # Meanwhile the registry served a real group at once.
            results = in_threads([lambda: meet(ticket, "1.0", 0, 2, "h:0"), lambda: meet(ticket, "1.0", 1, 2, "h:1")])
            assert results == [["h:0", "h:1"]] * 2
    finally:
        reg.close()


def _recording_proxy(front: socket.socket, target: tuple[str, int], heard: list[bytes]) -> None:
    """Forward one connection to ``target`` both ways, keeping what the client sent (an on-path observer)."""
    import select

    client, _ = front.accept()
    with client, socket.create_connection(target, timeout=30) as server:
        ends = {client: server, server: client}
        while True:
            ready, _, _ = select.select(list(ends), [], [], 30)
            if not ready:
                return
            for sock in ready:
                data = sock.recv(65536)
                if not data:
                    return
                if sock is client:
                    heard.append(data)
                ends[sock].sendall(data)


def test_a_replayed_announcement_takes_no_live_tasks_place(registry: Registry) -> None:
    """Why: an on-path replay of a task's announcement took its place, and the task failed ("another task
    announced the same partition")."""
    ticket = registry.ticket(b"s" * 32, timeout=10)
    heard: list[bytes] = []
    with socket.create_server(("127.0.0.1", 0)) as front:
        proxy = threading.Thread(target=_recording_proxy, args=(front, (registry.host, registry.port), heard))
        proxy.start()
        through = Ticket(*front.getsockname(), ticket.run, ticket.secret, ticket.timeout)
        first: list[Any] = []
        task = threading.Thread(target=lambda: first.extend(in_threads([lambda: meet(through, "1.0", 0, 2, "h:0")])))
        task.start()
        wait_until(lambda: registry.waiting > 0, 30, "a task waiting at the registry")
        # The observer sends what it saw on a connection of its own.
        with socket.create_connection((registry.host, registry.port), timeout=10) as replay:
            replay.sendall(b"".join(heard))
            assert meet(ticket, "1.0", 1, 2, "h:1") == ["h:0", "h:1"]
        task.join(10)
        proxy.join(10)
    assert first == [["h:0", "h:1"]]

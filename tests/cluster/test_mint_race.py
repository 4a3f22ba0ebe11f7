"""The mint race of issue 15 on real processes: the link from process 0 (the bootstrap server) to process 1 is slow.

A newcomer's capability used to be a copy at the time its server held. When the
server's ``+1`` travels a slow link and the newcomer's ``-1`` a fast one, the
member behind the slow link sees the time vacant while the server still holds
it, delivers records after declaring their time complete, and the job hangs or
miscounts. A delaying relay inside this test holds every byte process 0 sends
to process 1 for ``DELAY`` seconds; the word count must still equal ``Counter``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import threading
import time
from pathlib import Path

import pytest

from pytimely.membership import RescalePlan
from tests.cluster.helpers import Cluster, env_for, listen, report, start
from tests.cluster.test_elastic import EPOCHS, ROWS, expected_counts

DELAY = 0.02
"""How long the relay holds each chunk process 0 sends to process 1."""


class DelayRelay:
    """Forwards one connection to ``target``, holding every chunk from ``target`` back for ``delay`` seconds."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target = target
        self.delay = delay
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = ("127.0.0.1", self.listener.getsockname()[1])
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.listener.settimeout(60)
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        try:
            server = socket.create_connection(self.target, timeout=20)
            server.settimeout(None)
        except OSError:
            client.close()
            return
        self._socks += [client, server]
        threading.Thread(target=self._pipe, args=(client, server), daemon=True).start()
        self._delayed(server, client)

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            with_shutdown(dst)

    def _delayed(self, src: socket.socket, dst: socket.socket) -> None:
        """Read from ``src`` at once (so the sender is never blocked), write to ``dst`` ``delay`` s later, in order."""
        held: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def writer() -> None:
            try:
                while True:
                    due, chunk = held.get()
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    if not chunk:
                        return
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                with_shutdown(dst)

        threading.Thread(target=writer, daemon=True).start()
        try:
            while chunk := src.recv(1 << 16):
                held.put((time.monotonic() + self.delay, chunk))
        except OSError:
            pass
        held.put((time.monotonic() + self.delay, b""))

    def close(self) -> None:
        """Stop accepting and drop the relayed connection."""
        self.listener.close()
        for s in self._socks:
            s.close()


def with_shutdown(sock: socket.socket) -> None:
    """Pass an end of stream on (the peer sees FIN, as it would without the relay)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)


@pytest.mark.parametrize("text", ["1:+1", "0:+1,2:+1"])
def test_a_newcomer_retires_its_capability_while_the_servers_link_is_slow(tmp_path: Path, text: str) -> None:
    out = tmp_path / "counts.json"
    initial, workers = 2, 1
    plan = RescalePlan.parse(text, initial=initial, workers=workers)
    args = ["tests.cluster.elastic_jobs:word_count", str(out), str(EPOCHS), str(ROWS), text]
    extra = {"workers": str(workers), "PYTIMELY_ELASTIC": "1"}
    cluster = Cluster(initial, **extra)
    relay = DelayRelay(cluster.hosts[0], DELAY)
    listeners = [listen() for _ in range(plan.processes - initial)]
    hosts = cluster.hosts + [s.getsockname() for s in listeners]
    try:
        # Process 1 dials process 0 through the relay: everything 0 sends to 1 arrives DELAY late.
        cluster.start(args, hosts={1: [relay.address, *cluster.hosts[1:]]})
        for p in range(initial, plan.processes):
            joiner = env_for(
                p + 1, p, hosts[: p + 1], cluster.secret, **extra, PYTIMELY_INITIAL=str(initial), PYTIMELY_JOIN="1"
            )
            cluster.procs.append(start(args, joiner, listeners[p - initial]))
        results = cluster.wait(float(os.environ.get("ELASTIC_WAIT", "120")))
    finally:
        cluster.kill()
        relay.close()
        for listener in listeners:
            listener.close()
    assert [r[0] for r in results] == [0] * len(results), report(results)
    written = json.loads(out.read_text())
    assert written["counts"] == expected_counts(plan)

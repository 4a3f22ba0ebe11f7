"""The mint race of issue 15 on real processes: the link from process 0 (the bootstrap server) to process 1 is slow.

A newcomer's capability used to be a copy at the time its server held. When the
server's ``+1`` travels a slow link and the newcomer's ``-1`` a fast one, the
member behind the slow link sees the time vacant while the server still holds
it: its frontier passes the time and then moves back. A delaying relay inside
this test holds every byte process 0 sends to process 1 for ``DELAY`` seconds,
and every worker's watching operator fails (``ProgressError``) if a frontier it
saw moves back or a record arrives behind one.

``watched_epochs`` sends no records between processes, so nothing else on the
slow link holds process 1 back: with the old clone rule put back into
``Subgraph`` the plan ``0:+1,2:+1`` failed 5 of 5 runs here ("the input
frontier went back from 2 to 1"; ``1:+1`` did not show it). ``watched_word_count``
is the elastic word count under the same relay: its exchanges make process 1
wait for process 0's reports, which hid the race, and its counts must equal
``Counter``'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytimely import Worker
from pytimely.algorithms.rescaling import count_keys, run_while_rescaling
from pytimely.dataflow.capability import Capability
from pytimely.errors import ProgressError
from pytimely.io import atomic_output
from pytimely.membership import RescalePlan
from tests.cluster.bins_jobs import words_for
from tests.cluster.helpers import Cluster, env_for, listen, report, start
from tests.cluster.test_elastic import EPOCHS, ROWS, expected_counts

DELAY = 0.02
"""How long the relay holds each chunk process 0 sends to process 1."""
JOIN_DELAY = 1.0
"""How long after the members each newcomer starts."""


def _watch(cap: Capability[Any], info: Any) -> Callable[[Any, Any], None]:
    """An operator that passes records on and fails if its input frontier ever moves back or a record comes late."""
    cap.drop()
    passed: list[float] = [float("-inf")]

    def logic(port: Any, output: Any) -> None:
        for incap, batch in port:
            if incap.time < passed[0]:
                raise ProgressError(f"a record at {incap.time} arrived after the frontier passed {passed[0]}")
            output.give(incap, batch)
        elements = port.frontier.frontier_elements()
        least = min(elements) if elements else float("inf")
        if least < passed[0]:
            raise ProgressError(f"the input frontier went back from {passed[0]} to {least}")
        passed[0] = least

    return logic


def watched_word_count(worker: Worker) -> None:
    """``elastic_jobs.word_count`` with every member checking that no frontier it saw ever moves back."""
    out, epochs, rows, text = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    plan = RescalePlan.parse(text, initial=worker.peers, workers=1)

    def stage(records: Any, control: Any) -> Any:
        return count_keys(records, control).unary(_watch, name="watch")

    emitted = run_while_rescaling(worker, stage, lambda w, e, _: words_for(w, e, rows), epochs, plan)
    if emitted is not None:
        counts: dict[str, int] = {}
        for _, batch in emitted:
            for (key, total), _emitter in batch:
                counts[key] = max(counts.get(key, 0), total)
        with atomic_output(out) as f:
            json.dump({"counts": counts}, f)


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


def watched_epochs(worker: Worker) -> None:
    """Each worker feeds its own records through a watching operator, no exchange: only progress crosses.

    The members hold epoch ``e - 1`` while a newcomer joins for ``e`` (its server mints strictly above what it
    holds); with nothing else on the slow link to hold a member back, a capability counted late shows at once.
    """
    out, epochs, text = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    plan = RescalePlan.parse(text, initial=worker.peers, workers=1)
    me = worker.index

    def build(scope: Any) -> Any:
        handle, records = scope.new_input(name="records")
        return handle, records.unary(_watch, name="watch").probe()

    handle, probe = worker.dataflow(build)
    start = plan.joins_at(me) if worker.joined else 0
    handle.advance_to(start)
    for epoch in range(start, epochs):
        handle.send_batch([(me, epoch)])
        if epoch + 1 in plan.join_epochs:
            wanted = set(plan.members_at(epoch + 1))
            worker.step_while(lambda: not wanted <= set(worker.members))  # noqa: B023 - used at once
            worker.step()
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    worker.step_while(lambda: not probe.done())
    if me == 0:
        with atomic_output(out) as f:
            json.dump({"epochs": epochs}, f)


@pytest.mark.parametrize("text", ["1:+1", "0:+1,2:+1"])
def test_a_member_behind_the_slow_link_never_sees_a_frontier_move_back(tmp_path: Path, text: str) -> None:
    out = tmp_path / "done.json"
    initial = 2
    plan = RescalePlan.parse(text, initial=initial, workers=1)
    args = ["tests.cluster.test_mint_race:watched_epochs", str(out), str(EPOCHS), text]
    extra = {"workers": "1", "PYTIMELY_ELASTIC": "1"}
    cluster = Cluster(initial, **extra)
    relay = DelayRelay(cluster.hosts[0], DELAY)
    listeners = [listen() for _ in range(plan.processes - initial)]
    hosts = cluster.hosts + [s.getsockname() for s in listeners]
    try:
        cluster.start(args, hosts={1: [relay.address, *cluster.hosts[1:]]})
        for p in range(initial, plan.processes):
            time.sleep(JOIN_DELAY)
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
    assert json.loads(out.read_text()) == {"epochs": EPOCHS}


@pytest.mark.parametrize("text", ["1:+1", "0:+1,2:+1"])
def test_a_newcomer_retires_its_capability_while_the_servers_link_is_slow(tmp_path: Path, text: str) -> None:
    out = tmp_path / "counts.json"
    initial, workers = 2, 1
    plan = RescalePlan.parse(text, initial=initial, workers=workers)
    args = ["tests.cluster.test_mint_race:watched_word_count", str(out), str(EPOCHS), str(ROWS), text]
    extra = {"workers": str(workers), "PYTIMELY_ELASTIC": "1"}
    cluster = Cluster(initial, **extra)
    relay = DelayRelay(cluster.hosts[0], DELAY)
    listeners = [listen() for _ in range(plan.processes - initial)]
    hosts = cluster.hosts + [s.getsockname() for s in listeners]
    try:
        # Process 1 dials process 0 through the relay: everything 0 sends to 1 arrives DELAY late.
        cluster.start(args, hosts={1: [relay.address, *cluster.hosts[1:]]})
        for p in range(initial, plan.processes):
            time.sleep(JOIN_DELAY)  # the members are waiting for it, holding the epoch it joins in
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

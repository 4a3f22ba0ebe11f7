"""The push ends of a cluster's channel (elastic and fixed): a broadcast crosses to each other process once, for
all of its workers (numpy and Arrow buffers too), and to each member on its own where not every worker there is one."""

from __future__ import annotations

from typing import Any

import numpy as np

from pytimely.communication.allocator import Precedence, broadcast
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.cluster.router import ProcessPushes, Pushes, RemotePush
from pytimely.communication.frame import EVERY_WORKER
from pytimely.communication.payload import loads

WORKERS = 2


class Box:
    """A local worker's mailbox: takes messages by reference."""

    def __init__(self) -> None:
        self.got: list[Any] = []

    def push(self, message: Any) -> None:
        self.got.append(message)


def pushes(members: list[int], outbox: list[tuple[int, OutgoingFrame]], local: dict[int, Box]) -> Pushes:
    """Push ends from worker 0 of process 0 to ``members`` (workers 0 and 1 are local)."""
    ends = Pushes(6, WORKERS)
    for worker in members:
        if worker < WORKERS:
            ends.add(worker, local.setdefault(worker, Box()))
        else:
            ends.add(worker, RemotePush(outbox, Precedence.PROGRESS, (1, 0), 0, worker, worker // WORKERS))
    return ends


def frames(outbox: list[tuple[int, OutgoingFrame]]) -> list[tuple[int, int]]:
    return [(process, frame.target) for process, frame in outbox]


def test_a_broadcast_crosses_to_each_process_once_for_all_its_workers() -> None:
    outbox: list[tuple[int, OutgoingFrame]] = []
    local: dict[int, Box] = {}
    message = ("batch", 0, ((1, 2, -1),))
    broadcast(pushes([0, 1, 2, 3, 4, 5], outbox, local), message)
    assert frames(outbox) == [(1, EVERY_WORKER), (2, EVERY_WORKER)]
    assert [loads(b"".join(bytes(p) for p in frame.parts)) for _, frame in outbox] == [message, message]
    assert local[0].got == [message] and local[1].got == [message]


def test_a_process_not_all_of_whose_workers_are_members_gets_a_frame_per_member() -> None:
    outbox: list[tuple[int, OutgoingFrame]] = []
    broadcast(pushes([0, 1, 2, 3, 4], outbox, {}), "m")
    assert frames(outbox) == [(1, EVERY_WORKER), (2, 4)]


def test_a_message_with_out_of_band_buffers_crosses_to_each_process_once_too() -> None:
    # The receiving process gives each of its workers its own copy to rebuild the array on (see test_cluster).
    outbox: list[tuple[int, OutgoingFrame]] = []
    broadcast(pushes([0, 1, 2, 3], outbox, {}), (0, np.arange(10)))
    assert frames(outbox) == [(1, EVERY_WORKER)]


def test_a_list_of_push_ends_gets_the_message_one_end_after_another() -> None:
    boxes = [Box(), Box()]
    broadcast(boxes, "m")
    assert [b.got for b in boxes] == [["m"], ["m"]]


def test_a_broadcast_can_leave_out_the_worker_that_delivers_to_itself() -> None:
    outbox: list[tuple[int, OutgoingFrame]] = []
    local: dict[int, Box] = {}
    pushes([0, 1, 2, 3], outbox, local).broadcast("m", skip=0)
    assert local[0].got == [] and local[1].got == ["m"]
    assert frames(outbox) == [(1, EVERY_WORKER)]


def fixed(outbox: list[tuple[int, OutgoingFrame]], local: dict[int, Box]) -> ProcessPushes:
    """A fixed cluster's push ends from worker 0 of process 0 to all 6 workers (workers 0 and 1 are local)."""
    ends = [
        local.setdefault(w, Box()) if w < WORKERS else RemotePush(outbox, Precedence.DATA, (1, 1), 0, w, w // WORKERS)
        for w in range(6)
    ]
    return ProcessPushes(ends, WORKERS)


def test_a_fixed_clusters_push_ends_are_still_a_list_by_worker_index() -> None:
    # Exchange and progress index and iterate them as before; only a broadcast goes once per process.
    outbox: list[tuple[int, OutgoingFrame]] = []
    local: dict[int, Box] = {}
    ends = fixed(outbox, local)
    assert isinstance(ends, list) and len(ends) == 6 and ends[1] is local[1]
    assert [w for w, _ in ends.targets()] == list(range(6))
    ends[4].push("m")
    broadcast(ends, "p")  # a list: one end after another, as a fixed cluster's per-worker progress goes
    assert frames(outbox) == [(2, 4), (1, 2), (1, 3), (2, 4), (2, 5)]


def test_a_fixed_clusters_broadcast_crosses_to_each_process_once() -> None:
    outbox: list[tuple[int, OutgoingFrame]] = []
    local: dict[int, Box] = {}
    fixed(outbox, local).broadcast(("batch", [1, 2]), skip=0)
    assert frames(outbox) == [(1, EVERY_WORKER), (2, EVERY_WORKER)]
    assert local[0].got == [] and local[1].got == [("batch", [1, 2])]
    outbox.clear()
    fixed(outbox, {}).broadcast((0, np.arange(3)), skip=0)
    assert frames(outbox) == [(1, EVERY_WORKER), (2, EVERY_WORKER)]

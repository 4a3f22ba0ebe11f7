"""A worker's cluster mailbox: received payloads decoded when drained, in order, with at most a budget of in-band
data payloads (tuples) decoded per drain and the rest left for the next step; progress and buffer payloads whole."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from pytimely.communication.cluster.router import DECODE_BUDGET, ClusterMailbox, Wire
from pytimely.communication.payload import dumps


class Owner:
    """What the mailbox tells its process: the bytes its worker took, and failures."""

    def __init__(self) -> None:
        self.consumed_bytes = 0
        self.failures: list[BaseException] = []

    def consumed(self, nbytes: int) -> None:
        self.consumed_bytes += nbytes

    def fail(self, error: BaseException) -> None:
        self.failures.append(error)


def wire(message: Any, *, data: bool = True) -> Wire:
    """``message`` as a checked payload from process 1 would arrive."""
    parts, _ = dumps(message)
    return Wire(memoryview(b"".join(bytes(memoryview(p).cast("B")) for p in parts)), 1, (0, 3), data=data)


def tuples(index: int) -> tuple[int, list[tuple[int, int]]]:
    """A batch of records whose pickle is about a third of the budget."""
    rows = DECODE_BUDGET // 3 // 10
    return (index, [(index * rows + i, 1 << 20) for i in range(rows)])


def mailbox() -> tuple[ClusterMailbox, Owner, threading.Event]:
    owner, wake = Owner(), threading.Event()
    return ClusterMailbox(owner, wake), owner, wake


def test_in_band_data_payloads_past_the_budget_wait_in_order_for_the_next_drain() -> None:
    box, owner, wake = mailbox()
    wires = [wire(tuples(i)) for i in range(8)]
    for w in wires:
        box.arrive(w)
    box.push(("local", []))  # a message of a worker of this process, behind the payloads
    wake.clear()
    got: list[Any] = []
    drains = []
    while True:
        taken = box.drain()
        if not taken:
            break
        drains.append(len(taken))
        got.extend(taken)
        sizes = [len(wires[m[0]].payload) for m in taken if m[0] != "local"]
        # Past the first payload, a drain decodes another only while under the budget.
        assert sum(sizes[:-1]) < DECODE_BUDGET
        if len(got) < len(wires) + 1:
            assert wake.is_set(), "the worker must step again for what was left"
            assert box.waiting(), "what was left is not taken: a leaving worker must not leave it"
            wake.clear()
    assert len(drains) > 1
    assert not box.waiting()
    assert got == [tuples(i) for i in range(8)] + [("local", [])]
    assert owner.consumed_bytes == sum(len(w.payload) for w in wires)
    assert not owner.failures


def test_progress_payloads_and_buffer_payloads_are_drained_whole() -> None:
    box, owner, _ = mailbox()
    progress = [wire(tuples(i), data=False) for i in range(6)]
    arrays = [wire((i, np.arange(DECODE_BUDGET // 8 * 2, dtype=np.int64))) for i in range(4)]
    for w in [*progress, *arrays]:
        box.arrive(w)
    taken = box.drain()
    assert [m[1] for m in taken[:6]] == [tuples(i)[1] for i in range(6)]
    assert len(taken) == 10
    for i, (_, array) in enumerate(taken[6:]):
        assert np.array_equal(array, np.arange(DECODE_BUDGET // 8 * 2, dtype=np.int64)), i
    assert box.drain() == []
    assert owner.consumed_bytes == sum(len(w.payload) for w in [*progress, *arrays])

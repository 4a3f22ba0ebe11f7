"""Bursts of new objects: a worker's step and a decoding raise the collector's young threshold, bursts of several
threads nest, the program's own settings are kept, and cyclic garbage is still collected."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

from pytimely import Worker, execute
from pytimely.collector import BURST, burst


@pytest.fixture(autouse=True)
def usual_collector() -> Any:
    """Each test starts with the collector on at its usual thresholds, and leaves it so."""
    before = gc.get_threshold()
    assert gc.isenabled() and before[0] < BURST
    yield
    gc.enable()
    gc.set_threshold(*before)


def test_bursts_of_two_threads_nest_and_the_threshold_comes_back_once_both_end() -> None:
    usual = gc.get_threshold()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with burst():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with burst():
        assert gc.get_threshold()[0] == BURST
        thread.start()
        assert inside.wait(10)
    assert gc.get_threshold()[0] == BURST, "the threshold came back while another thread's burst was still on"
    release.set()
    thread.join(10)
    assert gc.get_threshold() == usual and gc.isenabled()


def test_a_program_that_turned_the_collector_off_or_set_its_own_threshold_keeps_it() -> None:
    gc.disable()
    with burst():
        pass
    assert not gc.isenabled(), "a burst turned the collector back on"
    gc.enable()
    with burst():
        gc.disable()  # turned off inside a burst, as an operator might
        gc.set_threshold(5_000, 10, 10)
    assert not gc.isenabled() and gc.get_threshold() == (5_000, 10, 10)
    gc.set_threshold(0, 10, 10)  # automatic collection off by threshold
    with burst():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_a_step_sets_off_no_collection_for_the_batches_it_makes_and_frees() -> None:
    started: list[bool] = []
    stepping = [False]
    steps = [0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(stepping[0])

    def job(worker: Worker) -> int:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            pairs = stream.flat_map(lambda n: [(n, i) for i in range(20_000)])
            return handle, pairs.map(lambda p: (p[1], p[0])).count().capture(), stream.probe()

        handle, out, probe = worker.dataflow(build)
        gc.callbacks.append(watch)
        try:
            for epoch in range(3):
                handle.send(epoch)
                handle.advance_to(epoch + 1)
                while probe.less_than(epoch + 1):
                    stepping[0] = True
                    steps[0] += 1
                    worker.step()
                    stepping[0] = False
        finally:
            gc.callbacks.remove(watch)
        handle.close()
        worker.finish()
        return sum(c for _, batch in out for c in batch)

    assert execute(job, 1) == [60_000]
    # At the usual threshold the 40,000 new tuples of an epoch set off a young collection every 700 of them
    # (about 57). In a burst at most one starts in a step: set off by what came before it, before the burst.
    assert started.count(True) <= steps[0], (steps[0], started)
    assert gc.get_threshold()[0] < BURST, "the step left the threshold raised"


def test_a_step_that_makes_cyclic_garbage_has_it_collected_as_it_goes() -> None:
    # However long a step runs, the collector runs every BURST young objects: its garbage does not pile up.
    collected: list[tuple[bool, int]] = []
    stepping = [False]

    class Node:
        """An object in a reference cycle with itself: only the cyclic collector frees it."""

        def __init__(self, n: int) -> None:
            self.me = self
            self.n = n

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            collected.append((stepping[0], info["collected"]))

    def job(worker: Worker) -> int:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.map(lambda n: Node(n).n).count().capture()

        handle, out = worker.dataflow(build)
        handle.send_batch(list(range(5 * BURST)))
        handle.close()
        gc.callbacks.append(watch)
        try:
            stepping[0] = True
            worker.step()
            stepping[0] = False
        finally:
            gc.callbacks.remove(watch)
        worker.finish()
        return sum(c for _, batch in out for c in batch)

    assert execute(job, 1) == [5 * BURST]
    during = sum(n for inside, n in collected if inside)
    assert during >= 3 * BURST, f"a step making {5 * BURST:,} cycles had {during:,} objects collected while it ran"

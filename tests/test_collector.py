"""Pausing the cyclic collector: pauses of several threads nest, a program's own choice is kept, and a worker's
step runs with it paused."""

from __future__ import annotations

import gc
import threading
import time
from typing import Any

from pytimely.collector import MAX_PAUSE, paused


def test_pauses_of_two_threads_nest_and_the_collector_comes_back_once_both_end() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with paused():
        thread.start()
        assert inside.wait(10)
        assert not gc.isenabled()
    assert not gc.isenabled(), "the collector came back while another thread's pause was still on"
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_pause_under_way_for_max_pause_takes_no_new_threads() -> None:
    # Workers stepping in turn would otherwise keep the collector off for good, each joining the other's pause.
    assert gc.isenabled()
    inside, release, done = threading.Event(), threading.Event(), threading.Event()

    def other() -> None:
        with paused():
            inside.set()
            release.wait(10)
        done.set()

    with paused():
        time.sleep(MAX_PAUSE * 1.5)
        thread = threading.Thread(target=other)
        thread.start()
        assert inside.wait(10)
    assert gc.isenabled(), "a pause older than MAX_PAUSE was joined: the collector stays off while threads overlap"
    release.set()
    thread.join(10)
    assert done.is_set() and gc.isenabled()


def test_a_step_runs_no_collection_however_many_objects_its_operators_make() -> None:
    from pytimely import Worker, execute

    started: list[tuple[bool, int]] = []
    stepping = [False]
    steps = [0]
    between: list[bool] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append((stepping[0], info["generation"]))

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
                    between.append(gc.isenabled())
        finally:
            gc.callbacks.remove(watch)
        handle.close()
        worker.finish()
        return sum(c for _, batch in out for c in batch)

    assert execute(job, 1) == [60_000]
    # Unpaused, the 40,000 new tuples of an epoch set off a young collection every 700 of them (about 57). Paused,
    # at most one starts in a step: set off by what came before it, before the pause begins. The tuples are freed
    # within their step, so what the next young collection must walk is small.
    inside = [g for stepping_then, g in started if stepping_then]
    assert len(inside) <= steps[0], (steps[0], started)
    assert between and all(between), "the collector stayed off after a step"

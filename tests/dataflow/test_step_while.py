"""``Worker.step_while`` waiting for a time that never comes: a stall is proven at once, or a deadline ends it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pytimely import Scope, Worker, execute
from pytimely.errors import InvalidArgument, StalledError, StepTimeoutError
from tests.cluster.helpers import Cluster, report


def hoarder(cap: Any, info: Any) -> Any:
    """Keeps its initial capability (time 0) for ever, so nothing downstream ever passes time 0."""

    def logic(inp: Any, out: Any) -> None:
        for _ in inp:
            pass

    return logic


def waiting_for(until: int, *, timeout: float | None, hoard: bool = True) -> Any:
    """A job: send a record, advance the input to ``until`` and step while the probe is behind it."""

    def job(worker: Worker) -> float:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            if hoard:
                stream = stream.unary(hoarder, name="hoarder")
            return handle, stream.probe()

        handle, probe = worker.dataflow(build)
        handle.send(1)
        handle.advance_to(until)
        started = time.monotonic()
        worker.step_while(lambda: probe.less_than(until), timeout=timeout)
        return time.monotonic() - started

    return job


def test_one_worker_waiting_for_a_held_time_is_a_stall_naming_the_capability() -> None:
    # Without a timeout at all: before, this waited for ever.
    with pytest.raises(StalledError, match="'hoarder' capability on output 0") as info:
        execute(waiting_for(3, timeout=None))
    assert "step_while" in str(info.value)


@pytest.mark.parametrize("seed", [None, 3])
def test_several_workers_in_one_process_waiting_for_a_held_time_are_a_stall(seed: int | None) -> None:
    # Every worker waits in step_while and a full round of steps does nothing: no deadline needed.
    with pytest.raises(StalledError, match="'hoarder' capability on output 0"):
        execute(waiting_for(3, timeout=None), 2, seed=seed)


@pytest.mark.parametrize("workers", [1, 2])
def test_waiting_with_no_dataflow_left_is_a_stall(workers: int) -> None:
    def job(worker: Worker) -> None:
        worker.step_while(lambda: True)

    with pytest.raises(StalledError, match="no running dataflow"):
        execute(job, workers)


def test_a_worker_still_running_its_function_keeps_the_others_waiting() -> None:
    # Worker 1 sends its records only after worker 0 has waited through idle rounds: no stall may be declared.
    def job(worker: Worker) -> int:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda r: 0).probe()

        handle, probe = worker.dataflow(build)
        if worker.index == 1:
            for _ in range(20):
                worker.step()  # idle steps outside step_while
            handle.send(7)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1), timeout=60)
        return 1

    assert execute(job, 2) == [1, 1]


def test_across_processes_the_deadline_ends_the_wait() -> None:
    # The deadline (2 s) comes long before the cluster-wide stall proof (30 s of every process quiet).
    cluster = Cluster(2)
    started = time.monotonic()
    try:
        cluster.start(["tests.cluster.misuse_jobs:wait_for_held_time", "2"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert all(code == 1 for code, _, _ in results), report(results)
    assert any("StepTimeoutError" in err and "'hoarder'" in err for _, _, err in results), report(results)
    assert time.monotonic() - started < 60, report(results)


def test_a_time_that_comes_ends_the_wait_without_error() -> None:
    assert all(elapsed < 60 for elapsed in execute(waiting_for(3, timeout=60, hoard=False), 2))
    assert all(elapsed < 60 for elapsed in execute(waiting_for(3, timeout=60, hoard=False), 1))


def test_a_condition_that_stays_true_while_work_goes_on_meets_the_deadline() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.probe()

        handle, _ = worker.dataflow(build)
        sent = [0]

        def condition() -> bool:
            # Keeps the worker busy: every check sends another record, so no step is idle.
            handle.send(sent[0])
            sent[0] += 1
            return True

        worker.step_while(condition, timeout=0.5)

    with pytest.raises(StepTimeoutError, match=r"after 0\.5 s"):
        execute(job)


@pytest.mark.parametrize("timeout", [-1, "soon", float("nan")])
def test_a_bad_timeout_is_refused(timeout: Any) -> None:
    def job(worker: Worker) -> None:
        worker.step_while(lambda: False, timeout=timeout)

    with pytest.raises(InvalidArgument, match="timeout"):
        execute(job)

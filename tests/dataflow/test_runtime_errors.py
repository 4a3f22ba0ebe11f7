"""Misuse of the runtime raises typed errors naming what went wrong, and every worker stops."""

from __future__ import annotations

from typing import Any

import pytest

from pytimely import Worker, execute
from pytimely.errors import (
    ArityError,
    CapabilityError,
    InputError,
    OperatorError,
    RouteError,
    ScopeError,
    StalledError,
)

pytestmark = pytest.mark.timeout(60)


def run_unary(logic_factory: Any, workers: int = 1, data: list[Any] | None = None) -> list[Any]:
    """Run one generic operator over ``data`` sent at time 0 by worker 0."""

    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            return handle, stream.unary(logic_factory, name="op under test").capture()

        handle, out = worker.dataflow(build)
        if worker.index == 0:
            handle.send_batch(data if data is not None else [1, 2, 3])
        return out

    return execute(job, workers, check_serialization=True)


def test_downgrading_backwards() -> None:
    def factory(cap: Any, info: Any) -> Any:
        cap.downgrade(5)

        def logic(inp: Any, out: Any) -> None:
            for _ in inp:
                pass
            cap.downgrade(2)

        return logic

    with pytest.raises(CapabilityError, match="backwards"):
        run_unary(factory)


def test_using_a_dropped_capability() -> None:
    def factory(cap: Any, info: Any) -> Any:
        cap.drop()

        def logic(inp: Any, out: Any) -> None:
            for _, batch in inp:
                out.give(cap, batch)

        return logic

    with pytest.raises(CapabilityError, match="dropped"):
        run_unary(factory)


def test_keeping_an_input_capability_past_its_call() -> None:
    kept: list[Any] = []

    def factory(cap: Any, info: Any) -> Any:
        cap.drop()

        def logic(inp: Any, out: Any) -> None:
            for in_cap, batch in inp:
                if kept:
                    out.give(kept[0], batch)
                kept.append(in_cap)

        return logic

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.unary(factory, name="keeper")
            return handle

        handle = worker.dataflow(build)
        handle.send_batch([1])
        worker.step()
        worker.step()
        handle.send_batch([2])

    with pytest.raises(CapabilityError, match="only valid while"):
        execute(job)


def test_sending_with_another_operators_capability() -> None:
    stolen: list[Any] = []

    def thief(cap: Any, info: Any) -> Any:
        stolen.append(cap)
        return lambda inp, out: [None for _ in inp]

    def user(cap: Any, info: Any) -> Any:
        cap.drop()

        def logic(inp: Any, out: Any) -> None:
            for _, batch in inp:
                out.give(stolen[0], batch)

        return logic

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.unary(thief, name="thief")
            stream.unary(user, name="user")
            return handle

        handle = worker.dataflow(build)
        handle.send(1)

    with pytest.raises(CapabilityError, match="cannot send on"):
        execute(job)


def test_delaying_to_an_earlier_time() -> None:
    def factory(cap: Any, info: Any) -> Any:
        def logic(inp: Any, out: Any) -> None:
            for in_cap, _ in inp:
                in_cap.delayed(-1)

        return logic

    with pytest.raises(CapabilityError, match="cannot hold a capability"):
        run_unary(factory)


def test_input_time_going_backwards_and_sending_after_close() -> None:
    def job(worker: Worker) -> str:
        handle = worker.dataflow(lambda scope: scope.new_input()[0])
        handle.advance_to(3)
        with pytest.raises(InputError, match="cannot advance from 3 to 1"):
            handle.advance_to(1)
        handle.close()
        with pytest.raises(InputError, match="closed"):
            handle.send(1)
        with pytest.raises(InputError, match="closed"):
            handle.advance_to(4)
        return "checked"

    assert execute(job, 2) == ["checked", "checked"]


def test_streams_from_another_dataflow_or_scope() -> None:
    def job(worker: Worker) -> None:
        other = worker.dataflow(lambda scope: scope.new_input()[1])
        with pytest.raises(ScopeError, match="another dataflow"):
            worker.dataflow(lambda scope: scope.new_input()[1].concat(other))

        def inner_mix(scope):  # type: ignore[no-untyped-def]
            _, stream = scope.new_input()
            inner = scope.iterative()
            with pytest.raises(ScopeError, match="enter"):
                stream.enter(inner).concat(stream)
            with pytest.raises(ScopeError, match="iterative"):
                scope.feedback()
            with pytest.raises(ScopeError, match="nothing to leave"):
                stream.leave()

        worker.dataflow(inner_mix)

    execute(job)


def test_unconnected_feedback_is_refused_when_built() -> None:
    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            scope.iterative().feedback(name="forgotten")

        worker.dataflow(build)

    with pytest.raises(ScopeError, match=r"'forgotten'.*never connected"):
        execute(job)


def test_partition_route_out_of_range_names_operator_and_time() -> None:
    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.partition(2, lambda x: x, name="splitter")
            return handle

        handle = worker.dataflow(build)
        handle.advance_to(7)
        handle.send(5)

    with pytest.raises(ArityError) as info:
        execute(job)
    assert "splitter" in str(info.value)
    assert any("at time 7" in note for note in info.value.__notes__)
    with pytest.raises(ArityError):
        execute(lambda w: w.dataflow(lambda scope: scope.concat([])))


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_user_exception_stops_every_worker(workers: int) -> None:
    steps: list[int] = [0] * workers

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            probe = stream.exchange(lambda x: x).map(lambda x: 1 // (x - 13), name="divide").probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        for t in range(20):
            if worker.index == 0:
                handle.send(t)
            handle.advance_to(t + 1)
            while probe.less_than(handle.time):
                worker.step()
                steps[worker.index] += 1

    with pytest.raises(OperatorError) as info:
        execute(job, workers, seed=workers)
    error = info.value
    assert error.operator == "divide"
    assert error.time == 13
    assert error.worker == 13 % workers
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert "'divide'" in str(error) and "time 13" in str(error)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_capability_held_for_ever_is_a_stall(workers: int) -> None:
    def hoarder(cap: Any, info: Any) -> Any:
        def logic(inp: Any, out: Any) -> None:
            for _ in inp:
                pass

        return logic

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.unary(hoarder, name="hoarder")
            return handle

        worker.dataflow(build).send(1)

    with pytest.raises(StalledError, match="'hoarder' capability on output 0"):
        execute(job, workers)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_route_giving_no_int_is_named(workers: int) -> None:
    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.map(str, name="stringify").exchange(lambda s: s, name="by text").count_by()
            return handle

        worker.dataflow(build).send(7)

    if workers == 1:
        execute(job, workers)  # one worker never routes, so the key is never asked for
        return
    with pytest.raises(RouteError, match=r"exchange into 'by text'.*gave '7' for '7'"):
        execute(job, workers)


def test_bad_worker_counts() -> None:
    for bad in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError):
            execute(lambda w: None, bad)  # type: ignore[arg-type]

"""Misuse of inputs, scopes and routes, failing user code and stalls: typed errors, and every worker stops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pytimely import Capability, Product, PytimelyError, Worker, execute
from pytimely.dataflow import OperatorInfo
from pytimely.errors import (
    ArityError,
    DataflowError,
    GraphError,
    InputError,
    InvalidArgument,
    OperatorError,
    RouteError,
    ScopeError,
    StalledError,
)

pytestmark = pytest.mark.timeout(60)


def test_error_hierarchy() -> None:
    for error in (ScopeError, ArityError, InputError, OperatorError, StalledError):
        assert issubclass(error, DataflowError) and issubclass(error, PytimelyError)
    assert issubclass(ScopeError, GraphError)
    assert issubclass(InputError, ValueError) and issubclass(ArityError, ValueError)
    assert issubclass(InvalidArgument, PytimelyError) and issubclass(InvalidArgument, ValueError)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: execute(lambda w: None, 0), InvalidArgument),
        (lambda: execute(lambda w: w.dataflow(lambda s: s.to_stream([1], batch_size=0))), InvalidArgument),
        (lambda: execute(lambda w: w.dataflow(lambda s: s.new_input()[1].exchange(3))), RouteError),
        (lambda: execute(lambda w: w.step_while(lambda: False, timeout=-1)), InvalidArgument),
    ],
)
def test_bad_arguments_are_typed(call: Callable[[], Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        call()


# -- inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_input_misuse(workers: int) -> None:
    def job(worker: Worker) -> list[str]:
        handle = worker.dataflow(lambda scope: scope.new_input("numbers")[0])
        checked = []
        handle.advance_to(3)
        handle.advance_to(3)  # staying put is fine
        with pytest.raises(InputError, match="'numbers' cannot advance from 3 to 1"):
            handle.advance_to(1)
        assert handle.time == 3
        handle.send(1)
        handle.close()
        handle.close()  # closing twice is harmless
        assert handle.closed
        for misuse in (lambda: handle.send(2), lambda: handle.send_batch([2]), lambda: handle.advance_to(4)):
            with pytest.raises(InputError, match="'numbers' is closed"):
                misuse()
            checked.append("refused")
        return checked

    assert execute(job, workers) == [["refused"] * 3] * workers


def test_input_with_product_times_refuses_incomparable_times() -> None:
    def job(worker: Worker) -> Any:
        handle = worker.dataflow(lambda scope: scope.new_input()[0], minimum=Product(0, 0))
        handle.advance_to(Product(1, 0))
        with pytest.raises(InputError, match=r"cannot advance from \(1, 0\) to \(0, 3\)"):
            handle.advance_to(Product(0, 3))
        handle.advance_to(Product(1, 3))
        return handle.time

    assert execute(job) == [Product(1, 3)]


def test_input_refuses_times_before_the_dataflow_minimum() -> None:
    def job(worker: Worker) -> None:
        handle = worker.dataflow(lambda scope: scope.new_input()[0], minimum=5)
        assert handle.time == 5
        handle.advance_to(4)

    with pytest.raises(InputError, match="from 5 to 4"):
        execute(job)


# -- scopes ------------------------------------------------------------------------------------


def mix_dataflows(how: str) -> Callable[[Worker], None]:
    """A job that combines a stream of one dataflow with a stream of another, ``how``."""

    def job(worker: Worker) -> None:
        other = worker.dataflow(lambda scope: scope.new_input()[1])

        def build(scope: Any) -> None:
            _, mine = scope.new_input()
            if how == "concat":
                mine.concat(other)
            elif how == "scope.concat":
                scope.concat([mine, other])
            elif how == "join":
                mine.join(other)
            elif how == "binary":
                mine.binary(other, lambda cap, info: lambda a, b, out: None)
            elif how == "map":
                # Using the other dataflow's stream at all, even alone, adds to an already built dataflow.
                other.map(lambda x: x)

        worker.dataflow(build)

    return job


@pytest.mark.parametrize("how", ["concat", "scope.concat", "join", "binary"])
@pytest.mark.parametrize("workers", [1, 2])
def test_streams_from_two_dataflows_cannot_be_combined(how: str, workers: int) -> None:
    with pytest.raises(ScopeError, match="lives in another dataflow"):
        execute(mix_dataflows(how), workers)


def test_a_built_dataflow_takes_no_more_operators() -> None:
    with pytest.raises(ScopeError, match="already built"):
        execute(mix_dataflows("map"))

    def job(worker: Worker) -> None:
        scope = worker.dataflow(lambda scope: scope)
        scope.new_input()

    with pytest.raises(ScopeError, match="already built"):
        execute(job)


def connect_twice(scope: Any, stream: Any) -> None:
    """Give one loop variable two sources."""
    handle, _ = scope.iterative().feedback()
    inside = stream.enter(handle.scope)
    inside.connect_loop(handle)
    inside.map(lambda x: x).connect_loop(handle)


SCOPE_MISUSE: dict[str, tuple[Callable[[Worker, Any, Any], Any], str]] = {
    "sibling loops": (
        lambda worker, scope, s: s.enter(scope.iterative("a")).concat(s.enter(scope.iterative("b"))),
        "lives in scope 'b', not in 'a'",
    ),
    "outer stream inside a loop": (
        lambda worker, scope, s: s.enter(scope.iterative()).concat(s),
        "lives in scope 'root', not in 'loop'",
    ),
    "enter a grandchild": (
        lambda worker, scope, s: s.enter(scope.iterative().iterative("deep")),
        "not nested directly",
    ),
    "leave the root": (lambda worker, scope, s: s.leave(), "nothing to leave"),
    "feedback in the root": (lambda worker, scope, s: scope.feedback(), "belong in an iterative scope"),
    "feedback that does not advance": (
        lambda worker, scope, s: scope.iterative().feedback(step=0),
        "at least 1, got 0",
    ),
    "loop fed from outside": (
        lambda worker, scope, s: s.connect_loop(scope.iterative().feedback()[0]),
        "lives in scope 'root', not in 'loop'",
    ),
    "loop connected twice": (lambda worker, scope, s: connect_twice(scope, s), "already connected"),
    "iterate body returns an outer stream": (lambda worker, scope, s: s.iterate(lambda inner: s), "not in 'iterate'"),
    "feedback never connected": (
        lambda worker, scope, s: scope.iterative().feedback(name="forgotten"),
        "'forgotten' in scope 'loop' was never connected",
    ),
    "dataflow inside a dataflow": (
        lambda worker, scope, s: worker.dataflow(lambda inner: None),
        "inside another dataflow's build",
    ),
    "not a stream": (lambda worker, scope, s: scope.concat([s, [1, 2]]), "expected a Stream, got list"),
}


@pytest.mark.parametrize("case", sorted(SCOPE_MISUSE))
def test_scope_misuse_raises_scope_error(case: str) -> None:
    build, message = SCOPE_MISUSE[case]

    def job(worker: Worker) -> None:
        def dataflow(scope: Any) -> None:
            _, stream = scope.new_input()
            build(worker, scope, stream)

        worker.dataflow(dataflow)

    with pytest.raises(ScopeError, match=message):
        execute(job)


def test_feedback_in_a_root_scope_with_product_times() -> None:
    with pytest.raises(ScopeError, match="belong in an iterative scope"):
        execute(lambda worker: worker.dataflow(lambda scope: scope.feedback(), minimum=Product(0, 0)))


def test_a_probe_reports_nothing_before_its_dataflow_is_built() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            probe = scope.new_input()[1].probe()
            probe.done()

        worker.dataflow(build)

    with pytest.raises(DataflowError, match="until its dataflow is built"):
        execute(job)


# -- routes and arities ------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_partition_route_out_of_range_names_operator_and_time(workers: int) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.partition(3, lambda x: x, name="splitter")
            return handle

        handle = worker.dataflow(build)
        handle.advance_to(4)
        handle.send(2)
        if worker.index == workers - 1:
            handle.send(3)

    with pytest.raises(ArityError, match=r"splitter: route gave 3 for 3; parts are numbered 0\.\.2") as info:
        execute(job, workers)
    assert any(f"'splitter' on worker {workers - 1} at time 4" in note for note in info.value.__notes__)


@pytest.mark.parametrize("parts", [0, -1, 2.0])
def test_partition_needs_a_positive_int(parts: Any) -> None:
    with pytest.raises(ArityError, match="positive int"):
        execute(lambda worker: worker.dataflow(lambda scope: scope.new_input()[1].partition(parts, int)))


def test_concat_of_nothing_and_non_callable_routes() -> None:
    with pytest.raises(ArityError, match="at least one stream"):
        execute(lambda worker: worker.dataflow(lambda scope: scope.concat([])))
    with pytest.raises(TypeError, match="route must be callable"):
        execute(lambda worker: worker.dataflow(lambda scope: scope.new_input()[1].exchange(3)))
    with pytest.raises(TypeError, match="route must be callable"):
        execute(lambda worker: worker.dataflow(lambda scope: scope.new_input()[1].unary(None, exchange=3)))


def test_a_vectorized_route_needs_one_key_per_row() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.map_batch(lambda a: a, name="before").exchange(lambda a: a[:2], vectorized=True, name="router")
            return handle

        worker.dataflow(build).send_batch(np.arange(5))

    with pytest.raises(ArityError, match=r"exchange into 'router'.*\(5 rows\), got shape \(2,\)"):
        execute(job, 2)


# -- failing user code -------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers,seed", [(1, None), (2, None), (2, 5), (3, 9)])
def test_a_failing_map_names_operator_worker_and_time_and_stops_every_worker(workers: int, seed: int | None) -> None:
    failed: list[int] = []
    steps_after_failure: list[int] = []

    def divide(x: int) -> int:
        if x == 13:
            failed.append(x)
        return 100 // (x - 13)

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            probe = stream.exchange(lambda x: x).map(divide, name="divide").probe()
            return handle, probe

        handle, probe = worker.dataflow(build)
        for t in range(40):
            handle.send(t)
            handle.advance_to(t + 1)
            while probe.less_than(handle.time):
                worker.step()
                if failed:
                    steps_after_failure.append(worker.index)

    with pytest.raises(OperatorError) as info:
        execute(job, workers, seed=seed)
    error = info.value
    assert (error.operator, error.worker, error.time) == ("divide", 13 % workers, 13)
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert f"operator 'divide' failed on worker {13 % workers} at time 13: ZeroDivisionError" in str(error)
    assert failed == [13], "the first 13 to arrive failed, and nothing ran after it"
    assert steps_after_failure == [], "no worker finished a step after the failure"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [1, 2])
def test_a_failing_operator_in_a_loop_reports_the_loop_time(workers: int) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()

            def body(s: Any) -> Any:
                return s.map(lambda x: x - 1).exchange(lambda x: x).inspect(lambda x: 1 // x, name="inverse")

            stream.iterate(body)
            return handle

        handle = worker.dataflow(build)
        handle.advance_to(2)
        if worker.index == 0:
            handle.send(5)

    with pytest.raises(OperatorError) as info:
        execute(job, workers)
    assert (info.value.operator, info.value.time, info.value.worker) == ("inverse", Product(2, 4), 0)


@pytest.mark.timeout(30)
def test_a_failing_unary_logic_and_source() -> None:
    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                output.give(in_cap, batch)
            raise KeyError("custom")

        return logic

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.unary(constructor, name="custom")
            return handle

        handle = worker.dataflow(build)
        handle.advance_to(3)
        handle.send(1)

    with pytest.raises(OperatorError, match="'custom' failed on worker 0 at time 3: KeyError: 'custom'"):
        execute(job)

    def source(cap: Capability[int], info: OperatorInfo) -> Callable[[Any], None]:
        def logic(output: Any) -> None:
            raise RuntimeError("no data today")

        return logic

    # A source handles no message: the time is unknown.
    with pytest.raises(OperatorError, match="'gen' failed on worker 0 at time None: RuntimeError: no data today"):
        execute(lambda worker: worker.dataflow(lambda scope: scope.source(source, name="gen")), 2)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("where", ["driver", "build"])
def test_an_error_on_one_worker_stops_the_others(where: str) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            if where == "build" and worker.index == 1:
                raise LookupError("worker 1 cannot build")
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda x: x).probe()

        handle, probe = worker.dataflow(build)
        for t in range(1000):
            if where == "driver" and worker.index == 2 and t == 3:
                raise LookupError("worker 2 gives up")
            handle.send(t)
            handle.advance_to(t + 1)
            worker.step_while(lambda: probe.less_than(handle.time))

    with pytest.raises(LookupError, match="gives up" if where == "driver" else "cannot build"):
        execute(job, 3, seed=4)


# -- stalls ------------------------------------------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers,holders", [(1, {0}), (2, {0, 1}), (2, {1}), (3, {0}), (3, {2})])
def test_a_capability_kept_forever_is_a_stall(workers: int, holders: set[int]) -> None:
    def hoarder(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        if info.worker not in holders:
            cap.drop()

        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                output.give(in_cap, batch)

        return logic

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.unary(hoarder, name="hoarder").map(lambda x: x).probe()
            return handle

        handle = worker.dataflow(build)
        handle.send(1)
        handle.advance_to(5)

    with pytest.raises(StalledError, match=r"'hoarder' capability on output 0 at \[0\]"):
        execute(job, workers, seed=3)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [1, 2])
def test_messages_never_read_are_a_stall(workers: int) -> None:
    def deaf(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        return lambda input, output: None

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.unary(deaf, name="deaf")
            return handle

        worker.dataflow(build).send(1)

    with pytest.raises(StalledError, match=r"'deaf' message\(s\) for input 0 at \[0\]"):
        execute(job, workers)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("workers", [2, 3])
def test_a_dataflow_built_by_only_some_workers_is_a_stall(workers: int) -> None:
    def job(worker: Worker) -> None:
        if worker.index == 0:
            worker.dataflow(lambda scope: scope.new_input(name="lonely"))

    with pytest.raises(StalledError, match=r"'lonely' capability on output 0 at \[0\]"):
        execute(job, workers)


def test_bad_worker_counts() -> None:
    for bad in (0, -2, 2.0, "2", True):
        with pytest.raises(ValueError, match="positive int"):
            execute(lambda worker: None, bad)  # type: ignore[arg-type]


@pytest.mark.timeout(30)
def test_a_failing_key_names_the_keyed_operator_with_one_worker() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.map(lambda x: x, name="upstream").count_by(lambda x: 100 // (x - 3), name="keyed").probe()
            return handle

        handle = worker.dataflow(build)
        for t in range(5):
            handle.send(t)
            handle.advance_to(t + 1)
            worker.step()

    with pytest.raises(OperatorError) as info:
        execute(job)
    assert (info.value.operator, info.value.time) == ("keyed", 3)


# -- routes belong to the operator they feed --------------------------------------------------


@pytest.mark.timeout(30)
@pytest.mark.parametrize("upstream", ["map", "input"])
@pytest.mark.parametrize("operator", ["exchange", "count_by"])
def test_a_failing_route_names_the_operator_it_belongs_to(upstream: str, operator: str) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            if upstream == "map":
                stream = stream.map(lambda x: x, name="upstream")
            if operator == "exchange":
                stream.exchange(lambda x: 100 // (x - 3), name="keyed").probe()
            else:
                stream.count_by(lambda x: 100 // (x - 3), name="keyed").probe()
            return handle

        handle = worker.dataflow(build)
        for t in range(5):
            handle.send(t)
            handle.advance_to(t + 1)
            worker.step()

    with pytest.raises(OperatorError) as info:
        execute(job, 2)
    assert (info.value.operator, info.value.time) == ("keyed", 3)

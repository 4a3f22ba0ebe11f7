"""The operator builder: declared internal summaries, multiple outputs, probe_with, regions, unordered and
thread-fed inputs, activators, and dropping a dataflow."""

from __future__ import annotations

import gc
import json
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytimely import Capability, Increment, Worker, execute
from pytimely.dataflow import OperatorBuilder, OperatorInfo, ProbeHandle
from pytimely.dataflow.channels import Exchange
from pytimely.errors import (
    ArityError,
    CapabilityError,
    DroppedDataflowError,
    InputError,
    InvalidArgument,
    StalledError,
    StepTimeoutError,
    SummaryViolationError,
)

from .helpers import records

pytestmark = pytest.mark.timeout(120)

Logic = Callable[[Sequence[Any], Sequence[Any]], None]


def delay_by(stream: Any, by: int, *, declare: bool, name: str = "delay") -> Any:
    """An operator sending each batch ``by`` epochs later, declaring ``Increment(by)`` when ``declare``."""
    builder: OperatorBuilder[int] = OperatorBuilder(stream.scope, name)
    builder.new_input(stream, summaries={0: Increment(by)} if declare else None)
    builder.new_output()

    def constructor(caps: list[Capability[int]], info: OperatorInfo) -> Logic:
        for cap in caps:
            cap.drop()

        def logic(inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
            for cap, batch in inputs[0]:
                later = cap.delayed(cap.time + by)
                outputs[0].give(later, batch)
                later.drop()

        return logic

    (out,) = builder.build(constructor)
    return out


# -- declared summaries ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_an_operator_emitting_at_t_plus_2_with_a_declared_summary_lets_the_probe_finish(workers: int) -> None:
    """The input stays open at epoch 1; only the declared +2 tells the probe that nothing before 3 can come."""
    seen: list[list[tuple[int, list[int]]]] = [[] for _ in range(workers)]

    def job(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, ProbeHandle[Any]]:
            handle, stream = scope.new_input()
            delayed = delay_by(stream, 2, declare=True)
            delayed.capture(seen[worker.index])
            return handle, delayed.probe()

        handle, probe = worker.dataflow(build)
        handle.send(10 + worker.index)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(3), timeout=60)
        assert list(probe.frontier().elements()) == [3]

    execute(job, workers=workers)
    assert sorted((t, r) for events in seen for t, b in events for r in records(b)) == [
        (2, 10 + w) for w in range(workers)
    ]


def test_without_the_declared_summary_the_same_probe_waits_forever() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, ProbeHandle[Any]]:
            handle, stream = scope.new_input()
            return handle, delay_by(stream, 2, declare=False).probe()

        handle, probe = worker.dataflow(build)
        handle.send(1)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(3), timeout=60)

    with pytest.raises(StalledError):
        execute(job, workers=1)


@pytest.mark.parametrize(
    ("use", "match"),
    [
        ("retain", "at or after \\[2\\], not 0"),
        ("delayed_too_early", "not 1"),
        ("give", "not 0"),
        ("no_path", "no path from input 0 to output 1"),
    ],
)
def test_capabilities_beyond_the_declared_summary_are_refused(use: str, match: str) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            builder: OperatorBuilder[int] = OperatorBuilder(scope, "strict")
            builder.new_input(stream, summaries={0: Increment(2)})
            builder.new_output()
            builder.new_output()

            def constructor(caps: list[Capability[int]], info: OperatorInfo) -> Logic:
                for cap in caps:
                    cap.drop()

                def logic(inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
                    for cap, batch in inputs[0]:
                        if use == "retain":
                            cap.retain()
                        elif use == "delayed_too_early":
                            cap.delayed(cap.time + 1)
                        elif use == "give":
                            outputs[0].give(cap, batch)
                        else:
                            cap.delayed(cap.time + 5, 1)

                return logic

            builder.build(constructor)
            return handle

        handle = worker.dataflow(build)
        handle.send(1)

    with pytest.raises(SummaryViolationError, match=match) as info:
        execute(job, workers=1)
    assert isinstance(info.value, CapabilityError)
    assert "strict" in str(info.value)


def test_a_summary_to_a_missing_output_is_an_arity_error() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            _, stream = scope.new_input()
            builder: OperatorBuilder[int] = OperatorBuilder(scope, "bad")
            builder.new_input(stream, summaries={1: Increment(1)})
            builder.new_output()
            builder.build(lambda caps, info: lambda i, o: None)

        worker.dataflow(build)

    with pytest.raises(ArityError, match="output 1"):
        execute(job, workers=1)


# -- multiple inputs and outputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 3])
def test_two_inputs_three_outputs_with_an_exchange(workers: int) -> None:
    """Records of both inputs go by key to one worker; output i gets the records with ``r % 3 == i``."""
    outs: list[list[list[Any]]] = [[[], [], []] for _ in range(workers)]

    def job(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, Any]:
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()
            builder: OperatorBuilder[int] = OperatorBuilder(scope, "split3")
            builder.new_input(s1, Exchange(lambda r: r))
            builder.new_input(s2, Exchange(lambda r: r))
            for _ in range(3):
                builder.new_output()

            def constructor(caps: list[Capability[int]], info: OperatorInfo) -> Logic:
                for cap in caps:
                    cap.drop()
                me = info.worker

                def logic(inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
                    for port in inputs:
                        for cap, batch in port:
                            for r in batch:
                                assert r % info.peers == me
                                outputs[r % 3].give(cap, [r])

                return logic

            streams = builder.build(constructor)
            for i, stream in enumerate(streams):
                stream.capture(outs[worker.index][i])
            return h1, h2

        h1, h2 = worker.dataflow(build)
        for r in range(worker.index * 100, worker.index * 100 + 30):
            (h1 if r % 2 else h2).send(r)

    execute(job, workers=workers)
    for i in range(3):
        got = sorted(r for per in outs for t, b in per[i] for r in records(b))
        assert got == sorted(r for w in range(workers) for r in range(w * 100, w * 100 + 30) if r % 3 == i)


# -- probe_with ----------------------------------------------------------------------------------------------------


def test_probe_with_watches_every_stream_it_is_given() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, Any, ProbeHandle[Any]]:
            fast, a = scope.new_input()
            slow, b = scope.new_input()
            probe: ProbeHandle[Any] = ProbeHandle()
            assert a.map(str).probe_with(probe) is not None
            b.probe_with(probe)
            return fast, slow, probe

        fast, slow, probe = worker.dataflow(build)
        fast.advance_to(5)
        for _ in range(5):
            worker.step()
        assert list(probe.frontier().elements()) == [0]  # the slow input still holds epoch 0
        slow.advance_to(3)
        worker.step_while(lambda: probe.less_than(3), timeout=30)
        assert list(probe.frontier().elements()) == [3]
        fast.close()
        slow.close()
        worker.step_while(lambda: not probe.done(), timeout=30)

    execute(job, workers=1)


def test_an_empty_probe_and_a_wrong_handle_are_named() -> None:
    with pytest.raises(Exception, match="watches no stream"):
        ProbeHandle().less_than(1)

    def job(worker: Worker) -> None:
        worker.dataflow(lambda scope: scope.new_input()[1].probe_with("probe"))

    with pytest.raises(InvalidArgument, match="expected a ProbeHandle"):
        execute(job, workers=1)


# -- regions -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_a_region_groups_operators_without_changing_times(workers: int) -> None:
    seen: list[list[Any]] = [[] for _ in range(workers)]
    scopes: list[str] = []

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            region = scope.region("prepare")
            inner = stream.enter(region).map(lambda x: x * 2).exchange(lambda x: x)
            assert inner.scope is region and region.minimum == 0
            inner.leave().capture(seen[worker.index])
            return handle

        handle = worker.dataflow(build)
        for epoch in range(3):
            handle.advance_to(epoch)
            handle.send(epoch + 10 * worker.index)
        if worker.index == 0:
            scopes.extend(s.name for s in worker.graph()[0].scopes)

    execute(job, workers=workers)
    got = sorted((t, r) for events in seen for t, b in events for r in records(b))
    assert got == sorted((e, 2 * (e + 10 * w)) for w in range(workers) for e in range(3))
    assert "prepare" in scopes


def test_a_region_keeps_its_streams_to_itself() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> None:
            _, stream = scope.new_input()
            region = scope.region()
            stream.enter(region).concat(stream)

        worker.dataflow(build)

    with pytest.raises(Exception, match="enter\\(\\)/leave\\(\\)"):
        execute(job, workers=1)


# -- unordered and thread-fed inputs -------------------------------------------------------------------------------


def test_an_unordered_input_sends_at_several_open_times() -> None:
    seen: list[Any] = []

    def job(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, ProbeHandle[Any]]:
            handle, stream = scope.new_unordered_input()
            stream.capture(seen)
            return handle, stream.probe()

        handle, probe = worker.dataflow(build)
        later = handle.capability.delayed(5)
        handle.capability.downgrade(2)
        handle.give(later, ["five"])
        with handle.session(handle.capability) as session:
            session.give("two")
        worker.step_while(lambda: probe.less_than(2) or not seen, timeout=30)
        assert list(probe.frontier().elements()) == [2]
        handle.capability.drop()
        worker.step_while(lambda: probe.less_than(5), timeout=30)
        with pytest.raises(CapabilityError):
            handle.give(handle.capability, ["late"])
        later.drop()
        worker.step_while(lambda: not probe.done(), timeout=30)

    execute(job, workers=1)
    assert sorted((t, records(b)) for t, b in seen) == [(2, ["two"]), (5, ["five"])]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_thread_feeds_a_dataflow_and_wakes_it(workers: int) -> None:
    """Another thread sends per-epoch records; the worker waits on its probe and is woken by the activator."""
    counts: list[list[Any]] = [[] for _ in range(workers)]

    def job(worker: Worker) -> None:
        def build(scope: Any) -> tuple[Any, ProbeHandle[Any]]:
            feed, stream = scope.new_sync_input("from_thread")
            stream.exchange(lambda r: r).count().capture(counts[worker.index])
            return feed, stream.probe()

        feed, probe = worker.dataflow(build)

        def producer() -> None:
            for epoch in range(5):
                feed.send(epoch, list(range(epoch + 1)))
                feed.advance_to(epoch + 1)
            feed.close()

        thread = threading.Thread(target=producer, name=f"producer-{worker.index}")
        thread.start()
        worker.step_while(lambda: not probe.done(), timeout=60)
        thread.join(timeout=60)
        assert not thread.is_alive()

    execute(job, workers=workers)
    totals = {t: sum(records(b)) for events in counts for t, b in events}
    assert totals == {e: workers * (e + 1) for e in range(5)}


def test_a_sync_input_checks_its_times_in_the_feeding_thread() -> None:
    def job(worker: Worker) -> None:
        feed, probe = worker.dataflow(lambda scope: (lambda h, s: (h, s.probe()))(*scope.new_sync_input()))
        feed.advance_to(3)
        with pytest.raises(InputError, match="cannot send at 1"):
            feed.send(1, [1])
        with pytest.raises(InputError, match="cannot advance from 3 to 2"):
            feed.advance_to(2)
        feed.close()
        with pytest.raises(InputError, match="closed"):
            feed.send(4, [1])
        worker.step_while(lambda: not probe.done(), timeout=30)

    execute(job, workers=1)


def test_a_source_woken_by_a_sync_activator_from_another_thread() -> None:
    """A generic source whose logic only runs when the thread's activator says there is work."""
    seen: list[Any] = []
    activated = threading.Event()

    def job(worker: Worker) -> None:
        box: list[int] = []
        lock = threading.Lock()

        def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[[Any], None]:
            activator = info.sync_activator()

            def producer() -> None:
                for value in range(3):
                    with lock:
                        box.append(value)
                    activator.activate()
                activated.set()
                activator.close()

            threading.Thread(target=producer).start()

            def logic(output: Any) -> None:
                with lock:
                    taken = box[:]
                    box.clear()
                if taken:
                    output.give(cap, taken)
                if activator.closed and not box and cap.valid:
                    cap.drop()

            return logic

        probe = worker.dataflow(
            lambda scope: scope.source(constructor).inspect_batch(lambda t, b: seen.extend(b)).probe()
        )
        worker.step_while(lambda: not probe.done(), timeout=60)

    execute(job, workers=1)
    assert activated.is_set()
    assert seen == [0, 1, 2]


def test_a_closed_activator_refuses_to_activate() -> None:
    def job(worker: Worker) -> None:
        def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[[Any], None]:
            activator = info.sync_activator()
            activator.close()
            with pytest.raises(Exception, match="closed"):
                activator.activate()
            cap.drop()
            return lambda output: None

        worker.dataflow(lambda scope: scope.source(constructor).probe())

    execute(job, workers=1)


# -- dropping a dataflow -------------------------------------------------------------------------------------------


class _State:
    """Something an operator keeps, to see it released."""


@pytest.mark.parametrize("workers", [1, 2])
def test_drop_dataflow_releases_a_dataflow_that_would_never_finish(workers: int) -> None:
    released: list[bool] = []

    def hoarding(scope: Any, state: _State) -> tuple[Any, ProbeHandle[Any]]:
        """An input and a probe behind an operator that keeps ``state`` and never drops its capability."""

        def hoard(cap: Capability[int], info: OperatorInfo) -> Callable[[Any, Any], None]:
            def logic(input: Any, output: Any) -> None:
                for _, batch in input:
                    assert state is not None
                    output.give(cap, batch)

            return logic

        handle, stream = scope.new_input()
        return handle, stream.unary(hoard).probe()

    def job(worker: Worker) -> None:
        state = _State()
        ref = weakref.ref(state)
        index = worker.next_dataflow_index

        def build(scope: Any) -> tuple[Any, ProbeHandle[Any]]:
            assert scope.dataflow_index == index
            return hoarding(scope, ref() or _State())

        handle, probe = worker.dataflow(build)
        del state
        handle.send(1)
        handle.advance_to(1)
        for _ in range(3):
            worker.step()
        assert probe.less_than(1)
        assert ref() is not None  # the operator keeps it
        assert worker.installed_dataflows() == [index]
        worker.drop_dataflow(index)
        assert worker.installed_dataflows() == []
        with pytest.raises(DroppedDataflowError, match="dropped"):
            handle.send(2)
        with pytest.raises(DroppedDataflowError):
            probe.done()
        with pytest.raises(InvalidArgument, match="runs no dataflow"):
            worker.drop_dataflow(index)
        del handle, probe
        gc.collect()
        released.append(ref() is None)

    execute(job, workers=workers)  # finishes: nothing is left holding a capability
    assert released == [True] * workers


def test_a_dataflow_that_never_finishes_stalls_without_drop() -> None:
    def job(worker: Worker) -> None:
        def hoard(cap: Capability[int], info: OperatorInfo) -> Callable[[Any, Any], None]:
            return lambda input, output: None

        worker.dataflow(lambda scope: scope.new_input()[1].unary(hoard).probe())

    with pytest.raises(StalledError):
        execute(job, workers=1)


def test_step_while_with_an_open_activator_waits_for_the_thread_not_a_stall() -> None:
    def job(worker: Worker) -> None:
        feed, probe = worker.dataflow(lambda scope: (lambda h, s: (h, s.probe()))(*scope.new_sync_input()))
        assert worker.awaits_other_threads
        with pytest.raises(StepTimeoutError):
            worker.step_while(lambda: not probe.done(), timeout=0.3)
        timer = threading.Timer(0.2, feed.close)
        timer.start()
        worker.step_while(lambda: not probe.done(), timeout=60)
        timer.join()
        assert not worker.awaits_other_threads

    execute(job, workers=1)


def test_threads_feed_a_dataflow_across_two_processes(tmp_path: Path) -> None:
    """Real processes over TCP: each process's thread feeds its worker, which waits on the thread's bell."""
    from tests.cluster.helpers import Cluster, report

    out = tmp_path / "counts.json"
    cluster = Cluster(2)
    try:
        cluster.start(["tests.dataflow.thread_jobs:thread_fed", str(out)])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert [r[0] for r in results] == [0, 0], report(results)
    assert json.loads(out.read_text()) == {str(e): 2 * (e + 1) for e in range(6)}

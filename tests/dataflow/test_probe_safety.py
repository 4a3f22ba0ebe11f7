"""Probes are safe: no batch at time t reaches a probed stage after any worker's probe reported t complete."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Product, Worker, execute
from tests.profiles import examples

from .helpers import share

pytestmark = pytest.mark.timeout(60)

BIG = 10**9


@dataclass
class Trace:
    """Everything the workers did, in one global order given by ``clock``."""

    clock: itertools.count[int] = field(default_factory=itertools.count)
    deliveries: list[tuple[int, Any, int, list[int]]] = field(default_factory=list)
    """``(worker, time, event, records)`` for every batch reaching the probed stage."""
    observations: list[tuple[int, int, list[Any], bool]] = field(default_factory=list)
    """``(worker, event, frontier, done)`` read from a worker's probe after each of its steps."""


def expected_deliveries(variant: str, data: list[tuple[int, int]]) -> Counter[tuple[Any, int]]:
    """``(time, record)`` pairs the probed stage must see."""
    out: Counter[tuple[Any, int]] = Counter()
    for epoch, value in data:
        x = 3 * value + 1
        if variant == "plain":
            out[(epoch, x)] += 1
            continue
        iteration = 0
        while True:
            out[(Product(epoch, iteration) if variant == "inner" else epoch, x)] += 1
            if x <= 4:
                break
            x, iteration = x // 2, iteration + 1
    return out


def run(variant: str, data: list[tuple[int, int]], workers: int, seed: int | None, mode: str, steps: int) -> Trace:
    """Run the watched dataflow; ``mode`` is "wait" (timely driver loop) or "steps" (``steps`` steps per epoch)."""
    trace = Trace()

    def job(worker: Worker) -> None:
        index = worker.index

        def record(time: Any, batch: Any) -> None:
            trace.deliveries.append((index, time, next(trace.clock), list(batch)))

        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream = stream.map(lambda x: 3 * x + 1).exchange(lambda x: x)
            if variant == "inner":
                inner = scope.iterative()
                loop, variable = inner.feedback()
                watched = stream.enter(inner).concat(variable).inspect_batch(record)
                watched.filter(lambda x: x > 4).map(lambda x: x // 2).exchange(lambda x: x).connect_loop(loop)
                return handle, watched.probe()
            if variant == "loop":

                def body(s: Any) -> Any:
                    return s.filter(lambda x: x > 4).map(lambda x: x // 2).exchange(lambda x: x)

                stream = stream.concat(stream.iterate(body))
            return handle, stream.inspect_batch(record).probe()

        handle, probe = worker.dataflow(build)

        def step() -> None:
            worker.step()
            trace.observations.append((index, next(trace.clock), probe.frontier().elements(), probe.done()))

        def live(epoch: int) -> bool:
            return bool(probe.less_equal(Product(epoch, BIG) if variant == "inner" else epoch))

        previous = None
        for epoch, group in itertools.groupby(share(worker, data), key=lambda p: p[0]):
            if epoch != handle.time:
                handle.advance_to(epoch)
            for _, value in group:
                handle.send(value)
            if mode == "wait" and previous is not None:
                while live(previous):
                    step()
            else:
                for _ in range(steps):
                    step()
            previous = epoch
        handle.close()
        for _ in range(10_000):
            if probe.done():
                break
            step()
        else:
            raise AssertionError(f"worker {index}: the probe never finished")

    execute(job, workers, seed=seed)
    return trace


def check(trace: Trace, variant: str, data: list[tuple[int, int]], workers: int) -> None:
    """The safety, completion and monotonicity properties of the trace."""
    delivered = Counter((t, r) for _, t, _, batch in trace.deliveries for r in batch)
    assert delivered == expected_deliveries(variant, data)
    # Safety: once some worker's probe says t can no longer appear, no batch at t arrives anywhere.
    for w, event, frontier, _ in trace.observations:
        for dw, time, at, _ in trace.deliveries:
            if at > event:
                assert any(f <= time for f in frontier), (
                    f"worker {w} saw frontier {frontier} at event {event}, then a batch at {time} reached "
                    f"worker {dw} at event {at}"
                )
    # done() only after every batch has been seen.
    last_delivery = max((at for _, _, at, _ in trace.deliveries), default=-1)
    for w, event, frontier, done in trace.observations:
        assert done == (frontier == [])
        if done:
            assert event > last_delivery, f"worker {w} reported done at event {event}; a batch came at {last_delivery}"
    # Each worker's probe frontier only moves forward, and ends empty.
    for w in range(workers):
        mine = [frontier for ww, _, frontier, _ in trace.observations if ww == w]
        for before, after in itertools.pairwise(mine):
            assert all(any(b <= a for b in before) for a in after), f"worker {w}: frontier went {before} -> {after}"
        if mine:
            assert mine[-1] == []


@settings(max_examples=examples(30), deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 30)), min_size=1, max_size=30),
    workers=st.integers(2, 3),
    seed=st.integers(0, 10_000),
    variant=st.sampled_from(["plain", "loop", "inner"]),
    mode=st.sampled_from(["wait", "steps"]),
    steps=st.integers(0, 3),
)
def test_no_batch_arrives_at_a_time_a_probe_reported_complete(
    data: list[tuple[int, int]], workers: int, seed: int, variant: str, mode: str, steps: int
) -> None:
    trace = run(variant, data, workers, seed, mode, steps)
    check(trace, variant, data, workers)


@pytest.mark.parametrize("variant", ["plain", "loop", "inner"])
@pytest.mark.parametrize("workers,seed", [(2, 1), (2, 2), (3, 3), (3, 4)])
def test_probe_safety_on_a_fixed_workload(variant: str, workers: int, seed: int) -> None:
    data = [(v // 10, (v * 11) % 31) for v in range(60)]  # every worker sends at every epoch
    trace = run(variant, data, workers, seed, "wait", 0)
    check(trace, variant, data, workers)
    # The check had teeth: some times were reported complete while data at later times was still arriving.
    last = max(at for _, _, at, _ in trace.deliveries)
    times = {time for _, time, _, _ in trace.deliveries}
    completed_early = {
        time
        for _, event, frontier, _ in trace.observations
        if event < last
        for time in times
        if not any(f <= time for f in frontier)
    }
    assert completed_early

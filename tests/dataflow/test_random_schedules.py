"""Random dataflows on random epoch-tagged input give what a sequential reference gives, for any number of
workers and any seeded schedule; and no probe ever reports a time done while data at it is still moving."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Worker, execute
from tests.profiles import examples

pytestmark = pytest.mark.timeout(120)

# A program is a list of stages applied to a stream of ints; each stage has a twin in `reference`.
STAGES = ["inc", "double", "keep_odd", "dup", "exchange", "broadcast_own", "branch_concat", "loop", "count_by"]
# At most two loops and two duplications, so no program's output explodes.
stages = st.lists(st.sampled_from(STAGES), min_size=1, max_size=6).filter(
    lambda p: p.count("loop") <= 2 and p.count("dup") <= 2
)
inputs = st.lists(st.tuples(st.integers(0, 4), st.integers(-20, 40)), max_size=40)


def apply(stream: Any, stage: str, worker: Worker) -> Any:
    """Add ``stage`` to ``stream``."""
    if stage == "inc":
        return stream.map(lambda x: x + 1)
    if stage == "double":
        return stream.map(lambda x: 2 * x)
    if stage == "keep_odd":
        return stream.filter(lambda x: x % 2 == 1)
    if stage == "dup":
        return stream.flat_map(lambda x: [x, x])
    if stage == "exchange":
        return stream.exchange(lambda x: x)
    if stage == "broadcast_own":
        # Every worker receives everything and keeps what it owns: the multiset is unchanged.
        peers, index = worker.peers, worker.index
        return stream.map(lambda x: (x, index)).broadcast().filter(lambda p: p[0] % peers == index).map(lambda p: p[0])
    if stage == "branch_concat":
        small, large = stream.branch(lambda x: x < 10)
        return small.map(lambda x: x - 1).concat(large)
    if stage == "loop":
        # Positive values are halved until they reach 0; every value met leaves the loop.
        def body(s: Any) -> Any:
            return s.filter(lambda x: x > 0).map(lambda x: x // 2).exchange(lambda x: x)

        return stream.concat(stream.iterate(body))
    if stage == "count_by":
        return stream.count_by().map(lambda kc: kc[0] * 100 + kc[1])
    raise AssertionError(stage)


def reference(program: list[str], records: list[int]) -> Counter[int]:
    """The program run sequentially on one epoch's records."""
    out = list(records)
    for stage in program:
        if stage == "inc":
            out = [x + 1 for x in out]
        elif stage == "double":
            out = [2 * x for x in out]
        elif stage == "keep_odd":
            out = [x for x in out if x % 2 == 1]
        elif stage == "dup":
            out = [y for x in out for y in (x, x)]
        elif stage == "branch_concat":
            out = [x - 1 if x < 10 else x for x in out]
        elif stage == "loop":
            produced = []
            frontier = list(out)
            while frontier:
                frontier = [x // 2 for x in frontier if x > 0]
                produced.extend(frontier)
            out = out + produced
        elif stage == "count_by":
            out = [k * 100 + c for k, c in Counter(out).items()]
    return Counter(out)


def run(program: list[str], data: list[tuple[int, int]], workers: int, seed: int) -> dict[int, Counter[int]]:
    """Each worker sends its share of ``data`` epoch by epoch; outputs gathered per epoch."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            for stage in program:
                stream = apply(stream, stage, worker)
            return handle, stream.capture()

        handle, captured = worker.dataflow(build)
        mine = sorted(data[worker.index :: worker.peers])
        for epoch, value in mine:
            handle.advance_to(epoch)
            handle.send(value)
            worker.step()
        return captured

    out: dict[int, Counter[int]] = {}
    for captured in execute(job, workers, seed=seed, check_serialization=True):
        for time, batch in captured:
            out.setdefault(time, Counter()).update(batch)
    return out


@settings(max_examples=examples(100), deadline=None)
@given(program=stages, data=inputs, workers=st.integers(1, 3), seed=st.integers(0, 10_000))
def test_random_dataflows_match_the_sequential_reference(
    program: list[str], data: list[tuple[int, int]], workers: int, seed: int
) -> None:
    got = run(program, data, workers, seed)
    expected: dict[int, Counter[int]] = {}
    for epoch in sorted({e for e, _ in data}):
        result = reference(program, [v for e, v in data if e == epoch])
        if result:
            expected[epoch] = result
    assert {t: c for t, c in got.items() if c} == expected


@settings(max_examples=examples(60), deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 30)), min_size=1, max_size=40),
    workers=st.integers(2, 3),
    seed=st.integers(0, 10_000),
    loop=st.booleans(),
)
def test_a_probe_never_reports_a_time_done_while_data_at_it_still_moves(
    data: list[tuple[int, int]], workers: int, seed: int, loop: bool
) -> None:
    clock = itertools.count()
    deliveries: list[tuple[int, int]] = []  # (event number, time) of every batch reaching the probed stage
    done_at: dict[int, int] = {}  # time -> first event number at which some worker's probe said it was done

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream = stream.map(lambda x: x * 7).exchange(lambda x: x)
            if loop:
                body = stream.iterate(lambda s: s.filter(lambda x: x > 5).map(lambda x: x // 2).exchange(lambda x: x))
                stream = stream.concat(body)
            watched = stream.inspect_batch(lambda t, b: deliveries.append((next(clock), t)))
            return handle, watched.probe()

        handle, probe = worker.dataflow(build)

        def observe() -> None:
            now = next(clock)
            for t in range(8):
                if not probe.less_equal(t):
                    done_at.setdefault(t, now)

        for epoch, value in sorted(data[worker.index :: worker.peers]):
            handle.advance_to(epoch)
            handle.send(value)
            worker.step()
            observe()
        handle.close()
        for _ in range(10_000):
            if probe.done():
                break
            worker.step()
            observe()
        else:
            raise AssertionError(f"worker {worker.index}: the probe never finished")
        assert all(e < next(clock) for e, _ in deliveries)

    execute(job, workers, seed=seed)
    assert deliveries, "the probed stage saw no data"
    for event, time in deliveries:
        if time in done_at:
            assert event < done_at[time], f"time {time} reported done at event {done_at[time]}, data came at {event}"
    # Every time that carried data was eventually reported done by someone.
    assert {t for _, t in deliveries} <= set(done_at)

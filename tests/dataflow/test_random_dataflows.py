"""Random dataflow programs on random epoch-tagged input agree, epoch by epoch, with a sequential interpreter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Stream, Worker, execute
from tests.profiles import examples

from .helpers import Events, merge, share

pytestmark = pytest.mark.timeout(120)

MAPS: dict[str, Callable[[int], int]] = {
    "inc": lambda x: x + 1,
    "half": lambda x: x // 2,
    "square_mod": lambda x: x * x % 11,
    "neg": lambda x: -x,
    "minus3": lambda x: x - 3,
}
PREDICATES: dict[str, Callable[[int], bool]] = {
    "odd": lambda x: x % 2 == 1,
    "positive": lambda x: x > 0,
    "small": lambda x: -3 <= x <= 5,
}

Stage = tuple[str, Any]

stage_strategy: st.SearchStrategy[Stage] = st.one_of(
    st.tuples(st.just("map"), st.sampled_from(sorted(MAPS))),
    st.tuples(st.just("filter"), st.sampled_from(sorted(PREDICATES))),
    st.tuples(st.just("dup"), st.none()),
    st.tuples(st.just("exchange"), st.none()),
    st.tuples(st.just("broadcast_own"), st.none()),
    st.tuples(st.just("branch_concat"), st.sampled_from(sorted(PREDICATES))),
    st.tuples(st.just("loop"), st.sampled_from([None, 0, 2, 5])),
    st.tuples(st.just("count_by"), st.none()),
)
programs = st.lists(stage_strategy, min_size=1, max_size=5)
inputs = st.lists(st.tuples(st.integers(0, 4), st.integers(-6, 14)), max_size=30)


def add_stage(stream: Stream[Any], stage: Stage, worker: Worker) -> Stream[Any]:
    """``stage`` added to ``stream`` in the dataflow under test."""
    kind, arg = stage
    if kind == "map":
        return stream.map(MAPS[arg])
    if kind == "filter":
        return stream.filter(PREDICATES[arg])
    if kind == "dup":
        return stream.flat_map(lambda x: (x, x))
    if kind == "exchange":
        return stream.exchange(lambda x: x)
    if kind == "broadcast_own":
        # Every worker gets every record and keeps those it owns: one copy of each survives.
        peers, index = worker.peers, worker.index
        return stream.broadcast().filter(lambda x: x % peers == index)
    if kind == "branch_concat":
        _, rejected = stream.branch(PREDICATES[arg])
        return stream.concat(rejected.map(lambda x: x + 20))
    if kind == "loop":

        def body(s: Stream[Any]) -> Stream[Any]:
            return s.filter(lambda x: x > 0).exchange(lambda x: x).map(lambda x: x - 1)

        return stream.map(lambda x: x % 12).iterate(body, limit=arg)
    if kind == "count_by":
        return stream.count_by().map(lambda kc: kc[0] * 100 + kc[1])
    raise AssertionError(kind)


def interpret(program: list[Stage], values: list[int]) -> Counter[int]:
    """The program run sequentially on one epoch's values."""
    out = list(values)
    for kind, arg in program:
        if kind == "map":
            out = [MAPS[arg](x) for x in out]
        elif kind == "filter":
            out = [x for x in out if PREDICATES[arg](x)]
        elif kind == "dup":
            out = [x for x in out for _ in range(2)]
        elif kind in ("exchange", "broadcast_own"):
            pass
        elif kind == "branch_concat":
            out = out + [x + 20 for x in out if not PREDICATES[arg](x)]
        elif kind == "loop":
            level, produced, iteration = [x % 12 for x in out], [], 0
            while level and (arg is None or iteration <= arg):
                level = [x - 1 for x in level if x > 0]
                produced.extend(level)
                iteration += 1
            out = produced
        elif kind == "count_by":
            out = [k * 100 + c for k, c in Counter(out).items()]
        else:
            raise AssertionError(kind)
    return Counter(out)


def run(
    program: list[Stage], data: list[tuple[int, int]], workers: int, seed: int | None, eager: bool
) -> dict[Any, Counter[Any]]:
    """The program as a dataflow; each worker feeds its share of ``data`` (stepping after each record if ``eager``)."""

    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            for stage in program:
                stream = add_stage(stream, stage, worker)
            return handle, stream.capture()

        handle, captured = worker.dataflow(build)
        for epoch, value in share(worker, data):
            if epoch != handle.time:
                handle.advance_to(epoch)
            handle.send(value)
            if eager:
                worker.step()
        return captured

    return merge(execute(job, workers, seed=seed, check_serialization=True))


@settings(max_examples=examples(40), deadline=None)
@given(
    program=programs,
    data=inputs,
    workers=st.integers(1, 3),
    seed=st.none() | st.integers(0, 10_000),
    eager=st.booleans(),
)
def test_random_programs_match_the_sequential_interpreter(
    program: list[Stage], data: list[tuple[int, int]], workers: int, seed: int | None, eager: bool
) -> None:
    expected: dict[int, Counter[int]] = {}
    for epoch in sorted({e for e, _ in data}):
        result = interpret(program, [v for e, v in data if e == epoch])
        if result:
            expected[epoch] = result
    assert run(program, data, workers, seed, eager) == expected


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_a_long_fixed_program(workers: int) -> None:
    """Every kind of stage at once, on more data than the random examples use."""
    program: list[Stage] = [
        ("dup", None),
        ("exchange", None),
        ("branch_concat", "odd"),
        ("loop", None),
        ("broadcast_own", None),
        ("map", "square_mod"),
        ("count_by", None),
        ("loop", 2),
        ("filter", "positive"),
    ]
    data = [(v % 5, (v * 7) % 23 - 5) for v in range(120)]
    expected = {e: interpret(program, [v for ee, v in data if ee == e]) for e in range(5)}
    assert run(program, data, workers, seed=workers, eager=False) == {e: c for e, c in expected.items() if c}
    assert sum(sum(c.values()) for c in expected.values()) > 50, "the program should not filter everything away"

"""Bytewax 0.21.1's own test cases for the operators a Bytewax user moves over with, reproduced from their inputs
and expected outputs (``pytests/operators/...`` in Bytewax's repository).

Bytewax's datetimes become integer seconds from its ``align_to``; its window ids ``(start - align_to) //
offset`` are computed from our ``(start, end)``. A Bytewax input is a sequence of items taken one at a time;
where a case depends on that order (a watermark, a running join) each item is sent at its own epoch here, which
is what orders records in a dataflow. Where we differ from Bytewax the test says so and checks our answer;
docs/from-bytewax.md lists every difference.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from pytimely.dataflow.operators.clock import EventClock, EventWatermark, SystemClock
from pytimely.dataflow.operators.folds import Fold, Reduce
from pytimely.dataflow.operators.window import DropLate, Session
from pytimely.errors import InvalidArgument
from pytimely.testing import TestingSink, run_dataflow, testing_source

WORKERS = [1, 2]


def run(build: Any, workers: int) -> list[Any]:
    """Every record ``build(scope)`` sends into its sink, in time order then as sorted by ``TestingSink``."""
    sink = TestingSink()
    run_dataflow(lambda scope: sink.attach(build(scope)), workers=workers)
    return [r for _, records in sorted(sink.by_epoch().items()) for r in records]


def one_per_epoch(items: list[Any]) -> list[list[Any]]:
    """Bytewax's items, each at its own epoch (the order Bytewax takes them in)."""
    return [[item] for item in items]


def ids(windows: list[Any], offset: int) -> list[Any]:
    """``(window id, result)`` as Bytewax names windows: starts counted in offsets from ``align_to``."""
    return sorted((start // offset, result) for start, _, _, result in windows)


# -- fold_window (pytests/operators/windowing/test_fold_window.py) -----------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_fold_window_tumbling(workers: int) -> None:
    events = [(0, "login"), (4, "post"), (8, "post"), (16, "post")]

    def count(counts: dict[str, int], event: tuple[int, str]) -> dict[str, int]:
        counts[event[1]] += 1
        return counts

    got = run(
        lambda scope: testing_source(scope, one_per_epoch(events)).tumbling(
            10, time=0, key=lambda _: "ALL", clock=EventClock(0), aggregate=Fold(lambda: defaultdict(int), count)
        ),
        workers,
    )
    assert [(i, dict(d)) for i, d in ids(got, 10)] == [(0, {"login": 1, "post": 2}), (1, {"post": 1})]


SESSION_EVENTS = [(1, "a"), (5, "b"), (11, "c"), (12, "d"), (13, "e"), (14, "f"), (20, "g"), (1, "h")]
"""The last is late: the watermark (no wait) is at 20 when it comes."""


@pytest.mark.parametrize("workers", WORKERS)
def test_fold_window_session(workers: int) -> None:
    late = DropLate()
    got = run(
        lambda scope: testing_source(scope, one_per_epoch(SESSION_EVENTS)).session(
            5, time=0, key=lambda _: "ALL", value=1, clock=EventClock(0), late=late,
            aggregate=Fold(list, lambda acc, v: [*acc, v], lambda a, b: a + b),
        ),
        workers,
    )
    # Bytewax numbers sessions 0, 1, 2; ours are [first, last + 1).
    assert [(s, e, v) for s, e, _, v in got] == [(1, 6, ["a", "b"]), (11, 15, ["c", "d", "e", "f"]), (20, 21, ["g"])]
    assert late.dropped == 1


@pytest.mark.parametrize("workers", WORKERS)
def test_fold_window_sliding(workers: int) -> None:
    events = [(1, "a"), (4, "b"), (8, "c"), (12, "d"), (13, "e"), (14, "f"), (16, "g"), (1, "h")]
    got = run(
        lambda scope: testing_source(scope, one_per_epoch(events)).sliding(
            10, 5, time=0, key=lambda _: "ALL", value=1, clock=EventClock(0),
            aggregate=Fold(list, lambda acc, v: [*acc, v], lambda a, b: a + b),
        ),
        workers,
    )
    # Bytewax also opens the window [-5, 5) (id -1, ["a", "b"]); ours start at 0.
    assert ids(got, 5) == [(0, ["a", "b", "c"]), (1, ["c", "d", "e", "f"]), (2, ["d", "e", "f", "g"]), (3, ["g"])]


# -- collect_window, reduce_window, max_window, min_window ------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_collect_window(workers: int) -> None:
    events = [(0, 1), (8, 3), (4, 2), (13, 5), (12, 4)]  # out of order; the clock waits for ever (delay=10**9)
    got = run(
        lambda scope: testing_source(scope, [events]).tumbling(
            10, time=0, key=lambda _: "ALL", value=1, clock=EventClock(10**9), aggregate="collect"
        ),
        workers,
    )
    assert ids(got, 10) == [(0, [1, 2, 3]), (1, [4, 5])]  # in event-time order, as Bytewax's


USERS = [(0, "a", 1), (4, "a", 9), (8, "a", 3), (12, "a", 10), (13, "a", 4)]


@pytest.mark.parametrize("workers", WORKERS)
def test_reduce_window(workers: int) -> None:
    events = [{"time": t, "user": u, "val": 1} for t, u, _ in USERS]

    def add(acc: dict[str, Any], x: dict[str, Any]) -> dict[str, Any]:
        acc["val"] += x["val"]
        return acc

    got = run(
        lambda scope: testing_source(scope, one_per_epoch(events)).tumbling(
            10, time=lambda e: e["time"], key=lambda e: e["user"], clock=EventClock(0), aggregate=Reduce(add)
        ).map(lambda w: (w[2], (w[0] // 10, w[3]["val"]))),
        workers,
    )
    assert got == [("a", (0, 3)), ("a", (1, 2))]


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize(("how", "expected"), [("max_by", [(0, 4), (1, 12)]), ("min_by", [(0, 0), (1, 13)])])
def test_max_and_min_window_return_the_record(workers: int, how: str, expected: list[Any]) -> None:
    events = [{"time": t, "user": u, "val": v} for t, u, v in USERS]
    got = run(
        lambda scope: testing_source(scope, one_per_epoch(events)).tumbling(
            10, time=lambda e: e["time"], key=lambda e: e["user"], value=lambda e: e["val"], clock=EventClock(0),
            aggregate=how,
        ),
        workers,
    )
    assert [(s // 10, record["time"]) for s, _, _, record in got] == expected
    assert all(record["user"] == "a" for _, _, _, record in got)


@pytest.mark.parametrize("workers", WORKERS)
def test_max_window_on_numpy_columns(workers: int) -> None:
    rows = np.array([(t, 0, v) for t, _, v in USERS], dtype=np.int64)
    got = run(
        lambda scope: testing_source(scope, [rows]).tumbling(
            10, time=0, key=1, value=2, clock=EventClock(10**9), aggregate="max_by"
        ),
        workers,
    )
    assert ids(got, 10) == [(0, (4, 0, 9)), (1, (12, 0, 10))]


# -- the event clock (pytests/operators/windowing/test_event_clock.py) ---------------------------------------


def test_event_clock_watermark() -> None:
    mark = EventWatermark(delay=5, idle=None, minimum=0, now=0.0)
    # "starts at beginning of time": Bytewax's UTC_MIN; ours the scope's minimum, 0 (no event time is earlier).
    assert mark.watermark == 0
    # "is item timestamp minus wait"
    assert not mark.take(7, 0.0) and mark.watermark == 2
    # "advances in batch"
    assert not mark.take(10, 0.0) and mark.watermark == 5
    # "does not reverse in batch"
    assert mark.take(3, 0.0) and mark.watermark == 5
    # "forwards by system time": Bytewax's watermark gains 2 s when 2 s pass without items (to 4); ours is made
    # from the data alone, so the same input in the same order gives the same answer: it stays at 2.
    mark = EventWatermark(delay=5, idle=None, minimum=0, now=0.0)
    mark.take(7, 0.0)
    assert mark.quiet(2.0) is None and mark.watermark == 2
    # "does not reverse, advancing item slower than system time gap": ours gains from the item, to 3.
    assert not mark.take(8, 2.0) and mark.watermark == 3
    # With an idle timeout, quiet time moves ours too, past the highest event time seen.
    mark = EventWatermark(delay=5, idle=2.0, minimum=0, now=0.0)
    mark.take(7, 0.0)
    assert mark.quiet(2.0) is None and mark.watermark == 8
    # "allows max wait": a delay longer than every event time keeps the watermark at the start.
    mark = EventWatermark(delay=10**18, idle=None, minimum=0, now=0.0)
    assert not mark.take(7, 0.0) and mark.watermark == 0


@pytest.mark.parametrize("workers", WORKERS)
def test_event_clock_watermark_is_end_of_time_on_eof(workers: int) -> None:
    # "watermark is end of time on EOF": every window closes when the input ends, however long the delay.
    got = run(
        lambda scope: testing_source(scope, [[(7, "k")]]).tumbling(5, time=0, key=1, clock=EventClock(10**9)),
        workers,
    )
    assert got == [(5, 10, "k", 1)]


def test_session_with_system_clock() -> None:
    got = run(
        lambda scope: testing_source(scope, [[("ALL", i) for i in range(10)]]).session(
            10, key=0, value=1, clock=SystemClock(), aggregate=Fold(list, lambda a, v: [*a, v], lambda a, b: a + b)
        ),
        1,
    )
    assert [sorted(r) for _, _, _, r in got] == [list(range(10))]


# -- join (pytests/operators/test_join.py) and join_window ---------------------------------------------------


def join(left: Any, right: Any, workers: int, **options: Any) -> list[Any]:
    """``left.join(right)`` of ``("ALL", value)`` items, each side a testing source; just the ``(l, r)`` pairs."""
    def build(scope: Any) -> Any:
        a = testing_source(scope, left).map(lambda v: ("ALL", v))
        b = testing_source(scope, right).map(lambda v: ("ALL", v))
        return a.join(b, **options).map(lambda kv: kv[1])

    return run(build, workers)


@pytest.mark.parametrize("workers", WORKERS)
def test_join_last_complete_is_a_join_per_timestamp(workers: int) -> None:
    assert join([[1]], [[2]], workers) == [(1, 2)]


@pytest.mark.parametrize("workers", WORKERS)
def test_join_last_running(workers: int) -> None:
    # Bytewax takes left 1, then right 2, then right 3; here they are epochs 0, 1 and 2.
    got = join({0: [1]}, {1: [2], 2: [3]}, workers, over="latest", how="outer")
    assert got == [(1, None), (1, 2), (1, 3)]


@pytest.mark.parametrize("workers", WORKERS)
def test_join_last_final_is_the_last_running_result(workers: int) -> None:
    got = join({0: [1]}, {1: [2], 2: [3]}, workers, over="latest")
    assert got[-1] == (1, 3)


@pytest.mark.parametrize("workers", WORKERS)
def test_join_first_final_is_a_join_of_first_finals(workers: int) -> None:
    def build(scope: Any) -> Any:
        a = testing_source(scope, [[1]]).map(lambda v: ("ALL", v)).first_final()
        b = testing_source(scope, [[2], [3]]).map(lambda v: ("ALL", v)).first_final()
        return a.join(b, over="latest").map(lambda kv: kv[1])

    assert run(build, workers) == [(1, 2)]


@pytest.mark.parametrize("workers", WORKERS)
def test_join_product_final(workers: int) -> None:
    assert join([[1, 2]], [[3, 4]], workers) == [(1, 3), (1, 4), (2, 3), (2, 4)]


@pytest.mark.parametrize("workers", WORKERS)
def test_join_window_product_final(workers: int) -> None:
    # pytests/operators/windowing/test_join_window.py: session windows of 10 s, the clock waiting for ever.
    got = join(
        [[(0, 1), (1, 2)]], [[(1, 3), (2, 4)]], workers, over=Session(10), time=0, clock=EventClock(10**9)
    )
    assert [(a[1], b[1]) for a, b in got] == [(1, 3), (1, 4), (2, 3), (2, 4)]


# -- count_final, fold_final, reduce_final, collect, stateful_map --------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_count_final(workers: int) -> None:
    got = run(lambda scope: testing_source(scope, [["a", "a", "b", "c", "b", "a"]]).count_final(), workers)
    assert got == [("a", 3), ("b", 2), ("c", 1)]


@pytest.mark.parametrize("workers", WORKERS)
def test_fold_final_and_reduce_final_keep_the_max(workers: int) -> None:
    def build(scope: Any) -> Any:
        s = testing_source(scope, [[1, 4, 2, 9, 4, 3]]).map(lambda x: ("ALL", x))
        return s.fold_final(lambda: 0, max).concat(s.reduce_final(max))

    assert run(build, workers) == [("ALL", 9), ("ALL", 9)]


def test_collect_max_size() -> None:
    got = run(lambda scope: testing_source(scope, [[("ALL", i) for i in range(10)]]).collect(max_size=3, timeout=10),
              1)
    assert got == [("ALL", [0, 1, 2]), ("ALL", [3, 4, 5]), ("ALL", [6, 7, 8]), ("ALL", [9])]


@pytest.mark.parametrize("workers", WORKERS)
def test_stateful_map_running_mean(workers: int) -> None:
    def running_mean(last_3: list[int] | None, new: int) -> tuple[list[int], float]:
        if last_3 is None:
            last_3 = []
        last_3.append(new)
        if len(last_3) > 3:
            last_3 = last_3[:-3]
        return last_3, sum(last_3) / len(last_3)

    got = run(
        lambda scope: testing_source(scope, one_per_epoch([2, 5, 8, 1, 3])).map(lambda x: ("ALL", x))
        .stateful_map(running_mean),
        workers,
    )
    assert got == [("ALL", 2.0), ("ALL", 3.5), ("ALL", 5.0), ("ALL", 2.0), ("ALL", 2.5)]


def test_stateful_map_raises_on_non_tuple() -> None:
    with pytest.raises(InvalidArgument, match="must return a"):
        run(lambda scope: testing_source(scope, [[1]]).map(lambda x: ("ALL", x)).stateful_map(lambda s, v: v), 1)

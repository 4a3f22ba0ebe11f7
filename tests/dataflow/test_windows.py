"""Windows over event time against a pure-Python reference: random event times, late records, 1-4 workers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Scope, Worker, execute
from pytimely.dataflow.operators.window import DropLate, Session, SideOutput, Sliding, Tumbling
from pytimely.errors import InvalidArgument
from tests.profiles import examples

Kind = Tumbling | Sliding | Session
Event = tuple[int, int, int, int]
"""``(epoch, event time, key, value)``: a record sent at ``epoch``; late when its event time is earlier."""


def reference(kind: Kind, events: list[tuple[int, int, int]], aggregate: str = "count") -> list[tuple[Any, ...]]:
    """The windows of ``(event time, key, value)`` events, by the definitions alone."""
    aggregates: dict[str, Callable[[list[int]], int]] = {"count": len, "sum": sum, "min": min, "max": max}
    combine = aggregates[aggregate]
    groups: dict[tuple[int, int, Any], list[int]] = defaultdict(list)
    if isinstance(kind, Session):
        by_key: dict[Any, list[tuple[int, int]]] = defaultdict(list)
        for x, k, v in events:
            by_key[k].append((x, v))
        for k, items in by_key.items():
            items.sort()
            run = [items[0]]
            for item in items[1:]:
                if item[0] - run[-1][0] > kind.gap:
                    groups[run[0][0], run[-1][0] + 1, k] = [v for _, v in run]
                    run = []
                run.append(item)
            groups[run[0][0], run[-1][0] + 1, k] = [v for _, v in run]
    else:
        size = kind.size
        step = kind.size if isinstance(kind, Tumbling) else kind.step
        for x, k, v in events:
            for j in range(x // step + 1):
                if j * step <= x < j * step + size:
                    groups[j * step, j * step + size, k].append(v)
    return sorted((s, e, k, combine(vs)) for (s, e, k), vs in groups.items())


def run_windows(
    kind: Kind,
    events: list[Event],
    workers: int,
    *,
    form: str = "tuples",
    side: bool = False,
    aggregate: str = "count",
    steps: int = 3,
) -> tuple[list[tuple[int, tuple[Any, ...]]], list[Any], int]:
    """``((emit time, window) pairs, late records, late count)`` from running ``kind`` over ``events``."""

    def job(worker: Worker) -> tuple[Any, Any, DropLate | SideOutput]:
        policy: DropLate | SideOutput = SideOutput() if side else DropLate()

        def build(scope: Scope[int]) -> tuple[Any, Any, Any]:
            handle, stream = scope.new_input(name="events")
            common: dict[str, Any] = {"time": 0, "key": 1, "value": 2, "aggregate": aggregate, "late": policy}
            if isinstance(kind, Tumbling):
                windows = stream.tumbling(kind.size, **common)
            elif isinstance(kind, Sliding):
                windows = stream.sliding(kind.size, kind.step, **common)
            else:
                windows = stream.session(kind.gap, **common)
            late = policy.stream.capture() if isinstance(policy, SideOutput) and policy.stream else None
            return handle, windows.capture(), late

        handle, captured, late = worker.dataflow(build)
        mine = sorted(events[worker.index :: worker.peers], key=lambda e: e[0])
        i = 0
        while i < len(mine):
            epoch = mine[i][0]
            handle.advance_to(epoch)
            for _ in range(steps):  # the frontier reaches ``epoch`` before its records do
                worker.step()
            batch = []
            while i < len(mine) and mine[i][0] == epoch:
                batch.append(mine[i][1:])
                i += 1
            # Two batches per epoch: windows must merge what arrives in pieces.
            half = len(batch) // 2
            for part in (batch[:half], batch[half:]):
                if part:
                    handle.send_batch(FORMS[form](part))
            for _ in range(steps):  # let windows close while later epochs are still to come
                worker.step()
        handle.close()
        return captured, late, policy

    results = execute(job, workers)
    windows = [(t, tuple(w)) for captured, _, _ in results for t, batch in captured for w in batch]
    late = [tuple(r) for _, cap, _ in results if cap is not None for _, batch in cap for r in _records(batch)]
    dropped = sum(p.dropped for _, _, p in results if isinstance(p, DropLate))
    return windows, late, dropped


FORMS: dict[str, Callable[[list[Any]], Any]] = {
    "tuples": lambda part: part,  # int tuples: turned into columns by the operator
    "lists": lambda part: [list(r) for r in part],  # not tuples: record by record
    "numpy": lambda part: np.array(part, dtype=np.int64),
}
"""How a worker's records are batched: each form takes a different path through the operator."""


def _records(batch: Any) -> list[Any]:
    return batch.tolist() if hasattr(batch, "tolist") else list(batch)


def kinds() -> st.SearchStrategy[Kind]:
    sizes = st.integers(1, 12)
    return st.one_of(
        sizes.map(Tumbling),
        st.tuples(sizes, sizes).map(lambda p: Sliding(p[0], p[1])),
        sizes.map(Session),
    )


# Epochs run ahead of event times now and then, so some records are late and most arrive out of order.
events_strategy = st.lists(
    st.tuples(
        st.integers(0, 30),
        st.integers(0, 40),
        # Mostly a few small keys; sometimes keys far apart, so grouping cannot use a dense grid of cells.
        st.one_of(st.integers(-3, 4), st.integers(-(10**15), 10**15)),
        st.integers(-50, 50),
    ),
    max_size=60,
)


def _check(kind: Kind, events: list[Event], windows: list[tuple[int, tuple[Any, ...]]], aggregate: str) -> None:
    on_time = [(x, k, v) for t, x, k, v in events if x >= t]
    assert sorted(w for _, w in windows) == reference(kind, on_time, aggregate)
    for time, (_, end, _, _) in windows:
        # Emitted at the window's last instant; a session once it is known closed (the gap after its last event).
        assert time == end - 1 + (kind.gap if isinstance(kind, Session) else 0)


@settings(max_examples=examples(40), deadline=None)
@given(kind=kinds(), events=events_strategy, workers=st.integers(1, 4), form=st.sampled_from(sorted(FORMS)))
def test_windows_match_the_reference_and_late_records_are_counted(
    kind: Kind, events: list[Event], workers: int, form: str
) -> None:
    windows, _, dropped = run_windows(kind, events, workers, form=form)
    _check(kind, events, windows, "count")
    assert dropped == sum(1 for t, x, _, _ in events if x < t)


@settings(max_examples=examples(25), deadline=None)
@given(
    kind=kinds(),
    events=events_strategy,
    workers=st.integers(1, 4),
    form=st.sampled_from(sorted(FORMS)),
    aggregate=st.sampled_from(["sum", "min", "max"]),
)
def test_aggregates_and_the_side_output_of_late_records(
    kind: Kind, events: list[Event], workers: int, form: str, aggregate: str
) -> None:
    windows, late, dropped = run_windows(kind, events, workers, form=form, side=True, aggregate=aggregate)
    _check(kind, events, windows, aggregate)
    assert dropped == 0
    assert sorted(late) == sorted((x, k, v) for t, x, k, v in events if x < t)


@pytest.mark.parametrize("kind", [Tumbling(5), Sliding(7, 3), Session(4)])
def test_numpy_batches_give_the_same_windows_as_records(kind: Kind) -> None:
    rng = np.random.default_rng(3)
    events = [(0, int(x), int(k), 1) for x, k in zip(rng.integers(0, 500, 3000), rng.integers(0, 9, 3000), strict=True)]
    as_lists, _, _ = run_windows(kind, events, 3, form="lists")
    as_numpy, _, _ = run_windows(kind, events, 3, form="numpy")
    assert sorted(as_numpy) == sorted(as_lists)
    assert len(as_lists) > 50


def test_a_window_is_emitted_as_soon_as_the_frontier_passes_it() -> None:
    def job(worker: Worker) -> list[list[Any]]:
        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input()
            return handle, stream.tumbling(10, time=0, key=1).capture()

        handle, captured = worker.dataflow(build)
        seen = []
        handle.send_batch([(3, "a"), (12, "a"), (9, "b")])
        handle.advance_to(9)  # [0, 10) may still get an event at 9
        for _ in range(20):
            worker.step()
        seen.append([w for _, b in captured for w in b])
        handle.advance_to(10)  # now no time before 10 can come: [0, 10) closes, [10, 20) stays open
        worker.step_while(lambda: not captured, timeout=60)
        seen.append(sorted(w for _, b in captured for w in b))
        handle.close()
        return seen

    (before, after) = execute(job, 1)[0]
    assert before == []
    assert after == [(0, 10, "a", 1), (0, 10, "b", 1)]


def test_windows_over_epochs_use_the_timestamp() -> None:
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input()
            return handle, stream.tumbling(2).capture()

        handle, captured = worker.dataflow(build)
        for epoch, words in enumerate([["a", "b"], ["a"], ["b", "b"], []]):
            handle.advance_to(epoch)
            if worker.index == 0:
                handle.send_batch(words)
        handle.close()
        return captured

    results = execute(job, 2)
    assert sorted(w for c in results for _, b in c for w in b) == [(0, 2, "a", 2), (0, 2, "b", 1), (2, 4, "b", 2)]


def test_arrow_batches_are_windowed_by_column() -> None:
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input()
            return handle, stream.sliding(4, 2, time=0, key=1, value=2, aggregate="max").capture()

        handle, captured = worker.dataflow(build)
        if worker.index == 0:
            handle.send_batch(pa.record_batch({"t": [1, 3, 5, 2], "k": [7, 7, 7, 8], "v": [10, 30, 20, 5]}))
        handle.close()
        return captured

    got = sorted(w for c in execute(job, 2) for _, b in c for w in b)
    assert got == [(0, 4, 7, 30), (0, 4, 8, 5), (2, 6, 7, 30), (2, 6, 8, 5), (4, 8, 7, 20)]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.tumbling(0), "size must be a positive int"),
        (lambda s: s.sliding(5, 0), "step must be a positive int"),
        (lambda s: s.session(-1), "gap must be a positive int"),
        (lambda s: s.tumbling(3, aggregate="mean"), "aggregate must be one of"),
        (lambda s: s.tumbling(3, key=2.5), "key must be a function"),
        (lambda s: s.tumbling(3, late="drop"), "late must be"),
    ],
)
def test_bad_window_arguments_are_refused_by_name(call: Any, match: str) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            _, stream = scope.new_input()
            return call(stream)

        worker.dataflow(build)

    with pytest.raises(InvalidArgument, match=match):
        execute(job, 1)


def test_a_session_closes_once_the_frontier_passes_its_last_event_plus_the_gap() -> None:
    def job(worker: Worker) -> list[list[Any]]:
        def build(scope: Scope[int]) -> tuple[Any, Any]:
            handle, stream = scope.new_input()
            return handle, stream.session(3, time=0, key=1).capture()

        handle, captured = worker.dataflow(build)
        seen = []
        handle.send_batch(np.array([[3, 1], [1, 1], [20, 1]]))
        handle.advance_to(6)  # an event at 6 could still extend the session [1, 3]
        for _ in range(20):
            worker.step()
        seen.append([w for _, b in captured for w in b])
        handle.advance_to(7)
        worker.step_while(lambda: not captured, timeout=60)
        seen.append([(t, w) for t, b in captured for w in b])
        handle.close()
        return seen

    (before, after) = execute(job, 1)[0]
    assert before == []
    assert after == [(6, (1, 4, 1, 2))]  # sent at last + gap, the time it is known closed


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("kind", [Tumbling(10), Sliding(10, 5), Session(4)])
def test_an_event_at_the_last_instant_the_frontier_allows_still_joins_its_window(kind: Kind, form: str) -> None:
    events = [(0, 3, 1, 1), (9, 9, 1, 1), (9, 12, 1, 1)]  # the second is sent once the frontier is at 9
    windows, _, dropped = run_windows(kind, events, 1, form=form, steps=20)
    _check(kind, events, windows, "count")
    assert dropped == 0

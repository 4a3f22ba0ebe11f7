"""Window folds, clocks and joins against pure-Python references: random out-of-order input, 1-4 workers,
records as tuples, lists and numpy rows (Arrow batches: ``tests/dataflow/batch_matrix.py``)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Scope, Worker, execute
from pytimely.dataflow.operators.clock import EventClock, EventWatermark, SystemClock
from pytimely.dataflow.operators.folds import Fold, Reduce
from pytimely.dataflow.operators.join import Interval
from pytimely.dataflow.operators.window import DropLate, Session, SideOutput, Sliding, Tumbling
from pytimely.errors import InputFormatError, InvalidArgument
from tests.dataflow.test_windows import FORMS, Event, Kind, events_strategy, kinds, run_windows
from tests.profiles import examples


def groups(kind: Kind, events: list[tuple[int, int, int]]) -> dict[tuple[int, int, int], list[tuple[int, int, int]]]:
    """``(start, end, key) -> records (x, k, v)`` of every window, by the definitions alone."""
    out: dict[tuple[int, int, int], list[tuple[int, int, int]]] = defaultdict(list)
    if isinstance(kind, Session):
        by_key: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
        for e in events:
            by_key[e[1]].append(e)
        for k, items in by_key.items():
            items.sort()
            run = [items[0]]
            for item in items[1:]:
                if item[0] - run[-1][0] > kind.gap:
                    out[run[0][0], run[-1][0] + 1, k] = run
                    run = []
                run.append(item)
            out[run[0][0], run[-1][0] + 1, k] = run
        return out
    size = kind.size
    step = kind.size if isinstance(kind, Tumbling) else kind.step
    for x, k, v in events:
        for j in range(x // step + 1):
            if j * step <= x < j * step + size:
                out[j * step, j * step + size, k].append((x, k, v))
    return out


AGGREGATES: dict[str, tuple[Any, Callable[[list[Any]], Any], Callable[[Any], Any]]] = {
    # name: (aggregate, reference over a window's records, normal form of one result)
    "fold sum": (Fold(lambda: 0, lambda acc, v: acc + v, lambda a, b: a + b), lambda rs: sum(r[2] for r in rs), repr),
    "fold list": (
        Fold(list, lambda acc, v: [*acc, v], lambda a, b: a + b),
        lambda rs: sorted(r[2] for r in rs),
        sorted,
    ),
    "reduce max": (Reduce(max), lambda rs: max(r[2] for r in rs), repr),
    "collect": ("collect", lambda rs: sorted(r[2] for r in rs), sorted),
    "max_by": ("max_by", lambda rs: max(r[2] for r in rs), lambda r: r[2]),
    "min_by": ("min_by", lambda rs: min(r[2] for r in rs), lambda r: r[2]),
}


def _normal(aggregate: str, result: Any) -> Any:
    normal = AGGREGATES[aggregate][2]
    if aggregate in ("max_by", "min_by"):
        return normal(tuple(result))
    if aggregate in ("fold list", "collect"):
        return normal(list(result))
    return result


def _check_windows(
    kind: Kind, aggregate: str, on_time: list[tuple[int, int, int]], windows: list[tuple[int, tuple[Any, ...]]]
) -> None:
    reference = AGGREGATES[aggregate][1]
    expected = {w: reference(rs) for w, rs in groups(kind, on_time).items()}
    got = {(s, e, k): _normal(aggregate, r) for _, (s, e, k, r) in windows}
    assert len(got) == len(windows), "a window was emitted twice"
    assert got == expected
    for time, (_, end, _, _) in windows:
        assert time == end - 1 + (kind.gap if isinstance(kind, Session) else 0)
    if aggregate in ("max_by", "min_by"):
        records = {w: set(rs) for w, rs in groups(kind, on_time).items()}
        for _, (s, e, k, r) in windows:
            assert tuple(r) in records[s, e, k]  # a record of the window, not a made-up one


@settings(max_examples=examples(30), deadline=None)
@given(
    kind=kinds(),
    events=events_strategy,
    workers=st.integers(1, 4),
    form=st.sampled_from(sorted(FORMS)),
    aggregate=st.sampled_from(sorted(AGGREGATES)),
)
def test_window_folds_match_the_reference(
    kind: Kind, events: list[Event], workers: int, form: str, aggregate: str
) -> None:
    windows, late, dropped = run_windows(kind, events, workers, form=form, side=True,
                                         aggregate=AGGREGATES[aggregate][0])
    _check_windows(kind, aggregate, [(x, k, v) for t, x, k, v in events if x >= t], windows)
    assert dropped == 0
    assert sorted(late) == sorted((x, k, v) for t, x, k, v in events if x < t)


# -- the event clock ---------------------------------------------------------------------------------------


def clock_reference(per_worker: list[list[tuple[int, int, int]]], delay: int) -> tuple[list[Any], list[Any]]:
    """``(on time, late)`` records: each worker's clock takes its records in order (module doc of clock.py)."""
    on_time, late = [], []
    for records in per_worker:
        watermark, highest = 0, None
        for r in records:
            (late if r[0] < watermark else on_time).append(r)
            highest = r[0] if highest is None else max(highest, r[0])
            watermark = max(watermark, highest - delay)
    return on_time, late


def run_clocked(
    kind: Kind, events: list[tuple[int, int, int]], workers: int, delay: int, aggregate: Any, form: str
) -> tuple[list[Any], list[Any], list[list[tuple[int, int, int]]]]:
    """Windows and late records of ``events`` sent in order, each worker its share, through an event clock."""

    def job(worker: Worker) -> tuple[Any, Any]:
        late = SideOutput()

        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            common: dict[str, Any] = {"time": 0, "key": 1, "value": 2, "aggregate": aggregate, "late": late}
            clock = EventClock(delay)
            if isinstance(kind, Tumbling):
                windows = stream.tumbling(kind.size, clock=clock, **common)
            elif isinstance(kind, Sliding):
                windows = stream.sliding(kind.size, kind.step, clock=clock, **common)
            else:
                windows = stream.session(kind.gap, clock=clock, **common)
            assert late.stream is not None
            return handle, windows.capture(), late.stream.capture()

        handle, captured, lost = worker.dataflow(build)
        mine = events[worker.index :: worker.peers]
        for start in range(0, len(mine), 3):  # small batches, steps between them: windows close as the data goes
            handle.send_batch(FORMS[form](mine[start : start + 3]))
            worker.step()
            worker.step()
        handle.close()
        return captured, lost

    results = execute(job, workers)
    windows = [(t, tuple(w)) for captured, _ in results for t, batch in captured for w in batch]
    late = [tuple(r) for _, lost in results for _, batch in lost for r in (batch.tolist() if hasattr(batch, "tolist")
                                                                           else batch)]
    shares = [events[i::workers] for i in range(workers)]
    return windows, late, shares


ordered_events = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 3), st.integers(-20, 20)), max_size=50
)


@settings(max_examples=examples(30), deadline=None)
@given(
    kind=kinds(),
    events=ordered_events,
    workers=st.integers(1, 4),
    delay=st.integers(0, 15),
    form=st.sampled_from(sorted(FORMS)),
    aggregate=st.sampled_from(["count", "sum", "fold list", "max_by"]),
)
def test_the_event_clock_matches_the_reference_on_any_worker_count(
    kind: Kind, events: list[tuple[int, int, int]], workers: int, delay: int, form: str, aggregate: str
) -> None:
    spec = AGGREGATES[aggregate][0] if aggregate in AGGREGATES else aggregate
    windows, late, shares = run_clocked(kind, events, workers, delay, spec, form)
    on_time, expected_late = clock_reference(shares, delay)
    assert sorted(late) == sorted(expected_late)
    if aggregate in AGGREGATES:
        _check_windows(kind, aggregate, on_time, windows)
    else:
        combine = len if aggregate == "count" else (lambda rs: sum(r[2] for r in rs))
        expected = {w: combine(rs) for w, rs in groups(kind, on_time).items()}
        assert {(s, e, k): r for _, (s, e, k, r) in windows} == expected


def test_event_watermark_is_the_highest_time_less_the_delay_and_never_goes_back() -> None:
    # Bytewax's EventClock cases (pytests/operators/windowing/test_event_clock.py), in integer seconds.
    mark = EventWatermark(delay=5, idle=None, minimum=0, now=0.0)
    assert mark.watermark == 0  # Bytewax starts at the beginning of time; ours at the scope's minimum
    assert not mark.take(7, 0.0) and mark.watermark == 2  # "is item timestamp minus wait"
    assert not mark.take(10, 0.0) and mark.watermark == 5  # "advances in batch"
    assert mark.take(3, 0.0) and mark.watermark == 5  # "does not reverse in batch"; 3 < 5 is late
    mark = EventWatermark(delay=5, idle=None, minimum=0, now=0.0)
    mark.take(7, 0.0)
    assert mark.quiet(2.0) is None and mark.watermark == 2  # Bytewax moves to 4 with the system time; ours waits
    late = mark.late(np.array([8, 1, 12, 6], dtype=np.int64), 3.0)
    assert late.tolist() == [False, True, False, True] and mark.watermark == 7  # 6 came after 12


def test_an_idle_clock_moves_past_the_highest_reported_time() -> None:
    mark = EventWatermark(delay=5, idle=2.0, minimum=0, now=0.0)
    mark.take(7, 0.0)
    assert mark.quiet(1.5) == pytest.approx(0.5) and mark.watermark == 2
    mark.report(30)  # another worker has seen 30
    assert mark.quiet(2.0) is None and mark.watermark == 31
    assert mark.take(20, 2.5)  # judged against the moved watermark


def test_an_idle_timeout_closes_windows_while_the_input_stays_open() -> None:
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            windows = stream.tumbling(10, time=0, key=1, clock=EventClock(delay=100, idle=0.2))
            return handle, windows.exchange(lambda _: 0).capture()

        handle, captured = worker.dataflow(build)
        if worker.index == 1:
            return None  # never gets a record: without idle it would hold every window open
        handle.send_batch([(3, "a"), (12, "a"), (15, "b")])
        # Both clocks go quiet: the watermark moves past 15, closing [0, 10) while the input is still open.
        worker.step_while(lambda: not captured, timeout=60)
        before = [w for _, b in captured for w in b]
        handle.close()
        worker.step_while(lambda: len(captured) < 3, timeout=60)
        return before, sorted(w for _, b in captured for w in b)

    before, after = execute(job, 2)[0]
    assert before == [(0, 10, "a", 1)]
    assert after == [(0, 10, "a", 1), (10, 20, "a", 1), (10, 20, "b", 1)]


def test_a_system_clock_stamps_records_with_the_time_they_arrive() -> None:
    ticks = iter(range(1000, 10**6, 7))
    frozen = [0.0]

    def now() -> float:
        frozen[0] = float(next(ticks))
        return frozen[0]

    def job(worker: Worker) -> list[Any]:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.tumbling(100, key=0, clock=SystemClock(unit=1.0, now=now)).capture()

        handle, captured = worker.dataflow(build)
        handle.send_batch([("a",), ("b",), ("a",)])
        handle.close()
        return captured

    (captured,) = execute(job, 1)
    windows = [w for _, b in captured for w in b]
    assert sorted(k[0] for _, _, k, _ in windows for _ in range(1)) == ["a", "b"]
    assert all(s >= 1000 and e - s == 100 for s, e, _, _ in windows)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.sliding(4, 2, time=0, aggregate=Fold(list, lambda a, v: a)), "sliding windows needs merge"),
        (lambda s: s.session(4, time=0, aggregate=Fold(list, lambda a, v: a)), "session windows needs merge"),
        (lambda s: s.tumbling(3, time=0, clock=EventClock(delay=-1)), "delay must be an int >= 0"),
        (lambda s: s.tumbling(3, time=0, clock=EventClock(idle=0)), "idle must be seconds > 0"),
        (lambda s: s.tumbling(3, clock=EventClock()), "give time="),
        (lambda s: s.tumbling(3, time=0, clock=SystemClock()), "leave time= out"),
        (lambda s: s.tumbling(3, time=0, clock="event"), "clock must be an EventClock"),
        (lambda s: s.tumbling(3, time=0, aggregate="median"), "aggregate must be one of"),
        (lambda s: s.join(s, over=Interval(3, 1), time=0), "lower <= upper"),
        (lambda s: s.join(s, how="right"), "how must be"),
        (lambda s: s.join(s, over="forever"), "over must be"),
        (lambda s: s.join(s, time=0), "belong to joins over windows"),
        (lambda s: s.collect(max_size=0), "max_size must be a positive int"),
        (lambda s: s.collect(keyed=False, timeout=1.0), "not with keyed=False"),
        (lambda s: s.fold_final(0, max), "fold_final takes functions"),
    ],
)
def test_bad_arguments_are_refused_naming_the_operator_before_records_flow(call: Any, match: str) -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            _, stream = scope.new_input()
            return call(stream)

        worker.dataflow(build)

    with pytest.raises(InvalidArgument, match=match):
        execute(job, 1)


def test_float_event_times_are_refused_by_the_clock_naming_the_column() -> None:
    from pytimely.errors import ColumnError

    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.tumbling(3, time="t", key="k", clock=EventClock(1), name="per minute")
            return handle

        handle = worker.dataflow(build)
        handle.send_batch(pa.record_batch({"t": [1.5], "k": [1]}))

    with pytest.raises(ColumnError, match=r"operator 'per minute\.clock'.*event times must be integers.*float64"):
        execute(job, 1)


# -- joins -------------------------------------------------------------------------------------------------

Side = list[tuple[int, int, tuple[int, int]]]
"""``(epoch, key, (event time, value))`` per record of one side."""

side_strategy = st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 3), st.tuples(st.integers(0, 30), st.integers(-9, 9))), max_size=25
)


def run_join(left: Side, right: Side, workers: int, **options: Any) -> tuple[Counter[Any], list[Any]]:
    """``(time, record)`` multiset of ``left.join(right, **options)``; each worker sends its share by epoch."""

    def job(worker: Worker) -> tuple[Any, Any]:
        late = DropLate() if "over" in options and options["over"] not in ("time", "latest") else None

        def build(scope: Scope[int]) -> Any:
            h1, s1 = scope.new_input(name="left")
            h2, s2 = scope.new_input(name="right")
            extra = {"late": late} if late is not None else {}
            return h1, h2, s1.join(s2, **options, **extra).capture()

        h1, h2, captured = worker.dataflow(build)
        for handle, records in ((h1, left), (h2, right)):
            for epoch, k, v in sorted(records[worker.index :: worker.peers], key=lambda r: r[0]):
                handle.advance_to(epoch)
                handle.send((k, v))
        return captured, late

    results = execute(job, workers)
    dropped = [p.dropped for _, p in results if p is not None]
    return Counter((t, r) for captured, _ in results for t, b in captured for r in b), dropped


def _lonely(how: str, k: Any, ls: list[Any], rs: list[Any]) -> list[Any]:
    if ls and rs:
        return [(k, (a, b)) for a in ls for b in rs]
    if ls and how != "inner":
        return [(k, (a, None)) for a in ls]
    if rs and how == "outer":
        return [(k, (None, b)) for b in rs]
    return []


@settings(max_examples=examples(25), deadline=None)
@given(left=side_strategy, right=side_strategy, workers=st.integers(1, 4),
       how=st.sampled_from(["inner", "left", "outer"]))
def test_joins_per_timestamp_match_the_reference(left: Side, right: Side, workers: int, how: str) -> None:
    got, _ = run_join(left, right, workers, how=how)
    expected: Counter[Any] = Counter()
    for t in {e for e, _, _ in left + right}:
        for k in {k for e, k, _ in left + right if e == t}:
            ls = [v for e, kk, v in left if e == t and kk == k]
            rs = [v for e, kk, v in right if e == t and kk == k]
            expected.update((t, r) for r in _lonely(how, k, ls, rs))
    assert got == expected


@settings(max_examples=examples(25), deadline=None)
@given(left=side_strategy, right=side_strategy, workers=st.integers(1, 4),
       how=st.sampled_from(["inner", "left", "outer"]))
def test_the_running_join_matches_the_reference(left: Side, right: Side, workers: int, how: str) -> None:
    # One value per key and epoch and side, so "latest" does not depend on arrival order within a time.
    left = list({(e, k): (e, k, v) for e, k, v in left}.values())
    right = list({(e, k): (e, k, v) for e, k, v in right}.values())
    got, _ = run_join(left, right, workers, how=how, over="latest")
    expected: Counter[Any] = Counter()
    latest: dict[int, list[Any]] = defaultdict(lambda: [None, None])
    for t in sorted({e for e, _, _ in left + right}):
        changed = set()
        for side, records in enumerate((left, right)):
            for e, k, v in records:
                if e == t:
                    latest[k][side] = v
                    changed.add(k)
        for k in changed:
            lv, rv = latest[k]
            if (how == "outer") or (how == "left" and lv is not None) or (lv is not None and rv is not None):
                expected[t, (k, (lv, rv))] += 1
    assert got == expected


@settings(max_examples=examples(25), deadline=None)
@given(left=side_strategy, right=side_strategy, workers=st.integers(1, 4), kind=kinds(),
       how=st.sampled_from(["inner", "left", "outer"]))
def test_window_joins_match_the_reference(left: Side, right: Side, workers: int, kind: Kind, how: str) -> None:
    got, _ = run_join(left, right, workers, how=how, over=kind, time=0)
    on_time = [(v[0], k, (0, v)) for e, k, v in left if v[0] >= e] + [
        (v[0], k, (1, v)) for e, k, v in right if v[0] >= e
    ]
    expected: Counter[Any] = Counter()
    for (_, end, k), records in groups(kind, on_time).items():  # type: ignore[arg-type]
        ls = [v for _, _, (side, v) in records if side == 0]
        rs = [v for _, _, (side, v) in records if side == 1]
        when = end - 1 if not isinstance(kind, Session) else max(r[0] for r in records) + kind.gap
        expected.update((when, r) for r in _lonely(how, k, ls, rs))
    assert got == expected


@settings(max_examples=examples(25), deadline=None)
@given(left=side_strategy, right=side_strategy, workers=st.integers(1, 4),
       bounds=st.tuples(st.integers(-6, 6), st.integers(0, 8)), how=st.sampled_from(["inner", "left", "outer"]))
def test_interval_joins_match_the_reference(
    left: Side, right: Side, workers: int, bounds: tuple[int, int], how: str
) -> None:
    lower, upper = bounds[0], bounds[0] + bounds[1]
    got, dropped = run_join(left, right, workers, how=how, over=Interval(lower, upper), time=0)
    ls = [(k, v) for e, k, v in left if v[0] >= e]
    rs = [(k, v) for e, k, v in right if v[0] >= e]
    expected: Counter[Any] = Counter()
    for k, a in ls:
        for kk, b in rs:
            if k == kk and a[0] + lower <= b[0] <= a[0] + upper:
                expected[k, (a, b)] += 1
    if how != "inner":
        expected.update((k, (a, None)) for k, a in ls if not any(
            kk == k and a[0] + lower <= b[0] <= a[0] + upper for kk, b in rs))
    if how == "outer":
        expected.update((k, (None, b)) for k, b in rs if not any(
            kk == k and a[0] + lower <= b[0] <= a[0] + upper for kk, a in ls))
    assert Counter(r for (_, r), n in got.items() for _ in range(n)) == expected
    assert sum(dropped) == sum(1 for e, _, v in left + right if v[0] < e)
    # A value without a partner goes out at the first time it is known to have none: its deadline, or its own
    # timestamp if that is later.
    lonely = Counter({(t, r): n for (t, r), n in got.items() if None in r[1]})
    expected_lonely: Counter[Any] = Counter()
    for e, k, a in left if how != "inner" else []:
        if a[0] >= e and not any(kk == k and a[0] + lower <= b[0] <= a[0] + upper for kk, b in rs):
            expected_lonely[max(a[0] + upper, e), (k, (a, None))] += 1
    for e, k, b in right if how == "outer" else []:
        if b[0] >= e and not any(kk == k and a[0] + lower <= b[0] <= a[0] + upper for kk, a in ls):
            expected_lonely[max(b[0] - lower, e), (k, (None, b))] += 1
    assert lonely == expected_lonely


def test_a_join_of_keys_of_different_kinds_names_the_operator() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()
            s1.join(s2, name="orders with users")
            return h1, h2

        h1, h2 = worker.dataflow(build)
        h1.send((1, "order"))
        h2.send(("1", "user"))

    with pytest.raises(InputFormatError, match="join 'orders with users': the left side's keys are numbers"):
        execute(job, 1)


# -- finals and collect ------------------------------------------------------------------------------------


@settings(max_examples=examples(20), deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5), st.integers(-9, 9)), max_size=60),
    workers=st.integers(1, 4),
    form=st.sampled_from(["tuples", "numpy"]),
)
def test_final_aggregates_match_the_reference(data: list[tuple[int, int, int]], workers: int, form: str) -> None:
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            pairs = stream.map(lambda r: (r[0], r[1]), name="pairs")
            return handle, (
                stream.count_final(1).capture(),
                pairs.fold_final(lambda: 0, lambda acc, v: acc + v).capture(),
                pairs.reduce_final(max).capture(),
            )

        handle, caught = worker.dataflow(build)
        mine = sorted(data[worker.index :: worker.peers], key=lambda r: r[2] % 3)
        for phase in range(3):
            handle.advance_to(phase)
            batch = [(k, v, e) for k, v, e in mine if e % 3 == phase]
            if batch:
                handle.send_batch(batch if form == "tuples" else np.array(batch, dtype=np.int64))
        return caught

    results = execute(job, workers)
    counts, folds, reductions = (Counter((t, r) for part in results for t, b in part[i] for r in
                                         (b.tolist() if hasattr(b, "tolist") else b)) for i in range(3))
    last = {k: max(e % 3 for kk, _, e in data if kk == k) for k, _, _ in data}
    by_value = {v: max(e % 3 for _, vv, e in data if vv == v) for _, v, _ in data}
    assert counts == Counter({(by_value[v], (v, n)): 1 for v, n in Counter(v for _, v, _ in data).items()})
    assert folds == Counter({(last[k], (k, sum(v for kk, v, _ in data if kk == k))): 1 for k in last})
    assert reductions == Counter({(last[k], (k, max(v for kk, v, _ in data if kk == k))): 1 for k in last})


def test_collect_sends_a_key_once_it_holds_max_size_values_and_the_rest_at_the_end() -> None:
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.collect(max_size=3).capture()

        handle, captured = worker.dataflow(build)
        for t, batch in enumerate([[("a", 1), ("b", 1), ("a", 2)], [("a", 3), ("a", 4)], [("b", 2)]]):
            handle.advance_to(t)
            handle.send_batch(batch)
        return captured

    (captured,) = execute(job, 1)
    assert sorted((t, r) for t, b in captured for r in b) == [(0, ("b", [1, 2])), (1, ("a", [1, 2, 3])),
                                                             (1, ("a", [4]))]


def test_collect_sends_what_a_key_gathered_after_the_timeout_while_the_input_is_open() -> None:
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.collect(max_size=100, timeout=0.2).capture()

        handle, captured = worker.dataflow(build)
        handle.send_batch([("a", 1), ("a", 2)])
        worker.step_while(lambda: not captured, timeout=60)
        got = [(t, r) for t, b in captured for r in b]
        handle.close()
        return got

    assert execute(job, 1) == [[(0, ("a", [1, 2]))]]


def test_a_timeout_after_the_input_moved_on_sends_at_the_earliest_epoch_still_open() -> None:
    # Not at the first value's time: a snapshot of an epoch in between would hold the values and, in a capture
    # downstream, their list (tests/recovery/test_fences.py).
    def job(worker: Worker) -> Any:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.collect(max_size=100, timeout=0.2).capture()

        handle, captured = worker.dataflow(build)
        handle.send_batch([("a", 1), ("a", 2)])
        handle.advance_to(4)
        worker.step_while(lambda: not captured, timeout=60)
        got = [(t, r) for t, b in captured for r in b]
        handle.close()
        return got

    assert execute(job, 1) == [[(4, ("a", [1, 2]))]]


def test_stateful_map_refuses_a_mapper_that_does_not_return_a_pair() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.stateful_map(lambda state, v: "xy", name="running")
            return handle

        handle = worker.dataflow(build)
        handle.send(("k", 1))

    with pytest.raises(InvalidArgument, match=r"stateful_map 'running': the mapper must return a \(state, output\)"):
        execute(job, 1)


@pytest.mark.parametrize(
    ("epochs", "match"),
    [([1, 2, 3], "epoch 0 .time 0. is 1, not a batch"), ({0.5: [1]}, "0.5 is a float"), ({0: "abc"}, "not a batch")],
)
def test_testing_source_refuses_what_is_not_a_batch_or_an_int_time(epochs: Any, match: str) -> None:
    from pytimely.testing import run_dataflow, testing_source

    with pytest.raises(InvalidArgument, match=match):
        run_dataflow(lambda scope: testing_source(scope, epochs))


def test_an_input_refuses_a_float_time_in_an_integer_scope() -> None:
    def job(worker: Worker) -> None:
        handle, _ = worker.dataflow(lambda scope: scope.new_input(name="readings"))
        handle.advance_to(np.int64(2))  # a whole number of another type is taken as an int
        assert type(handle.time) is int
        handle.advance_to(2.5)

    with pytest.raises(InvalidArgument, match=r"input 'readings': times of this scope are ints; 2\.5 is a float"):
        execute(job, 1)

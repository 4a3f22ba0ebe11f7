"""The everyday operators against pure-Python references: random keyed data over epochs, 1-4 workers,
list and numpy batches."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Scope, Stream, Worker, execute
from pytimely.errors import InvalidArgument
from tests.profiles import examples

Row = tuple[int, int, int]
"""``(epoch, key, value)``."""

rows = st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 6), st.integers(-50, 50)), max_size=60)
workers = st.integers(1, 4)
forms = st.sampled_from(["list", "numpy"])


def run(
    data: list[Row], n: int, build: Callable[[Stream[Any]], Stream[Any]], form: str = "list"
) -> list[tuple[int, Any]]:
    """Feed ``(key, value)`` pairs at their epochs (each worker its share) and return ``(time, record)`` output."""

    def job(worker: Worker) -> list[tuple[Any, list[Any]]]:
        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, build(stream).capture()

        handle, captured = worker.dataflow(dataflow)
        mine = sorted(data[worker.index :: worker.peers])
        for epoch in sorted({e for e, _, _ in mine}):
            handle.advance_to(epoch)
            pairs = [(k, v) for e, k, v in mine if e == epoch]
            handle.send_batch(np.array(pairs, dtype=np.int64) if form == "numpy" else pairs)
        return captured

    out: list[tuple[int, Any]] = []
    for events in execute(job, n, check_serialization=True):
        for t, batch in events:
            out.extend((t, r) for r in (batch.tolist() if hasattr(batch, "tolist") else batch))
    return out


@settings(max_examples=examples(15), deadline=None)
@given(rows, workers, forms)
def test_key_on_and_map_value(data: list[Row], n: int, form: str) -> None:
    def build(s: Stream[Any]) -> Stream[Any]:
        return (
            s.key_on(1).map_value(lambda r: (r[0], 2 * r[1]))
            if form == "list"
            else s.key_on(1).map_value(lambda r: (int(r[0]), 2 * int(r[1])))
        )

    got = Counter((t, k, v) for t, (k, v) in run(data, n, build, form))
    assert got == Counter((e, v, (k, 2 * v)) for e, k, v in data)


def test_key_on_arrow_reads_the_key_column() -> None:
    def job(worker: Worker) -> Any:
        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.key_on(0).capture()

        handle, captured = worker.dataflow(dataflow)
        handle.send_batch(pa.record_batch({"k": [1, 2, 1], "v": ["a", "b", "c"]}))
        return captured

    [events] = execute(job)
    assert [r for _, b in events for r in b] == [(1, (1, "a")), (2, (2, "b")), (1, (1, "c"))]


@settings(max_examples=examples(15), deadline=None)
@given(rows, workers)
def test_stateful_map_running_sum_in_epoch_order(data: list[Row], n: int) -> None:
    """A running sum per key, forgotten (state ``None``) once it passes 40; one value per key and epoch, so
    the order is the epochs' alone."""
    data = list({(e, k): (e, k, v) for e, k, v in data}.values())

    def mapper(state: int | None, v: int) -> tuple[int | None, int]:
        total = (state or 0) + v
        return (None if total > 40 else total), total

    got = run(data, n, lambda s: s.stateful_map(mapper))
    expected = []
    state: dict[int, int | None] = {}
    for e, k, v in sorted(data):
        total = (state.get(k) or 0) + v
        state[k] = None if total > 40 else total
        expected.append((e, (k, total)))
    assert sorted(got) == sorted(expected)


@settings(max_examples=examples(15), deadline=None)
@given(rows, workers, forms, st.sampled_from([None, 1, 2, 3]))
def test_collect_keyed_per_epoch_and_window(data: list[Row], n: int, form: str, every: int | None) -> None:
    got = run(data, n, lambda s: s.collect(every=every), form)
    expected: dict[tuple[int, int], Counter[int]] = defaultdict(Counter)
    for e, k, v in data:
        w = e if every is None else (e // every + 1) * every - 1
        expected[w, k][v] += 1
    assert len(got) == len(expected)  # one collection per window and key
    assert {(t, k): Counter(vs) for t, (k, vs) in got} == expected


@settings(max_examples=examples(10), deadline=None)
@given(rows, workers, forms)
def test_collect_unkeyed_gathers_one_collection_keeping_numpy(data: list[Row], n: int, form: str) -> None:
    def job(worker: Worker) -> Any:
        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.collect(keyed=False).capture()

        handle, captured = worker.dataflow(dataflow)
        mine = sorted(data[worker.index :: worker.peers])
        for epoch in sorted({e for e, _, _ in mine}):
            handle.advance_to(epoch)
            pairs = [(k, v) for e, k, v in mine if e == epoch]
            handle.send_batch(np.array(pairs, dtype=np.int64) if form == "numpy" else pairs)
        return captured

    results = execute(job, n)
    assert all(not events for events in results[1:])  # everything is gathered on worker 0
    got: dict[int, Counter[Any]] = {}
    for t, [collection] in results[0]:
        assert t not in got
        if form == "numpy":
            assert isinstance(collection, np.ndarray)
        got[t] = Counter(map(tuple, collection.tolist() if form == "numpy" else collection))
    expected: dict[int, Counter[Any]] = defaultdict(Counter)
    for e, k, v in data:
        expected[e][k, v] += 1
    assert got == expected


@settings(max_examples=examples(10), deadline=None)
@given(st.integers(0, 300), st.integers(2, 4), forms)
def test_redistribute_spreads_evenly(size: int, n: int, form: str) -> None:
    def job(worker: Worker) -> Any:
        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.redistribute().capture()

        handle, captured = worker.dataflow(dataflow)
        if worker.index == 0:  # one worker has everything
            values = list(range(size))
            handle.send_batch(np.array(values) if form == "numpy" else values)
        return captured

    results = execute(job, n)
    shares = [[r for _, b in events for r in (b.tolist() if form == "numpy" else b)] for events in results]
    assert sorted(r for s in shares for r in s) == list(range(size))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    if form == "numpy":
        assert all(isinstance(b, np.ndarray) for events in results for _, b in events)


def test_enrich_cached_fetches_each_key_once_per_ttl() -> None:
    fetched: list[tuple[int, int]] = []

    def job(worker: Worker) -> Any:
        def getter(k: int) -> int:
            fetched.append((worker.index, k))
            return k * 100

        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            out = stream.enrich_cached(getter, lambda cache, r: (r, cache.get(r % 3)), ttl=2)
            return handle, out.capture()

        handle, captured = worker.dataflow(dataflow)
        for epoch in range(4):
            handle.advance_to(epoch)
            for r in range(6):
                handle.send(r)
        return captured

    [events] = execute(job)
    assert sorted(r for _, b in events for r in b) == sorted((r, (r % 3) * 100) for r in range(6) for _ in range(4))
    # Keys 0, 1, 2 fetched at epoch 0 and again at epoch 2 (two epochs old): six fetches for 24 records.
    assert sorted(fetched) == sorted([(0, k) for k in range(3)] * 2)


def test_enrich_cached_vectorized_mapper_sees_whole_batches() -> None:
    def job(worker: Worker) -> Any:
        def mapper(cache: Any, batch: Any) -> Any:
            table = cache.get_many(np.unique(batch).tolist())
            return batch * 0 + np.array([table[k] for k in batch.tolist()])

        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.enrich_cached(lambda k: k + 1000, mapper, vectorized=True).capture()

        handle, captured = worker.dataflow(dataflow)
        handle.send_batch(np.array([1, 2, 1, 3]))
        return captured

    [events] = execute(job)
    [(_, batch)] = events
    assert isinstance(batch, np.ndarray) and batch.tolist() == [1001, 1002, 1001, 1003]


@settings(max_examples=examples(20), deadline=None)
@given(rows, workers, forms, st.sampled_from(["min", "max", "first", "last"]))
def test_final_extremes(data: list[Row], n: int, form: str, kind: str) -> None:
    got = run(data, n, lambda s: getattr(s, f"{kind}_final")(), form)
    by_key: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e, k, v in data:
        by_key[k].append((e, v))
    assert sorted(k for _, (k, _) in got) == sorted(by_key)  # one result per key
    for t, (k, v) in got:
        items = by_key[k]
        assert t == max(e for e, _ in items)  # sent at the key's latest time
        if kind in ("min", "max"):
            assert v == (min if kind == "min" else max)(x for _, x in items)
        else:
            edge = (min if kind == "first" else max)(e for e, _ in items)
            assert v in [x for e, x in items if e == edge]


def test_first_and_last_follow_order_within_one_worker() -> None:
    def job(worker: Worker) -> Any:
        def dataflow(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.first_final().capture(), stream.last_final().capture()

        handle, first, last = worker.dataflow(dataflow)
        handle.send_batch(np.array([[1, 10], [2, 20], [1, 11], [1, 12]]))
        handle.advance_to(3)
        handle.send_batch([(2, 21), (2, 22)])
        return first, last

    [(first, last)] = execute(job)
    assert sorted((t, k, v) for t, b in first for k, v in b) == [(0, 1, 10), (3, 2, 20)]
    assert sorted((t, k, v) for t, b in last for k, v in b) == [(0, 1, 12), (3, 2, 22)]


def test_bad_arguments_are_typed() -> None:
    def job(worker: Worker) -> None:
        def dataflow(scope: Scope[int]) -> None:
            _, stream = scope.new_input()
            with pytest.raises(InvalidArgument):
                stream.collect(every=0)
            with pytest.raises(InvalidArgument):
                stream.key_on(1.5)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument):
                stream.enrich_cached(str, lambda c, r: r, ttl=0)

        worker.dataflow(dataflow)

    execute(job)


@settings(max_examples=examples(60), deadline=None)
@given(
    st.lists(st.tuples(st.integers(-(2**40), 2**40), st.integers(-100, 100)), min_size=1, max_size=80),
    st.sampled_from([None, 1, 2**20]),
    st.sampled_from(["min", "max", "first", "last"]),
    st.booleans(),
)
def test_reduce_by_key_dense_and_sorted_paths(
    pairs: list[tuple[int, int]], spread: int, how: str, floats: bool
) -> None:
    """Keys in a narrow range take the dense path, wide ones the sort: both agree with a dict loop."""
    from pytimely.dataflow.operators.grouping import group_starts, reduce_by_key

    # spread None: keys in -18..18 (the dense path); else a wide range (the sort).
    keys = np.array([k % 37 - 18 if spread is None else k // spread for k, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.float64 if floats else np.int64)
    expected: dict[int, Any] = {}
    for k, v in zip(keys.tolist(), values.tolist(), strict=True):
        if (
            k not in expected
            or how == "last"
            or (how == "min" and v < expected[k])
            or (how == "max" and v > expected[k])
        ):
            expected[k] = v
    ks, vs = reduce_by_key(keys, values, how)
    assert dict(zip(ks.tolist(), vs.tolist(), strict=True)) == expected
    order, starts = group_starts(keys)
    assert keys[order].tolist() == sorted(keys.tolist())
    assert len(starts) == len(expected)

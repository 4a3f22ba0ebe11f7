"""Keyed state in bins: stable bins, the versioned table, and operators whose bins move between workers.

Every dataflow test compares a run with random moves against a run without them and against a model, on
1, 2 and 3 workers under drawn schedules; the state machine's debugging hook shows where state lives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import InputHandle, Worker, execute
from pytimely.dataflow.bins import BinTable, Move, bin_of, binner, bins_of, key_hash
from pytimely.errors import (
    BinCountError,
    BinRangeError,
    LateMoveError,
    NotAMoveError,
    OperatorError,
    UnknownWorkerError,
)
from tests.dataflow.helpers import Events, merge
from tests.profiles import examples

EPOCHS = 5

keys = st.recursive(
    st.none() | st.integers() | st.text(max_size=6) | st.binary(max_size=6) | st.floats(allow_nan=False),
    lambda inner: st.tuples(inner, inner) | st.tuples(inner),
    max_leaves=6,
)

# -- bins ------------------------------------------------------------------------------------


@given(keys, st.sampled_from([1, 2, 7, 256, 1000, 1 << 20]))
def test_bin_of_is_in_range_and_the_fast_binner_agrees(key: Any, bins: int) -> None:
    b = bin_of(key, bins)
    assert 0 <= b < bins
    assert binner(bins)(key) == b


@given(st.integers(-(1 << 100), 1 << 100), st.sampled_from([2, 256]))
def test_keys_that_compare_equal_share_a_bin(n: int, bins: int) -> None:
    same = float(n) if float(n) == n else n
    assert bin_of(same, bins) == bin_of(n, bins)
    assert bin_of((same, "a", (n,)), bins) == bin_of((n, "a", (same,)), bins)
    assert bin_of(np.int64(n % (1 << 63)), bins) == bin_of(n % (1 << 63), bins)
    assert bin_of(n == 0, bins) == bin_of(int(n == 0), bins)
    assert bin_of(frozenset({n, "x"}), bins) == bin_of(frozenset({"x", n}), bins)


@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), max_size=50), st.sampled_from([1, 3, 256, 4096]))
def test_bins_of_an_int_array_is_bin_of_each(values: list[int], bins: int) -> None:
    array = np.array(values, dtype=np.int64)
    assert bins_of(array, bins).tolist() == [bin_of(v, bins) for v in values]
    small = np.array([v % 200 for v in values], dtype=np.uint8)
    assert bins_of(small, bins).tolist() == [bin_of(v % 200, bins) for v in values]


def test_bins_spread_strided_ints_and_words() -> None:
    for sample in ([i * 256 for i in range(4096)], [f"word{i}" for i in range(4096)]):
        counts = Counter(bin_of(k) for k in sample)
        assert len(counts) == 256 and max(counts.values()) < 3 * 4096 / 256


@pytest.mark.parametrize("bins", [0, -1, 2.0, (1 << 32) + 1])
def test_a_bad_bin_count_is_refused(bins: Any) -> None:
    with pytest.raises(BinCountError, match=repr(bins)):
        bin_of("a", bins)
    with pytest.raises(BinCountError):
        BinTable.default(2, bins)


_PROBE = """
import json, sys
from pytimely.dataflow.bins import bin_of
def tuples(v):
    return tuple(map(tuples, v)) if isinstance(v, list) else v
keys = json.loads(sys.argv[1])
print(json.dumps({"bins": [bin_of(tuples(k)) for k in keys],
                  "hashes": [hash(k) for k in keys if isinstance(k, str)]}))
"""


def test_bin_of_is_the_same_in_processes_with_different_hash_seeds() -> None:
    words = [f"w{i}" for i in range(200)] + ["", "é", "naïve", "\U0001f600"]
    sample: list[Any] = [*words, ["x", 3, "y"], [1, ["nested", 2.5]]]
    seen = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        result = subprocess.run(
            [sys.executable, "-c", _PROBE, json.dumps(sample)], env=env, capture_output=True, text=True, check=True
        )
        seen.append(json.loads(result.stdout))
    assert seen[0]["hashes"] != seen[1]["hashes"]  # Python's own hash does differ between the two
    here = [bin_of(k if isinstance(k, str) else _tuples(k)) for k in sample]
    assert seen[0]["bins"] == seen[1]["bins"] == here


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


# -- the table -------------------------------------------------------------------------------

moves_lists = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7), st.integers(0, 2)), max_size=20)


def _model_owners(peers: int, bins: int, moves: Sequence[tuple[int, int, int]], time: int) -> list[int]:
    owners = [b % peers for b in range(bins)]
    for t, b, w in sorted(moves, key=lambda m: m[0]):
        if t <= time:
            owners[b] = w
    return owners


@given(moves_lists, st.integers(0, 7))
def test_the_table_at_a_time_has_every_earlier_move_applied(moves: list[tuple[int, int, int]], compact: int) -> None:
    table = BinTable.default(3, 8)
    table.schedule(Move(*m) for m in moves)
    for t in range(8):
        assert table.at(t) == _model_owners(3, 8, moves, t)
        assert table.before(t) == _model_owners(3, 8, moves, t - 1)
        changed = {b for b in range(8) if table.at(t)[b] != table.before(t)[b]}
        assert set(table.moving_at(t)) == changed
    table.compact(compact)
    for t in range(compact, 8):
        assert table.at(t) == _model_owners(3, 8, moves, t)


def test_the_table_refuses_unknown_workers_and_bins_by_name() -> None:
    table = BinTable.default(2, 16)
    with pytest.raises(UnknownWorkerError, match="no worker 2") as info:
        table.schedule([Move(1, 3, 2)])
    assert info.value.worker == 2
    with pytest.raises(BinRangeError, match="no bin 16") as bad_bin:
        table.schedule([Move(1, 16, 0)])
    assert bad_bin.value.bin == 16
    with pytest.raises(UnknownWorkerError, match="bin 1"):
        BinTable([0, 5], 2)
    assert table.times() == []


# -- dataflows with moves ------------------------------------------------------------------

Data = list[tuple[int, Any]]
Moves = list[tuple[int, int, int, int]]
"""``(sent at, move time, bin, worker)``."""


def run_keyed(
    build: Callable[[Any, Any, Worker], Any],
    workers: int,
    seed: int | None,
    data: Data,
    moves: Moves | None,
    sender: Callable[[Any], int] | None = None,
) -> list[Events]:
    """Feed ``data`` (``(epoch, record)``) and, when ``moves`` is given, a control stream; capture the output.

    Records go out from worker ``sender(record) % peers`` (or round robin); moves from worker 0.
    """

    def job(worker: Worker) -> Events:
        def dataflow(scope: Any) -> tuple[InputHandle[Any, Any], InputHandle[Any, Any] | None, Events]:
            handle, stream = scope.new_input()
            control_handle, control = scope.new_input(name="control") if moves is not None else (None, None)
            return handle, control_handle, build(stream, control, worker).capture()

        handle, control_handle, captured = worker.dataflow(dataflow)
        mine = [
            (e, r)
            for i, (e, r) in enumerate(data)
            if (sender(r) if sender is not None else i) % worker.peers == worker.index
        ]
        for epoch in range(EPOCHS):
            handle.advance_to(epoch)
            handle.send_batch([r for e, r in mine if e == epoch])
            worker.step()
            # Moves go out after the epoch's data has had a step to travel: routing must wait for them.
            if control_handle is not None:
                control_handle.advance_to(epoch)
                if worker.index == 0:
                    batch = [Move(t, b, w % worker.peers) for sent, t, b, w in moves or [] if sent == epoch]
                    if batch:
                        control_handle.send_batch(batch)
                worker.step()
        return captured

    return execute(job, workers, seed=seed, check_serialization=True)


def owners_model(peers: int, bins: int, moves: Moves, time: int) -> list[int]:
    """The owners in force at ``time``: moves applied in time order, later sends winning ties."""
    in_sending_order = sorted(moves, key=lambda m: m[0])  # stable: one epoch's moves keep their order
    return _model_owners(peers, bins, [(t, b, w % peers) for _, t, b, w in in_sending_order], time)


runs = st.sampled_from([(1, None), (2, None), (2, 3), (3, None), (3, 8), (2, 21), (3, 40)])
epoch_data = st.lists(st.tuples(st.integers(0, EPOCHS - 1), st.integers(0, 30)), max_size=60)


@st.composite
def move_plans(draw: st.DrawFn, bins: int) -> Moves:
    plan = []
    for _ in range(draw(st.integers(0, 6))):
        sent = draw(st.integers(0, EPOCHS - 1))
        plan.append((sent, sent + draw(st.integers(0, 2)), draw(st.integers(0, bins - 1)), draw(st.integers(0, 2))))
    return plan


def running_sums(data: Data) -> Counter[tuple[int, Any]]:
    """What the running-sum state machine emits: ``(epoch, (key, sum so far))`` per record, in order."""
    sums: dict[int, int] = {}
    out: Counter[tuple[int, Any]] = Counter()
    for epoch, (k, v) in sorted(data, key=lambda p: p[0]):
        sums[k] = sums.get(k, 0) + v
        out[epoch, (k, sums[k])] += 1
    return out


def flat(events: Events) -> Counter[tuple[int, Any]]:
    return Counter((t, r) for t, batch in events for r in batch)


def add(key: Any, value: int, state: int | None) -> tuple[int, list[tuple[Any, int]]]:
    total = (state or 0) + value
    return total, [(key, total)]


@settings(max_examples=examples(100), deadline=None)
@given(runs, epoch_data, st.data())
def test_a_running_sum_state_machine_gives_the_same_output_whatever_the_moves(
    run: tuple[int, int | None], values: list[tuple[int, int]], data: st.DataObject
) -> None:
    workers, seed = run
    bins = data.draw(st.sampled_from([2, 4, 256]))
    records: Data = [(e, (v % 7, v)) for e, v in values]
    moves = data.draw(move_plans(bins))
    snapshots: list[tuple[int, int, set[Any]]] = []

    def build(stream: Any, control: Any, worker: Worker) -> Any:
        def look(w: int, t: Any, states: Any) -> None:
            if control is not None:
                snapshots.append((w, t, set(states)))

        return stream.state_machine(add, control=control, bins=bins, inspect_state=look)

    # Each key's records leave from one worker, so their order within a time is the order they were sent.
    sender = lambda r: r[0]  # noqa: E731
    moved = run_keyed(build, workers, seed, records, moves, sender)
    still = run_keyed(build, workers, seed, records, None, sender)
    expected = running_sums(records)
    assert sum((flat(e) for e in moved), Counter()) == expected
    assert sum((flat(e) for e in still), Counter()) == expected

    # Where the state was: after time t, worker w holds every key seen so far whose bin it owns at t, and
    # no key whose bin it does not own at t or later (state shipped at a later move may arrive early).
    for w, t, held in snapshots:
        owners = owners_model(workers, bins, moves, t)
        seen = {k for e, (k, _) in records if e <= t}
        assert {k for k in seen if owners[bin_of(k, bins)] == w} <= held, (w, t, moves)
        later = [owners_model(workers, bins, moves, u) for u in range(t, EPOCHS + 2)]
        assert all(any(o[bin_of(k, bins)] == w for o in later) for k in held), (w, t, moves)
    # Each output record comes from the owner of its key at its time.
    for w, events in enumerate(moved):
        for t, batch in events:
            owners = owners_model(workers, bins, moves, t)
            assert all(owners[bin_of(k, bins)] == w for k, _ in batch)


@settings(max_examples=examples(50), deadline=None)
@given(runs, st.lists(st.tuples(st.integers(0, EPOCHS - 1), st.integers(0, 30)), max_size=40), st.data())
def test_the_running_join_gives_the_same_output_whatever_the_moves(
    run: tuple[int, int | None], values: list[tuple[int, int]], data: st.DataObject
) -> None:
    workers, seed = run
    bins = data.draw(st.sampled_from([2, 4, 256]))
    # One value per key and epoch, so which is latest does not depend on arrival order within a time.
    records: Data = list({(e, v % 5): (e, (v % 5, v)) for e, v in values}.values())
    moves = data.draw(move_plans(bins))

    def build(stream: Any, control: Any, worker: Worker) -> Any:
        evens = stream.filter(lambda kv: kv[1] % 2 == 0, name="evens")
        return stream.join(evens, over="latest", how="left", control=control, bins=bins)

    moved = run_keyed(build, workers, seed, records, moves)
    still = run_keyed(build, workers, seed, records, None)
    latest: dict[int, list[Any]] = {}
    expected: Counter[tuple[int, Any]] = Counter()
    for epoch in sorted({e for e, _ in records}):
        for e, (k, v) in records:
            if e == epoch:
                pair = latest.setdefault(k, [None, None])
                pair[0] = v
                pair[1] = v if v % 2 == 0 else pair[1]
                expected[epoch, (k, tuple(pair))] += 1
    assert sum((flat(e) for e in moved), Counter()) == expected
    assert sum((flat(e) for e in still), Counter()) == expected


def test_moved_state_continues_on_the_new_owner() -> None:
    """Bin of key 5 moves from worker 0 to 1 at time 2: worker 1 emits 3, 4 (not 1, 2) and holds the key."""
    bins = 4
    b = bin_of(5, bins)
    records: Data = [(e, (5, 1)) for e in range(EPOCHS)]
    snapshots: list[tuple[int, int, set[Any]]] = []
    old = b % 2

    def build(stream: Any, control: Any, worker: Worker) -> Any:
        return stream.state_machine(
            add, control=control, bins=bins, inspect_state=lambda w, t, s: snapshots.append((w, t, set(s)))
        )

    out = run_keyed(build, 2, None, records, [(1, 2, b, 1 - old)])
    assert sorted(r for t, batch in out[old] for r in batch) == [(5, 1), (5, 2)]
    assert sorted(r for t, batch in out[1 - old] for r in batch) == [(5, 3), (5, 4), (5, 5)]
    assert {(w, t) for w, t, held in snapshots if 5 in held} == {
        (old, 0),
        (old, 1),
        (1 - old, 2),
        (1 - old, 3),
        (1 - old, 4),
    }
    assert all(5 not in held for w, t, held in snapshots if w == old and t >= 2)


@settings(max_examples=examples(50), deadline=None)
@given(runs, st.lists(st.tuples(st.integers(0, EPOCHS - 1), st.sampled_from("abcdefgh")), max_size=60), st.data())
def test_word_count_and_per_time_aggregations_ignore_moves(
    run: tuple[int, int | None], words: list[tuple[int, str]], data: st.DataObject
) -> None:
    workers, seed = run
    bins = data.draw(st.sampled_from([2, 8, 256]))
    moves = data.draw(move_plans(bins))

    def build(stream: Any, control: Any, worker: Worker) -> Any:
        counts = stream.count_by(control=control, bins=bins)
        sums = stream.sum_by(lambda w: w, lambda w: ord(w), control=control, bins=bins)
        folds = stream.fold_by(lambda w: w, lambda: 0, lambda a, w: a + 2, control=control, bins=bins)
        groups = stream.reduce_by(lambda w: w, lambda k, ws: len(ws) * 3, control=control, bins=bins)

        def tag(name: str) -> Callable[[Any], Any]:
            return lambda r: (name, r)

        return counts.map(tag("count")).concat(sums.map(tag("sum")), folds.map(tag("fold")), groups.map(tag("reduce")))

    moved = merge(run_keyed(build, workers, seed, words, moves))
    still = merge(run_keyed(build, workers, seed, words, None))
    expected: dict[Any, Counter[Any]] = {}
    for epoch in {e for e, _ in words}:
        counts = Counter(w for e, w in words if e == epoch)
        expected[epoch] = Counter((name, (w, f(n, w))) for w, n in counts.items() for name, f in _AGGREGATES.items())
    assert moved == still == expected


_AGGREGATES: dict[str, Callable[[int, str], int]] = {
    "count": lambda n, w: n,
    "sum": lambda n, w: n * ord(w),
    "fold": lambda n, w: 2 * n,
    "reduce": lambda n, w: 3 * n,
}


@settings(max_examples=examples(50), deadline=None)
@given(runs, epoch_data, epoch_data, st.data())
def test_a_join_gives_the_same_matches_whatever_the_moves(
    run: tuple[int, int | None], left: list[tuple[int, int]], right: list[tuple[int, int]], data: st.DataObject
) -> None:
    workers, seed = run
    bins = data.draw(st.sampled_from([2, 4, 256]))
    moves = data.draw(move_plans(bins))
    tagged = [(e, ("l", v)) for e, v in left] + [(e, ("r", v)) for e, v in right]

    def build(stream: Any, control: Any, worker: Worker) -> Any:
        lefts = stream.filter(lambda r: r[0] == "l").map(lambda r: (r[1] % 5, r[1]))
        rights = stream.filter(lambda r: r[0] == "r").map(lambda r: (r[1] % 5, -r[1]))
        return lefts.join(rights, control=control, bins=bins)

    expected: dict[Any, Counter[Any]] = {}
    for e, a in left:
        for f, b in right:
            if e == f and a % 5 == b % 5:
                expected.setdefault(e, Counter())[a % 5, (a, -b)] += 1
    assert merge(run_keyed(build, workers, seed, tagged, moves)) == expected
    assert merge(run_keyed(build, workers, seed, tagged, None)) == expected


# -- refused moves ---------------------------------------------------------------------------


def _control_job(moves: list[Any], sent_at: int = 0) -> Callable[[Worker], None]:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            control_handle, control = scope.new_input(name="control")
            stream.state_machine(add, control=control, bins=16, name="counter").probe()
            return handle, control_handle

        handle, control_handle = worker.dataflow(build)
        handle.send((1, 1))
        control_handle.advance_to(sent_at)
        if worker.index == 0:
            control_handle.send_batch(moves)

    return job


@pytest.mark.parametrize("workers", [1, 2])
def test_a_move_to_an_unknown_worker_is_refused_naming_it(workers: int) -> None:
    with pytest.raises(UnknownWorkerError, match=f"no worker {workers}") as info:
        execute(_control_job([Move(0, 3, workers)]), workers)
    assert info.value.worker == workers


@pytest.mark.parametrize("workers", [1, 2])
def test_a_move_of_a_bin_out_of_range_is_refused_naming_it(workers: int) -> None:
    with pytest.raises(BinRangeError, match="no bin 16") as info:
        execute(_control_job([Move(2, 16, 0)]), workers)
    assert info.value.bin == 16


@pytest.mark.parametrize("workers", [1, 2])
def test_a_move_earlier_than_the_control_frontier_is_refused(workers: int) -> None:
    move = Move(1, 0, 0)
    with pytest.raises(LateMoveError, match="counter") as info:
        execute(_control_job([move], sent_at=3), workers)
    assert info.value.move == move and info.value.time == 3
    execute(_control_job([Move(3, 0, workers - 1)], sent_at=3), workers)  # at the frontier itself: fine


def test_a_control_record_that_is_not_a_move_is_refused() -> None:
    with pytest.raises(NotAMoveError, match=r"\(0, 3, 1\)"):
        execute(_control_job([(0, 3, 1)]), 2)


def test_a_failing_fold_names_the_operator_and_time() -> None:
    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.state_machine(lambda k, v, s: (1 // v, None), name="divide").probe()
            return handle

        handle = worker.dataflow(build)
        handle.advance_to(4)
        handle.send(("k", 0))

    with pytest.raises(OperatorError, match=r"'divide'.*time 4") as info:
        execute(job, 1)
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_key_hash_of_other_types_falls_back_to_python_hash() -> None:
    class Point:
        def __hash__(self) -> int:
            return 12345

    assert key_hash(Point()) == 12345


@settings(max_examples=examples(20), deadline=None)
@given(runs, st.lists(st.tuples(st.integers(0, EPOCHS - 1), st.integers(-(1 << 40), 1 << 40)), max_size=80), st.data())
def test_numpy_batches_are_routed_by_vectorised_bins(
    run: tuple[int, int | None], values: list[tuple[int, int]], data: st.DataObject
) -> None:
    workers, seed = run
    bins = data.draw(st.sampled_from([2, 8, 256]))
    moves = data.draw(move_plans(bins))
    keys = [v % 13 - 6 for _, v in values]

    def job(worker: Worker) -> tuple[Events, Events]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            control_handle, control = scope.new_input()
            rows = stream.map_batch(lambda b: np.stack([b, np.ones_like(b)], axis=1))  # (key, value) rows
            seen = rows.state_machine(lambda k, v, s: (None, [(k, worker.index)]), control=control, bins=bins)
            return handle, control_handle, stream.count_by(control=control, bins=bins).capture(), seen.capture()

        handle, control_handle, counts, seen = worker.dataflow(build)
        for epoch in range(EPOCHS):
            handle.advance_to(epoch)
            control_handle.advance_to(epoch)
            if worker.index == 0:
                control_handle.send_batch([Move(t, b, w % worker.peers) for s, t, b, w in moves if s == epoch])
            mine = [
                k
                for i, ((e, _), k) in enumerate(zip(values, keys, strict=True))
                if e == epoch and i % worker.peers == worker.index
            ]
            handle.send_batch(np.array(mine, dtype=np.int64))
            worker.step()
        return counts, seen  # filled as the worker finishes, after this returns

    results = execute(job, workers, seed=seed)
    got = merge(counts for counts, _ in results)
    expected = {
        e: Counter(Counter(k for (f, _), k in zip(values, keys, strict=True) if f == e).items())
        for e in {e for e, _ in values}
    }
    assert got == expected
    assert sum(len(batch) for _, seen in results for _, batch in seen) == len(values)
    for _, seen in results:
        for t, batch in seen:
            owners = owners_model(workers, bins, moves, t)
            assert all(owners[bin_of(k, bins)] == w for k, w in batch)

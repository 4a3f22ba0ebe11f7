"""Every dataflow operator's output on small epoch-tagged inputs, for one, two and three workers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Antichain, Capability, Notificator, Product, Stream, Worker, execute
from pytimely.dataflow import OperatorInfo
from tests.profiles import examples

from .helpers import DATA, RUNS, Events, feed, merge, per_epoch, records, run_pipeline

pytestmark = pytest.mark.timeout(60)

WORKERS = [1, 2, 3]


def where(per_worker: list[Events]) -> list[tuple[int, Any, Any]]:
    """``(worker, time, record)`` for every record captured anywhere."""
    return [(w, t, r) for w, events in enumerate(per_worker) for t, batch in events for r in records(batch)]


# -- record-at-a-time operators --------------------------------------------------------------

PIPELINES: dict[str, tuple[Callable[[Stream[Any]], Stream[Any]], Callable[[list[int]], list[Any]]]] = {
    "map": (lambda s: s.map(lambda x: 3 * x - 1), lambda xs: [3 * x - 1 for x in xs]),
    "filter": (lambda s: s.filter(lambda x: x % 3 == 0), lambda xs: [x for x in xs if x % 3 == 0]),
    "flat_map": (lambda s: s.flat_map(lambda x: [x] * (x % 3)), lambda xs: [x for x in xs for _ in range(x % 3)]),
    "map_batch": (
        lambda s: s.map_batch(lambda b: [x + 1 for x in b if x % 2]),
        lambda xs: [x + 1 for x in xs if x % 2],
    ),
    "map_batch_to_nothing": (lambda s: s.map_batch(lambda b: None), lambda xs: []),
    "chain": (
        lambda s: s.map(lambda x: x * x).filter(lambda x: x > 10).flat_map(lambda x: [x, -x]),
        lambda xs: [y for x in xs if x * x > 10 for y in (x * x, -x * x)],
    ),
    "concat_self": (lambda s: s.concat(s.map(lambda x: -x)), lambda xs: xs + [-x for x in xs]),
    "exchange_then_map": (lambda s: s.exchange(lambda x: x).map(lambda x: x % 5), lambda xs: [x % 5 for x in xs]),
}


@pytest.mark.parametrize("workers,seed", RUNS)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_record_operators_per_epoch(name: str, workers: int, seed: int | None) -> None:
    build, reference = PIPELINES[name]
    got = merge(run_pipeline(lambda s, w: build(s), workers, seed))
    assert got == per_epoch(DATA, reference)


@pytest.mark.parametrize("workers", WORKERS)
def test_inspect_sees_every_record_and_passes_it_on(workers: int) -> None:
    seen: list[tuple[int, int]] = []
    batches: list[tuple[int, Any, list[int]]] = []

    def build(stream: Stream[Any], worker: Worker) -> Stream[Any]:
        index = worker.index
        looked = stream.inspect(lambda x: seen.append((index, x)))
        return looked.inspect_batch(lambda t, b: batches.append((index, t, list(b))))

    got = merge(run_pipeline(build, workers))
    expected = per_epoch(DATA)
    assert got == expected
    assert Counter(x for _, x in seen) == Counter(v for _, v in DATA)
    by_time: dict[Any, Counter[int]] = {}
    for _, t, b in batches:
        by_time.setdefault(t, Counter()).update(b)
    assert by_time == expected
    # Without an exchange, records stay on the worker that sent them.
    assert Counter(seen) == Counter((i % workers, v) for i, (_, v) in enumerate(DATA))


@pytest.mark.parametrize("workers", WORKERS)
def test_sink_gets_every_batch_with_its_time(workers: int) -> None:
    sunk: list[tuple[Any, list[int]]] = []

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.map(lambda x: x + 100).sink(lambda t, b: sunk.append((t, list(b))))
            return handle

        feed(worker.dataflow(build), worker, DATA)

    execute(job, workers)
    assert merge([sunk]) == per_epoch(DATA, lambda xs: [x + 100 for x in xs])


# -- moving data between workers ---------------------------------------------------------------


def route(x: int) -> int:
    """A route with negative keys, to check that routing wraps them onto a worker."""
    return 7 * x - 3


@pytest.mark.parametrize("workers,seed", RUNS)
def test_exchange_sends_each_record_to_its_worker(workers: int, seed: int | None) -> None:
    per_worker = run_pipeline(lambda s, w: s.exchange(route), workers, seed)
    assert merge(per_worker) == per_epoch(DATA)
    for w, _, r in where(per_worker):
        assert route(r) % workers == w, f"record {r} reached worker {w}"


@pytest.mark.parametrize("workers,seed", RUNS)
def test_broadcast_copies_every_record_to_every_worker(workers: int, seed: int | None) -> None:
    per_worker = run_pipeline(lambda s, w: s.broadcast(), workers, seed)
    for events in per_worker:
        assert merge([events]) == per_epoch(DATA)


@pytest.mark.parametrize("workers", WORKERS)
def test_partition_splits_by_route(workers: int) -> None:
    parts: list[list[Events]] = [[], [], []]

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            for i, part in enumerate(stream.partition(3, lambda x: x % 3)):
                parts[i].append(part.capture())
            return handle

        feed(worker.dataflow(build), worker, DATA)

    execute(job, workers)
    for i in range(3):
        assert merge(parts[i]) == per_epoch(DATA, lambda xs, i=i: [x for x in xs if x % 3 == i])


@pytest.mark.parametrize("workers", WORKERS)
def test_branch_splits_by_predicate(workers: int) -> None:
    def job(worker: Worker) -> tuple[Events, Events]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            yes, no = stream.branch(lambda x: x > 4)
            return handle, yes.capture(), no.capture()

        handle, yes, no = worker.dataflow(build)
        feed(handle, worker, DATA)
        return yes, no

    results = execute(job, workers)
    assert merge(y for y, _ in results) == per_epoch(DATA, lambda xs: [x for x in xs if x > 4])
    assert merge(n for _, n in results) == per_epoch(DATA, lambda xs: [x for x in xs if x <= 4])


@pytest.mark.parametrize("workers", WORKERS)
def test_scope_concat_merges_streams(workers: int) -> None:
    def build(stream: Stream[Any], worker: Worker) -> Stream[Any]:
        evens, odds = stream.branch(lambda x: x % 2 == 0)
        return stream.scope.concat([evens.map(lambda x: x // 2), odds, stream.filter(lambda x: x > 15)])

    got = merge(run_pipeline(build, workers))
    assert got == per_epoch(DATA, lambda xs: [x // 2 if x % 2 == 0 else x for x in xs] + [x for x in xs if x > 15])


# -- keyed aggregation per timestamp ---------------------------------------------------------


@pytest.mark.parametrize("workers,seed", RUNS)
def test_count_is_one_total_per_epoch_from_worker_0(workers: int, seed: int | None) -> None:
    per_worker = run_pipeline(lambda s, w: s.filter(lambda x: x != 3).count(), workers, seed)
    assert all(not events for events in per_worker[1:]), "count is sent by worker 0 only"
    totals = per_worker[0]
    assert sorted(t for t, _ in totals) == sorted({e for e, _ in DATA}), "one total per epoch"
    assert merge(per_worker) == per_epoch(DATA, lambda xs: [sum(1 for x in xs if x != 3)])


@pytest.mark.parametrize("workers,seed", RUNS)
def test_count_by_record_and_by_key(workers: int, seed: int | None) -> None:
    plain = run_pipeline(lambda s, w: s.count_by(), workers, seed)
    assert merge(plain) == per_epoch(DATA, lambda xs: Counter(xs).items())
    keyed = run_pipeline(lambda s, w: s.count_by(lambda x: x % 4), workers, seed)
    assert merge(keyed) == per_epoch(DATA, lambda xs: Counter(x % 4 for x in xs).items())
    for per_worker in (plain, keyed):
        located = where(per_worker)
        # Each key is counted in one place per epoch: the worker its hash routes it to.
        assert len({(t, k) for _, t, (k, _) in located}) == len(located)
        for w, _, (k, _) in located:
            assert hash(k) % workers == w


@pytest.mark.parametrize("workers,seed", RUNS)
def test_sum_fold_reduce_by_key(workers: int, seed: int | None) -> None:
    def key(x: int) -> int:
        return x % 3

    def groups(xs: list[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for x in xs:
            out.setdefault(key(x), []).append(x)
        return out

    summed = merge(run_pipeline(lambda s, w: s.sum_by(key, lambda x: x * x), workers, seed))
    assert summed == per_epoch(DATA, lambda xs: [(k, sum(v * v for v in vs)) for k, vs in groups(xs).items()])

    folded = merge(
        run_pipeline(lambda s, w: s.fold_by(key, lambda: (0, 1), lambda acc, x: (acc[0] + 1, acc[1] * 2)), workers)
    )
    assert folded == per_epoch(DATA, lambda xs: [(k, (len(vs), 2 ** len(vs))) for k, vs in groups(xs).items()])

    reduced = merge(run_pipeline(lambda s, w: s.reduce_by(key, lambda k, vs: (k, tuple(sorted(vs)))), workers, seed))
    # reduce_by gives every record of the key and epoch to one reducer call.
    assert reduced == per_epoch(DATA, lambda xs: [(k, (k, tuple(sorted(vs)))) for k, vs in groups(xs).items()])


@pytest.mark.parametrize("workers,seed", RUNS)
def test_join_matches_per_key_and_epoch(workers: int, seed: int | None) -> None:
    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            left, ls = scope.new_input("left")
            right, rs = scope.new_input("right")
            return left, right, ls.join(rs).capture()

        left, right, out = worker.dataflow(build)
        feed(left, worker, [(e, (v % 4, v)) for e, v in DATA])
        feed(right, worker, [(e, (v % 4, -v)) for e, v in DATA[::2]] + [(1, (99, 0)), (3, (2, 1000))])
        return out

    def expected_join(pairs: list[tuple[str, tuple[int, int]]]) -> list[Any]:
        ls = [p for side, p in pairs if side == "l"]
        rs = [p for side, p in pairs if side == "r"]
        return [(k, (a, b)) for k, a in ls for j, b in rs if j == k]

    tagged = [(e, ("l", (v % 4, v))) for e, v in DATA]
    tagged += [(e, ("r", (v % 4, -v))) for e, v in DATA[::2]] + [(1, ("r", (99, 0))), (3, ("r", (2, 1000)))]
    got = merge(execute(job, workers, seed=seed))
    assert got == per_epoch(tagged, expected_join)
    assert got, "the join produced nothing to compare"


# -- capture and replay ------------------------------------------------------------------------


@pytest.mark.parametrize("workers,seed", RUNS)
def test_capture_then_replay_in_a_later_dataflow(workers: int, seed: int | None) -> None:
    def job(worker: Worker) -> tuple[Events, Events]:
        def first(scope: Any) -> Any:
            handle, stream = scope.new_input()
            into: Events = []
            captured = stream.exchange(lambda x: x).map(lambda x: x * 2).capture(into)
            assert captured is into
            return handle, captured

        handle, captured = worker.dataflow(first)
        feed(handle, worker, DATA)
        handle.close()
        worker.step_while(lambda: worker.running)  # the first dataflow is complete: everything is captured
        replayed = worker.dataflow(lambda scope: scope.replay(captured).map(lambda x: x + 1).capture())
        return captured, replayed

    results = execute(job, workers, seed=seed)
    first = merge(c for c, _ in results)
    assert first == per_epoch(DATA, lambda xs: [2 * x for x in xs])
    for captured, replayed in results:
        # Each worker replays what it captured, at the same times.
        assert merge([replayed]) == {t: Counter({x + 1: n for x, n in c.items()}) for t, c in merge([captured]).items()}


def test_replay_at_several_times_with_a_later_minimum() -> None:
    events = [(7, [1, 2]), (5, [3]), (9, []), (7, [4])]

    def job(worker: Worker) -> Events:
        return worker.dataflow(lambda scope: scope.replay(events).capture(), minimum=5)

    assert merge(execute(job)) == {5: Counter([3]), 7: Counter([1, 2, 4])}


# -- columnar batches --------------------------------------------------------------------------


@pytest.mark.parametrize("workers,seed", RUNS)
def test_numpy_batches_through_vectorized_exchange_and_map_batch(workers: int, seed: int | None) -> None:
    routed_at: list[tuple[int, Any, Any]] = []

    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            routed = stream.exchange(lambda a: a // 3, vectorized=True)
            index = worker.index
            routed = routed.inspect_batch(lambda t, b: routed_at.append((index, t, b)))
            return handle, routed.map_batch(lambda a: a[a % 2 == 0] * 10).capture()

        handle, out = worker.dataflow(build)
        for epoch in range(3):
            handle.advance_to(epoch)
            handle.send_batch(np.arange(-10, 20, dtype=np.int64) + 100 * epoch + worker.index)
        return out

    per_worker = execute(job, workers, seed=seed)
    expected = {
        e: Counter(10 * x for w in range(workers) for x in range(-10 + 100 * e + w, 20 + 100 * e + w) if x % 2 == 0)
        for e in range(3)
    }
    assert merge(per_worker) == expected
    for events in per_worker:
        assert all(isinstance(batch, np.ndarray) for _, batch in events), "batches stay numpy arrays"
    assert routed_at
    for w, _, batch in routed_at:
        assert isinstance(batch, np.ndarray)
        assert ((batch // 3) % workers == w).all()


@settings(max_examples=examples(40), deadline=None)
@given(
    workers=st.sampled_from([2, 3, 4]),
    dtype=st.sampled_from(["int64", "int32", "uint32"]),
    rows=st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40),
    one_owner=st.booleans(),
)
def test_vectorized_exchange_sends_each_row_to_its_owner_once(
    workers: int, dtype: str, rows: list[int], one_owner: bool
) -> None:
    # Two-column rows keyed by column 0: covers negative keys, unsigned keys, whole batches owned by
    # one worker (sent uncopied) and batches split between owners.
    keys = np.array([r if dtype != "uint32" else abs(r) for r in rows], dtype=dtype)
    if one_owner:
        keys = keys - keys % workers + 1 if len(keys) else keys
    batch = np.column_stack([keys, np.arange(len(keys), dtype=dtype)]) if len(keys) else np.zeros((0, 2), dtype)
    seen: list[tuple[int, int, int]] = []

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            index = worker.index
            stream.exchange(lambda b: b[:, 0], vectorized=True).inspect_batch(
                lambda _t, b: seen.extend((index, int(k), int(v)) for k, v in b.tolist())
            ).probe()
            return handle

        handle = worker.dataflow(build)
        if worker.index == 0 and len(batch):
            handle.send_batch(batch)

    execute(job, workers)
    expected = sorted((int(k) % workers, int(k), v) for v, k in enumerate(keys.tolist()))
    assert sorted(seen) == expected


@pytest.mark.parametrize("workers", WORKERS)
def test_count_by_on_numpy_batches(workers: int) -> None:
    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.count_by().capture()

        handle, out = worker.dataflow(build)
        handle.send_batch(np.array([1, 2, 2, 3, 3, 3]))
        handle.advance_to(1)
        handle.send_batch(np.array([worker.index, 4]))
        return out

    got = merge(execute(job, workers))
    assert got == {
        0: Counter([(1, workers), (2, 2 * workers), (3, 3 * workers)]),
        1: Counter([(4, workers)] + [(i, 1) for i in range(workers)]),
    }


def test_a_keyed_result_of_many_keys_sets_off_at_most_one_collection() -> None:
    import gc

    words = [f"k{i}" for i in range(30_000)]
    collections: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    def job(worker: Worker) -> int:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.count_by().capture(), stream.probe()

        handle, out, probe = worker.dataflow(build)
        handle.send_batch(words)
        worker.step_while(lambda: probe.less_than(0))  # the words are counted; the result is not made yet
        handle.close()
        gc.callbacks.append(watch)
        try:
            worker.step_while(lambda: not out)  # the 30,000 (word, 1) pairs are built in this step
        finally:
            gc.callbacks.remove(watch)
        return sum(len(batch) for _, batch in out)

    assert execute(job, 1) == [30_000]
    # Built with the collector running, 30,000 new tuples set off about 40 young collections; paused, only the one
    # that runs once it is back on.
    assert len(collections) <= 1, collections


# -- loops -------------------------------------------------------------------------------------


def countdown(xs: list[int], limit: int | None) -> list[int]:
    """What ``iterate`` gives for a body that drops non-positive values and decrements the rest."""
    out: list[int] = []
    level = list(xs)
    rounds = 0
    while level and (limit is None or rounds <= limit):
        level = [x - 1 for x in level if x > 0]
        out.extend(level)
        rounds += 1
    return out


@pytest.mark.parametrize("workers,seed", RUNS)
@pytest.mark.parametrize("limit", [None, 0, 3])
def test_iterate_counts_down_with_an_exchange_in_the_body(workers: int, seed: int | None, limit: int | None) -> None:
    def body(s: Stream[Any]) -> Stream[Any]:
        return s.filter(lambda x: x > 0).map(lambda x: x - 1).exchange(lambda x: x)

    got = merge(run_pipeline(lambda s, w: s.iterate(body, limit=limit), workers, seed))
    assert got == per_epoch(DATA, lambda xs: countdown(xs, limit))


@pytest.mark.parametrize("workers", WORKERS)
def test_feedback_step_and_limit_inside_the_loop(workers: int) -> None:
    def job(worker: Worker) -> tuple[Events, Events]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            inner = scope.iterative()
            loop, variable = inner.feedback(step=2, limit=6)
            looped = stream.enter(inner).concat(variable).map(lambda x: x + 1).exchange(lambda x: x)
            seen = looped.capture()
            looped.connect_loop(loop)
            return handle, seen, looped.leave().capture()

        handle, seen, left = worker.dataflow(build)
        if worker.index == 0:
            handle.send(0)
            handle.advance_to(2)
            handle.send(100)
        return seen, left

    results = execute(job, workers)
    inside = merge(s for s, _ in results)
    # Iterations 0, 2, 4, 6 run; what comes round after 6 is past the limit and is dropped.
    assert inside == {
        Product(0, 0): Counter([1]),
        Product(0, 2): Counter([2]),
        Product(0, 4): Counter([3]),
        Product(0, 6): Counter([4]),
        Product(2, 0): Counter([101]),
        Product(2, 2): Counter([102]),
        Product(2, 4): Counter([103]),
        Product(2, 6): Counter([104]),
    }
    assert merge(left for _, left in results) == {0: Counter([1, 2, 3, 4]), 2: Counter([101, 102, 103, 104])}


@pytest.mark.parametrize("workers,seed", RUNS)
def test_nested_loops(workers: int, seed: int | None) -> None:
    def build(stream: Stream[Any], worker: Worker) -> Stream[Any]:
        scope = stream.scope
        outer = scope.iterative("outer")
        outer_loop, outer_var = outer.feedback()
        x = stream.filter(lambda v: v > 0).map(lambda v: v * 10).enter(outer).concat(outer_var)
        inner = outer.iterative("inner")
        inner_loop, inner_var = inner.feedback()
        # Inner loop: step down to the next multiple of 10; outer loop: drop 10 and go round again.
        stepped = x.enter(inner).concat(inner_var).filter(lambda v: v % 10 != 0).map(lambda v: v - 1)
        stepped = stepped.exchange(lambda v: v)
        stepped.connect_loop(inner_loop)
        down = stepped.leave().filter(lambda v: v % 10 == 0)
        again = down.concat(x.filter(lambda v: v % 10 == 0)).filter(lambda v: v > 0).map(lambda v: v - 7)
        again.connect_loop(outer_loop)
        return again.leave()

    def reference(xs: list[int]) -> list[int]:
        out = []
        for v in xs:
            if v <= 0:
                continue
            v *= 10
            while True:
                v -= v % 10
                if v <= 0:
                    break
                v -= 7
                out.append(v)
        return out

    assert merge(run_pipeline(build, workers, seed)) == per_epoch(DATA, reference)


# -- sources -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_to_stream_sends_at_the_scope_minimum(workers: int) -> None:
    def job(worker: Worker) -> Events:
        values = range(worker.index * 1000, worker.index * 1000 + 2500)
        return worker.dataflow(lambda scope: scope.to_stream(values, batch_size=100).capture(), minimum=5)

    got = merge(execute(job, workers))
    assert got == {5: Counter(x for w in range(workers) for x in range(w * 1000, w * 1000 + 2500))}


@pytest.mark.parametrize("workers", WORKERS)
def test_source_reactivating_itself_sends_several_epochs(workers: int) -> None:
    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[[Any], None]:
                def logic(output: Any) -> None:
                    t = cap.time
                    output.give(cap, [(info.worker, t)])
                    if t == 3:
                        cap.drop()
                    else:
                        cap.downgrade(t + 1)
                        info.activate()

                return logic

            return scope.source(constructor, name="ticker").capture()

        return worker.dataflow(build)

    assert merge(execute(job, workers)) == {t: Counter((w, t) for w in range(workers)) for t in range(4)}


# -- generic operators -------------------------------------------------------------------------


def running_max(cap: Capability[Any], info: OperatorInfo) -> Callable[[Any, Any], None]:
    """The documentation's example operator: the maximum per time, sent once the time is complete."""
    cap.drop()
    best: dict[Any, int] = {}
    waiting: Notificator[Any] = Notificator()

    def logic(input: Any, output: Any) -> None:
        for in_cap, batch in input:
            t = in_cap.time
            if t not in best:
                waiting.notify_at(in_cap.retain())
            best[t] = max(best.get(t, -(10**9)), *batch)
        for done in waiting.ready(input.frontier):
            output.give(done, [(info.worker, best.pop(done.time))])
            done.drop()

    return logic


@pytest.mark.parametrize("workers,seed", RUNS)
def test_unary_with_notificator_and_exchange(workers: int, seed: int | None) -> None:
    per_worker = run_pipeline(lambda s, w: s.unary(running_max, exchange=lambda x: 0), workers, seed)
    assert merge(per_worker) == per_epoch(DATA, lambda xs: [(0, max(xs))])
    # Without an exchange every worker reports the maximum of its own records.
    local = merge(run_pipeline(lambda s, w: s.unary(running_max), workers, seed))
    assert local == {
        e: Counter(
            (w, max(v for i, (ee, v) in enumerate(DATA) if ee == e and i % workers == w))
            for w in range(workers)
            if any(ee == e and i % workers == w for i, (ee, _) in enumerate(DATA))
        )
        for e in {e for e, _ in DATA}
    }


@pytest.mark.parametrize("workers,seed", RUNS)
def test_binary_waits_for_both_frontiers(workers: int, seed: int | None) -> None:
    def difference(cap: Capability[Any], info: OperatorInfo) -> Callable[[Any, Any, Any], None]:
        cap.drop()
        sums: dict[Any, int] = {}
        waiting: Notificator[Any] = Notificator()

        def logic(left: Any, right: Any, output: Any) -> None:
            for sign, port in ((1, left), (-1, right)):
                for in_cap, batch in port:
                    if in_cap.time not in sums:
                        waiting.notify_at(in_cap.retain())
                    sums[in_cap.time] = sums.get(in_cap.time, 0) + sign * sum(batch)
            for done in waiting.ready(left.frontier, right.frontier):
                with output.session(done) as session:
                    session.give(sums.pop(done.time))
                done.drop()

        return logic

    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            left, ls = scope.new_input("left")
            right, rs = scope.new_input("right")
            out = ls.binary(rs, difference, exchange1=lambda x: 0, exchange2=lambda x: 0)
            return left, right, out.capture()

        left, right, out = worker.dataflow(build)
        feed(left, worker, DATA)
        feed(right, worker, [(e, v * v) for e, v in DATA[1::3]])
        return out

    per_worker = execute(job, workers, seed=seed)
    assert all(not events for events in per_worker[1:])
    tagged = [(e, v) for e, v in DATA] + [(e, -v * v) for e, v in DATA[1::3]]
    assert merge(per_worker) == per_epoch(tagged, lambda xs: [sum(xs)])


@pytest.mark.parametrize("workers", WORKERS)
def test_operator_info_and_delayed_capabilities(workers: int) -> None:
    infos: list[OperatorInfo] = []

    def shift(cap: Capability[Any], info: OperatorInfo) -> Callable[[Any, Any], None]:
        infos.append(info)
        cap.drop()

        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                later = in_cap.delayed(in_cap.time + 10)
                output.give(later, [x + 1 for x in batch])
                later.drop()

        return logic

    per_worker = run_pipeline(lambda s, w: s.unary(shift, name="shift"), workers)
    assert merge(per_worker) == {e + 10: Counter(x + 1 for x in c.elements()) for e, c in per_epoch(DATA).items()}
    assert sorted((i.name, i.worker, i.peers) for i in infos) == [("shift", w, workers) for w in range(workers)]
    assert len({i.index for i in infos}) == 1


# -- probes ------------------------------------------------------------------------------------


@pytest.mark.parametrize("workers,seed", RUNS)
def test_probe_in_a_timely_driver_loop(workers: int, seed: int | None) -> None:
    seen: list[tuple[int, int]] = []  # (time, record), from every worker

    def job(worker: Worker) -> list[str]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            watched = stream.exchange(lambda x: x // 10).inspect_batch(lambda t, b: seen.extend((t, x) for x in b))
            return handle, watched.probe()

        handle, probe = worker.dataflow(build)
        problems = []
        for r in range(5):
            handle.send(10 * r + worker.index)
            handle.send(10 * r + worker.index + 5)
            handle.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            # Time r is complete everywhere: every worker's records for it have reached the probed stage.
            expected = Counter(10 * r + w + d for w in range(worker.peers) for d in (0, 5))
            if Counter(x for t, x in seen if t == r) != expected:
                problems.append(f"round {r}: saw {sorted(x for t, x in seen if t == r)}")
            if probe.less_equal(r) or probe.less_than(r + 1) or not probe.less_equal(r + 1):
                problems.append(f"round {r}: frontier {probe.frontier()!r}")
            if probe.frontier() != Antichain([r + 1]) or probe.done():
                problems.append(f"round {r}: frontier {probe.frontier()!r}")
        handle.close()
        worker.step_while(lambda: not probe.done())
        if not probe.frontier().is_empty():
            problems.append("done, yet the frontier is not empty")
        return problems

    assert execute(job, workers, seed=seed) == [[] for _ in range(workers)]
    assert len(seen) == 10 * workers


@pytest.mark.parametrize("workers", WORKERS)
def test_probe_holds_back_while_an_operator_holds_a_capability(workers: int) -> None:
    def hold_until_epoch_3(cap: Capability[Any], info: OperatorInfo) -> Callable[[Any, Any], None]:
        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                output.give(in_cap, batch)
            if cap.valid and not input.frontier.less_than(3):
                cap.drop()

        return logic

    def job(worker: Worker) -> list[Any]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.unary(hold_until_epoch_3).probe()

        handle, probe = worker.dataflow(build)
        frontiers = []
        for epoch in (1, 2):
            handle.advance_to(epoch)
            for _ in range(10):
                worker.step()
                frontiers.append(probe.frontier().elements())
        for epoch in (3, 4):
            handle.advance_to(epoch)
            worker.step_while(lambda: probe.less_than(handle.time))
            frontiers.append(probe.frontier().elements())
        return frontiers

    for frontiers in execute(job, workers):
        # The operator's initial capability at 0 holds the probe at 0 until its input passes 2.
        assert frontiers == [[0]] * 20 + [[3], [4]]


def test_probe_in_a_loop_sees_product_times() -> None:
    def job(worker: Worker) -> list[list[Any]]:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            inner = scope.iterative()
            loop, variable = inner.feedback(limit=2)
            looped = stream.enter(inner).concat(variable).map(lambda x: x + 1)
            looped.connect_loop(loop)
            return handle, looped.probe()

        handle, probe = worker.dataflow(build)
        handle.send(1)
        handle.advance_to(1)
        seen = [probe.frontier().elements()]
        # (0, i) and (1, 0) are incomparable: less_than((1, 0)) cannot tell whether epoch 0 is still looping.
        while probe.less_equal(Product(0, 2)):
            worker.step()
            seen.append(probe.frontier().elements())
        handle.close()
        worker.step_while(lambda: not probe.done())
        return [*seen, probe.frontier().elements()]

    (seen,) = execute(job)
    assert seen[0] == [Product(0, 0)]
    assert [Product(0, 1), Product(1, 0)] in seen, "the loop's second round and the next epoch are both live"
    assert seen[-2:] == [[Product(1, 0)], []]

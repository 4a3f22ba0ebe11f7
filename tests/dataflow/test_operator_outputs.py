"""Each operator's output on small inputs, for one and several workers."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pytest

from pytimely import Notificator, Product, Worker, execute

pytestmark = pytest.mark.timeout(60)

EPOCHS = {0: [3, 1, 4, 1, 5], 1: [9, 2, 6], 3: [5, 3, 5]}


def run(make: Any, workers: int, seed: int | None = None) -> dict[Any, Counter[Any]]:
    """Feed EPOCHS through ``make(stream)`` (worker w sends every w-th record); gather outputs per time."""

    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            return handle, make(stream).capture()

        handle, captured = worker.dataflow(build)
        for epoch, values in EPOCHS.items():
            handle.advance_to(epoch)
            for value in values[worker.index :: worker.peers]:
                handle.send(value)
        return captured

    out: dict[Any, Counter[Any]] = defaultdict(Counter)
    for captured in execute(job, workers, seed=seed):
        for time, batch in captured:
            out[time].update(batch)
    return dict(out)


def per_epoch(f: Any) -> dict[Any, Counter[Any]]:
    """What ``f(records)`` gives for each epoch's records, as counters."""
    return {e: Counter(f(v)) for e, v in EPOCHS.items() if f(v)}


WORKERS = pytest.mark.parametrize("workers", [1, 2, 3])


@WORKERS
def test_count(workers: int) -> None:
    assert run(lambda s: s.count(), workers) == per_epoch(lambda v: [len(v)])


@WORKERS
def test_sum_fold_reduce_by_key(workers: int) -> None:
    def parity(x: int) -> int:
        return x % 2

    def sums(v: list[int]) -> list[tuple[int, int]]:
        return [(k, sum(x for x in v if x % 2 == k)) for k in {x % 2 for x in v}]

    assert run(lambda s: s.sum_by(parity, lambda x: x), workers) == per_epoch(sums)
    assert run(lambda s: s.fold_by(parity, lambda: 0, lambda acc, x: acc + x), workers) == per_epoch(sums)

    def sorted_groups(v: list[int]) -> list[tuple[int, tuple[int, ...]]]:
        return [(k, tuple(sorted(x for x in v if x % 2 == k))) for k in {x % 2 for x in v}]

    assert run(lambda s: s.reduce_by(parity, lambda k, xs: tuple(sorted(xs))), workers) == per_epoch(sorted_groups)


@WORKERS
def test_join_per_timestamp(workers: int) -> None:
    def make(s: Any) -> Any:
        left = s.map(lambda x: (x % 3, x))
        right = s.filter(lambda x: x > 2).map(lambda x: (x % 3, -x))
        return left.join(right)

    def expected(v: list[int]) -> list[Any]:
        return [(a % 3, (a, -b)) for a in v for b in v if b > 2 and a % 3 == b % 3]

    assert run(make, workers, seed=5) == per_epoch(expected)


@WORKERS
def test_partition_and_branch(workers: int) -> None:
    def make(s: Any) -> Any:
        parts = s.partition(3, lambda x: x % 3)
        tagged = [p.map(lambda x, i=i: (i, x)) for i, p in enumerate(parts)]
        yes, no = s.branch(lambda x: x > 4)
        return tagged[0].concat(*tagged[1:], yes.map(lambda x: ("big", x)), no.map(lambda x: ("small", x)))

    def expected(v: list[int]) -> list[Any]:
        return [(x % 3, x) for x in v] + [("big" if x > 4 else "small", x) for x in v]

    assert run(make, workers) == per_epoch(expected)


@WORKERS
def test_exchange_and_broadcast_deliver_to_the_right_workers(workers: int) -> None:
    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            routed = stream.exchange(lambda x: x).map(lambda x: ("routed", worker.index, x))
            copied = stream.broadcast().map(lambda x: ("copied", worker.index, x))
            return handle, routed.concat(copied).capture()

        handle, captured = worker.dataflow(build)
        if worker.index == 0:
            handle.send_batch(list(range(10)))
        return captured

    records = [r for captured in execute(job, workers) for _, batch in captured for r in batch]
    assert sorted(r for r in records if r[0] == "routed") == sorted(("routed", x % workers, x) for x in range(10))
    assert sorted(r for r in records if r[0] == "copied") == sorted(
        ("copied", w, x) for w in range(workers) for x in range(10)
    )


@WORKERS
def test_capture_then_replay(workers: int) -> None:
    first = run(lambda s: s.map(lambda x: x * 10), workers)

    def job(worker: Worker) -> Any:
        events = [(t, list(c.elements())) for t, c in first.items()] if worker.index == 0 else []
        return worker.dataflow(lambda scope: scope.replay(events).exchange(lambda x: x).capture())

    replayed: dict[Any, Counter[Any]] = defaultdict(Counter)
    for captured in execute(job, workers):
        for t, batch in captured:
            replayed[t].update(batch)
    assert dict(replayed) == first


def test_to_stream_reads_in_batches_and_source_operators_emit() -> None:
    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            sizes = scope.to_stream(range(10_000), batch_size=1000).map_batch(lambda b: [len(b)]).capture()

            def counter(cap: Any, info: Any) -> Any:
                def logic(output: Any) -> None:
                    with output.session(cap) as session:
                        for i in range(3):
                            session.give((info.worker, i))
                    cap.drop()

                return logic

            made = scope.source(counter, name="counter").capture()
            return sizes, made

        return worker.dataflow(build)

    (sizes, made), = execute(job)
    assert [b for _, b in sizes] == [[1000]] * 10
    assert made == [(0, [(0, 0), (0, 1), (0, 2)])]


def test_probe_reports_progress_in_a_driver_loop() -> None:
    def job(worker: Worker) -> list[tuple[int, bool, bool]]:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda x: x).probe()

        handle, probe = worker.dataflow(build)
        seen = []
        for r in range(5):
            handle.send(r)
            handle.advance_to(r + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            seen.append((r, probe.less_equal(r), probe.less_equal(r + 1)))
        handle.close()
        worker.step_while(lambda: not probe.done())
        assert probe.frontier().is_empty()
        return seen

    for seen in execute(job, 2, seed=11):
        assert seen == [(r, False, True) for r in range(5)]


@pytest.mark.parametrize("limit", [None, 4])
def test_feedback_with_a_limit(limit: int | None) -> None:
    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            loop = scope.iterative()
            fb, var = loop.feedback(limit=limit)
            body = stream.enter(loop).concat(var).map(lambda x: x + 1).filter(lambda x: x < 10)
            body.connect_loop(fb)
            seen = body.inspect_batch(lambda t, b: None).capture()
            return handle, seen, body.leave().capture()

        handle, inside, outside = worker.dataflow(build)
        handle.send(0)
        return inside, outside

    ((inside, outside),) = execute(job)
    times = sorted(t for t, _ in inside)
    last = 8 if limit is None else limit
    assert times == [Product(0, i) for i in range(last + 1)]
    assert sorted(x for _, b in outside for x in b) == list(range(1, last + 2))


def test_notificator_delivers_in_time_order_once_complete() -> None:
    order: list[Any] = []

    def factory(cap: Any, info: Any) -> Any:
        cap.drop()
        waiting: Notificator[Any] = Notificator()

        def logic(inp: Any, out: Any) -> None:
            for in_cap, _ in inp:
                waiting.notify_at(in_cap.retain())
            for done in waiting.ready(inp.frontier):
                assert not inp.frontier.less_equal(done.time)
                order.append(done.time)
                done.drop()

        return logic

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.unary(factory, name="notified")
            return handle

        handle = worker.dataflow(build)
        for t in (0, 2, 5):
            handle.advance_to(t)
            handle.send(t)
            handle.send(t)

    execute(job)
    assert order == [0, 2, 5]

"""Jobs for the recovery tests: running sums per key kept by a user operator's declared state, their changelog
gathered into a declared log, a crash on demand. Nothing in them knows about snapshots."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pytimely import Worker, execute
from pytimely.dataflow.operators.builder import OperatorBuilder
from pytimely.dataflow.state import Log, exchange_by_bin
from pytimely.recovery import Recovery, SnapshotPolicy


class Crash(Exception):
    """Raised inside a worker to stand for a process dying mid-epoch."""


SKEWED = (400, 600)
"""A workload of few changes per epoch (``keys=`` of :func:`run_sums`): 400 keys, 600 records in the first epoch
and 60 in each after, so that most epochs write few of the keys held (snapshots take deltas)."""


def records(epoch: int, seed: int = 7, keys: tuple[int, int] = (40, 60)) -> list[tuple[int, int]]:
    """The ``(key, value)`` records of ``epoch`` (the same in every run): ``keys`` = (distinct keys, records in
    the first epoch); 60 records in every epoch after it."""
    rng = random.Random(seed * 1000 + epoch)
    return [(rng.randrange(keys[0]), rng.randrange(1, 10)) for _ in range(keys[1] if epoch == 0 else 60)]


def running_sums(scope: Any, stream: Any, name: str = "sum", seen: list[int] | None = None) -> Any:
    """``(key, total)`` for every record: each key's running total, kept in the operator's declared state.

    ``seen``, if given, counts the records the operator applied on this worker (to show what a run computed).
    """
    builder = OperatorBuilder(scope, name)
    totals = builder.keyed_state("totals")
    builder.new_input(stream, exchange_by_bin(lambda r: r[0]))
    builder.new_output()

    def constructor(caps: list[Any], info: Any) -> Any:
        for cap in caps:
            cap.drop()

        def logic(inputs: Any, outputs: Any) -> None:
            for cap, batch in inputs[0]:
                changes = []
                for k, v in batch:
                    total = totals.get(k, 0) + v
                    totals[k] = total
                    changes.append((k, total))
                if seen is not None:
                    seen.append(len(batch))
                outputs[0].give(cap, changes)

        return logic

    (out,) = builder.build(constructor)
    return out


def durable_sink(scope: Any, stream: Any, into: list[Any], name: str = "changelog") -> None:
    """Append ``(time, record)`` of everything reaching this worker to ``into``, a log the runtime snapshots."""
    builder = OperatorBuilder(scope, name)
    builder.state("rows", Log(into))
    builder.new_input(stream)

    def constructor(caps: list[Any], info: Any) -> Any:
        for cap in caps:
            cap.drop()

        def logic(inputs: Any, outputs: Any) -> None:
            for cap, batch in inputs[0]:
                into.extend((cap.time, r) for r in batch)

        return logic

    builder.build(constructor)


def sums_job(
    epochs: int,
    *,
    crash_at: tuple[int, int] | None = None,
    seen: list[int] | None = None,
    name: str = "sum",
    on_epoch: Callable[[Worker, int], None] | None = None,
    keys: tuple[int, int] = (40, 60),
) -> Callable[[Worker], list[Any]]:
    """The job: every worker sends its share of each epoch, steps until the epoch is through; worker 0's log of
    ``(epoch, key, total)`` changes is what it returns. ``crash_at=(worker, epoch)`` dies mid-epoch."""

    def job(worker: Worker) -> list[Any]:
        log: list[Any] = []

        def build(scope: Any) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="records")
            sums = running_sums(scope, stream, name, seen)
            durable_sink(scope, sums.exchange(lambda _: 0, name="gather"), log)
            return handle, sums.probe()

        handle, probe = worker.dataflow(build)
        for epoch in range(epochs):
            mine = records(epoch, keys=keys)[worker.index :: worker.peers]
            handle.send_batch(mine[: len(mine) // 2])
            if crash_at == (worker.index, epoch):
                raise Crash(f"worker {worker.index} dies in epoch {epoch}")
            handle.send_batch(mine[len(mine) // 2 :])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            if on_epoch is not None:
                on_epoch(worker, epoch)
        return log

    return job


def run_sums(
    store: Any,
    epochs: int,
    workers: int,
    *,
    crash_at: tuple[int, int] | None = None,
    every: int = 1,
    keep: int = 2,
    seed: int | None = None,
    name: str = "sum",
    seen: list[int] | None = None,
    on_epoch: Callable[[Worker, int], None] | None = None,
    keys: tuple[int, int] = (40, 60),
    **options: Any,
) -> list[tuple[int, int, int, int]]:
    """Run the job with recovery into ``store``; its changelog as :func:`changes` gives it."""
    options.setdefault("parameters", {"epochs": epochs})
    recovery = Recovery(store, job="sums", policy=SnapshotPolicy(every_epochs=every, keep=keep), **options)
    job = sums_job(epochs, crash_at=crash_at, seen=seen, name=name, on_epoch=on_epoch, keys=keys)
    results = execute(job, workers, recovery=recovery, seed=seed)
    return changes(row for part in results for row in part)


def changes(log: Any) -> list[tuple[int, int, int, int]]:
    """Per epoch and key: how many changes the log holds and the last total, from ``(epoch, (key, total))``.

    Within an epoch a key's records arrive in any order, so the totals between differ from run to run; their
    number (one per record: a duplicate or a gap changes it) and the last (the largest) do not.
    """
    seen: dict[tuple[int, int], list[int]] = {}
    for t, (k, total) in log:
        seen.setdefault((t, k), []).append(total)
    return sorted((t, k, len(v), max(v)) for (t, k), v in seen.items())


def expected(epochs: int, keys: tuple[int, int] = (40, 60)) -> list[tuple[int, int, int, int]]:
    """What :func:`changes` gives for an uninterrupted run, computed without pytimely."""
    totals: dict[int, int] = {}
    rows = []
    for epoch in range(epochs):
        count: dict[int, int] = {}
        for k, v in records(epoch, keys=keys):
            totals[k] = totals.get(k, 0) + v
            count[k] = count.get(k, 0) + 1
        rows.extend((epoch, k, n, totals[k]) for k, n in count.items())
    return sorted(rows)


def cli_job(worker: Worker) -> int | None:
    """``pytimely run tests.recovery.jobs:cli_job``: the sums job over 4 epochs; worker 0 says how many changes."""
    log = sums_job(4)(worker)
    return len(log) if worker.index == 0 else None


def other_job(worker: Worker) -> None:
    """Another job, for refusals."""

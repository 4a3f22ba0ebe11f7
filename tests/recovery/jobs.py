"""A durable job for the recovery tests: running sums per key, a changelog line per change, a crash on demand."""

from __future__ import annotations

import random
from typing import Any

from pytimely import Worker, execute
from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.recovery import Recovery, SnapshotPolicy, fixed_bins


class Crash(Exception):
    """Raised inside a worker to stand for a process dying mid-epoch."""


def records(epoch: int, seed: int = 7) -> list[tuple[int, int]]:
    """The ``(key, value)`` records of ``epoch`` (the same in every run)."""
    rng = random.Random(seed * 1000 + epoch)
    return [(rng.randrange(40), rng.randrange(1, 10)) for _ in range(60)]


def _add(key: int, value: int, total: int | None) -> tuple[int, list[tuple[int, int]]]:
    new = (total or 0) + value
    return new, [(key, new)]


def running_sums(
    store: Any, epochs: int, workers: int, *, crash_at: tuple[int, int] | None = None, every: int = 1,
    name: str = "sum", seed: int | None = None, policy: SnapshotPolicy | None = None,
) -> list[tuple[int, int, int]]:
    """Run the job on ``workers`` threads; the committed changelog ``(epoch, key, total)`` lines, sorted.

    ``crash_at=(worker, epoch)`` makes that worker raise :class:`Crash` after sending part of that epoch.
    """
    recovery = Recovery(store, policy or SnapshotPolicy(every_epochs=every), job="sums")

    def job(worker: Worker) -> Any:
        durable = worker.recovery
        totals = durable.keyed("totals")
        seen: dict[int, list[tuple[int, int, int]]] = {}

        def keep(t: int, batch: Any) -> None:
            seen.setdefault(t, []).extend((t, k, v) for k, v in batch)

        def changes(epoch: int) -> list[tuple[int, int, int]]:
            # Within an epoch the records of a key arrive in any order; totals only grow: the largest is the last.
            last: dict[int, int] = {}
            for _, k, v in seen.pop(epoch, []):
                last[k] = max(v, last.get(k, 0))
            return [(epoch, k, v) for k, v in last.items()]

        def build(scope: Any) -> tuple[Any, Any]:
            handle, stream = durable.new_input(scope, "records")
            out = state_machine(stream, _add, None, fixed_bins(scope), recovery.bins, name, states=totals)
            return handle, out.inspect_batch(keep).probe()

        handle, probe = worker.dataflow(build)
        for epoch in range(durable.begin(), epochs):
            mine = records(epoch)[worker.index :: worker.peers]
            handle.send_batch(mine[: len(mine) // 2])
            if crash_at == (worker.index, epoch):
                raise Crash(f"worker {worker.index} dies in epoch {epoch}")
            handle.send_batch(mine[len(mine) // 2 :])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time))
            durable.commit(epoch, output=changes(epoch), final=epoch == epochs - 1)
        return durable.committed_output() if worker.index == 0 else None

    results = execute(job, workers, recovery=recovery, seed=seed)
    return sorted(row for part in results[0] for row in part)


def expected(epochs: int) -> list[tuple[int, int, int]]:
    """The changelog of an uninterrupted run (each changed key's total after each epoch), without pytimely."""
    totals: dict[int, int] = {}
    rows = []
    for epoch in range(epochs):
        for k, v in records(epoch):
            totals[k] = totals.get(k, 0) + v
        rows.extend((epoch, k, totals[k]) for k in {k for k, _ in records(epoch)})
    return sorted(rows)

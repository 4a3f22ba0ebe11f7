"""Shared helpers for the dataflow runtime tests: feeding epoch-tagged data, merging captured output."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pytimely import InputHandle, Stream, Worker, execute

Events = list[tuple[Any, list[Any]]]
"""What ``Stream.capture`` fills: ``(time, records)`` per batch that reached one worker."""

RUNS = [(1, None), (2, None), (2, 7), (3, None), (3, 11)]
"""``(workers, seed)`` pairs most tests run under: one worker, round robin, and seeded random schedules."""


def epoch_data(seed: int = 1, size: int = 40, epochs: int = 4, low: int = -8, high: int = 20) -> list[tuple[int, int]]:
    """A fixed list of ``(epoch, value)`` pairs, in no particular order."""
    rng = random.Random(seed)
    return [(rng.randrange(epochs), rng.randint(low, high)) for _ in range(size)]


DATA = epoch_data()


def records(batch: Any) -> list[Any]:
    """A batch (list or numpy array) as a list of plain Python values."""
    return batch.tolist() if hasattr(batch, "tolist") else list(batch)


def share(worker: Worker, data: Sequence[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """This worker's share of ``data`` (every ``peers``-th pair from its index), epochs ascending."""
    return sorted(data[worker.index :: worker.peers], key=lambda p: p[0])


def feed(handle: InputHandle[Any, Any], worker: Worker, data: Sequence[tuple[Any, Any]]) -> None:
    """Send this worker's share of ``data`` through ``handle``, advancing to each epoch before its records."""
    for epoch, value in share(worker, data):
        if handle.time != epoch:
            handle.advance_to(epoch)
        handle.send(value)


def merge(per_worker: Iterable[Events]) -> dict[Any, Counter[Any]]:
    """Every worker's captured events as one multiset of records per time (times with no records left out)."""
    out: dict[Any, Counter[Any]] = {}
    for events in per_worker:
        for time, batch in events:
            out.setdefault(time, Counter()).update(records(batch))
    return {t: c for t, c in out.items() if c}


def per_epoch(
    data: Iterable[tuple[Any, Any]], f: Callable[[list[Any]], Iterable[Any]] = list
) -> dict[Any, Counter[Any]]:
    """``f`` applied to each epoch's values of ``data``, as one multiset per epoch (empty results left out)."""
    groups: dict[Any, list[Any]] = {}
    for epoch, value in data:
        groups.setdefault(epoch, []).append(value)
    out = {e: Counter(f(values)) for e, values in groups.items()}
    return {e: c for e, c in out.items() if c}


def run_pipeline(
    build: Callable[[Stream[Any], Worker], Stream[Any]],
    workers: int,
    seed: int | None = None,
    data: Sequence[tuple[Any, Any]] = DATA,
) -> list[Events]:
    """Feed ``data`` through one input into ``build(stream, worker)`` and capture the result on every worker."""

    def job(worker: Worker) -> Events:
        def dataflow(scope: Any) -> tuple[InputHandle[Any, Any], Events]:
            handle, stream = scope.new_input()
            return handle, build(stream, worker).capture()

        handle, captured = worker.dataflow(dataflow)
        feed(handle, worker, data)
        return captured

    return execute(job, workers, seed=seed, check_serialization=True)

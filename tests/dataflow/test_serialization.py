"""Records that cannot be pickled: named at the exchange that carries them, in one process as across two."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pytimely import Scope, Worker, execute
from pytimely.errors import UnpicklableRecordError
from tests.cluster.helpers import Cluster, report


def sending(records: list[Any], pact: str = "exchange", nested: bool = False) -> Callable[[Worker], list[Any]]:
    """A job: worker 0 sends ``records`` through ``tag`` and then the pact into ``sink``; returns what arrived."""

    def job(worker: Worker) -> list[Any]:
        seen: list[Any] = []

        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input(name="source")
            stream = stream.map(lambda r: r, name="tag")
            if nested:
                inner = scope.iterative(name="loop")
                stream = stream.enter(inner)
            stream = stream.exchange(lambda r: 0, name="sink") if pact == "exchange" else stream.broadcast()
            stream.inspect(seen.append, name="seen")
            return handle

        handle = worker.dataflow(build)
        if worker.index == 0:
            for record in records:
                handle.send(record)
        return seen

    return job


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("pact", ["exchange", "broadcast"])
def test_checked_serialization_names_the_exchange_and_the_sender(workers: int, pact: str) -> None:
    lock = threading.Lock()
    with pytest.raises(UnpicklableRecordError) as info:
        execute(sending([1, lock, 3], pact), workers, check_serialization=True)
    error = info.value
    assert error.sender == "tag"
    assert pact in error.channel and "'tag'" in error.channel
    assert "lock" in str(error) and "cannot be pickled" in str(error)
    assert isinstance(error, TypeError)


def test_without_the_check_one_process_passes_records_by_reference() -> None:
    # The gap the option closes: the same record goes through unnoticed in one process.
    lock = threading.Lock()
    assert [r for seen in execute(sending([lock]), 2) for r in seen] == [lock]


def test_checked_serialization_reaches_nested_scopes() -> None:
    with pytest.raises(UnpicklableRecordError):
        execute(sending([threading.Lock()], nested=True), 1, check_serialization=True)


def test_checked_records_arrive_as_copies_with_the_same_values() -> None:
    records = [(1, "a"), [2, 3], {"k": 4}]
    out = execute(sending(records), 2, check_serialization=True)
    got = [r for seen in out for r in seen]
    assert got == records and all(g is not r for g, r in zip(got, records, strict=True))


def test_checked_numpy_batches_keep_their_rows() -> None:
    def job(worker: Worker) -> list[Any]:
        seen: list[Any] = []

        def build(scope: Scope[int]) -> Any:
            handle, stream = scope.new_input()
            stream.exchange(lambda b: b[:, 0], vectorized=True).inspect_batch(lambda t, b: seen.append(b.copy()))
            return handle

        handle = worker.dataflow(build)
        handle.send_batch(np.arange(20, dtype=np.int64).reshape(10, 2) + 100 * worker.index)
        return seen

    out = execute(job, 2, check_serialization=True)
    rows = sorted(map(tuple, np.concatenate([b for seen in out for b in seen]).tolist()))
    assert rows == sorted(map(tuple, np.concatenate([np.arange(20).reshape(10, 2) + 100 * i for i in (0, 1)]).tolist()))


def test_across_two_processes_the_error_names_the_exchange_and_the_sender() -> None:
    cluster = Cluster(2)
    try:
        cluster.start(["tests.cluster.misuse_jobs:lock_through_exchange"])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    failed = [err for code, _, err in results if code != 0]
    assert failed, report(results)
    # Each process sends a lock to the other: each fails on its own send, naming it, with no raw pickle error.
    for code, _, err in results:
        assert code == 1, report(results)
        assert "UnpicklableRecordError" in err and "'tag'" in err and "exchange" in err, report(results)
        assert "Traceback" not in err, report(results)

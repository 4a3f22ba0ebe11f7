"""Columnar batches: numpy arrays and Arrow record batches through vectorised exchange and map_batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pytimely import Worker, execute


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_arrow_batches_are_routed_by_key_and_kept_columnar(workers: int) -> None:
    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            routed = stream.exchange(lambda b: b.column("k").to_numpy(), vectorized=True)
            kept = routed.map_batch(lambda b: b.filter(pc.greater(b.column("v"), 1)))
            return handle, kept.capture()

        handle, captured = worker.dataflow(build)
        if worker.index == 0:
            handle.send_batch(pa.record_batch({"k": list(range(12)), "v": [i % 4 for i in range(12)]}))
            handle.advance_to(1)
            handle.send_batch(pa.record_batch({"k": [5, 6], "v": [9, 0]}))
        return captured

    results = execute(job, workers, seed=workers)
    seen = []
    for index, captured in enumerate(results):
        for time, batch in captured:
            assert isinstance(batch, pa.RecordBatch)
            for k, v in zip(batch.column("k").to_pylist(), batch.column("v").to_pylist(), strict=True):
                assert k % workers == index
                seen.append((time, k, v))
    expected = [(0, k, k % 4) for k in range(12) if k % 4 > 1] + [(1, 5, 9)]
    assert sorted(seen) == sorted(expected)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_numpy_rows_are_routed_by_a_column(workers: int) -> None:
    data = np.arange(200, dtype=np.int64).reshape(100, 2)

    def job(worker: Worker) -> Any:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            doubled = stream.exchange(lambda b: b[:, 0] // 2, vectorized=True).map_batch(lambda b: b * 2)
            return handle, doubled.capture()

        handle, captured = worker.dataflow(build)
        handle.send_batch(data[worker.index :: worker.peers])
        return captured

    rows = []
    for index, captured in enumerate(execute(job, workers)):
        for _, batch in captured:
            assert isinstance(batch, np.ndarray)
            assert np.all((batch[:, 0] // 2 // 2) % workers == index)
            rows.extend(map(tuple, batch.tolist()))
    assert sorted(rows) == sorted(map(tuple, (data * 2).tolist()))


def test_vectorized_route_with_wrong_shape_is_a_typed_error() -> None:
    from pytimely.errors import ArityError

    def job(worker: Worker) -> None:
        def build(scope):  # type: ignore[no-untyped-def]
            handle, stream = scope.new_input()
            stream.exchange(lambda b: np.zeros(3, dtype=np.int64), vectorized=True).capture()
            return handle

        handle = worker.dataflow(build)
        handle.send_batch(np.arange(10))

    with pytest.raises(ArityError, match="one key per row"):
        execute(job, 2)

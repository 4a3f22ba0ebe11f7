"""Every operator on lists, numpy arrays and Arrow batches, on 1-3 workers and on 2 processes, against a
pure-Python reference (:mod:`tests.dataflow.batch_matrix`), and the batch container's own contract."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from pytimely import Worker, execute
from tests.cluster.helpers import Cluster, report
from tests.dataflow import batch_matrix


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("kind", batch_matrix.KINDS)
def test_every_operator_on_every_batch_kind_equals_the_reference(kind: str, workers: int) -> None:
    def job(worker: Worker) -> Any:
        return batch_matrix.run(worker, kind)

    caught = execute(job, workers, seed=workers)
    assert batch_matrix.check(kind, caught, workers) == []


@pytest.mark.parametrize("kind", batch_matrix.KINDS)
def test_every_operator_on_every_batch_kind_across_two_processes(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "caught"
    cluster = Cluster(2, workers="1")
    try:
        cluster.start(["tests.dataflow.batch_matrix:job", kind, str(out)])
        results = cluster.wait(timeout=120)
    finally:
        cluster.kill()
    assert all(code == 0 for code, _, _ in results), report(results)
    caught = [pickle.loads((tmp_path / f"caught.{i}").read_bytes()) for i in range(2)]
    assert batch_matrix.check(kind, caught, 2) == []

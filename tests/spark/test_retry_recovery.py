"""A hosted computation with epochs and ``recovery=``: a retried barrier stage resumes from its last snapshot."""

from __future__ import annotations

import os
import random
import secrets
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pytimely.dataflow.operators.state_machine import state_machine
from pytimely.errors import InvalidArgument, StoreNotWritableError
from pytimely.spark import collect, run_dataflow

SCHEMA = "epoch long, key string, n long"


def _pairs(batch: Any) -> list[tuple[str, int]]:
    return [(key, 1) for key in batch.column("key").to_pylist()]


def _add(key: str, _one: int, count: int | None) -> tuple[int, list[tuple[str, int]]]:
    total = (count or 0) + 1
    return total, [(key, total)]


class RunningCounts:
    """Each key's running count across epochs (state kept by ``state_machine``, which declares it: the build
    knows nothing of recovery).

    Every batch an attempt computes leaves a file ``<attempt>-<epoch>-<token>`` in ``log``; the first attempt
    fails at epoch ``fail_at`` (a marker file remembers), raising or killing its own Python worker.
    """

    def __init__(self, log: Path, marker: Path, fail_at: int | None, kill: bool = False) -> None:
        self.log, self.marker, self.fail_at, self.kill = str(log), str(marker), fail_at, kill

    def __call__(self, stream: Any) -> Any:
        log, marker, fail_at, kill = self.log, self.marker, self.fail_at, self.kill
        attempt = 1 if os.path.exists(marker) else 0

        def note(t: int, _batch: Any) -> None:
            Path(log, f"{attempt}-{t}-{secrets.token_hex(4)}").touch()
            if t == fail_at and attempt == 0 and not os.path.exists(marker):
                Path(marker).touch()
                if kill:
                    os._exit(17)
                raise RuntimeError(f"the first attempt fails at epoch {t}")

        pairs = stream.inspect_batch(note).map_batch(_pairs)
        return state_machine(pairs, _add, None, None, 256, "count")


def reference(rows: list[tuple[int, str]]) -> list[tuple[int, str, int]]:
    seen: dict[str, int] = defaultdict(int)
    out = []
    for epoch, key in sorted(rows):
        seen[key] += 1
        out.append((epoch, key, seen[key]))
    return sorted(out)


def frame(spark: Any, seed: int, epochs: int = 6) -> tuple[Any, list[tuple[int, str]]]:
    rng = random.Random(seed)
    rows = [(rng.randrange(epochs), f"k{rng.randrange(12)}") for _ in range(300)]
    return spark.createDataFrame(rows, "epoch long, key string"), rows


def rows_of(result: Any) -> list[tuple[int, str, int]]:
    table = collect(result)
    return sorted(zip(*(table.column(c).to_pylist() for c in ("epoch", "key", "n")), strict=True))


def attempts(log: Path) -> dict[int, set[int]]:
    """The epochs each attempt computed."""
    seen: dict[int, set[int]] = defaultdict(set)
    for path in log.iterdir():
        attempt, epoch, _ = path.name.split("-")
        seen[int(attempt)].add(int(epoch))
    return dict(seen)


@pytest.mark.parametrize("kill", [False, True], ids=["raises", "killed"])
def test_a_retried_stage_resumes_from_its_last_snapshot(spark: Any, tmp_path: Path, kill: bool) -> None:
    """The first attempt fails at epoch 4 of 6; Spark's retry resumes, and the rows are the reference's, once."""
    data, rows = frame(spark, seed=7)
    log, marker = tmp_path / "log", tmp_path / "failed-once"
    log.mkdir()
    build = RunningCounts(log, marker, fail_at=4, kill=kill)
    result = run_dataflow(build, data, SCHEMA, processes=2, workers=2, epoch="epoch", recovery=tmp_path / "store")
    assert rows_of(result) == reference(rows)
    assert marker.exists(), "the first attempt did fail"
    computed = attempts(log)
    assert set(computed) == {0, 1}, "Spark retried the stage once"
    resumed_at = min(computed[1])
    assert 1 <= resumed_at <= 4, f"the retry started over at epoch {resumed_at}"
    assert computed[1] == set(range(resumed_at, 6)), computed


def test_without_a_failure_the_rows_are_the_reference_and_a_second_action_reads_them(
    spark: Any, tmp_path: Path
) -> None:
    data, rows = frame(spark, seed=11)
    log = tmp_path / "log"
    log.mkdir()
    build = RunningCounts(log, tmp_path / "never", fail_at=None)
    result = run_dataflow(build, data, SCHEMA, processes=2, workers=1, epoch="epoch", recovery=tmp_path / "store",
                          snapshot_every=2)  # fmt: skip
    assert rows_of(result) == reference(rows)
    first = len(list(log.iterdir()))
    assert rows_of(result) == reference(rows), "acting again gives the same rows"
    assert len(list(log.iterdir())) == first, "from the committed snapshots: nothing computed again"


def test_recovery_without_epochs_or_a_store_that_cannot_be_written_is_refused_at_once(
    spark: Any, tmp_path: Path
) -> None:
    data, _ = frame(spark, seed=1)
    build = RunningCounts(tmp_path, tmp_path / "m", fail_at=None)
    with pytest.raises(InvalidArgument, match="recovery needs epoch="):
        run_dataflow(build, data, SCHEMA, recovery=tmp_path / "store")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreNotWritableError, match="a-file"):
        run_dataflow(build, data, SCHEMA, epoch="epoch", recovery=blocker)

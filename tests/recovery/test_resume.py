"""Recovery in one process: a run that died resumes from its last snapshot; the changelog is exactly once."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pytimely.errors import RecoveryMismatchError, StoreNotWritableError
from pytimely.recovery import SnapshotPolicy
from tests.recovery.jobs import Crash, expected, running_sums

EPOCHS = 8


def test_an_uninterrupted_run_commits_the_whole_changelog(tmp_path: Path) -> None:
    assert running_sums(tmp_path / "r", EPOCHS, 2) == expected(EPOCHS)


@pytest.mark.parametrize("trial", range(12))
def test_a_run_that_died_resumes_and_the_changelog_has_no_duplicate_and_no_gap(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)
    before, after = rng.choice([(1, 2), (2, 2), (2, 3), (3, 1), (2, 1)])
    every = rng.choice([1, 1, 2, 3])
    crash = (rng.randrange(before), rng.randrange(EPOCHS))
    with pytest.raises(Crash):
        running_sums(tmp_path / "r", EPOCHS, before, crash_at=crash, every=every, seed=trial)
    assert running_sums(tmp_path / "r", EPOCHS, after, every=every, seed=trial) == expected(EPOCHS)


def test_two_crashes_in_a_row_then_a_finish(tmp_path: Path) -> None:
    with pytest.raises(Crash):
        running_sums(tmp_path / "r", EPOCHS, 2, crash_at=(1, 3))
    with pytest.raises(Crash):
        running_sums(tmp_path / "r", EPOCHS, 3, crash_at=(2, 6))
    assert running_sums(tmp_path / "r", EPOCHS, 1) == expected(EPOCHS)


def test_without_a_snapshot_the_rerun_starts_over(tmp_path: Path) -> None:
    with pytest.raises(Crash):
        running_sums(tmp_path / "r", EPOCHS, 2, crash_at=(0, 0))
    assert not (tmp_path / "r" / "manifests").exists() or not list((tmp_path / "r" / "manifests").iterdir())
    assert running_sums(tmp_path / "r", EPOCHS, 2) == expected(EPOCHS)


def test_another_job_in_the_folder_is_refused_naming_the_operator(tmp_path: Path) -> None:
    with pytest.raises(Crash):
        running_sums(tmp_path / "r", EPOCHS, 2, crash_at=(0, 4))
    manifests = sorted((tmp_path / "r" / "manifests").iterdir())
    with pytest.raises(RecoveryMismatchError, match="'sum'"):
        running_sums(tmp_path / "r", EPOCHS, 2, name="total")
    assert sorted((tmp_path / "r" / "manifests").iterdir()) == manifests


def test_an_unwritable_store_fails_before_any_worker_runs(tmp_path: Path) -> None:
    with pytest.raises(StoreNotWritableError, match="does not exist"):
        running_sums(tmp_path / "missing" / "r", EPOCHS, 2)


@pytest.mark.parametrize("seconds", [1e-9, 3600.0])
def test_a_timed_policy_snapshots_the_same_epochs_on_every_worker(tmp_path: Path, seconds: float) -> None:
    policy = SnapshotPolicy(every_epochs=None, every_seconds=seconds)
    with pytest.raises(Crash):
        running_sums(tmp_path / "r", EPOCHS, 3, crash_at=(2, 5), policy=policy)
    folder = tmp_path / "r" / "manifests"
    manifests = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    # Worker 0's clock decides at each epoch for the next: with a tiny period epochs 1 to 3 at least are taken
    # (4 too if worker 0 got to commit it before the crash stopped it); with an hour, none.
    assert manifests in ([["000000000002", "000000000003"], ["000000000003", "000000000004"]] if seconds < 1 else [[]])
    assert running_sums(tmp_path / "r", EPOCHS, 2, policy=policy) == expected(EPOCHS)


def test_positions_come_back_to_the_same_worker_and_not_after_a_change_of_size(tmp_path: Path) -> None:
    from pytimely import execute
    from pytimely.recovery import Recovery

    recovery = Recovery(tmp_path / "r", job="positions")

    def job(worker: Any) -> Any:
        durable = worker.recovery
        durable.begin()
        before = durable.position
        if durable.resume_epoch == 0:
            durable.commit(0, position={"offset": 100 + worker.index}, final=True)
        return before

    assert execute(job, 2, recovery=recovery) == [None, None]
    assert execute(job, 2, recovery=Recovery(tmp_path / "r", job="positions")) == [{"offset": 100}, {"offset": 101}]
    assert execute(job, 3, recovery=Recovery(tmp_path / "r", job="positions")) == [None, None, None]


def test_a_job_with_windows_is_refused_before_any_snapshot(tmp_path: Path) -> None:
    """Open windows are not snapshotted: a job holding them cannot use recovery, and the store stays empty."""
    from pytimely import execute
    from pytimely.errors import RecoveryError
    from pytimely.recovery import Recovery

    def job(worker: Any) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input(name="events")
            stream.tumbling(10, time=0, key=1, name="per ten").probe()
            return handle

        worker.dataflow(build)
        worker.recovery.begin()

    with pytest.raises(RecoveryError, match=r"operator 'per ten' of dataflow .* keeps its open windows"):
        execute(job, 2, recovery=Recovery(tmp_path / "store"))
    assert not (tmp_path / "store" / "manifests").exists()

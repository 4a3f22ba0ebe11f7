"""Recovery in one process: a run that died resumes from its last snapshot on any number of workers; the
changelog is exactly once; a store of another job, parameter or input is refused naming what differs."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from pytimely import execute
from pytimely.dataflow.operators.builder import OperatorBuilder
from pytimely.dataflow.state import Positions
from pytimely.errors import RecoveryError, RecoveryMismatchError, StoreNotWritableError
from pytimely.recovery import Recovery, SnapshotPolicy
from tests.recovery.jobs import SKEWED, Crash, expected, records, run_sums

EPOCHS = 8


def _slowly(worker: Any, epoch: int) -> None:
    """Give the writer thread time, so that crashes find committed snapshots to resume from."""
    time.sleep(0.01)
    worker.step()


def _committed(worker: Any, epoch: int) -> None:
    """Worker 0 steps until the snapshot of ``epoch`` is durable (a generous deadline), so that a crash in a later
    epoch resumes from it."""
    deadline = time.monotonic() + 60
    while worker.index == 0 and not worker.recovery.holds(epoch) and time.monotonic() < deadline:
        worker.step()
        time.sleep(0.001)


def _manifests(store: Path) -> list[str]:
    folder = store / "manifests"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_an_uninterrupted_run_gives_the_whole_changelog(tmp_path: Path) -> None:
    assert run_sums(tmp_path / "r", EPOCHS, 2) == expected(EPOCHS)
    assert _manifests(tmp_path / "r")[-1] == f"{1 << 62:020d}"  # the final snapshot


@pytest.mark.parametrize("trial", range(12))
def test_a_run_that_died_resumes_and_the_changelog_has_no_duplicate_and_no_gap(tmp_path: Path, trial: int) -> None:
    rng = random.Random(trial)
    before, after = rng.choice([(1, 2), (2, 2), (2, 3), (3, 1), (2, 1)])
    every = rng.choice([1, 1, 2, 3])
    crash = (rng.randrange(before), rng.randrange(2, EPOCHS))
    with pytest.raises(Crash):
        run_sums(tmp_path / "r", EPOCHS, before, crash_at=crash, every=every, seed=trial, on_epoch=_slowly)
    resumed_from = _manifests(tmp_path / "r")
    assert run_sums(tmp_path / "r", EPOCHS, after, every=every, seed=trial) == expected(EPOCHS)
    if crash[1] >= 3 and every == 1:
        assert resumed_from, "the crash came late enough for a snapshot to be committed"


@pytest.mark.parametrize("trial", range(6))
def test_a_run_of_few_changes_per_epoch_resumes_from_its_deltas_on_any_number_of_workers(
    tmp_path: Path, trial: int
) -> None:
    rng = random.Random(100 + trial)
    before, after = rng.choice([(2, 1), (2, 3), (1, 2), (3, 2)])
    crash = (rng.randrange(before), rng.randrange(4, EPOCHS))
    store = tmp_path / "r"
    with pytest.raises(Crash):
        run_sums(store, EPOCHS, before, crash_at=crash, seed=trial, on_epoch=_committed, keys=SKEWED)
    names = _manifests(store)
    assert names, "the crash came late enough for a snapshot to be committed"
    body = json.loads((store / "manifests" / names[-1]).read_bytes())["body"]
    assert body["epoch"] >= 1 and body["deltas"], "the snapshot resumed from holds deltas (few keys changed)"
    assert run_sums(store, EPOCHS, after, seed=trial, keys=SKEWED) == expected(EPOCHS, SKEWED)


def test_a_resumed_run_computes_only_the_epochs_after_its_snapshot(tmp_path: Path) -> None:
    with pytest.raises(Crash):
        run_sums(tmp_path / "r", EPOCHS, 2, crash_at=(0, 6), on_epoch=_slowly)
    committed = max(int(n) for n in _manifests(tmp_path / "r"))
    seen: list[int] = []
    assert run_sums(tmp_path / "r", EPOCHS, 3, seen=seen) == expected(EPOCHS)
    assert sum(seen) == sum(len(records(e)) for e in range(committed + 1, EPOCHS))


def test_two_crashes_in_a_row_then_a_finish(tmp_path: Path) -> None:
    with pytest.raises(Crash):
        run_sums(tmp_path / "r", EPOCHS, 2, crash_at=(1, 3), on_epoch=_slowly)
    with pytest.raises(Crash):
        run_sums(tmp_path / "r", EPOCHS, 3, crash_at=(2, 6), on_epoch=_slowly)
    assert run_sums(tmp_path / "r", EPOCHS, 1) == expected(EPOCHS)


def test_without_a_snapshot_the_rerun_starts_over(tmp_path: Path) -> None:
    with pytest.raises(Crash):
        run_sums(tmp_path / "r", EPOCHS, 2, crash_at=(0, 0))
    assert not _manifests(tmp_path / "r")
    assert run_sums(tmp_path / "r", EPOCHS, 2) == expected(EPOCHS)


def test_a_finished_run_started_again_computes_nothing_and_gives_the_same_output(tmp_path: Path) -> None:
    first = run_sums(tmp_path / "r", EPOCHS, 2)
    seen: list[int] = []
    assert run_sums(tmp_path / "r", EPOCHS, 3, seen=seen) == first == expected(EPOCHS)
    assert seen == []


def test_a_policy_of_every_third_epoch_snapshots_those_epochs_and_keep_bounds_them(tmp_path: Path) -> None:
    run_sums(tmp_path / "r", EPOCHS, 2, every=3, keep=10, on_epoch=_slowly)
    # The last (8) is where the fence stood when the input ended, then the final snapshot; a commit the writer
    # had not started when a newer one came is dropped (the newer holds everything), so under load any of them
    # but the last may be missing.
    committed = [int(n) for n in _manifests(tmp_path / "r")]
    assert committed[-1] == 1 << 62 and set(committed[:-1]) <= {2, 5, 8} and len(committed) >= 2
    run_sums(tmp_path / "k", EPOCHS, 2, keep=3, on_epoch=_slowly)
    kept = [int(n) for n in _manifests(tmp_path / "k")]
    assert len(kept) == 3 and kept[-1] == 1 << 62 and kept[0] >= 4


def test_another_job_parameter_or_input_is_refused_naming_it_and_nothing_changes(tmp_path: Path) -> None:
    store = tmp_path / "r"
    text = tmp_path / "input.txt"
    text.write_text("one\n")
    with pytest.raises(Crash):
        run_sums(store, EPOCHS, 2, crash_at=(0, 5), on_epoch=_slowly, inputs={"text": text})
    before = sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file())
    with pytest.raises(RecoveryMismatchError, match="written with epochs = 8, this run has epochs = 9") as info:
        run_sums(store, 9, 2, inputs={"text": text})
    assert info.value.field == "parameter epochs"
    text.write_text("two\n")
    with pytest.raises(RecoveryMismatchError, match="input 'text' differs in content") as info:
        run_sums(store, EPOCHS, 2, inputs={"text": text})
    assert info.value.field == "input text"
    with pytest.raises(RecoveryMismatchError, match="this run has no input 'text'"):
        run_sums(store, EPOCHS, 2)
    assert sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file()) == before
    text.write_text("one\n")
    with pytest.raises(RecoveryMismatchError, match="dataflow 'dataflow 0': the store holds state '0/sum#0/totals'"):
        run_sums(store, EPOCHS, 2, name="total", inputs={"text": text})
    assert run_sums(store, EPOCHS, 2, inputs={"text": text}) == expected(EPOCHS)


def test_fresh_mode_empties_the_store_and_starts_over(tmp_path: Path) -> None:
    store = tmp_path / "r"
    run_sums(store, EPOCHS, 2)
    with pytest.raises(RecoveryMismatchError):
        run_sums(store, 5, 2)
    seen: list[int] = []
    assert run_sums(store, 5, 2, mode="fresh", seen=seen) == expected(5)
    assert sum(seen) == 5 * 60


def test_an_unwritable_store_fails_before_any_worker_runs(tmp_path: Path) -> None:
    with pytest.raises(StoreNotWritableError, match="does not exist"):
        run_sums(tmp_path / "missing" / "r", EPOCHS, 2)


def test_source_positions_come_back_by_partition_on_any_number_of_workers(tmp_path: Path) -> None:
    """A replayable source's positions are kept in the manifest per partition; partition p goes to p % peers."""
    partitions = 6

    def job(worker: Any) -> dict[int, Any]:
        restored: dict[int, Any] = {}

        def build(scope: Any) -> Any:
            builder = OperatorBuilder(scope, "source")
            positions = builder.state("positions", Positions(restored.update))
            builder.new_output()

            def constructor(caps: list[Any], info: Any) -> Any:
                cap = caps[0]

                def logic(inputs: Any, outputs: Any) -> None:
                    if not cap.valid:
                        return
                    for p in range(worker.index, partitions, worker.peers):
                        start = positions.get(p, 0)
                        positions.set(p, start + 10 * (p + 1))
                    cap.drop()

                return logic

            builder.build(constructor)

        worker.dataflow(build)
        return restored

    recovery = Recovery(tmp_path / "r", job="positions")
    assert execute(job, 2, recovery=recovery) == [{}, {}]
    again = execute(job, 3, recovery=Recovery(tmp_path / "r", job="positions"))
    assert again == [{p: 10 * (p + 1) for p in range(partitions) if p % 3 == w} for w in range(3)]


def test_an_operator_with_undeclared_state_is_refused_before_any_snapshot(tmp_path: Path) -> None:
    def job(worker: Any) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input(name="events")
            op = scope.add_operator("keeps things", [(stream, None)], 0)
            op.undeclared_state = "its cache"
            op.logic = lambda: None
            return handle

        worker.dataflow(build)

    with pytest.raises(RecoveryError, match=r"operator 'keeps things' of dataflow .* keeps its cache"):
        execute(job, 2, recovery=Recovery(tmp_path / "store"))
    assert not (tmp_path / "store" / "manifests").exists()
    assert not (tmp_path / "store" / "snapshots").exists()


def test_policy_arguments_are_checked() -> None:
    from pytimely.errors import InvalidArgument

    for bad in ({"every_epochs": 0}, {"keep": 0}, {"rewrite_every": "2"}):
        with pytest.raises(InvalidArgument):
            SnapshotPolicy(**bad)  # type: ignore[arg-type]
    every3 = SnapshotPolicy(every_epochs=3)
    assert [e for e in range(10) if every3.due(e)] == [2, 5, 8]
    assert [every3.first_at_or_after(e) for e in range(6)] == [2, 2, 2, 5, 5, 5]

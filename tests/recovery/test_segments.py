"""Payload segments: a worker's records of a dataflow appended to one file per window of epochs, named by the
manifests as ``<segment>@<offset>``; a segment goes once no kept manifest names it and its window is over."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytimely import execute
from pytimely.recovery import LocalStore, Manifest, Recovery, Seal, SnapshotPolicy, Snapshots
from pytimely.recovery.segments import SegmentLog, container, record_name, segment_last, split_record
from pytimely.recovery.snapshots import Retained
from tests.recovery.jobs import Crash, changes, expected, sums_job


def test_records_go_one_after_another_into_the_segment_of_their_window() -> None:
    log = SegmentLog(worker=1, dataflow=0, token="t", span=4)
    first, offset, finished = log.place(0, 10)
    assert (offset, finished) == (0, None)
    assert log.place(3, 5) == (first, 10, None)
    second, offset, finished = log.place(6, 7)  # epochs 4..7: a new window; the first is written no more
    assert (offset, finished) == (0, first)
    assert (segment_last(first), segment_last(second)) == (3, 7)
    name = record_name(second, 123)
    assert split_record(name) == (second, 123) and container(name) == second
    assert split_record("snapshots/00000000000000000001-00000-000-abc0") is None  # a payload file of its own


def _manifest(epoch: int, *names: str) -> Manifest:
    return Manifest(epoch, "id", 1, [(n, 1, "0" * 64) for n in names])


def test_a_segment_goes_only_once_no_kept_manifest_names_it_and_its_window_is_over() -> None:
    early = "snapshots/00000000000000000000-00000000000000000003-00000-000-t"
    later = "snapshots/00000000000000000004-00000000000000000007-00000-000-t"
    retained = Retained()
    assert retained.commit(_manifest(1, record_name(early, 0)), keep=1) == []
    # Epoch 2's record went elsewhere, but the window of ``early`` runs to epoch 3: a worker may still append.
    assert retained.commit(_manifest(2, record_name(later, 0)), keep=1) == [("manifests/00000000000000000001", [])]
    assert retained.commit(_manifest(4, record_name(later, 9)), keep=1) == [
        ("manifests/00000000000000000002", [early])
    ]


def test_a_long_run_keeps_a_few_segments_and_a_rerun_leaves_only_what_its_last_snapshots_name(tmp_path: Path) -> None:
    store = tmp_path / "s"
    epochs = 40

    def run(crash_at: tuple[int, int] | None) -> list[tuple[int, int, int, int]]:
        policy = SnapshotPolicy(keep=2, rewrite_every=4)
        recovery = Recovery(store, job="sums", policy=policy, parameters={"epochs": epochs})
        results = execute(sums_job(epochs, crash_at=crash_at), 2, recovery=recovery)
        return changes(row for part in results for row in part)

    with pytest.raises(Crash):
        run((1, 30))
    segments = [n for n in os.listdir(store / "snapshots") if segment_last(n) is not None]
    # Two workers, 4-epoch windows, every bin written again within 4 snapshots: a handful per worker, not 30.
    assert 2 <= len(segments) <= 2 * 5, segments
    assert run(None) == expected(epochs)
    snaps = Snapshots(LocalStore(store), Seal(None))
    # The manifests the rerun found (the one it restored from and the one before) went in turn, with what only
    # they read: the store holds what the newest two snapshots read and nothing else.
    assert len(snaps.store.list("manifests")) == 2
    named: set[str] = set()
    for name in snaps.store.list("manifests"):
        manifest = snaps._read_manifest(name)
        assert manifest is not None
        named |= {container(f) for f in manifest.file_names()}
    assert sorted(f"snapshots/{n}" for n in os.listdir(store / "snapshots")) == sorted(named)

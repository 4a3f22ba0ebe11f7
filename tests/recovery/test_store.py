"""The snapshot store: all-or-nothing per epoch, torn snapshots never used, identity refused, retention bounded."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytimely.errors import (
    InvalidArgument,
    RecoveryMismatchError,
    SnapshotCorruptError,
    StoreNotWritableError,
)
from pytimely.recovery import FsspecStore, Identity, LocalStore, Manifest, SnapshotPolicy, Snapshots
from tests.recovery.conftest import S3Server

IDENTITY = Identity("job", (("dataflow", ((0, "words"), (1, "count"))),), ("counts",), 4)


def _snapshot(snaps: Snapshots, epoch: int, keep: int = 2, *, output: bytes | None = b"out") -> Manifest:
    refs = tuple(snaps.put_payload(epoch, w, f"state {epoch} {w}".encode(), (w, w + 2)) for w in range(2))
    outs = () if output is None else (snaps.put_output(epoch, 0, output),)
    manifest = Manifest(epoch, "id", 2, refs, outs, {"0": [epoch]})
    snaps.commit(manifest, keep)
    return manifest


def _stores(tmp_path: Path, request: pytest.FixtureRequest, kind: str) -> Snapshots:
    if kind == "local":
        return Snapshots(LocalStore(tmp_path / "store"))
    s3: S3Server = request.getfixturevalue("s3_server")
    return Snapshots(FsspecStore(f"s3://{s3.bucket}/recovery-{tmp_path.name}", **s3.options()))


@pytest.fixture(params=["local", "s3"])
def snaps(request: pytest.FixtureRequest, tmp_path: Path) -> Snapshots:
    """An empty, writable store of each kind."""
    s = _stores(tmp_path, request, request.param)
    s.store.check_writable()
    return s


def test_a_committed_snapshot_reads_back_whole(snaps: Snapshots) -> None:
    assert snaps.latest() is None
    written = _snapshot(snaps, 3)
    latest = snaps.latest()
    assert latest == written
    assert [snaps.read(r) for r in latest.payloads] == [b"state 3 0", b"state 3 1"]
    assert latest.positions == {"0": [3]}


def test_payloads_without_a_manifest_are_never_used_and_are_cleaned(snaps: Snapshots) -> None:
    _snapshot(snaps, 1)
    # A run that died while writing epoch 2: payloads and an output part, but no manifest.
    snaps.put_payload(2, 0, b"torn", (0,))
    snaps.put_output(2, 0, b"torn output")
    assert snaps.latest().epoch == 1
    assert len(snaps.committed_outputs(1)) == 1
    snaps.clean(1)
    assert snaps.store.list("epochs") == ["epochs/000000000001"]
    assert len(snaps.store.list("outputs")) == 1


def test_a_payload_not_matching_its_checksum_makes_the_snapshot_unusable(snaps: Snapshots) -> None:
    _snapshot(snaps, 1)
    newer = _snapshot(snaps, 2)
    snaps.store.put(newer.payloads[1].name, b"state 2 X")  # same size, other bytes
    assert snaps.latest().epoch == 1
    with pytest.raises(SnapshotCorruptError, match="does not match its checksum"):
        snaps.read(newer.payloads[1])
    snaps.store.delete(newer.payloads[0].name)
    with pytest.raises(SnapshotCorruptError, match="missing"):
        snaps.read(newer.payloads[0])


def test_a_damaged_manifest_is_not_a_snapshot(snaps: Snapshots) -> None:
    _snapshot(snaps, 1)
    _snapshot(snaps, 2)
    data = json.loads(snaps.store.get("manifests/000000000002") or b"")
    data["body"]["epoch"] = 7
    snaps.store.put("manifests/000000000002", json.dumps(data).encode())
    assert snaps.latest().epoch == 1
    snaps.store.put("manifests/000000000002", b'{"body": {"epo')
    assert snaps.latest().epoch == 1


def test_retention_keeps_the_last_n_complete_snapshots_and_the_size_bounded(snaps: Snapshots) -> None:
    for epoch in range(12):
        _snapshot(snaps, epoch, keep=3, output=None)
    assert snaps.store.list("manifests") == [f"manifests/{e:012d}" for e in (9, 10, 11)]
    assert snaps.store.list("epochs") == [f"epochs/{e:012d}" for e in (9, 10, 11)]


def test_output_parts_are_kept_by_retention_and_listed_in_epoch_order(snaps: Snapshots) -> None:
    for epoch in range(5):
        _snapshot(snaps, epoch, keep=1, output=f"{epoch}".encode())
    names = snaps.committed_outputs(4)
    assert [snaps.store.get(n) for n in names] == [b"0", b"1", b"2", b"3", b"4"]
    assert snaps.committed_outputs(None) == []


def test_identity_written_once_then_another_job_or_version_is_refused_naming_it(snaps: Snapshots) -> None:
    snaps.check_identity(IDENTITY, write=True)
    _snapshot(snaps, 0)
    snaps.check_identity(IDENTITY, write=True)  # the same job: accepted
    before = {n: snaps.store.get(n) for n in snaps.store.list("manifests")}
    renamed = Identity("job", (("dataflow", ((0, "words"), (1, "sum"))),), ("counts",), 4)
    with pytest.raises(RecoveryMismatchError, match="'count' \\(id 1\\)") as info:
        snaps.check_identity(renamed, write=True)
    assert info.value.field == "dataflow 0"
    with pytest.raises(RecoveryMismatchError, match="belongs to job 'job', not 'other'"):
        snaps.check_identity(Identity("other", IDENTITY.dataflows, IDENTITY.states, 4), write=True)
    with pytest.raises(RecoveryMismatchError, match="format version 1, this is version 99"):
        snaps.check_identity(Identity("job", IDENTITY.dataflows, IDENTITY.states, 4, format=99), write=True)
    with pytest.raises(RecoveryMismatchError, match="16"):
        snaps.check_identity(Identity("job", IDENTITY.dataflows, IDENTITY.states, 16), write=True)
    assert {n: snaps.store.get(n) for n in snaps.store.list("manifests")} == before
    assert json.loads(snaps.store.get("identity.json") or b"") == IDENTITY.to_json()


def test_a_folder_that_is_not_a_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    snaps = Snapshots(LocalStore(folder))
    with pytest.raises(RecoveryMismatchError, match="not a recovery store"):
        snaps.check_identity(IDENTITY, write=True)
    assert sorted(os.listdir(folder)) == ["notes.txt"]


def test_a_store_that_cannot_be_written_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(StoreNotWritableError, match="does not exist"):
        LocalStore(tmp_path / "no" / "store").check_writable()
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreNotWritableError, match="not a folder"):
        LocalStore(tmp_path / "file").check_writable()
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere")
        with pytest.raises(StoreNotWritableError, match="cannot write"):
            LocalStore(locked).check_writable()
    finally:
        locked.chmod(0o700)


def test_a_writer_killed_mid_write_leaves_only_a_temporary_the_store_ignores(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    snaps = Snapshots(store)
    store.check_writable()
    _snapshot(snaps, 0)
    # What write_atomic leaves when killed before its rename: a dot-file of a process that no longer runs.
    folder = tmp_path / "s" / "manifests"
    (folder / ".000000000001.host.999999.0123456789abcdef.tmp").write_bytes(b'{"body": {"ep')
    assert store.list("manifests") == ["manifests/000000000000"]
    assert snaps.latest().epoch == 0


def test_policy_arguments_are_checked_and_decide() -> None:
    with pytest.raises(InvalidArgument):
        SnapshotPolicy(every_epochs=0)
    with pytest.raises(InvalidArgument):
        SnapshotPolicy(every_epochs=None, every_seconds=None)
    with pytest.raises(InvalidArgument):
        SnapshotPolicy(keep=0)
    every3 = SnapshotPolicy(every_epochs=3)
    assert [e for e in range(10) if every3.due(e, e - e % 3 - (3 if e % 3 == 0 else 0), 0.0)] == [0, 3, 6, 9]
    timed = SnapshotPolicy(every_epochs=None, every_seconds=5.0)
    assert not timed.due(4, 0, last_time=100.0, now=104.0)
    assert timed.due(4, 0, last_time=100.0, now=105.0)

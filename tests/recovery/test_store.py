"""The snapshot store: manifests after payloads, usable snapshots only, fallback with a warning, sealing,
identity refused naming what differs, retention that keeps what a kept snapshot reads, leftovers cleaned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytimely.errors import RecoveryMismatchError, SnapshotSealError, StoreNotWritableError
from pytimely.recovery import (
    FORMAT_VERSION,
    FsspecStore,
    Identity,
    LocalStore,
    Manifest,
    RecoveryWarning,
    Seal,
    Snapshots,
)
from pytimely.recovery.manifest import epoch_name
from tests.recovery.conftest import S3Server

IDENTITY = Identity("job", {"epochs": 4}, {"text": "sha256:abc"})
KEY = b"k" * 32


def _snapshot(snaps: Snapshots, epoch: int, keep: int = 2, *, reuse: Manifest | None = None) -> Manifest:
    """Two workers' payloads at ``epoch`` (bin w of a state), committed; bin 9 stays where ``reuse`` had it."""
    files, binned = [], {}
    for w in range(2):
        name = snaps.payload_name(epoch, w, 0)
        files.append(snaps.put_payload(name, f"state {epoch} {w}".encode()))
        binned[w] = (len(files) - 1, 0, len(f"state {epoch} {w}"))
    if reuse is not None:
        files.append(reuse.files[reuse.binned["k"][9][0]])
        binned[9] = (len(files) - 1, *reuse.binned["k"][9][1:])
    manifest = Manifest(epoch, "id", 2, files, {"k": binned})
    snaps.commit(manifest, keep)
    return manifest


@pytest.fixture(params=["local", "s3"])
def snaps(request: pytest.FixtureRequest, tmp_path: Path) -> Snapshots:
    """An empty, writable store of each kind, unsealed."""
    if request.param == "local":
        store: LocalStore | FsspecStore = LocalStore(tmp_path / "store")
    else:
        s3: S3Server = request.getfixturevalue("s3_server")
        store = FsspecStore(f"s3://{s3.bucket}/recovery-{tmp_path.name}", **s3.options())
    store.check_writable()
    return Snapshots(store, Seal(None))


def test_a_committed_snapshot_reads_back_whole_and_verified(snaps: Snapshots) -> None:
    assert snaps.latest("id") is None
    written = _snapshot(snaps, 3)
    opened = snaps.latest("id")
    assert opened is not None and opened.manifest.to_json() == written.to_json()
    assert [opened.piece(written.binned["k"][w]) for w in range(2)] == [b"state 3 0", b"state 3 1"]


def test_a_damaged_newest_manifest_falls_back_to_the_one_before_with_a_warning(snaps: Snapshots) -> None:
    _snapshot(snaps, 1)
    _snapshot(snaps, 2)
    name = f"manifests/{epoch_name(2)}"
    data = json.loads(snaps.store.get(name) or b"")
    data["body"]["epoch"] = 7
    snaps.store.put(name, json.dumps(data).encode())
    with pytest.warns(RecoveryWarning, match=f"{name} is damaged; using an older snapshot"):
        assert snaps.latest("id").manifest.epoch == 1  # type: ignore[union-attr]
    snaps.store.put(name, b'{"body": {"epo')
    with pytest.warns(RecoveryWarning, match="is damaged"):
        assert snaps.latest("id").manifest.epoch == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda data: data[:-3], "has 6 bytes, not the 9 its manifest records"),
        (lambda data: data[:-1] + b"X", "does not match its checksum"),
        (None, "is missing"),
    ],
)
def test_a_truncated_altered_or_missing_payload_makes_the_snapshot_unusable(
    snaps: Snapshots, damage: object, said: str
) -> None:
    _snapshot(snaps, 1)
    newer = _snapshot(snaps, 2)
    name = newer.files[1][0]
    if damage is None:
        snaps.store.delete(name)
    else:
        snaps.store.put(name, damage(snaps.store.get(name)))  # type: ignore[operator]
    with pytest.warns(RecoveryWarning, match=f"snapshot manifests/{epoch_name(2)} is not usable: {name} {said}"):
        assert snaps.latest("id").manifest.epoch == 1  # type: ignore[union-attr]


def test_with_every_snapshot_unusable_the_warning_says_the_run_starts_over(snaps: Snapshots) -> None:
    _snapshot(snaps, 1)
    snaps.store.put(f"manifests/{epoch_name(1)}", b"not json")
    with pytest.warns(RecoveryWarning, match="no usable snapshot among 1; starting over from the first epoch"):
        assert snaps.latest("id") is None


def test_a_snapshot_of_another_identity_is_passed_over(snaps: Snapshots) -> None:
    _snapshot(snaps, 1)
    with pytest.warns(RecoveryWarning, match="was taken by another job"):
        assert snaps.latest("other") is None


def test_retention_keeps_the_files_kept_snapshots_read_even_when_old(snaps: Snapshots) -> None:
    first = _snapshot(snaps, 0)
    old_file = first.files[first.binned["k"][0][0]][0]
    # Bin 9 of every later snapshot is still the piece written at epoch 0 (it did not change).
    first.binned["k"][9] = first.binned["k"][0]
    manifest = first
    for epoch in range(1, 8):
        manifest = _snapshot(snaps, epoch, keep=2, reuse=manifest)
    assert snaps.store.list("manifests") == [f"manifests/{epoch_name(e)}" for e in (6, 7)]
    assert snaps.store.get(old_file) == b"state 0 0"  # kept: bin 9 reads it
    kept = snaps.store.list("snapshots")
    assert [name.split("/")[1][:20] for name in kept] == [epoch_name(e) for e in (0, 6, 6, 7, 7)]
    assert old_file in kept  # worker 1's file of epoch 0 went, worker 0's stays


def test_clean_removes_what_a_run_that_died_left_after_the_snapshot(snaps: Snapshots, tmp_path: Path) -> None:
    kept = _snapshot(snaps, 1)
    snaps.put_payload(snaps.payload_name(2, 0, 0), b"torn")
    snaps.store.put(f"manifests/{epoch_name(3)}", b"torn manifest")
    snaps.clean(kept)
    assert snaps.store.list("manifests") == [f"manifests/{epoch_name(1)}"]
    assert [name.split("/")[1][:20] for name in snaps.store.list("snapshots")] == [epoch_name(1)] * 2


def test_temporary_files_of_killed_writers_are_swept_from_every_folder(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    store.check_writable()
    snaps = Snapshots(store, Seal(None))
    _snapshot(snaps, 0)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    from pytimely.atomic import _host

    leftovers = [
        tmp_path / "s" / "manifests" / f".{epoch_name(1)}.{_host()}.{pid}.0123456789abcdef.tmp",
        tmp_path / "s" / "snapshots" / f".{epoch_name(0)}-00000-000-x.{_host()}.{pid}.0123456789abcdef.tmp",
        tmp_path / "s" / f".identity.json.{_host()}.{pid}.0123456789abcdef.tmp",
        tmp_path / "s" / f".probe-{pid}-abcd",
    ]
    for path in leftovers:
        path.write_bytes(b"half")
    mine = tmp_path / "s" / f".run.json.{_host()}.{os.getpid()}.0123456789abcdef.tmp"
    mine.write_bytes(b"in flight")
    assert sorted(store.sweep()) == sorted(os.fspath(p) for p in leftovers)
    assert mine.exists()  # a writer still running keeps its temporary file
    assert store.list("manifests") == [f"manifests/{epoch_name(0)}"]


def test_identity_written_once_then_another_job_parameter_input_or_version_is_refused(snaps: Snapshots) -> None:
    snaps.check_identity(IDENTITY, write=True)
    snaps.check_identity(IDENTITY, write=True)  # the same job: accepted
    cases = [
        (Identity("other", IDENTITY.parameters, IDENTITY.inputs), "belongs to job 'job', not 'other'", "job"),
        (Identity("job", {"epochs": 40}, IDENTITY.inputs), "written with epochs = 4, this run has epochs = 40",
         "parameter epochs"),
        (Identity("job", IDENTITY.parameters, {"text": "sha256:def"}), "input 'text' differs in content",
         "input text"),
        (Identity("job", IDENTITY.parameters, {}), "this run has no input 'text'", "input text"),
        (Identity("job", IDENTITY.parameters, IDENTITY.inputs, format=99),
         f"format version {FORMAT_VERSION}, this is version 99", "format"),
    ]
    for identity, said, field in cases:
        with pytest.raises(RecoveryMismatchError, match=said) as info:
            snaps.check_identity(identity, write=True)
        assert info.value.field == field
    body = json.loads(snaps.store.get("identity.json") or b"")["body"]
    assert body == IDENTITY.to_json()


def test_a_folder_that_is_not_a_store_is_refused_and_left_alone(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep me")
    snaps = Snapshots(LocalStore(folder), Seal(None))
    with pytest.raises(RecoveryMismatchError, match="not a recovery store"):
        snaps.check_identity(IDENTITY, write=True)
    with pytest.raises(RecoveryMismatchError, match="only empties a recovery store"):
        snaps.wipe()
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


def test_a_sealed_store_refuses_a_run_without_its_key_or_with_another(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    store.check_writable()
    sealed = Snapshots(store, Seal(KEY))
    sealed.check_identity(Identity("job", key_id=Seal(KEY).key_id), write=True)
    _snapshot(sealed, 1)
    with pytest.raises(SnapshotSealError, match="is sealed with a key and this run has none"):
        Snapshots(store, Seal(None)).check_identity(Identity("job"), write=False)
    other = Seal(b"o" * 32)
    with pytest.raises(SnapshotSealError, match="not sealed by this store's key"):
        Snapshots(store, other).check_identity(Identity("job", key_id=other.key_id), write=False)
    unsealed = LocalStore(tmp_path / "u")
    unsealed.check_writable()
    Snapshots(unsealed, Seal(None)).check_identity(Identity("job"), write=True)
    with pytest.raises(SnapshotSealError, match=r"is not sealed .* this run has a key and refuses it"):
        Snapshots(unsealed, Seal(KEY)).check_identity(Identity("job", key_id=Seal(KEY).key_id), write=False)


def test_a_sealed_store_passes_over_a_manifest_it_did_not_seal(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    store.check_writable()
    sealed = Snapshots(store, Seal(KEY))
    _snapshot(sealed, 1)
    forged = _snapshot(Snapshots(store, Seal(None)), 2)  # checksummed, as anyone could write it
    assert forged.epoch == 2
    refused = r"not sealed .*this run has a key and refuses it; .*using an older snapshot"
    with pytest.warns(RecoveryWarning, match=refused):
        assert sealed.latest("id").manifest.epoch == 1  # type: ignore[union-attr]

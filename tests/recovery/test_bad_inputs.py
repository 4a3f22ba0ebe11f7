"""Bad inputs to recovery: a crafted payload, damaged, truncated and foreign payloads, another version's store, a
store that fills up mid-run. Typed errors naming the file, nothing half-written, never a resume into wrong output."""

from __future__ import annotations

import contextlib
import errno
import json
import pickle
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pytimely.errors import RecoveryMismatchError, SnapshotSealError, StoreWriteError
from pytimely.recovery import FORMAT_VERSION, FsspecStore, LocalStore, Manifest, RecoveryWarning, Seal, Snapshots
from pytimely.recovery.manifest import digest
from pytimely.recovery.segments import record_name, split_record
from tests.recovery.jobs import Crash, expected, run_sums

EPOCHS = 8
KEY = b"a key of thirty-two bytes, really"


def _slowly(worker: Any, epoch: int) -> None:
    time.sleep(0.01)
    worker.step()


def _died(store: Any, **options: Any) -> None:
    """A run that dies at epoch 6 after committing snapshots."""
    with pytest.raises(Crash):
        run_sums(store, EPOCHS, 2, crash_at=(1, 6), on_epoch=_slowly, **options)


class _Evil:
    """Unpickling it creates a file: what a crafted payload could do instead."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.marker), "w"))


def _craft(store: Path, marker: Path, seal: Seal) -> str:
    """Replace the newest snapshot's first payload with a crafted pickle and make its manifest agree (checksums
    recomputed, sealed with ``seal``: an attacker without the store's key can only checksum). Its manifest name."""
    newest = sorted((store / "manifests").iterdir())[-1]
    body = json.loads(newest.read_bytes())["body"]
    manifest = Manifest.from_json(body)
    evil = pickle.dumps(_Evil(marker))
    name, _, _ = manifest.files[0]
    split = split_record(name)
    if split is None:
        (store / name).write_bytes(evil)
    else:  # a record of a segment: the crafted one is appended to it, and the manifest names that
        segment = store / split[0]
        name = record_name(split[0], segment.stat().st_size)
        with segment.open("ab") as out:
            out.write(evil)
    manifest.files[0] = (name, len(evil), digest(evil))
    for bins in manifest.binned.values():
        for b, piece in bins.items():
            if piece[0] == 0:
                bins[b] = (0, 0, len(evil))
    newest.write_bytes(seal.wrap("manifest", manifest.to_json()))
    return newest.name


def test_a_sealed_store_refuses_a_crafted_payload_before_unpickling_it(tmp_path: Path) -> None:
    store, marker = tmp_path / "s", tmp_path / "ran"
    _died(store, key=KEY)
    name = _craft(store, marker, Seal(None))
    with pytest.warns(RecoveryWarning, match=f"manifests/{name} is not sealed .* using an older snapshot"):
        assert run_sums(store, EPOCHS, 2, key=KEY) == expected(EPOCHS)
    assert not marker.exists()


def test_without_a_key_the_store_is_trusted_like_the_program_and_a_crafted_payload_runs(tmp_path: Path) -> None:
    """The trust model the help states: an unsealed store's files are unpickled as they are."""
    store, marker = tmp_path / "s", tmp_path / "ran"
    _died(store)
    _craft(store, marker, Seal(None))
    with contextlib.suppress(Exception):
        run_sums(store, EPOCHS, 2)
    assert marker.exists()


def test_a_sealed_store_opened_without_its_key_or_with_another_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "s"
    _died(store, key=KEY)
    with pytest.raises(SnapshotSealError, match="sealed with a key and this run has none"):
        run_sums(store, EPOCHS, 2)
    with pytest.raises(SnapshotSealError, match="another key"):
        run_sums(store, EPOCHS, 2, key=b"another key, thirty-two bytes...")
    assert run_sums(store, EPOCHS, 2, key=KEY) == expected(EPOCHS)


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign"])
def test_a_damaged_truncated_or_foreign_payload_falls_back_with_a_warning_naming_it(
    tmp_path: Path, damage: str
) -> None:
    store = tmp_path / "s"
    _died(store)
    newest = sorted((store / "manifests").iterdir())[-1]
    files = Manifest.from_json(json.loads(newest.read_bytes())["body"]).files
    # The newest record (the one a torn write at the end of a segment would cut): the last in its file.
    name, size, _ = max(files, key=lambda f: _where(store, f[0])[1])
    path, offset = _where(store, name)
    data = path.read_bytes()
    if damage == "flip":
        end = offset + size - 1
        path.write_bytes(data[:end] + bytes([data[end] ^ 1]) + data[end + 1 :])
    elif damage == "truncate":  # a torn write at the end of its file
        path.write_bytes(data[: offset + size // 2])
    else:
        other = tmp_path / "other"
        run_sums(other, 3, 1, name="other")
        foreign = next(p for p in (other / "snapshots").rglob("0*") if p.is_file()).read_bytes()
        path.write_bytes(data[:offset] + foreign[:size].ljust(size, b"\0") + data[offset + size :])
    with pytest.warns(RecoveryWarning, match=f"{newest.name} is not usable: {name}"):
        assert run_sums(store, EPOCHS, 3) == expected(EPOCHS)


def test_a_store_of_another_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    store = tmp_path / "s"
    _died(store)
    identity = json.loads((store / "identity.json").read_bytes())
    identity["body"]["format"] = 1
    (store / "identity.json").write_bytes(Seal(None).wrap("identity", identity["body"]))
    before = sorted((p, p.read_bytes()) for p in store.rglob("*") if p.is_file())
    with pytest.raises(RecoveryMismatchError, match=f"format version 1, this is version {FORMAT_VERSION}"):
        run_sums(store, EPOCHS, 2)
    assert sorted((p, p.read_bytes()) for p in store.rglob("*") if p.is_file()) == before


def _where(store: Path, name: str) -> tuple[Path, int]:
    """The file a payload name lives in and the offset in it (a record of a segment, or a file of its own)."""
    split = split_record(name)
    return (store / name, 0) if split is None else (store / split[0], split[1])


def _check_nothing_half_written(store: Path) -> None:
    """No temporary file; every manifest there opens and names files that are whole."""
    assert not [p for p in store.rglob(".*") if p.is_file()]
    snaps = Snapshots(LocalStore(store), Seal(None))
    for name in snaps.store.list("manifests"):
        manifest = snaps._read_manifest(name)
        assert manifest is not None
        for file, size, sha in manifest.files:
            path, offset = _where(store, file)
            data = path.read_bytes()[offset : offset + size]
            assert (len(data), digest(data)) == (size, sha)


@contextlib.contextmanager
def _tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A small tmpfs at ``folder`` (skips the test where mounting is not allowed)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs privileges); the fsspec quota test stands in for it")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_store_that_fills_up_mid_run_fails_naming_the_file_and_keeps_its_last_snapshot(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", "1m") as disk:
        store = disk / "s"
        filler = disk / "filler"
        filler.write_bytes(b"x" * (1024 * 1024 - 48 * 1024))
        with pytest.raises(StoreWriteError, match=r"cannot write .*: No space left on device") as info:
            run_sums(store, 40, 2, on_epoch=_slowly, parameters={"epochs": 40})
        assert str(store) in info.value.path
        _check_nothing_half_written(store)
        filler.unlink()
        assert run_sums(store, 40, 2, parameters={"epochs": 40}) == expected(40)


class _QuotaFS:
    """Builds an in-memory fsspec file system that raises ENOSPC once ``limit`` bytes are stored."""

    @staticmethod
    def register(limit: int) -> Any:
        import fsspec  # type: ignore[import-untyped]
        from fsspec.implementations.memory import MemoryFileSystem  # type: ignore[import-untyped]

        class QuotaFileSystem(MemoryFileSystem):  # type: ignore[misc]
            protocol = "quotamem"
            store: ClassVar[dict[str, Any]] = {}
            pseudo_dirs: ClassVar[list[str]] = [""]
            quota = limit

            def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
                used = sum(len(f.getvalue()) for f in self.store.values())
                if used + len(value) > self.quota:
                    raise OSError(errno.ENOSPC, "No space left on device", path)
                super().pipe_file(path, value, **kwargs)

        fsspec.register_implementation("quotamem", QuotaFileSystem, clobber=True)
        return QuotaFileSystem


def test_a_store_whose_writes_fail_through_fsspec_fails_the_run_and_keeps_its_last_snapshot(tmp_path: Path) -> None:
    fs = _QuotaFS.register(40_000)
    url = f"quotamem://full-{tmp_path.name}"
    with pytest.raises(StoreWriteError, match="No space left on device") as info:
        run_sums(url, 40, 2, on_epoch=_slowly, parameters={"epochs": 40})
    assert url in info.value.path
    snaps = Snapshots(FsspecStore(url), Seal(None))
    for name in snaps.store.list("manifests"):
        manifest = snaps._read_manifest(name)
        assert manifest is not None and all(snaps.store.get(f) is not None for f in manifest.file_names())
    fs.quota = 10_000_000
    assert run_sums(url, 40, 2, parameters={"epochs": 40}) == expected(40)

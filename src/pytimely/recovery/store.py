"""Where snapshots live: a :class:`SnapshotStore` holds named blobs; :class:`LocalStore` keeps them in a folder.

A store only puts, gets, lists and deletes whole blobs, each put atomic (a reader sees the whole blob or
none): a local file written under a temporary name and renamed (:func:`pytimely.atomic.write_atomic`, the
helper ``io`` and the Spark session share), or one object PUT on S3. What makes a snapshot count (a
manifest committed after its payloads) is built on top of that in :mod:`pytimely.recovery.snapshots`,
the same for every store.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Protocol, runtime_checkable

from pytimely.atomic import remove_stale, write_atomic
from pytimely.errors import RecoveryError, StoreNotWritableError

__all__ = ["LocalStore", "SnapshotStore", "open_store"]


@runtime_checkable
class SnapshotStore(Protocol):
    """Named blobs (``/``-separated names), each put all-or-nothing."""

    location: str
    """Where the store is, for messages (a folder, an ``s3://`` URL)."""

    def check_writable(self) -> None:
        """Raise :class:`~pytimely.errors.StoreNotWritableError` unless a blob can be put and removed now."""
        ...

    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` as ``name`` atomically (replacing any blob of that name)."""
        ...

    def get(self, name: str) -> bytes | None:
        """The blob ``name``, or ``None`` if there is none."""
        ...

    def list(self, prefix: str) -> list[str]:
        """The names under the folder ``prefix`` (no trailing ``/``), sorted; empty if there is none."""
        ...

    def delete(self, name: str) -> None:
        """Remove blob ``name`` (no error if it is gone already)."""
        ...


class LocalStore:
    """A :class:`SnapshotStore` in a local folder: one file per blob, written durably (fsync, then rename)."""

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.root = Path(path)
        self.location = os.fspath(path)
        self.durable = durable
        """fsync every blob and its folder before the rename (off only for benchmarks of the cost)."""

    def __repr__(self) -> str:
        return f"LocalStore({self.location!r})"

    def _path(self, name: str) -> Path:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise RecoveryError(f"{self.location}: {name!r} is not a blob name inside the store", self.location)
        return self.root / name

    def check_writable(self) -> None:
        """Create the folder if its parent exists; put and remove a probe file; a failure is typed and says why."""
        where = self.location
        if self.root.exists() and not self.root.is_dir():
            raise StoreNotWritableError(f"recovery store {where}: not a folder", where)
        if not self.root.parent.is_dir():
            raise StoreNotWritableError(
                f"recovery store {where}: the folder {os.fspath(self.root.parent)} does not exist", where
            )
        probe = self.root / f".probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            self.root.mkdir(exist_ok=True)
            probe.write_bytes(b"probe")
            probe.unlink()
        except OSError as exc:
            raise StoreNotWritableError(f"recovery store {where}: cannot write: {exc.strerror or exc}", where) from None

    def put(self, name: str, data: bytes) -> None:
        """Write ``name`` under a temporary name and rename it over (missing folders are made)."""
        path = self._path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            write_atomic(path, data, durable=self.durable)
        except OSError as exc:
            where = os.fspath(path)
            raise RecoveryError(f"recovery store {self.location}: cannot write {name}: {exc}", where) from None

    def get(self, name: str) -> bytes | None:
        """The bytes of ``name`` or ``None``."""
        try:
            return self._path(name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list(self, prefix: str) -> list[str]:
        """Names of the files in folder ``prefix`` (temporary files of writes in flight left out)."""
        folder = self._path(prefix) if prefix else self.root
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = f"{prefix}/" if prefix else ""
        return [base + e.name for e in entries if not e.name.startswith(".")]

    def delete(self, name: str) -> None:
        """Remove the file (or the empty folder) ``name`` and the abandoned temporary files beside it."""
        path = self._path(name)
        with contextlib.suppress(FileNotFoundError):
            if path.is_dir():
                for child in path.iterdir():
                    if child.name.startswith("."):
                        child.unlink(missing_ok=True)  # temporaries of writers killed mid-write
                path.rmdir()
            else:
                path.unlink()
                remove_stale(path)


def open_store(location: str | os.PathLike[str] | SnapshotStore) -> SnapshotStore:
    """A store for ``location``: a store as is, ``s3://``/``memory://`` and other fsspec URLs, else a folder."""
    if isinstance(location, SnapshotStore) and not isinstance(location, (str, os.PathLike)):
        return location
    text = os.fspath(location)
    if "://" in text and not text.startswith("file://"):
        from pytimely.recovery.fsspec_store import FsspecStore

        return FsspecStore(text)
    return LocalStore(text.removeprefix("file://"))

"""Where snapshots live: a :class:`SnapshotStore` holds named blobs; :class:`LocalStore` keeps them in a folder.

A store only puts, gets, lists and deletes whole blobs, each put atomic (a reader sees the whole blob or
none): a local file written under a temporary name and renamed (:func:`pytimely.atomic.write_atomic`, the
helper ``io`` and the Spark session share), or one object PUT on S3 (:class:`~pytimely.recovery.fsspec_store.
FsspecStore`). What makes a snapshot count (a manifest committed after its payloads) is built on top of that in
:mod:`pytimely.recovery.snapshots`, the same for every store. A put that fails (a full disk) raises
:class:`~pytimely.errors.StoreWriteError` naming the blob and leaves no part of it under its name.

A store that can also write a blob piece by piece at an offset (:class:`AppendingStore`: a local folder) gets
the snapshots' payload records appended to segment files (:mod:`pytimely.recovery.segments`), which a snapshot
then writes with one ``pwrite`` and one ``fdatasync`` of a file it keeps open.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import secrets
from collections.abc import Collection
from pathlib import Path
from typing import Protocol, runtime_checkable

from pytimely.atomic import remove_stale, sync_directory, write_atomic
from pytimely.errors import OutputPathError, RecoveryError, StoreNotWritableError, StoreWriteError

__all__ = ["AppendingStore", "LocalStore", "SnapshotStore", "open_store"]


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

    def put_new(self, name: str, data: bytes) -> None:
        """Store ``data`` under a name never used before, not necessarily atomically: nothing reads it before a
        later :meth:`persist` and commit name it (a payload file)."""
        ...

    def persist(self, names: Collection[str]) -> None:
        """Make sure blobs written with :meth:`put_new` survive a power cut before something names them."""
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

    def sweep(self) -> builtins.list[str]:
        """Remove what writers killed mid-write left anywhere in the store (temporary files); what was removed."""
        ...


@runtime_checkable
class AppendingStore(SnapshotStore, Protocol):
    """A store whose blobs can be written piece by piece at an offset (a local folder): snapshots append their
    records to segment files (:mod:`pytimely.recovery.segments`) instead of writing a file each."""

    def write_at(self, name: str, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of blob ``name`` (created, durably, when first written) and make it durable
        before returning. Writes of one blob come from one thread, in order; nothing reads a blob being written."""
        ...

    def read_at(self, name: str, offset: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of ``name`` from ``offset`` (fewer when it is shorter), or ``None`` if it is gone."""
        ...

    def release(self, name: str | None = None) -> None:
        """Close what writing ``name`` keeps open (every blob with ``None``); it is written no more."""
        ...


class LocalStore:
    """A :class:`SnapshotStore` in a local folder: one file per blob, written durably (fsync, then rename); an
    :class:`AppendingStore`, whose segments stay open between writes."""

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True) -> None:
        self.root = Path(path)
        self.location = os.fspath(path)
        self.durable = durable
        """fsync every blob and its folder before the rename (off only for benchmarks of the cost)."""
        self._folders: set[Path] = set()
        self._open: dict[str, int] = {}
        """Segments being appended to: name -> file descriptor."""

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
            with contextlib.suppress(OSError):
                probe.unlink()
            raise StoreNotWritableError(f"recovery store {where}: cannot write: {exc.strerror or exc}", where) from None

    def put(self, name: str, data: bytes) -> None:
        """Write ``name`` under a temporary name and rename it over (missing folders are made)."""
        path = self._path(name)
        try:
            if path.parent not in self._folders:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._folders.add(path.parent)
            # No listing for abandoned temporaries at each put: sweep() removes them when a run starts.
            write_atomic(path, data, durable=self.durable, tidy=False)
        except (OSError, OutputPathError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise StoreWriteError(
                f"recovery store {self.location}: cannot write {name}: {reason} (the last committed snapshot is "
                "untouched)", os.fspath(path),
            ) from None

    def put_new(self, name: str, data: bytes) -> None:
        """Create ``name`` with ``data`` and fsync it (no temporary file: the name is new and nothing reads it
        before a commit names it; a run that dies mid-write leaves a file no commit names, removed at restart)."""
        path = self._path(name)
        try:
            if path.parent not in self._folders:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._folders.add(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self.durable:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                path.unlink()
            raise StoreWriteError(
                f"recovery store {self.location}: cannot write {name}: {exc.strerror or exc} (the last committed "
                "snapshot is untouched)", os.fspath(path),
            ) from None

    def persist(self, names: Collection[str]) -> None:
        """fsync the folders of ``names`` (their entries survive a power cut once this returns)."""
        if not self.durable:
            return
        for folder in sorted({self._path(n).parent for n in names}):
            try:
                fd = os.open(folder, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StoreWriteError(
                    f"recovery store {self.location}: cannot sync {os.fspath(folder)}: {exc.strerror or exc}",
                    os.fspath(folder),
                ) from None

    def write_at(self, name: str, offset: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` of ``name`` and ``fdatasync`` it; the first write creates the file (a new
        name) and fsyncs its folder. The file stays open for the next write until :meth:`release`."""
        fd = self._open.get(name)
        try:
            if fd is None:
                path = self._path(name)
                if path.parent not in self._folders:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    self._folders.add(path.parent)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                self._open[name] = fd
                if self.durable:
                    sync_directory(path.parent)
            view = memoryview(data)
            while view:
                written = os.pwrite(fd, view, offset)
                view, offset = view[written:], offset + written
            if self.durable:
                _datasync(fd)
        except OSError as exc:
            raise StoreWriteError(
                f"recovery store {self.location}: cannot write {name}: {exc.strerror or exc} (the last committed "
                "snapshot is untouched)", os.fspath(self._path(name)),
            ) from None

    def read_at(self, name: str, offset: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of ``name`` from ``offset``, or ``None`` if there is no such file."""
        path = self._path(name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise RecoveryError(f"recovery store {self.location}: cannot read {name}: {exc.strerror or exc}",
                                os.fspath(path)) from None
        try:
            chunks = []
            while length > 0:
                chunk = os.pread(fd, length, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                length -= len(chunk)
                offset += len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise RecoveryError(f"recovery store {self.location}: cannot read {name}: {exc.strerror or exc}",
                                os.fspath(path)) from None
        finally:
            os.close(fd)

    def release(self, name: str | None = None) -> None:
        """Close the segment ``name`` (every open one with ``None``)."""
        for segment in list(self._open) if name is None else [name]:
            fd = self._open.pop(segment, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def get(self, name: str) -> bytes | None:
        """The bytes of ``name`` or ``None``; a file that exists but cannot be read is a :class:`RecoveryError`."""
        path = self._path(name)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise RecoveryError(f"recovery store {self.location}: cannot read {name}: {exc.strerror or exc}",
                                os.fspath(path)) from None

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
        """Remove the file (or the empty folder) ``name``; temporary files killed writers left go with
        :meth:`sweep`, which a run started again calls first."""
        path = self._path(name)
        with contextlib.suppress(FileNotFoundError):
            try:
                path.unlink()
            except (IsADirectoryError, PermissionError):
                if not path.is_dir():
                    raise
                for child in path.iterdir():
                    if child.name.startswith("."):
                        child.unlink(missing_ok=True)  # temporaries of writers killed mid-write
                with contextlib.suppress(OSError):
                    path.rmdir()
            self._folders.discard(path)

    def sweep(self) -> builtins.list[str]:
        """Remove every temporary file of a writer that no longer runs, in every folder of the store."""
        removed: builtins.list[str] = []
        for folder, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(".probe-"):
                    pid = name.split("-")[1]
                    if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
                        with contextlib.suppress(OSError):
                            os.unlink(os.path.join(folder, name))
                            removed.append(os.path.join(folder, name))
                    continue
                target = _target_of(name)
                if target is not None:
                    # ``.<target>.<host>.<pid>.<token>.tmp``: remove_stale proves it abandoned before removing it.
                    removed.extend(os.fspath(p) for p in remove_stale(Path(folder, target)))
        return removed


_datasync = getattr(os, "fdatasync", os.fsync)
"""``fdatasync`` where the platform has it (not macOS): the data and the file's size, not its times."""


def _target_of(name: str) -> str | None:
    """The target a temporary file ``.<target>.<host>.<pid>.<token>.tmp`` was written for."""
    if not name.startswith(".") or not name.endswith(".tmp"):
        return None
    parts = name[1:].rsplit(".", 4)
    return parts[0] if len(parts) == 5 else None


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def open_store(location: str | os.PathLike[str] | SnapshotStore) -> SnapshotStore:
    """A store for ``location``: a store as is, ``s3://``/``memory://`` and other fsspec URLs, else a folder."""
    if isinstance(location, SnapshotStore) and not isinstance(location, (str, os.PathLike)):
        return location
    text = os.fspath(location)
    if "://" in text and not text.startswith("file://"):
        from pytimely.recovery.fsspec_store import FsspecStore

        return FsspecStore(text)
    return LocalStore(text.removeprefix("file://"))

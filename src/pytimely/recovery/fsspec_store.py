"""A :class:`~pytimely.recovery.store.SnapshotStore` on any fsspec file system (S3 through s3fs, ``memory://``).

One blob is one object written in one call (an S3 PUT is all-or-nothing), so a reader sees it whole or not
at all; the manifest is still written after its payloads, as for every store.
"""

from __future__ import annotations

import builtins
import secrets
from typing import Any

from pytimely.errors import RecoveryError, StoreNotWritableError, StoreWriteError

__all__ = ["FsspecStore"]


class FsspecStore:
    """Blobs under ``url`` (``s3://bucket/prefix``); ``options`` go to fsspec (credentials, endpoint)."""

    def __init__(self, url: str, **options: Any) -> None:
        import fsspec  # type: ignore[import-untyped]

        self.location = url
        self.fs, root = fsspec.core.url_to_fs(url, **options)
        self.root = root.rstrip("/")

    def __repr__(self) -> str:
        return f"FsspecStore({self.location!r})"

    def _path(self, name: str) -> str:
        if not name or name.startswith("/") or ".." in name.split("/"):
            raise RecoveryError(f"{self.location}: {name!r} is not a blob name inside the store", self.location)
        return f"{self.root}/{name}"

    def check_writable(self) -> None:
        """Put and remove a probe object; a failure is a :class:`StoreNotWritableError` saying why."""
        probe = self._path(f".probe-{secrets.token_hex(6)}")
        try:
            self.fs.pipe_file(probe, b"probe")
            self.fs.rm_file(probe)
        except Exception as exc:  # fsspec back ends raise their own kinds (botocore, OSError, ...)
            raise StoreNotWritableError(f"recovery store {self.location}: cannot write: {exc}", self.location) from None

    def put(self, name: str, data: bytes) -> None:
        """One object write."""
        path = self._path(name)
        try:
            self.fs.pipe_file(path, data)
        except Exception as exc:  # fsspec back ends raise their own kinds (botocore, OSError, ...)
            raise StoreWriteError(
                f"recovery store {self.location}: cannot write {name}: {exc} (the last committed snapshot is "
                "untouched)", f"{self.location}/{name}",
            ) from None

    def put_new(self, name: str, data: bytes) -> None:
        """One object write (an object store's write is atomic anyway)."""
        self.put(name, data)

    def persist(self, names: Any) -> None:
        """Nothing to do: an object is durable once its write returned."""

    def get(self, name: str) -> bytes | None:
        """The object's bytes or ``None``."""
        try:
            data: bytes = self.fs.cat_file(self._path(name))
        except (FileNotFoundError, IsADirectoryError):
            return None
        except Exception as exc:
            raise RecoveryError(f"recovery store {self.location}: cannot read {name}: {exc}", name) from None
        return data

    def list(self, prefix: str) -> list[str]:
        """Names directly under ``prefix`` (objects and sub-prefixes)."""
        path = self._path(prefix) if prefix else self.root
        try:
            self.fs.invalidate_cache(path)
            entries = self.fs.ls(path, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        base = f"{prefix}/" if prefix else ""
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(base + n for n in names if n and not n.startswith("."))

    def delete(self, name: str) -> None:
        """Remove the object ``name`` (a prefix has nothing to remove once its objects are gone)."""
        path = self._path(name)
        try:
            if self.fs.isfile(path):
                self.fs.rm_file(path)
        except FileNotFoundError:
            pass

    def sweep(self) -> builtins.list[str]:
        """Nothing to remove: an object is written in one call, so no writer leaves a part of one behind."""
        return []

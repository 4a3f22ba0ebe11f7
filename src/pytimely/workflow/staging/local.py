"""A staging area in a local directory."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

from pytimely.workflow.staging.codec import Buffer
from pytimely.workflow.staging.commit import MARKER, TMP, PathStaging, fresh_suffix

__all__ = ["LocalStaging"]

class LocalStaging(PathStaging):
    """A staging area in a local directory: payloads fsynced, the commit marker put in place by ``os.replace``.

    ``durable=False`` skips the fsyncs: a crash of the process still never leaves a value that counts as
    present, but a crash of the machine might.
    """

    def __init__(self, root: str | os.PathLike[str], *, durable: bool = True) -> None:
        super().__init__()
        self.root = os.path.abspath(os.fspath(root))
        self.durable = durable
        os.makedirs(self.root, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalStaging({self.root!r})"

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _read(self, path: str) -> Buffer | None:
        import numpy as np

        try:
            with open(path, "rb") as file:
                # An uninitialised, writable buffer of the file's size: arrays read back are views of it.
                view = np.empty(os.fstat(file.fileno()).st_size, dtype=np.uint8).data
                size = file.readinto(view)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return view[:size]

    def _open_write(self, path: str) -> Any:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "xb")

    def _abandon(self, file: Any) -> None:
        file.close()

    def _sync(self, file: Any) -> None:
        if self.durable:
            file.flush()
            os.fsync(file.fileno())

    def _sync_dir(self, path: str) -> None:
        if self.durable:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _finish(self, file: Any) -> None:
        with file:
            self._sync(file)
        self._sync_dir(os.path.dirname(file.name))

    def _write_marker(self, directory: str, data: bytes) -> None:
        temporary = os.path.join(directory, MARKER + TMP + fresh_suffix())
        with open(temporary, "xb") as file:
            file.write(data)
            self._sync(file)
        os.replace(temporary, os.path.join(directory, MARKER))
        self._sync_dir(directory)

    def _remove_file(self, path: str) -> None:
        with suppress(FileNotFoundError):
            os.unlink(path)

    def _remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def _sizes(self, directory: str) -> dict[str, int]:
        sizes = {}
        for parent, _, names in os.walk(directory):
            for name in names:
                path = os.path.join(parent, name)
                with suppress(FileNotFoundError):  # removed while we looked: absent, as if never listed
                    sizes[os.path.relpath(path, directory).replace(os.sep, "/")] = os.path.getsize(path)
        return sizes

    def _entries(self, directory: str) -> list[str]:
        try:
            return os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _marker_keys(self, directory: str) -> Iterator[str]:
        for parent, dirs, names in os.walk(directory):
            dirs[:] = [d for d in dirs if not d.startswith(".")]  # payloads hold no keys
            if MARKER in names:
                relative = os.path.relpath(parent, directory)
                yield "" if relative == "." else relative.replace(os.sep, "/")

    def _spark_path(self, directory: str) -> str | None:
        return "file://" + directory

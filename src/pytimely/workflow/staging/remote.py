"""A staging area on any fsspec filesystem (S3 through ``s3fs``, GCS, a local one, ...)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress
from typing import Any

from pytimely.workflow.staging.commit import MARKER, TMP, PathStaging, fresh_suffix

__all__ = ["FsspecStaging"]

class FsspecStaging(PathStaging):
    """A staging area on any fsspec filesystem: ``FsspecStaging("s3://bucket/prefix", key=..., secret=...)``.

    On object stores the commit marker is one PUT (atomic: readers see the old marker or the new one); on a
    local filesystem it is written under a temporary name and renamed. An upload cut short by a crash may leave
    an incomplete multipart upload on S3 (invisible, never counted); a bucket lifecycle rule removes those.
    Spark DataFrames go through Arrow to Parquet here, except on a local filesystem where Spark writes them.
    """

    def __init__(self, url: str, **storage_options: Any) -> None:
        super().__init__()
        import fsspec  # type: ignore[import-untyped]

        self.url = url
        self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        self.root = root.rstrip("/")
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        self._local = "file" in protocols or "local" in protocols
        if self._local:
            self.fs.makedirs(self.root, exist_ok=True)

    def __repr__(self) -> str:
        return f"FsspecStaging({self.url!r})"

    def _path(self, *parts: str) -> str:
        return "/".join((self.root, *parts)) if parts else self.root

    def _read(self, path: str) -> bytes | None:
        try:
            data: bytes = self.fs.cat_file(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return data

    def _open_write(self, path: str) -> Any:
        if self._local:
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        return self.fs.open(path, "wb")

    def _abandon(self, file: Any) -> None:
        discard = getattr(file, "discard", None)
        if discard is not None and not self._local:
            try:
                discard()  # an unfinished multipart upload is aborted, not committed
                file.closed = True  # so that nothing flushes the rest when the file object is collected
                return
            except Exception:
                pass  # this filesystem cannot discard: closing it is the next best thing
        file.close()

    def _write_marker(self, directory: str, data: bytes) -> None:
        marker = directory + "/" + MARKER
        if self._local:
            temporary = directory + "/" + MARKER + TMP + fresh_suffix()
            self.fs.pipe_file(temporary, data)
            self.fs.mv(temporary, marker)
        else:
            self.fs.pipe_file(marker, data)

    def _remove_file(self, path: str) -> None:
        with suppress(FileNotFoundError):
            self.fs.rm_file(path)

    def _remove_tree(self, path: str) -> None:
        with suppress(FileNotFoundError):
            self.fs.rm(path, recursive=True)

    def _find(self, directory: str) -> dict[str, Any]:
        self.fs.invalidate_cache(directory)  # another process may have written since we last listed
        try:
            found: dict[str, Any] = self.fs.find(directory, detail=True)
        except FileNotFoundError:
            return {}
        return found

    def _relative(self, path: str, directory: str) -> str | None:
        path = self.fs._strip_protocol(path)
        directory = self.fs._strip_protocol(directory).rstrip("/")
        return path[len(directory) + 1 :] if path.startswith(directory + "/") else None

    def _sizes(self, directory: str) -> dict[str, int]:
        sizes = {}
        for path, info in self._find(directory).items():
            relative = self._relative(path, directory)
            if relative is not None and info.get("type", "file") == "file":
                sizes[relative] = int(info["size"])
        return sizes

    def _entries(self, directory: str) -> list[str]:
        self.fs.invalidate_cache(directory)
        try:
            listing = self.fs.ls(directory, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = []
        for path in listing:
            relative = self._relative(path, directory)
            if relative:
                names.append(relative.split("/", 1)[0])
        return names

    def _marker_keys(self, directory: str) -> Iterator[str]:
        for path in self._find(directory):
            relative = self._relative(path, directory)
            if relative is None:
                continue
            if relative == MARKER:
                yield ""
            elif relative.endswith("/" + MARKER):
                parent = relative[: -len(MARKER) - 1]
                if not any(part.startswith(".") for part in parent.split("/")):
                    yield parent

    def _spark_path(self, directory: str) -> str | None:
        return "file://" + directory if self._local else None

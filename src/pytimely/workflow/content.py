"""Content fingerprints of a workflow's inputs that name data elsewhere: files, directories and URLs.

A workflow input given as a path (a :class:`os.PathLike`, or a string naming a file or directory that exists)
or as an object-store URL (``s3://``, ``gs://``, ``http(s)://``, ...) is fingerprinted by *what it names*, not
by its spelling: editing ``edges.csv`` in place changes the fingerprint, touching it does not, and the same
relative path run from another folder reads (and fingerprints) that folder's file.

* a file: SHA-256 of its bytes, kept in a :class:`FingerprintCache` under its resolved path, size, mtime and
  inode, so an unchanged file is not read again;
* a directory: its files' relative paths and content fingerprints, in sorted order;
* an object (``s3://`` and other fsspec URLs): its version id when the store keeps versions, else its ETag (for
  S3 a hash of the content computed by the store), else a hash of its bytes; a prefix: its objects' in order.

A file whose mtime is within :data:`RACY_SECONDS` of the moment it was hashed is not cached: it could be written
again within the same mtime tick without its size changing (git's "racy clean" problem).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytimely.errors import WorkflowInputError

__all__ = ["RACY_SECONDS", "FingerprintCache", "content_fingerprint", "is_url"]

RACY_SECONDS = 2.0
_CHUNK = 1 << 22
_URL_SCHEMES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "http", "https", "hdfs", "file", "memory")


class FingerprintCache:
    """Content fingerprints of files by (resolved path, size, mtime, inode), optionally kept in a JSON file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._lock = threading.Lock()
        self._entries: dict[str, list[Any]] = {}
        self._dirty = False
        self.hashed = 0
        """How many files were read and hashed (not found in the cache) by this object."""
        if self.path is not None:
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict):
                    self._entries = {k: v for k, v in loaded.items() if isinstance(v, list) and len(v) == 4}
            except (OSError, ValueError):
                pass  # a missing or damaged cache is an empty one: it only costs reading the files again

    def file(self, path: Path) -> str:
        """The content fingerprint of the regular file at ``path`` (resolved), read only if not cached."""
        st = path.stat()
        key = str(path)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ino]
        with self._lock:
            known = self._entries.get(key)
        if known is not None and known[:3] == stamp:
            return str(known[3])
        digest = _hash_file(path)
        self.hashed += 1
        after = path.stat()
        # Cache only what cannot change unseen: same stamp before and after, and an mtime not racy.
        if [after.st_size, after.st_mtime_ns, after.st_ino] == stamp and time.time() - st.st_mtime > RACY_SECONDS:
            with self._lock:
                self._entries[key] = [*stamp, digest]
                self._dirty = True
        return digest

    def save(self) -> None:
        """Write the cache file (atomically; a concurrent writer's entries may be lost, which costs only time)."""
        if self.path is None or not self._dirty:
            return
        with self._lock:
            data = json.dumps(self._entries, separators=(",", ":"))
            self._dirty = False
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)  # an unwritable cache is not an error: the next run hashes again


def _hash_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        # A fixed buffer read into repeatedly: no allocation per chunk for gigabyte inputs.
        buf = bytearray(_CHUNK)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL of a scheme fsspec reads (``s3://bucket/key``, ``https://...``)."""
    scheme, sep, rest = text.partition("://")
    return bool(sep) and bool(rest) and scheme.lower() in _URL_SCHEMES


def _digest(kind: bytes, parts: list[tuple[str, str]]) -> str:
    h = hashlib.sha256(kind)
    for name, fp in parts:
        for text in (name, fp):
            data = text.encode("utf-8", "surrogatepass")
            h.update(struct.pack("<Q", len(data)))
            h.update(data)
    return h.hexdigest()


def _local(path: Path, cache: FingerprintCache) -> str:
    try:
        st = path.stat()
        if stat.S_ISREG(st.st_mode):
            return _digest(b"file", [("", cache.file(path))])
        if stat.S_ISDIR(st.st_mode):
            parts = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    full = Path(root) / name
                    parts.append((full.relative_to(path).as_posix(), cache.file(full)))
            return _digest(b"directory", parts)
    except OSError as exc:
        raise WorkflowInputError(f"input {str(path)!r} cannot be read: {exc.strerror or exc}") from exc
    raise WorkflowInputError(f"input {str(path)!r} is neither a file nor a directory")


def _object_version(info: Mapping[str, Any]) -> str | None:
    for field in ("VersionId", "version_id", "generation"):
        version = info.get(field)
        if version and version != "null":
            return f"version:{version}"
    for field in ("ETag", "etag", "md5Hash", "content_md5"):
        tag = info.get(field)
        if tag:
            return f"etag:{str(tag).strip(chr(34))}:{info.get('size')}"
    return None


def _remote(url: str, storage_options: Mapping[str, Any]) -> str:
    import fsspec  # type: ignore[import-untyped]

    try:
        fs, path = fsspec.core.url_to_fs(url, **storage_options)
        info = fs.info(path)
        if info.get("type") == "directory":
            found = fs.find(path, detail=True)
            parts = []
            for name in sorted(found):
                entry = found[name]
                parts.append((name[len(path) :].lstrip("/"), _object_version(entry) or _remote_bytes(fs, name)))
            return _digest(b"prefix", parts)
        return _digest(b"object", [("", _object_version(info) or _remote_bytes(fs, path))])
    except FileNotFoundError as exc:
        raise WorkflowInputError(f"input {url!r} does not exist") from exc
    except (OSError, ValueError, ImportError) as exc:
        raise WorkflowInputError(f"input {url!r} cannot be read: {exc}") from exc


def _remote_bytes(fs: Any, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def content_fingerprint(
    value: Any,
    cache: FingerprintCache | None = None,
    *,
    base: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> str | None:
    """The fingerprint of what ``value`` names, or ``None`` when it names no file, directory or object.

    A path-like value must exist (``WorkflowInputError`` otherwise); a string counts when it is a URL or names
    an existing file or directory, resolved against ``base`` (default: the current directory).
    """
    where = Path(base) if base is not None else Path.cwd()
    cache = cache if cache is not None else FingerprintCache()
    if isinstance(value, os.PathLike):
        text = os.fspath(value)
        if isinstance(text, bytes):
            text = os.fsdecode(text)
        return _local((where / text).resolve(), cache)
    if not isinstance(value, str) or not value or "\0" in value or len(value) > 4096:
        return None
    if is_url(value):
        if value.lower().startswith("file://"):
            return _local(Path(value[len("file://") :]).resolve(), cache)
        return _remote(value, storage_options or {})
    try:
        path = (where / value).resolve()
        if not path.exists():
            return None
    except (OSError, ValueError):
        return None
    return _local(path, cache)

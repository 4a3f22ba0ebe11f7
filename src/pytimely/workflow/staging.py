"""Staging areas: where a workflow keeps the values of its ports, each with the fingerprint it was computed for.

A staging area maps **keys** to values. A key is a ``/``-separated path of segments — the module path and the
port, e.g. ``report/clean/out``, with loop iterations as a segment such as ``iter-3``. A segment is made of
letters, digits and ``_ . = -`` and does not start with ``.`` (names starting with a dot are the staging
area's own bookkeeping); :func:`check_key` says why a key is refused.

Every value is stored with the **fingerprint** it was computed for (see :mod:`pytimely.workflow.fingerprint`).
A value counts as present for a fingerprint only when it was stored completely *and* under that very
fingerprint, so a stale value (its code, parameters or inputs changed since) is treated as absent.

The :class:`StagingArea` protocol (synchronous; an asyncio interpreter calls it through
``asyncio.to_thread``):

* ``has(key, fingerprint)`` — a complete value is stored under ``key`` for exactly ``fingerprint``;
* ``fingerprint(key)`` — the fingerprint of the complete value under ``key``, or ``None``;
* ``put(key, value, fingerprint)`` — store atomically: a crash at any point never leaves a value that counts
  as present, and overwriting replaces the old value in one step (until then the old one is still there);
* ``get(key, fingerprint=None)`` — the value, or :class:`~pytimely.errors.ValueMissingError` naming the key
  (also when ``fingerprint`` is given and the stored one differs);
* ``delete(key)`` — forget the value (nothing happens when there is none);
* ``keys(prefix="")`` — the sorted keys with a committed value at or below ``prefix`` (whole segments); check
  each with ``has`` before trusting it.

Implementations: :class:`MemoryStaging` (objects kept as they are, in this process), :class:`LocalStaging`
(a directory), :class:`FsspecStaging` (any fsspec filesystem: S3 through ``s3fs``, GCS, memory, …), and
:func:`open_staging` choosing one by URL.

Persistent staging areas write a value's payload under a fresh name and then a **commit marker** naming the
fingerprint, the format and the payload's files with their sizes (and an xxh3-128 checksum for single-file
payloads). The marker is written last, in one step (a rename on local disks, a single PUT on object stores),
so a value counts as present only once its payload is complete. Formats: ``pyarrow.Table``/``RecordBatch`` and
``pandas.DataFrame`` as Parquet (read back as the same kind), Spark DataFrames as Parquet written by Spark (read
back through the active SparkSession), numpy arrays with ``np.save``, everything else pickled (protocol 5).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any, Protocol, runtime_checkable

import xxhash

from pytimely.errors import (
    CorruptValueError,
    StagingKeyError,
    UnpicklableValueError,
    ValueMissingError,
)

__all__ = [
    "FsspecStaging",
    "LocalStaging",
    "MemoryStaging",
    "StagingArea",
    "check_key",
    "format_of",
    "open_staging",
]

_SEGMENT = re.compile(r"[A-Za-z0-9_=-][A-Za-z0-9_.=-]*")


def check_key(key: str) -> str:
    """Return ``key`` if it is a valid staging key, else raise :class:`StagingKeyError` saying why."""
    if not isinstance(key, str):
        raise StagingKeyError(f"a staging key is a str, got {type(key).__name__}: {key!r}", repr(key))
    if not key:
        raise StagingKeyError("a staging key cannot be empty", key)
    for segment in key.split("/"):
        if not _SEGMENT.fullmatch(segment):
            raise StagingKeyError(
                f"staging key {key!r} has a bad segment {segment!r}: segments are non-empty, made of letters, "
                "digits and '_ . = -', and do not start with '.'",
                key,
            )
    return key


def check_prefix(prefix: str) -> str:
    """Return ``prefix`` (``""`` or a valid key, a trailing ``/`` dropped) or raise :class:`StagingKeyError`."""
    prefix = prefix.rstrip("/") if isinstance(prefix, str) else prefix
    return "" if prefix == "" else check_key(prefix)


def under(key: str, prefix: str) -> bool:
    """Whether ``key`` is ``prefix`` or below it, by whole segments (``a/bc`` is not under ``a/b``)."""
    return prefix == "" or key == prefix or key.startswith(prefix + "/")


def format_of(value: Any) -> str:
    """The format a persistent staging area stores ``value`` in (``parquet-*``, ``spark``, ``numpy`` or ``pickle``)."""
    cls = type(value)
    module = cls.__module__
    if module.startswith("pyarrow"):
        if cls.__name__ == "Table":
            return "parquet-arrow-table"
        if cls.__name__ == "RecordBatch":
            return "parquet-arrow-batch"
    elif module.startswith("pandas") and cls.__name__ == "DataFrame":
        return "parquet-pandas"
    elif module.startswith("pyspark.sql") and cls.__name__ == "DataFrame":
        return "spark"
    elif module == "numpy" and cls.__name__ == "ndarray" and not value.dtype.hasobject:
        return "numpy"
    return "pickle"


@runtime_checkable
class StagingArea(Protocol):
    """Where port values live between modules, each recorded with the fingerprint it was computed for."""

    def has(self, key: str, fingerprint: str) -> bool:
        """Whether a complete value is stored under ``key`` for exactly ``fingerprint``."""
        ...

    def fingerprint(self, key: str) -> str | None:
        """The fingerprint of the complete value under ``key``, or ``None`` when there is none."""
        ...

    def put(self, key: str, value: Any, fingerprint: str) -> None:
        """Store ``value`` under ``key`` for ``fingerprint``, atomically (replacing any value there)."""
        ...

    def get(self, key: str, fingerprint: str | None = None) -> Any:
        """The value under ``key`` (checked against ``fingerprint`` when given); ``ValueMissingError`` if absent."""
        ...

    def delete(self, key: str) -> None:
        """Forget the value under ``key``, if any."""
        ...

    def keys(self, prefix: str = "") -> list[str]:
        """The sorted keys holding a committed value, at or below ``prefix`` (whole segments)."""
        ...


@dataclass(frozen=True, slots=True)
class _Entry:
    fingerprint: str
    format: str
    value: Any


class MemoryStaging:
    """A staging area in this process's memory: values are kept as the objects they are (not copied).

    Modules must therefore not mutate the values they receive or return after returning them. Spark
    DataFrames are kept as DataFrames (their plan, not their rows).
    """

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStaging({len(self._entries)} values)"

    def has(self, key: str, fingerprint: str) -> bool:
        """Whether a value is stored under ``key`` for exactly ``fingerprint``."""
        return self.fingerprint(key) == fingerprint

    def fingerprint(self, key: str) -> str | None:
        """The fingerprint of the value under ``key``, or ``None``."""
        entry = self._entries.get(check_key(key))
        return None if entry is None else entry.fingerprint

    def put(self, key: str, value: Any, fingerprint: str) -> None:
        """Keep ``value`` under ``key`` for ``fingerprint`` (one dictionary assignment: atomic)."""
        entry = _Entry(_check_fingerprint(fingerprint), format_of(value), value)
        with self._lock:
            self._entries[check_key(key)] = entry

    def get(self, key: str, fingerprint: str | None = None) -> Any:
        """The value under ``key``; ``ValueMissingError`` when absent or stored for another fingerprint."""
        entry = self._entries.get(check_key(key))
        if entry is None:
            raise ValueMissingError(f"no value staged under {key!r}", key)
        if fingerprint is not None and entry.fingerprint != fingerprint:
            raise ValueMissingError(
                f"the value staged under {key!r} has fingerprint {entry.fingerprint}, not {fingerprint} (stale)", key
            )
        return entry.value

    def delete(self, key: str) -> None:
        """Forget the value under ``key``, if any."""
        with self._lock:
            self._entries.pop(check_key(key), None)

    def keys(self, prefix: str = "") -> list[str]:
        """The sorted keys at or below ``prefix``."""
        prefix = check_prefix(prefix)
        with self._lock:
            return sorted(k for k in self._entries if under(k, prefix))


def _check_fingerprint(fingerprint: str) -> str:
    if not isinstance(fingerprint, str) or not fingerprint:
        raise TypeError(f"a fingerprint is a non-empty str, got {fingerprint!r}")
    return fingerprint


# -- persistent staging areas: payload first, commit marker last ----------------------------------------------------

MARKER = ".commit"
_DATA = ".data-"
_TMP = ".tmp-"
_MARKER_VERSION = 1
Buffer = bytes | bytearray | memoryview
_PICKLE_PROTOCOL = 5
_READ_RETRIES = 3


class _HashingWriter:
    """A write-only file that forwards to another and keeps the size and xxh3-128 checksum of what passed."""

    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.hash = xxhash.xxh3_128()
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.hash.update(view)
        self.size += len(view)
        self.target.write(view)
        return len(view)

    def flush(self) -> None:
        self.target.flush()

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False


def _payload_name(fmt: str) -> str:
    if fmt == "numpy":
        return "value.npy"
    if fmt.startswith("parquet") or fmt == "spark-arrow":
        return "value.parquet"
    return "value.pickle"


def _encode(value: Any, fmt: str, out: Any) -> None:
    """Write ``value`` to the file ``out`` in ``fmt`` (a single-file format)."""
    if fmt == "pickle":
        pickle.dump(value, out, protocol=_PICKLE_PROTOCOL)
    elif fmt == "numpy":
        import numpy as np

        np.save(out, value, allow_pickle=False)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if fmt == "parquet-arrow-batch":
            table = pa.Table.from_batches([value])
        elif fmt == "spark-arrow":
            table = value.toArrow()
        else:
            table = value
        pq.write_table(table, out)


def _decode(data: Buffer, fmt: str) -> Any:
    """The value ``_encode`` wrote as ``data``."""
    if fmt == "pickle":
        return pickle.loads(data)
    if fmt == "numpy":
        return _load_array(data)
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(data))
    if fmt == "parquet-pandas":
        return table.to_pandas()
    if fmt == "parquet-arrow-batch":
        table = table.combine_chunks()
        batches = table.to_batches()
        if batches:
            return batches[0]
        return pa.record_batch([pa.array([], type=f.type) for f in table.schema], schema=table.schema)
    if fmt == "spark-arrow":
        return _active_spark().createDataFrame(table)
    return table


def _load_array(data: Buffer) -> Any:
    """The array in ``.npy`` bytes, as a view of them when they are writable (no copy), else a copy."""
    import numpy as np

    head = io.BytesIO(memoryview(data)[: 1 << 16])
    version = np.lib.format.read_magic(head)
    try:
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(head)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(head)
        else:
            raise ValueError(f"version {version}")  # 3.0: UTF-8 field names, left to np.load
    except ValueError:  # a header longer than we looked at, or a version we do not parse here
        return np.load(io.BytesIO(data), allow_pickle=False)
    count = 1
    for side in shape:
        count *= side
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=head.tell())
    if not flat.flags.writeable:
        flat = flat.copy()  # a staged array reads back writable, like np.load's
    return flat.reshape(shape[::-1]).transpose() if fortran else flat.reshape(shape)


def _active_spark() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.active()


def _prepare(value: Any) -> tuple[str, Any]:
    """The format for ``value`` and what to encode: pandas frames become Arrow tables, or are pickled if they cannot."""
    fmt = format_of(value)
    if fmt == "parquet-pandas":
        import pyarrow as pa

        try:
            return fmt, pa.Table.from_pandas(value, preserve_index=True)
        except (pa.ArrowException, TypeError, ValueError):
            return "pickle", value
    return fmt, value


@dataclass(frozen=True, slots=True)
class _Marker:
    """What a commit marker records: the fingerprint, the format and the payload's files."""

    key: str
    fingerprint: str
    format: str
    data: str  # the payload directory's name under the key
    files: dict[str, dict[str, Any]]  # relative name -> {"size": n, "xxh3_128": hex (single-file payloads)}

    def dumps(self) -> bytes:
        record = {
            "pytimely-staging": _MARKER_VERSION,
            "key": self.key,
            "fingerprint": self.fingerprint,
            "format": self.format,
            "data": self.data,
            "files": self.files,
        }
        return json.dumps(record, sort_keys=True).encode()

    @staticmethod
    def loads(data: bytes, key: str) -> _Marker | None:
        """The marker in ``data``, or ``None`` when it is not a complete marker for ``key``."""
        try:
            record = json.loads(data)
            marker = _Marker(
                record["key"], record["fingerprint"], record["format"], record["data"], dict(record["files"])
            )
        except (ValueError, KeyError, TypeError):
            return None
        if record.get("pytimely-staging") != _MARKER_VERSION or marker.key != key:
            return None
        if not marker.data.startswith(_DATA) or "/" in marker.data:
            return None
        if not all(isinstance(info, dict) and isinstance(info.get("size"), int) for info in marker.files.values()):
            return None
        return marker


class _PathStaging:
    """The commit-marker protocol over a tree of files; subclasses say how to read and write them.

    A key ``k`` lives in the directory ``<root>/k``: its payload in ``.data-<token>/`` and its commit marker in
    ``.commit``, written last. Only the marker makes a value count, so a crash before it leaves nothing
    present, and the old value (still named by the old marker) in place.
    """

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    # -- what a file system must provide -----------------------------------------------------------------------------

    def _path(self, *parts: str) -> str:
        raise NotImplementedError

    def _read(self, path: str) -> Buffer | None:
        """The file's bytes (possibly a writable buffer), or ``None`` if there is no such file."""
        raise NotImplementedError

    def _open_write(self, path: str) -> Any:
        raise NotImplementedError

    def _abandon(self, file: Any) -> None:
        file.close()

    def _write_marker(self, directory: str, data: bytes) -> None:
        raise NotImplementedError

    def _remove_file(self, path: str) -> None:
        raise NotImplementedError

    def _remove_tree(self, path: str) -> None:
        raise NotImplementedError

    def _sizes(self, directory: str) -> dict[str, int]:
        """Relative name -> size of every file below ``directory`` (empty if there is none)."""
        raise NotImplementedError

    def _entries(self, directory: str) -> list[str]:
        """Names directly in ``directory`` (empty if it does not exist)."""
        raise NotImplementedError

    def _marker_keys(self, directory: str) -> Iterator[str]:
        """Paths, relative to ``directory``, of the key directories at or below it that hold a marker."""
        raise NotImplementedError

    def _spark_path(self, directory: str) -> str | None:
        """A path Spark can write Parquet to for ``directory``, or ``None`` (values then go through Arrow)."""
        return None

    # -- the protocol ----------------------------------------------------------------------------------------------

    def _marker(self, key: str) -> _Marker | None:
        data = self._read(self._path(check_key(key), MARKER))
        return None if data is None else _Marker.loads(bytes(data), key)

    def _complete(self, key: str, marker: _Marker) -> bool:
        sizes = self._sizes(self._path(key, marker.data))
        return all(sizes.get(name) == info.get("size") for name, info in marker.files.items())

    def _committed(self, key: str) -> _Marker | None:
        """The marker of the complete value under ``key``, or ``None``."""
        marker = self._marker(key)
        for _ in range(_READ_RETRIES):
            if marker is None or self._complete(key, marker):
                return marker
            again = self._marker(key)
            if again == marker:
                return None  # really incomplete
            marker = again  # a writer replaced it (and swept the old payload) while we looked
        return None

    def has(self, key: str, fingerprint: str) -> bool:
        """Whether a complete value is stored under ``key`` for exactly ``fingerprint``."""
        marker = self._committed(key)
        return marker is not None and marker.fingerprint == fingerprint

    def fingerprint(self, key: str) -> str | None:
        """The fingerprint of the complete value under ``key``, or ``None``."""
        marker = self._committed(key)
        return None if marker is None else marker.fingerprint

    def put(self, key: str, value: Any, fingerprint: str) -> None:
        """Write the payload under a fresh name, then the commit marker; then remove what the old marker named."""
        _check_fingerprint(fingerprint)
        check_key(key)
        fmt, prepared = _prepare(value)
        data = _DATA + secrets.token_hex(8)
        with self._key_lock(key):
            if fmt == "spark":
                files, fmt = self._put_spark(key, data, value)
            else:
                files = self._put_file(key, data, prepared, fmt)
            self._write_marker(self._path(key), _Marker(key, fingerprint, fmt, data, files).dumps())
            self._sweep(key, keep=data)

    def _put_file(self, key: str, data: str, value: Any, fmt: str) -> dict[str, dict[str, Any]]:
        name = _payload_name(fmt)
        file = self._open_write(self._path(key, data, name))
        writer = _HashingWriter(file)
        try:
            _encode(value, fmt, writer)
        except BaseException as exc:
            self._abandon(file)
            self._remove_tree(self._path(key, data))
            if fmt == "pickle" and isinstance(exc, pickle.PicklingError | TypeError | AttributeError):
                raise UnpicklableValueError(
                    f"cannot stage the value under {key!r}: a {type(value).__module__}.{type(value).__qualname__} "
                    f"cannot be pickled ({exc})",
                    key,
                ) from exc
            raise
        self._finish(file)
        return {name: {"size": writer.size, "xxh3_128": writer.hash.hexdigest()}}

    def _finish(self, file: Any) -> None:
        file.close()

    def _put_spark(self, key: str, data: str, frame: Any) -> tuple[dict[str, dict[str, Any]], str]:
        target = self._spark_path(self._path(key, data))
        if target is None:
            return self._put_file(key, data, frame, "spark-arrow"), "spark-arrow"
        try:
            frame.write.parquet(target + "/value")
        except BaseException:
            self._remove_tree(self._path(key, data))
            raise
        sizes = self._sizes(self._path(key, data))
        return {name: {"size": size} for name, size in sizes.items()}, "spark"

    def _sweep(self, key: str, keep: str) -> None:
        """Remove payloads and temporary markers of ``key`` that no marker names (old or abandoned ones)."""
        for name in self._entries(self._path(key)):
            if name != keep and name.startswith(_DATA):
                self._remove_tree(self._path(key, name))
            elif name.startswith(MARKER + _TMP):
                self._remove_file(self._path(key, name))

    def get(self, key: str, fingerprint: str | None = None) -> Any:
        """The value under ``key``; ``ValueMissingError`` when absent or for another fingerprint."""
        for _ in range(_READ_RETRIES):
            marker = self._marker(key)
            if marker is None:
                raise ValueMissingError(f"no value staged under {key!r}", key)
            if fingerprint is not None and marker.fingerprint != fingerprint:
                raise ValueMissingError(
                    f"the value staged under {key!r} has fingerprint {marker.fingerprint}, not {fingerprint} (stale)",
                    key,
                )
            value = self._load(key, marker)
            if value is not _GONE:
                return value
        # The payload kept vanishing under us while its marker stayed: not a race with a writer.
        raise CorruptValueError(f"the payload of {key!r} named by its commit marker is missing", key)

    def _load(self, key: str, marker: _Marker) -> Any:
        directory = self._path(key, marker.data)
        if marker.format == "spark":
            if not self._complete(key, marker):
                return self._gone_or_corrupt(key, marker, "its Parquet files do not match the commit marker")
            target = self._spark_path(directory)
            assert target is not None
            return _active_spark().read.parquet(target + "/value")
        [(name, info)] = marker.files.items()
        payload = self._read(self._path(key, marker.data, name))
        if payload is None:
            return self._gone_or_corrupt(key, marker, f"its payload {name} is missing")
        if len(payload) != info["size"] or xxhash.xxh3_128_hexdigest(payload) != info["xxh3_128"]:
            raise CorruptValueError(
                f"the payload of {key!r} does not match its commit marker (size {len(payload)}, "
                f"marker says {info['size']}, or its checksum differs)",
                key,
            )
        return _decode(payload, marker.format)

    def _gone_or_corrupt(self, key: str, marker: _Marker, what: str) -> Any:
        if self._marker(key) != marker:
            return _GONE  # overwritten or deleted while we read: read the new marker
        raise CorruptValueError(f"the value staged under {key!r} is damaged: {what}", key)

    def delete(self, key: str) -> None:
        """Remove the marker first (the value stops counting), then every payload of ``key``."""
        check_key(key)
        with self._key_lock(key):
            self._remove_file(self._path(key, MARKER))
            self._sweep(key, keep="")

    def keys(self, prefix: str = "") -> list[str]:
        """The sorted keys at or below ``prefix`` whose commit marker is there."""
        prefix = check_prefix(prefix)
        base = self._path(prefix) if prefix else self._path()
        found = []
        for relative in self._marker_keys(base):
            key = f"{prefix}/{relative}" if prefix and relative else (relative or prefix)
            if key and _is_key(key):
                found.append(key)
        return sorted(found)

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        with self._locks_lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            yield


_GONE: Any = object()


def _is_key(key: str) -> bool:
    try:
        check_key(key)
    except StagingKeyError:
        return False
    return True


class LocalStaging(_PathStaging):
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
        temporary = os.path.join(directory, MARKER + _TMP + secrets.token_hex(8))
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


class FsspecStaging(_PathStaging):
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
            temporary = directory + "/" + MARKER + _TMP + secrets.token_hex(8)
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


def open_staging(url: str | os.PathLike[str], **storage_options: Any) -> StagingArea:
    """The staging area a URL names: ``memory://``, a path or ``file://...``, ``s3://...`` or another fsspec URL."""
    text = os.fspath(url)
    if text.startswith("memory://"):
        if storage_options:
            raise ValueError(f"memory:// takes no storage options, got {sorted(storage_options)}")
        return MemoryStaging()
    if "://" not in text:
        return LocalStaging(text, **storage_options)
    if text.startswith("file://"):
        return LocalStaging(text[len("file://") :], **storage_options)
    return FsspecStaging(text, **storage_options)

"""The commit protocol of persistent staging areas: payload under a fresh name first, commit marker last.

A key ``k`` lives in the directory ``<root>/k``: its payload in ``.data-<time>-<random>/`` and its commit marker
in ``.commit``, written in one step (a rename, or one PUT). Only the marker makes a value count. A put removes
the payload of the marker it replaced; payloads and temporary markers no marker names are removed only once they
are :data:`ABANDONED_SECONDS` old, since a concurrent writer (another process, another area object on the same
place) may still be writing or have just committed them.

Staging keeps its own commit protocol rather than a general atomic-write helper: it needs the marker to name a
checksummed payload and the sweep rules above, which a write-temporary-then-rename helper does not give."""

from __future__ import annotations

import json
import pickle
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import xxhash

from pytimely.errors import CorruptValueError, UnpicklableValueError, ValueMissingError
from pytimely.workflow.staging.area import check_fingerprint
from pytimely.workflow.staging.codec import Buffer, HashingWriter, active_spark, decode, encode, payload_name, prepare
from pytimely.workflow.staging.keys import check_key, check_prefix, is_key

__all__ = ["ABANDONED_SECONDS", "MARKER", "PathStaging", "fresh_suffix"]

MARKER = ".commit"
DATA = ".data-"
TMP = ".tmp-"
MARKER_VERSION = 1
_READ_RETRIES = 3


@dataclass(frozen=True, slots=True)
class Marker:
    """What a commit marker records: the fingerprint, the format and the payload's files."""

    key: str
    fingerprint: str
    format: str
    data: str  # the payload directory's name under the key
    files: dict[str, dict[str, Any]]  # relative name -> {"size": n, "xxh3_128": hex (single-file payloads)}

    def dumps(self) -> bytes:
        record = {
            "pytimely-staging": MARKER_VERSION,
            "key": self.key,
            "fingerprint": self.fingerprint,
            "format": self.format,
            "data": self.data,
            "files": self.files,
        }
        return json.dumps(record, sort_keys=True).encode()

    @staticmethod
    def loads(data: bytes, key: str) -> Marker | None:
        """The marker in ``data``, or ``None`` when it is not a complete marker for ``key``."""
        try:
            record = json.loads(data)
            marker = Marker(
                record["key"], record["fingerprint"], record["format"], record["data"], dict(record["files"])
            )
        except (ValueError, KeyError, TypeError):
            return None
        if record.get("pytimely-staging") != MARKER_VERSION or marker.key != key:
            return None
        if not marker.data.startswith(DATA) or "/" in marker.data:
            return None
        if not all(isinstance(info, dict) and isinstance(info.get("size"), int) for info in marker.files.values()):
            return None
        return marker


class PathStaging:
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

    def _marker(self, key: str) -> Marker | None:
        data = self._read(self._path(check_key(key), MARKER))
        return None if data is None else Marker.loads(bytes(data), key)

    def _complete(self, key: str, marker: Marker) -> bool:
        sizes = self._sizes(self._path(key, marker.data))
        return all(sizes.get(name) == info.get("size") for name, info in marker.files.items())

    def _committed(self, key: str) -> Marker | None:
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
        check_fingerprint(fingerprint)
        check_key(key)
        fmt, prepared = prepare(value)
        data = DATA + fresh_suffix()
        with self._key_lock(key):
            # Only the payload this put replaces is removed at once: another writer's payload (in another
            # process, or another area object on the same place) may still be written or just committed.
            previous = self._marker(key)
            if fmt == "spark":
                files, fmt = self._put_spark(key, data, value)
            else:
                files = self._put_file(key, data, prepared, fmt)
            self._write_marker(self._path(key), Marker(key, fingerprint, fmt, data, files).dumps())
            self._sweep(key, keep=data, replaced=None if previous is None else previous.data)

    def retag(self, key: str, old: str, new: str) -> bool:
        """Record the complete value under ``key`` for fingerprint ``new`` if it is there for ``old``: one marker
        write, the payload stays (early cutoff: a value recomputed the same need not be written again)."""
        check_fingerprint(new)
        with self._key_lock(key):
            marker = self._committed(key)
            if marker is None or marker.fingerprint != old:
                return False
            retagged = Marker(key, new, marker.format, marker.data, marker.files)
            self._write_marker(self._path(key), retagged.dumps())
        return True

    def _put_file(self, key: str, data: str, value: Any, fmt: str) -> dict[str, dict[str, Any]]:
        name = payload_name(fmt)
        file = self._open_write(self._path(key, data, name))
        writer = HashingWriter(file)
        try:
            encode(value, fmt, writer)
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

    def _sweep(self, key: str, keep: str, replaced: str | None, *, everything: bool = False) -> None:
        """Remove the payload ``replaced`` (its marker is gone) and what writers abandoned: payloads and temporary
        markers older than :data:`ABANDONED_SECONDS` (a concurrent writer's newer ones may still be in use);
        ``everything`` (``delete``) removes all but ``keep``."""
        for name in self._entries(self._path(key)):
            if name == keep:
                continue
            if name.startswith(DATA) and (everything or name == replaced or abandoned(name[len(DATA) :])):
                self._remove_tree(self._path(key, name))
            elif name.startswith(MARKER + TMP) and (everything or abandoned(name[len(MARKER + TMP) :])):
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

    def _load(self, key: str, marker: Marker) -> Any:
        directory = self._path(key, marker.data)
        if marker.format == "spark":
            if not self._complete(key, marker):
                return self._gone_or_corrupt(key, marker, "its Parquet files do not match the commit marker")
            target = self._spark_path(directory)
            assert target is not None
            return active_spark().read.parquet(target + "/value")
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
        return decode(payload, marker.format)

    def _gone_or_corrupt(self, key: str, marker: Marker, what: str) -> Any:
        if self._marker(key) != marker:
            return _GONE  # overwritten or deleted while we read: read the new marker
        raise CorruptValueError(f"the value staged under {key!r} is damaged: {what}", key)

    def delete(self, key: str) -> None:
        """Remove the marker first (the value stops counting), then every payload of ``key``."""
        check_key(key)
        with self._key_lock(key):
            previous = self._marker(key)
            self._remove_file(self._path(key, MARKER))
            self._sweep(key, keep="", replaced=None if previous is None else previous.data, everything=True)

    def keys(self, prefix: str = "") -> list[str]:
        """The sorted keys at or below ``prefix`` whose commit marker is there."""
        prefix = check_prefix(prefix)
        base = self._path(prefix) if prefix else self._path()
        found = []
        for relative in self._marker_keys(base):
            key = f"{prefix}/{relative}" if prefix and relative else (relative or prefix)
            if key and is_key(key):
                found.append(key)
        return sorted(found)

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        with self._locks_lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            yield


_GONE: Any = object()

ABANDONED_SECONDS = 6 * 3600.0
"""A payload or temporary marker no marker names is removed once it is this old: a writer crashed or lost a race.
Younger ones may belong to a concurrent writer that has not committed yet."""


def fresh_suffix() -> str:
    """A unique name suffix that says when it was made: ``<time in ns, hex>-<random>``."""
    return f"{time.time_ns():x}-{secrets.token_hex(6)}"


def abandoned(suffix: str) -> bool:
    """Whether a payload or temporary marker named with ``suffix`` is old enough to be abandoned (names of
    earlier versions carry no time: they are treated as old)."""
    stamp, sep, _ = suffix.partition("-")
    if not sep:
        return True
    try:
        made = int(stamp, 16) / 1e9
    except ValueError:
        return True
    return time.time() - made > ABANDONED_SECONDS

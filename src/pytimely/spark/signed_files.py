"""Arrow files signed with a checkpoint's key: what a streaming query writes under its checkpoint and reads back
(staged inputs, held rows, late rows, output parts), refused before parsing unless signed with the key.

A file is a marker, an HMAC-SHA256 over its folder's and its own name and its bytes, then the Arrow IPC file: a
file planted, altered, cut short or moved to stand in for another is a :class:`CheckpointFileError` naming it.
Reads take regular files only, never wait, and are bounded by :data:`SIGNED_FILE_LIMIT`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from pytimely.atomic import write_atomic
from pytimely.errors import CheckpointFileError, InvalidArgument

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SIGNED_FILE_LIMIT", "is_signed_file", "read_regular", "read_signed_arrow", "write_signed_arrow"]

_SIGNED = b"PYTIMELY-SIGNED-ARROW-2\n"
"""The first bytes of a signed Arrow file; the HMAC-SHA256 (32 bytes) follows, then the Arrow IPC file. (``-1``
bound the file's name only.)"""
SIGNED_FILE_LIMIT = 1 << 32
"""The most bytes a signed checkpoint file may hold (4 GiB): a read is bounded by it, and a larger file is not
written (one micro-batch's held rows, late rows or staged input, or one process's output part)."""


def _signed_name(path: Path) -> str:
    """What a signature binds of a file's place: its folder's name and its own (``late/batch-3/s00000.arrow`` and
    ``late/batch-5/s00000.arrow`` differ), not where the checkpoint lies (it may be moved whole)."""
    return f"{path.parent.name}/{path.name}"


def _mac(key: bytes, name: str, body: bytes) -> bytes:
    """The HMAC of a signed file's ``body``, bound to its ``name`` (a file cannot stand in for another)."""
    if len(key) < 16:
        raise InvalidArgument(f"a signed file's key must be at least 16 bytes, got {len(key)}")
    return hmac.new(key, b"pytimely-arrow-file\0" + name.encode() + b"\0" + body, hashlib.sha256).digest()


def is_signed_file(path: Path) -> bool:
    """Whether ``path`` starts as a signed file does (any version; read without waiting, a few bytes only)."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(handle).st_mode) and os.read(handle, 22) == _SIGNED[:22]
    except OSError:
        return False
    finally:
        os.close(handle)


def read_regular(path: Path, limit: int, what: str) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (at most ``limit``, else :class:`CheckpointFileError`), and its status.

    Opened without waiting and refused unless it is a regular file: a named pipe planted under the name would
    block the read for ever, a link to a device would read without end."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CheckpointFileError(f"{path}: {what} cannot be read: {exc.strerror or exc}") from None
    try:
        status = os.fstat(handle)
        if not stat.S_ISREG(status.st_mode):
            raise CheckpointFileError(f"{path} is not a regular file ({what}; planted?)")
        if status.st_size > limit:
            raise CheckpointFileError(f"{path} is {status.st_size} bytes, more than the {limit} {what} may be")
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(handle, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise CheckpointFileError(f"{path}: {what} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(handle)
    data = b"".join(chunks)
    if len(data) > limit:  # grew since it was looked at
        raise CheckpointFileError(f"{path} is more than the {limit} bytes {what} may be")
    return data, status


def write_signed_arrow(path: Path, table: pa.Table, key: bytes) -> None:
    """Write ``table`` to ``path`` as an Arrow IPC file signed with ``key`` (bound to the file's folder and name),
    whole or not at all; one larger than :data:`SIGNED_FILE_LIMIT` is refused (a later read would refuse it)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    body = sink.getvalue().to_pybytes()
    size = len(_SIGNED) + hashlib.sha256().digest_size + len(body)
    if size > SIGNED_FILE_LIMIT:
        raise CheckpointFileError(
            f"{path} would be {size} bytes, more than the {SIGNED_FILE_LIMIT} a checkpoint file is read back with "
            f"({table.num_rows} rows): nothing written"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, _SIGNED + _mac(key, _signed_name(path), body) + body)
    except OSError as exc:  # a full disk, a folder's name taken: typed, so a hosted process answers with it
        raise CheckpointFileError(f"{path} cannot be written: {exc.strerror or exc}") from None


def read_signed_arrow(path: Path, key: bytes) -> pa.Table:
    """The table of a file :func:`write_signed_arrow` wrote under ``key``; :class:`CheckpointFileError` naming the
    file for one that is not signed with it (planted, altered, moved or cut short), before any of it is parsed, and
    for one that is no regular file or larger than :data:`SIGNED_FILE_LIMIT` (before any of it is read)."""
    import pyarrow as pa

    data, _ = read_regular(path, SIGNED_FILE_LIMIT, "a signed checkpoint file")
    start = len(_SIGNED) + hashlib.sha256().digest_size
    if not data.startswith(_SIGNED) or len(data) < start:
        raise CheckpointFileError(
            f"{path} is not a signed pytimely Arrow file (planted, cut short, or written by an earlier pytimely)"
        )
    if not hmac.compare_digest(data[len(_SIGNED) : start], _mac(key, _signed_name(path), data[start:])):
        raise CheckpointFileError(
            f"{path} is not signed with the checkpoint's key (altered, planted, renamed or moved from another folder)"
        )
    try:
        return pa.ipc.open_file(pa.BufferReader(data[start:])).read_all()
    except (pa.ArrowException, OSError) as exc:  # signed, so written by this query: a bug, not an attack
        raise CheckpointFileError(f"{path} is signed but is not an Arrow file: {exc}") from None

"""Atomic file writes: a temporary file beside the target, renamed over it only when complete.

A temporary file is named ``.<target>.<host>.<pid>.<token>.tmp``. A writer
killed before its rename (``kill -9``, a power cut) leaves one behind; the next
write of the same target removes those it can prove abandoned: written on this
host by a process that no longer runs, or on another host (a shared file
system) and untouched for ``stale_after`` seconds. Anything else is left alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from pytimely.errors import InvalidArgument, OutputPathError

__all__ = ["STALE_AFTER", "atomic_output", "check_output", "remove_stale", "temporary_name", "write_atomic"]

STALE_AFTER = 24 * 3600.0
"""Seconds after which another host's temporary file of a target counts as abandoned."""

_TAIL = re.compile(r"(?P<host>[A-Za-z0-9_-]+)\.(?P<pid>[0-9]+)\.[0-9a-f]{16}\.tmp")


def _host() -> str:
    """This host's name with everything outside ``[A-Za-z0-9_-]`` replaced, so names parse back unambiguously."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"


def temporary_name(target: str | os.PathLike[str]) -> Path:
    """A fresh temporary path for writing ``target`` (same directory, so the rename stays on one file system)."""
    path = Path(target)
    return path.with_name(f".{path.name}.{_host()}.{os.getpid()}.{secrets.token_hex(8)}.tmp")


def _running(pid: int) -> bool:
    """Whether a process ``pid`` runs on this host (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale(target: str | os.PathLike[str], *, stale_after: float = STALE_AFTER) -> list[Path]:
    """Remove the abandoned temporary files of earlier writes of ``target``; return the paths removed."""
    path = Path(target)
    prefix = f".{path.name}."
    host = _host()
    now = time.time()
    removed = []
    try:
        entries = list(os.scandir(path.parent if str(path.parent) else "."))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        match = _TAIL.fullmatch(entry.name[len(prefix) :])
        if match is None:
            continue
        pid = int(match["pid"])
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if match["host"] == host:
                abandoned = pid != os.getpid() and not _running(pid)
            else:
                abandoned = now - entry.stat(follow_symlinks=False).st_mtime > stale_after
            if abandoned:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue  # another run removed it first, or it is not ours to remove
    return removed


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike[str], mode: str = "w", *, durable: bool = False, tidy: bool = True
) -> Iterator[IO[Any]]:
    """Write ``path`` under a temporary name beside it, renamed to ``path`` only if the block succeeds.

    A failed run leaves no partial output that could pass for a complete one; abandoned temporary files of
    earlier writes of ``path`` are removed first. A missing directory is an :class:`OutputPathError` naming
    ``path``. With ``durable``, the file and then its directory are fsynced, so the rename survives a power
    cut with the whole content behind it. ``tidy=False`` skips the checks of the directory and the removal of
    abandoned temporary files (a caller that writes often and removes them otherwise).
    """
    if mode not in ("w", "wb"):
        raise InvalidArgument(f"atomic_output writes with mode 'w' or 'wb', got {mode!r}")
    target = Path(path)
    if tidy:
        check_output(target)
        remove_stale(target)
    tmp = temporary_name(target)
    encoding = None if "b" in mode else "utf-8"
    try:
        # Opened apart from the block below, so that only a failure to create the file is an OutputPathError.
        out = open(tmp, mode.replace("w", "x"), encoding=encoding)  # noqa: SIM115
    except OSError as exc:
        raise OutputPathError(f"cannot write {os.fspath(path)}: {exc.strerror or exc}", os.fspath(path)) from None
    try:
        with out:
            yield out
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, target)
        if durable:
            sync_directory(target.parent if str(target.parent) else Path("."))
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def sync_directory(directory: Path) -> None:
    """Make a folder's entries (a rename, a new file) durable: fsync the folder itself."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_output(path: str | os.PathLike[str]) -> None:
    """Raise :class:`OutputPathError` unless ``path`` could be written: its directory exists, it is no directory."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    name = os.fspath(path)
    if not parent.is_dir():
        raise OutputPathError(f"cannot write {name}: the directory {os.fspath(parent)} does not exist", name)
    if target.is_dir():
        raise OutputPathError(f"cannot write {name}: it is a directory", name)


def write_atomic(
    path: str | os.PathLike[str], data: str | bytes, *, durable: bool = False, tidy: bool = True
) -> None:
    """Replace ``path`` with ``data`` (text is written as UTF-8) atomically (``durable``, ``tidy``: as for
    atomic_output)."""
    with atomic_output(path, "wb", durable=durable, tidy=tidy) as out:
        out.write(data.encode("utf-8") if isinstance(data, str) else data)

"""One run at a time per staging area: a file lock on a local disk, a lease on object stores.

:func:`staging_lock` is a context manager a run holds for as long as it writes. A second run on the same area
is refused at once with :class:`~pytimely.errors.StagingLockedError` naming the holder: what it is, its process
id and host, and since when.

* :class:`LocalStaging`: ``flock`` on ``<root>/.lock``, which also records the holder. The kernel drops the lock
  when the holder's process ends in any way (SIGKILL included), so no stale lock is ever left behind.
* :class:`FsspecStaging`: a lease object ``<root>/.lock`` created by a conditional write (S3's
  ``If-None-Match: *``; exclusive create elsewhere), holding the holder and an expiry ``ttl`` seconds ahead
  that a thread renews every ``ttl / 3``. A lease past its expiry (its holder was killed) is taken over.
* :class:`MemoryStaging` is private to its process: nothing to lock.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from types import TracebackType
from typing import Any

from pytimely.errors import StagingLockedError, StagingUnavailableError
from pytimely.workflow.staging.area import StagingArea
from pytimely.workflow.staging.local import LocalStaging
from pytimely.workflow.staging.remote import FsspecStaging

__all__ = ["LOCK_NAME", "StagingLock", "staging_lock", "unavailable_reason"]


def unavailable_reason(exc: OSError) -> str:
    """Why a staging area cannot be used, in words: the OS error's, or the object store's missing bucket."""
    text = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, FileNotFoundError) and ("bucket" in str(exc).lower() or "NoSuchBucket" in repr(exc)):
        return f"its bucket does not exist ({text})"
    if isinstance(exc, PermissionError):
        return f"permission denied ({exc.filename or text})"
    return text

LOCK_NAME = ".lock"
"""The lock file (local) or lease object (object stores) in a staging area's root: not a staging key."""


def _holder(what: str, token: str, expires: float | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "holder": what,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "token": token,
    }
    if expires is not None:
        record["expires"] = expires
    return record


RECORD_WAIT = 2.0
"""Seconds a refused run waits for the lock's holder to record who it is (or to let go) before naming it."""


def _recorded(data: bytes) -> bool:
    """Whether a lock file's bytes name its holder."""
    try:
        return isinstance(json.loads(data or b"{}").get("pid"), int)
    except (ValueError, AttributeError):
        return False


def _refusal(where: str, data: bytes | str | None) -> StagingLockedError:
    try:
        record = json.loads(data or b"")
        who = f"{record['holder']} (pid {record['pid']} on {record['host']} since {record['since']})"
    except (ValueError, KeyError, TypeError):
        who = "another run (it has not recorded who it is yet)"
    return StagingLockedError(
        f"staging area {where} is in use by {who}; wait for it to finish or use another staging area"
    )


class StagingLock:
    """The lock of one staging area, held between ``__enter__`` and ``__exit__`` (see the module docstring)."""

    def __init__(self, area: StagingArea, what: str, *, ttl: float = 120.0, renew: bool = True) -> None:
        self.area = area
        self.what = what
        self.ttl = ttl
        self.renew = renew
        self.token = secrets.token_hex(8)
        self._fd: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> StagingLock:
        if isinstance(self.area, LocalStaging):
            self._lock_file(os.path.join(self.area.root, LOCK_NAME))
        elif isinstance(self.area, FsspecStaging):
            self._lease()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._fd is not None:
            import fcntl

            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._renewer is not None:
            self._stop.set()
            self._renewer.join(timeout=60)
            self._renewer = None
        if isinstance(self.area, FsspecStaging) and self._stop.is_set() is not None:
            self._release_lease()

    # -- a local file lock -----------------------------------------------------------------------------------------

    def _lock_file(self, path: str) -> None:
        import fcntl

        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StagingUnavailableError(
                f"staging area {os.path.dirname(path)!r} cannot be written: {unavailable_reason(exc)}"
            ) from exc
        # The holder writes who it is just after taking the lock, and clears it just before letting go: a run
        # that finds the lock taken in either gap looks again for a moment rather than name nobody.
        deadline = time.monotonic() + RECORD_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                data = os.pread(fd, 1 << 16, 0)
                if _recorded(data) or time.monotonic() >= deadline:
                    os.close(fd)
                    raise _refusal(repr(os.path.dirname(path)), data) from None
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_holder(self.what, self.token)).encode(), 0)
        self._fd = fd

    # -- a lease on an object store ----------------------------------------------------------------------------------

    def _lease_path(self) -> str:
        assert isinstance(self.area, FsspecStaging)
        return f"{self.area.root}/{LOCK_NAME}"

    def _lease(self) -> None:
        assert isinstance(self.area, FsspecStaging)
        fs, path = self.area.fs, self._lease_path()
        for _ in range(3):
            record = json.dumps(_holder(self.what, self.token, time.time() + self.ttl))
            try:
                with fs.open(path, "xb") as f:  # S3: a PUT with If-None-Match: *
                    f.write(record.encode())
            except FileNotFoundError as exc:
                raise StagingUnavailableError(
                    f"staging area {self.area.url!r} cannot be written: {unavailable_reason(exc)}"
                ) from exc
            except (FileExistsError, OSError) as exc:
                try:
                    held = fs.cat_file(path)
                except FileNotFoundError:
                    continue  # released meanwhile: try again
                except OSError:
                    reason = unavailable_reason(exc) if isinstance(exc, OSError) else str(exc)
                    where = repr(self.area.url)
                    raise StagingUnavailableError(f"staging area {where} cannot be written: {reason}") from exc
                try:
                    expired = float(json.loads(held)["expires"]) < time.time()
                except (ValueError, KeyError, TypeError):
                    expired = False
                if not expired:
                    raise _refusal(repr(self.area.url), held) from None
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(path)  # its holder stopped renewing it: it was killed
                continue
            if self.renew:
                self._renewer = threading.Thread(target=self._renew, name="pytimely-staging-lease", daemon=True)
                self._renewer.start()
            return
        raise StagingLockedError(f"staging area {self.area.url!r}: its lease changed hands three times meanwhile")

    def _renew(self) -> None:
        assert isinstance(self.area, FsspecStaging)
        while not self._stop.wait(self.ttl / 3):
            record = json.dumps(_holder(self.what, self.token, time.time() + self.ttl))
            with contextlib.suppress(OSError):
                self.area.fs.pipe_file(self._lease_path(), record.encode())

    def _release_lease(self) -> None:
        assert isinstance(self.area, FsspecStaging)
        fs, path = self.area.fs, self._lease_path()
        try:
            held = json.loads(fs.cat_file(path))
            if held.get("token") == self.token:
                fs.rm_file(path)
        except (OSError, ValueError):
            pass  # gone already, or not ours any more


def staging_lock(area: StagingArea, what: str, *, ttl: float = 120.0, renew: bool = True) -> StagingLock:
    """A lock on ``area`` held as ``what`` (a description naming the run); see the module docstring."""
    return StagingLock(area, what, ttl=ttl, renew=renew)

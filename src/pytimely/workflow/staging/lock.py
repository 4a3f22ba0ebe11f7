"""One run at a time per staging area: a file lock on a local disk, a lease on object stores.

:func:`staging_lock` is a context manager a run holds for as long as it writes. A second run on the same area
is refused at once with :class:`~pytimely.errors.StagingLockedError` naming the holder: what it is, its process
id and host, and since when.

* :class:`LocalStaging` (and ``file://`` areas): ``flock`` on ``<root>/.lock``, which also records the holder.
  The kernel drops the lock when the holder's process ends in any way (SIGKILL included), so no stale lock is
  ever left behind.
* S3 (``s3://``): a lease object ``<root>/.lock`` naming the holder and an expiry ``ttl`` seconds ahead. Every
  change to it is a conditional write on the lease's own version (its ETag): it is created with
  ``If-None-Match: *``, renewed (every ``ttl / 3``, by a thread) and taken over with ``If-Match: <the version
  read>``, and released with a delete ``If-Match`` too, so two runs can never both hold it and none ever removes
  another's. A lease is taken over once it has expired (by the taker's clock), or at once when its holder is a
  process of this host known to be dead (its pid gone, or reused by another process, or the host rebooted since).
  A holder whose renewal fails (the lease was taken over, or could not be written for a while) stops writing
  ``ttl / 4`` before its expiry: :meth:`StagingLock.check`, called before every write, raises
  :class:`~pytimely.errors.StagingLockLostError`. With clocks that agree within ``ttl / 4``, a taker never writes
  while the holder still does (a write already under way when the lease runs out excepted).
* Other fsspec filesystems, which offer no conditional write: a lease created exclusively and renewed by its
  holder, never taken over automatically (that could not be done safely); :func:`break_lock` breaks one.
* :class:`MemoryStaging` is private to its process: nothing to lock.

:func:`break_lock` (``pytimely workflow unlock --staging URL``) removes a lease whose holder is gone, naming it;
it refuses a holder that is a live process of this host unless forced.
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
from typing import Any, Protocol

from pytimely.errors import StagingLockedError, StagingLockLostError, StagingUnavailableError
from pytimely.workflow.staging.area import StagingArea
from pytimely.workflow.staging.local import LocalStaging
from pytimely.workflow.staging.remote import FsspecStaging

__all__ = [
    "LEASE_SECONDS",
    "LOCK_NAME",
    "Leases",
    "StagingLock",
    "break_lock",
    "holder_text",
    "staging_lock",
    "unavailable_reason",
]

LEASE_SECONDS = 120.0
"""How long a lease on an object store lasts without renewal (renewed every third of it)."""

LOCK_NAME = ".lock"
"""The lock file (local) or lease object (object stores) in a staging area's root: not a staging key."""

RECORD_WAIT = 2.0
"""Seconds a refused run waits for the lock's holder to record who it is (or to let go) before naming it."""

_ATTEMPTS = 8
"""Rounds of create-read-replace a run tries while the lease keeps changing under it."""


def unavailable_reason(exc: OSError) -> str:
    """Why a staging area cannot be used, in words: the OS error's, or the object store's missing bucket."""
    text = exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, FileNotFoundError) and ("bucket" in str(exc).lower() or "NoSuchBucket" in repr(exc)):
        return f"its bucket does not exist ({text})"
    if isinstance(exc, PermissionError):
        return f"permission denied ({exc.filename or text})"
    return text


# -- who holds it ----------------------------------------------------------------------------------------------------


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), ``-1`` for a zombie, ``None`` if there is none."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return -2  # there, but unreadable here
    fields = stat[stat.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    if fields and fields[0] == "Z":
        return -1
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return -2


def _record(what: str, token: str, expires: float | None = None, ttl: float | None = None) -> dict[str, Any]:
    record: dict[str, Any] = {
        "holder": what,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "boot": _boot_id(),
        "started": _process_start(os.getpid()),
        "since": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "token": token,
    }
    if expires is not None:
        record["expires"] = expires
        record["ttl"] = ttl
    return record


def _parse(data: bytes | str | None) -> dict[str, Any] | None:
    try:
        record = json.loads(data or b"")
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def holder_text(record: dict[str, Any] | None) -> str:
    """Who a lock record names, in words: ``what (pid N on host since T)``."""
    try:
        assert record is not None
        return f"{record['holder']} (pid {record['pid']} on {record['host']} since {record['since']})"
    except (AssertionError, KeyError, TypeError):
        return "another run (it has not recorded who it is yet)"


def holder_dead(record: dict[str, Any]) -> bool | None:
    """Whether the process a lock record names is known dead (``True``), known alive (``False``), or cannot be
    known from here (``None``: another host)."""
    if record.get("host") != socket.gethostname():
        return None
    boot = _boot_id()
    if boot is not None and record.get("boot") not in (None, boot):
        return True  # this host rebooted since: every process of before is gone
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    started = _process_start(pid)
    if started is None or started == -1:
        if started is None and not os.path.isdir("/proc"):  # no /proc: ask the kernel
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
            return False
        return True
    recorded = record.get("started")
    # Started at another moment than the recorded holder: the pid was reused by another process.
    return started >= 0 and isinstance(recorded, int) and recorded >= 0 and recorded != started


def _refusal(where: str, record: dict[str, Any] | None, hint: str = "") -> StagingLockedError:
    return StagingLockedError(
        f"staging area {where} is in use by {holder_text(record)}; wait for it to finish or use another staging "
        f"area{hint}"
    )


# -- leases: conditional writes on an object ---------------------------------------------------------------------------


class Leases(Protocol):
    """The lease object of one staging area, changed only by writes conditional on its version."""

    where: str
    """The staging area, for messages."""
    safe: bool
    """Whether ``replace`` and ``remove`` are atomic compare-and-swaps (so a lease may be taken over)."""

    def read(self) -> tuple[bytes, str] | None:
        """The lease's bytes and version, or ``None`` when there is none."""
        ...

    def create(self, data: bytes) -> str | None:
        """Write the lease if there is none: its version, or ``None`` when one exists."""
        ...

    def replace(self, data: bytes, version: str) -> str | None:
        """Write the lease if it is still at ``version``: the new version, or ``None`` when it is not."""
        ...

    def remove(self, version: str) -> bool:
        """Remove the lease if it is still at ``version``; whether it was."""
        ...


class S3Leases:
    """A lease object on S3 (through s3fs's client): conditional PUTs and DELETEs on its ETag."""

    safe = True

    def __init__(self, area: FsspecStaging, path: str) -> None:
        self.where = repr(area.url)
        self.fs = area.fs
        self.bucket, self.key, _ = self.fs.split_path(path)

    def _call(self, method: str, **kwargs: Any) -> Any:
        """``method`` of the S3 client on the lease object; the response, or ``None`` when a condition failed or it
        is missing. The client's own errors become ``OSError`` (``FileNotFoundError`` for a missing bucket)."""
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]
        from fsspec.asyn import sync  # type: ignore[import-untyped]

        async def call() -> Any:
            await self.fs.set_session()
            s3 = await self.fs.get_s3(self.bucket)
            response = await getattr(s3, method)(Bucket=self.bucket, Key=self.key, **kwargs)
            if method == "get_object":
                async with response["Body"] as body:
                    response["Data"] = await body.read()
            return response

        try:
            return sync(self.fs.loop, call)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                raise FileNotFoundError(f"NoSuchBucket: bucket {self.bucket!r} does not exist") from exc
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey") or status in (404, 409, 412):
                return None  # the condition failed, or the lease is not there
            raise OSError(f"{code or status}: {exc}") from exc
        except BotoCoreError as exc:
            raise OSError(str(exc)) from exc

    def read(self) -> tuple[bytes, str] | None:
        """The lease's bytes and ETag, read in one request."""
        response = self._call("get_object")
        return None if response is None else (bytes(response["Data"]), str(response["ETag"]))

    def create(self, data: bytes) -> str | None:
        """A PUT with ``If-None-Match: *``."""
        response = self._call("put_object", Body=data, IfNoneMatch="*")
        return None if response is None else str(response["ETag"])

    def replace(self, data: bytes, version: str) -> str | None:
        """A PUT with ``If-Match: <version>``."""
        response = self._call("put_object", Body=data, IfMatch=version)
        return None if response is None else str(response["ETag"])

    def remove(self, version: str) -> bool:
        """A DELETE with ``If-Match: <version>``."""
        return self._call("delete_object", IfMatch=version) is not None


class FileLeases:
    """A lease object on a filesystem without conditional writes: created exclusively; its version is a hash of
    its bytes, compared before a write (not atomically, so ``safe`` is false and it is never taken over)."""

    safe = False

    def __init__(self, area: FsspecStaging, path: str) -> None:
        self.where = repr(area.url)
        self.fs = area.fs
        self.path = path

    @staticmethod
    def _version(data: bytes) -> str:
        import hashlib

        return hashlib.sha256(data).hexdigest()

    def read(self) -> tuple[bytes, str] | None:
        """The lease's bytes and their hash."""
        try:
            data = bytes(self.fs.cat_file(self.path))
        except FileNotFoundError:
            return None
        return data, self._version(data)

    def create(self, data: bytes) -> str | None:
        """An exclusive create."""
        try:
            with self.fs.open(self.path, "xb") as f:
                f.write(data)
        except FileExistsError:
            return None
        return self._version(data)

    def replace(self, data: bytes, version: str) -> str | None:
        """Write if the lease still hashes to ``version`` (checked just before)."""
        found = self.read()
        if found is None or found[1] != version:
            return None
        self.fs.pipe_file(self.path, data)
        return self._version(data)

    def remove(self, version: str) -> bool:
        """Remove if the lease still hashes to ``version`` (checked just before)."""
        found = self.read()
        if found is None or found[1] != version:
            return False
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.path)
        return True


def _local_root(area: StagingArea) -> str | None:
    """The folder of an area locked with ``flock``: a local one, or an fsspec area on the local filesystem."""
    if isinstance(area, LocalStaging):
        return area.root
    if isinstance(area, FsspecStaging) and area._local:
        return str(area.root)
    return None


def leases_of(area: FsspecStaging) -> Leases:
    """The lease object of an fsspec area: S3's conditional writes where the filesystem is S3, else a plain file."""
    path = f"{area.root}/{LOCK_NAME}"
    protocols = area.fs.protocol if isinstance(area.fs.protocol, tuple) else (area.fs.protocol,)
    if "s3" in protocols or "s3a" in protocols:
        return S3Leases(area, path)
    return FileLeases(area, path)


# -- the lock --------------------------------------------------------------------------------------------------------


class StagingLock:
    """The lock of one staging area, held between ``__enter__`` and ``__exit__`` (see the module docstring)."""

    def __init__(self, area: StagingArea, what: str, *, ttl: float = LEASE_SECONDS, renew: bool = True) -> None:
        self.area = area
        self.what = what
        self.ttl = ttl
        self.renew = renew
        self.token = secrets.token_hex(8)
        self.took_over: str | None = None
        """Why a lease left by another run was taken over (expired, its holder dead), if one was."""
        self._fd: int | None = None
        self._leases: Leases | None = None
        self._version: str | None = None
        self._expires: float | None = None
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def __enter__(self) -> StagingLock:
        root = _local_root(self.area)
        if root is not None:
            self._lock_file(os.path.join(root, LOCK_NAME))
        elif isinstance(self.area, FsspecStaging):
            self._take(leases_of(self.area))
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
        if self._leases is not None and self._version is not None and self._lost is None:
            with contextlib.suppress(OSError):
                self._leases.remove(self._version)  # only ours: a lease taken over since has another version
            self._version = None

    def check(self) -> None:
        """Raise :class:`~pytimely.errors.StagingLockLostError` if this run may no longer write to the area: its
        lease was taken over, or was not renewed in time (it stops ``ttl / 4`` before the lease expires)."""
        if self._lost is not None:
            raise StagingLockLostError(
                f"staging area {self._where()}: this run lost its lease ({self._lost}) and stopped before writing"
            )
        if self._expires is not None and time.time() > self._expires - self.ttl / 4:
            raise StagingLockLostError(
                f"staging area {self._where()}: this run could not renew its lease in time (it runs out at "
                f"{time.strftime('%H:%M:%S UTC', time.gmtime(self._expires))}) and stopped before writing"
            )

    def _where(self) -> str:
        return self._leases.where if self._leases is not None else repr(self.area)

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
                record = _parse(data)
                if (record is not None and isinstance(record.get("pid"), int)) or time.monotonic() >= deadline:
                    os.close(fd)
                    raise _refusal(repr(os.path.dirname(path)), record) from None
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_record(self.what, self.token)).encode(), 0)
        self._fd = fd

    # -- a lease on an object store ----------------------------------------------------------------------------------

    def _fresh(self) -> tuple[bytes, float]:
        expires = time.time() + self.ttl
        return json.dumps(_record(self.what, self.token, expires, self.ttl)).encode(), expires

    def _take(self, leases: Leases) -> None:
        try:
            for _ in range(_ATTEMPTS):
                data, expires = self._fresh()
                version = leases.create(data)
                if version is None:
                    found = leases.read()
                    if found is None:
                        continue  # released meanwhile: create it again
                    held = _parse(found[0])
                    why = _takeable(held)
                    if why is None:
                        raise _refusal(leases.where, held, _until(held, leases.where))
                    if not leases.safe:
                        raise _refusal(
                            leases.where, held,
                            f" ({why}, but this filesystem cannot take a lease over safely; if that run is gone, "
                            f"`pytimely workflow unlock --staging URL` breaks it)",
                        )  # fmt: skip
                    version = leases.replace(data, found[1])
                    if version is None:
                        continue  # changed since it was read: another run took it, or its holder renewed it
                    self.took_over = f"{holder_text(held)}: {why}"
                self._hold(leases, version, expires)
                return
        except OSError as exc:
            reason = unavailable_reason(exc)
            raise StagingUnavailableError(f"staging area {leases.where} cannot be written: {reason}") from exc
        raise StagingLockedError(f"staging area {leases.where}: its lease kept changing hands; try again")

    def _hold(self, leases: Leases, version: str, expires: float) -> None:
        self._leases, self._version, self._expires = leases, version, expires
        if self.renew:
            self._renewer = threading.Thread(target=self._renew, name="pytimely-staging-lease", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        leases = self._leases
        assert leases is not None
        while not self._stop.wait(self.ttl / 3):
            version = self._version
            assert version is not None
            data, expires = self._fresh()
            try:
                renewed = leases.replace(data, version)
                if renewed is None:
                    # Our write may have landed and only its answer been lost (a retried request): look.
                    found = leases.read()
                    held = _parse(found[0]) if found is not None else None
                    if found is None or held is None or held.get("token") != self.token:
                        self._lost = f"taken over by {holder_text(held)}" if held else "it was removed"
                        return
                    renewed, expires = found[1], float(held["expires"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not renewed this time: check() stops the run if it stays so too long
            self._version, self._expires = renewed, expires


def _takeable(record: dict[str, Any] | None) -> str | None:
    """Why a lease may be taken over (expired, or its holder is a dead process of this host), or ``None``."""
    if record is None:
        return None  # unreadable: never guess
    dead = holder_dead(record)
    if dead:
        return "its holder is no longer running on this host"
    try:
        expires = float(record["expires"])
    except (KeyError, TypeError, ValueError):
        return None
    if expires < time.time():
        return f"it expired at {time.strftime('%H:%M:%S UTC', time.gmtime(expires))}"
    return None


def _until(record: dict[str, Any] | None, where: str) -> str:
    try:
        assert record is not None
        ends = time.strftime("%H:%M:%S UTC", time.gmtime(float(record["expires"])))
    except (AssertionError, KeyError, TypeError, ValueError):
        return ""
    return f" (its lease runs until {ends} unless renewed; if that run is gone, `pytimely workflow unlock` breaks it)"


def staging_lock(area: StagingArea, what: str, *, ttl: float = LEASE_SECONDS, renew: bool = True) -> StagingLock:
    """A lock on ``area`` held as ``what`` (a description naming the run); see the module docstring."""
    return StagingLock(area, what, ttl=ttl, renew=renew)


def break_lock(area: StagingArea, *, force: bool = False) -> dict[str, Any] | None:
    """Break the lock of ``area`` and return the record of the holder it named (``None``: it was not locked).

    A holder that is a live process of this host is refused (``StagingLockedError`` naming it) unless ``force``;
    a local folder's lock cannot be broken at all while its process lives (the kernel holds it for it).
    """
    root = _local_root(area)
    if root is not None:
        return _break_file(os.path.join(root, LOCK_NAME))
    if not isinstance(area, FsspecStaging):
        return None
    leases = leases_of(area)
    try:
        for _ in range(_ATTEMPTS):
            found = leases.read()
            if found is None:
                return None
            held = _parse(found[0])
            if held is not None and holder_dead(held) is False and not force:
                raise StagingLockedError(
                    f"staging area {leases.where} is held by {holder_text(held)}, which is running on this host; "
                    "stop it, or break its lease with force"
                )
            if leases.remove(found[1]):
                return held if held is not None else {}
    except OSError as exc:
        reason = unavailable_reason(exc)
        raise StagingUnavailableError(f"staging area {leases.where} cannot be written: {reason}") from exc
    raise StagingLockedError(f"staging area {leases.where}: its lease kept changing hands; try again")


def _break_file(path: str) -> dict[str, Any] | None:
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = _parse(os.pread(fd, 1 << 16, 0))
            raise StagingLockedError(
                f"staging area {os.path.dirname(path)!r} is held by {holder_text(held)}, which is running; a "
                "local folder's lock ends with its process: stop it"
            ) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # nobody holds it: the kernel let go when its holder ended
    finally:
        os.close(fd)

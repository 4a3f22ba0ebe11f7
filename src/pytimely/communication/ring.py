"""Shared-memory rings: where processes on one host put big frame payloads instead of the socket.

timely has a process allocator beside its TCP one; pytimely keeps one link per pair of processes and lets a
link on one host move its big payloads through a ring in shared memory, saving the kernel's two copies of
every byte (into the socket, out of it). Everything else stays on the link's TCP connection: headers, order,
heartbeats and failure. A frame whose payload is in the ring carries on the wire only its authenticated header
and a *descriptor* (where in the ring, how long); the payload in the ring is sealed with AES-GCM under the
frame's own nonce and with the header and descriptor as associated data, so a payload changed in the ring, or a
descriptor pointing elsewhere, fails authentication exactly as a corrupted frame on the wire does
(:mod:`pytimely.communication.frame`).

A ring is offered only to a peer whose address names this host (:func:`same_host`). The sending process creates
the ring (a file in ``/dev/shm``, mode 0600, opened ``O_EXCL``, every page allocated up front so that a full
``/dev/shm`` means no ring rather than a crash later) and offers it over the link; the receiving process maps it
read-only, so it can never write into its peer's memory, and says so; the creator then removes the file's name.
A process killed in between leaves the file, named with its pid; the next ring created on the host removes the
files of processes that are gone (:func:`sweep`). The
reader tells the writer how far it has read with control frames on the link (a system call apart, so no
memory ordering between the processes is assumed). A payload that does not fit in the free part of the ring
goes on the socket as before: the ring never makes a sender wait.
"""

from __future__ import annotations

import contextlib
import ipaddress
import mmap
import os
import re
import secrets
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from pytimely.errors import RingError

__all__ = [
    "DESCRIPTOR",
    "MIN_CAPACITY",
    "RingOffer",
    "RingReader",
    "RingWriter",
    "same_host",
    "shared_memory_dir",
    "sweep",
]

DESCRIPTOR = struct.Struct("<QQ")
"""A ring frame's payload on the wire: the payload's start (bytes ever written to the ring) and its length."""
_NAME = re.compile(r"pytimely-ring-(\d+)-[0-9a-f]{32}")
_MAX_CAPACITY = 1 << 32
MIN_CAPACITY = 1 << 17
"""The smallest ring worth having: room for a payload of the smallest size that goes through a ring, twice."""


def shared_memory_dir() -> Path | None:
    """Where rings are created (``/dev/shm``), or ``None`` where there is no such place (then no rings)."""
    path = Path("/dev/shm")
    return path if path.is_dir() and os.access(path, os.W_OK) else None


@dataclass(frozen=True, slots=True)
class RingOffer:
    """What a writer tells its peer over the link: the ring's file name and its capacity in bytes."""

    name: str
    capacity: int

    def encode(self) -> str:
        """The offer as the text of a control frame."""
        return f"{self.name},{self.capacity}"

    @classmethod
    def decode(cls, text: str) -> RingOffer:
        """An offer from a control frame's text (the peer is authenticated, the text is still checked)."""
        name, _, capacity = text.partition(",")
        if not _NAME.fullmatch(name) or not capacity.isdigit() or not 0 < int(capacity) <= _MAX_CAPACITY:
            raise RingError(f"a ring offer names no ring this process would map: {text[:80]!r}")
        return cls(name, int(capacity))


def same_host(host: str, other: str) -> bool:
    """Whether two listening addresses are on one machine as far as their names say (the same, or both loopback).

    Only then is a ring offered: a ring for a peer elsewhere would hold ``/dev/shm`` pages until it says no.
    """
    if host == other:
        return True

    def loopback(name: str) -> bool:
        if name == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    return loopback(host) and loopback(other)


def sweep(directory: Path) -> list[str]:
    """Remove ring files of this user whose creating process is gone (killed before its peer mapped the ring);
    the names removed."""
    removed = []
    for path in directory.glob("pytimely-ring-*"):
        match = _NAME.fullmatch(path.name)
        if match is None:
            continue
        try:
            if path.lstat().st_uid != os.getuid():
                continue
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path.name)
        except (PermissionError, FileNotFoundError):
            continue  # a live process of another user, or already gone
    return removed


class RingWriter:
    """The sending side of a ring: places sealed payloads and learns from its reader what it may reuse."""

    def __init__(self, capacity: int, directory: Path) -> None:
        if not MIN_CAPACITY <= capacity <= _MAX_CAPACITY:
            raise ValueError(f"a ring holds {MIN_CAPACITY} bytes to 4 GiB, not {capacity}")
        self.capacity = capacity
        # The creator's pid in the name lets a later run remove the file of a process killed before its peer
        # mapped the ring (sweep).
        self.name = f"pytimely-ring-{os.getpid()}-{secrets.token_hex(16)}"
        self._path: Path | None = directory / self.name
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            # Every page taken now: a page of a full /dev/shm first touched while writing would kill the process
            # (SIGBUS); here it is an OSError, and the link goes without a ring.
            os.posix_fallocate(fd, 0, capacity)
            self._map = mmap.mmap(fd, capacity)
        except BaseException:
            os.close(fd)
            self.unlink()
            raise
        os.close(fd)
        self._view = memoryview(self._map)
        self.head = 0
        """Bytes ever placed in the ring (a payload starts at ``head % capacity``)."""
        self.tail = 0
        """Bytes ever released by the reader."""
        self.ready = False
        """Whether the peer mapped the ring (until then nothing is placed in it)."""
        self.placed = 0
        """How many payloads went through the ring."""

    @property
    def offer(self) -> RingOffer:
        """What to tell the peer."""
        return RingOffer(self.name, self.capacity)

    def accepted(self) -> None:
        """The peer mapped the ring: remove its name (the mappings stay) and start placing payloads."""
        self.unlink()
        self.ready = True

    def unlink(self) -> None:
        """Remove the ring's file name, if still there."""
        path, self._path = self._path, None
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def release(self, upto: int) -> None:
        """The reader has read everything before position ``upto``."""
        if not self.tail <= upto <= self.head:
            raise RingError(f"the peer released ring position {upto}, outside the {self.tail}..{self.head} it holds")
        self.tail = upto

    def reserve(self, size: int) -> tuple[int, memoryview] | None:
        """Room for ``size`` contiguous bytes: their start position and a view to fill; ``None`` if full now."""
        capacity = self.capacity
        if not self.ready or size > capacity:
            return None
        at = self.head % capacity
        skip = capacity - at if at + size > capacity else 0  # a payload never wraps: the end of the ring is skipped
        if self.head + skip + size - self.tail > capacity:
            return None
        start = self.head + skip
        self.head = start + size
        self.placed += 1
        offset = start % capacity
        return start, self._view[offset : offset + size]

    def close(self) -> None:
        """Unmap the ring and remove its name."""
        self.unlink()
        self._view.release()
        with contextlib.suppress(BufferError):
            self._map.close()


class RingReader:
    """The receiving side of a ring: a read-only mapping of the peer's ring."""

    def __init__(self, offer: RingOffer, directory: Path) -> None:
        path = directory / offer.name
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            info = os.fstat(fd)
            # Only a plain file of this user's, of the size offered, is mapped.
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_size != offer.capacity:
                raise RingError(f"the ring {offer.name} is not a file this process would map")
            self._map = mmap.mmap(fd, offer.capacity, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self.capacity = offer.capacity
        self._view = memoryview(self._map)
        self.read = 0
        """Position up to which payloads have been taken out of the ring."""

    def payload(self, start: int, size: int) -> memoryview:
        """The ``size`` bytes placed at ``start``; call :meth:`taken` once they are opened (the descriptor saying
        where is authenticated only then)."""
        offset = start % self.capacity
        if start < self.read or size > self.capacity or offset + size > self.capacity:
            raise RingError(f"a ring descriptor points at {start} (+{size} bytes), outside the ring's unread part")
        return self._view[offset : offset + size]

    def taken(self, start: int, size: int) -> None:
        """The payload at ``start`` is out of the ring: its place may be reused."""
        self.read = start + size

    def close(self) -> None:
        """Unmap the ring."""
        self._view.release()
        with contextlib.suppress(BufferError):
            self._map.close()

"""Shared-memory rings: where processes on one host put big frame payloads instead of the socket.

timely has a process allocator beside its TCP one; pytimely keeps one link per pair of processes and lets a
link on one host move its big payloads through a ring in shared memory, saving the kernel's two copies of
every byte (into the socket, out of it). Everything else stays on the link's TCP connection: headers, order,
heartbeats and failure. A frame whose payload is in the ring carries on the wire only its authenticated header
and a *descriptor* (where in the ring, how long); the payload in the ring is authenticated, not encrypted: its
AES-GCM tag (a GMAC), under the link's key and the frame's own nonce, covers the header, the descriptor and the
payload, so a payload changed in the ring, copied there from another frame, or a descriptor pointing elsewhere
fails authentication exactly as a corrupted frame on the wire does (:mod:`pytimely.communication.frame`, which says
why a cipher would hide nothing here).

A ring is offered only to a peer on this host (:func:`same_host` of the two ends' addresses). The sending process
creates the ring (a file in ``/dev/shm``, mode 0600, opened ``O_EXCL``, every page allocated up front so that a full
``/dev/shm`` means no ring rather than a crash later) and offers it over the link; the receiving process maps it
read-only, so it can never write into its peer's memory, removes the file's name at once and says so (the
creator removes the name too if it is still there). A process killed before its peer mapped its ring leaves the
file, named with its pid and the process's start time; the next ring created on the host removes the files of
processes that are gone, and of pids now used by another process, told apart by the start time
(:func:`sweep`). The
reader tells the writer how far it has read in two ways: in ``RING_FREE`` control frames on the link, and, where
both processes have a ring towards the other, in the *control block* at the start of its own ring, which the
writer reads through its read-only mapping of that ring whenever its own ring looks full
(:meth:`RingWriter.reserve`). The control frame travels behind whatever the reader's process is sending and
waits for its sending thread to hold the interpreter lock, often many milliseconds; the control block is seen at
once, so a ring of a few megabytes keeps up with a stream of megabyte payloads. The position is published only
after the payloads before it were copied out of the ring and authenticated, or lent and given back once nothing
built on them is alive (:class:`RingReader`): after every read of their bytes (x86 never moves a store before an
earlier load; elsewhere the locks taken in between order them). It is published with its complement, so a torn
read is recognised and ignored. A published position is a claim of the peer like a ``RING_FREE``: one beyond what
the writer placed is a :class:`~pytimely.errors.RingError`, and one that lies the other way can only make the
peer's own next payloads fail authentication. A full ring is waited on while its reader frees some of it at least every
:attr:`RingWriter.patience` seconds (a reader that keeps up a stream is worth waiting for: the socket would only
add two copies to its work); a payload that still does not fit goes on the socket, which is how a ring without a
control block to read (the peer offered none) always works.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import re
import secrets
import stat
import struct
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pytimely.config import is_loopback
from pytimely.errors import InvalidArgument, RingError

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
_NAME = re.compile(r"pytimely-ring-(\d+)-(?:(\d+)-)?[0-9a-f]{32}")
_MAX_CAPACITY = 1 << 32
MIN_CAPACITY = 1 << 17
"""The smallest ring worth having: room for a payload of the smallest size that goes through a ring."""
CONTROL = 64
"""Bytes at the start of a ring that its creator publishes its read position of the peer's ring in; payloads
follow (one cache line, so the payloads' stores never share a line with the position's)."""
_PUBLISHED = struct.Struct("<QQ")
_POLL = 0.0005
"""Seconds between looks at a full ring's published read position."""
_COMPLEMENT = (1 << 64) - 1


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
        if not _NAME.fullmatch(name) or not capacity.isdigit() or not MIN_CAPACITY <= int(capacity) <= _MAX_CAPACITY:
            raise RingError(f"a ring offer names no ring this process would map: {text[:80]!r}")
        return cls(name, int(capacity))


def same_host(host: str, other: str) -> bool:
    """Whether two addresses are on one machine as far as their names say (the same, or both loopback).

    Only then is a ring offered: a ring for a peer elsewhere would hold ``/dev/shm`` pages until it says no.
    """
    return host == other or (is_loopback(host) and is_loopback(other))


def _started(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc``); ``None`` where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            text = stat_file.read()
        # The command name (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
        return int(text[text.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def sweep(directory: Path) -> list[str]:
    """Remove ring files of this user whose creating process is gone (killed before its peer mapped the ring):
    no process has its pid, or the process that has it started at another time than the creator; the names
    removed."""
    removed = []
    for path in directory.glob("pytimely-ring-*"):
        match = _NAME.fullmatch(path.name)
        if match is None:
            continue
        pid, started = int(match.group(1)), match.group(2)
        try:
            if path.lstat().st_uid != os.getuid():
                continue
            with contextlib.suppress(PermissionError):  # a live process of another user: its start time tells
                os.kill(pid, 0)
        except ProcessLookupError:
            gone = True
        except FileNotFoundError:
            continue  # already removed
        else:
            now = _started(pid)
            gone = started is not None and int(started) != 0 and now is not None and now != int(started)
        if gone:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path.name)
    return removed


class RingWriter:
    """The sending side of a ring: places sealed payloads and learns from its reader what it may reuse."""

    def __init__(self, capacity: int, directory: Path, patience: float = 0.05) -> None:
        if not MIN_CAPACITY <= capacity <= _MAX_CAPACITY:
            raise InvalidArgument(f"a ring holds {MIN_CAPACITY} bytes to 4 GiB, not {capacity}")
        self.capacity = capacity
        self.patience = patience
        """Seconds a full ring is waited on without its reader freeing any of it, before a payload goes on the
        socket instead (see :meth:`reserve`)."""
        # The creator's pid and start time in the name let a later run remove the file of a process killed before
        # its peer mapped the ring, even once another process has its pid (sweep).
        self.name = f"pytimely-ring-{os.getpid()}-{_started(os.getpid()) or 0}-{secrets.token_hex(16)}"
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
        self.span = capacity - CONTROL
        """Bytes of the ring that hold payloads (after the control block)."""
        self.head = 0
        """Bytes ever placed in the ring (a payload starts at ``CONTROL + head % span``)."""
        self.tail = 0
        """Bytes ever released by the reader."""
        self.ready = False
        """Whether the peer mapped the ring (until then nothing is placed in it)."""
        self.placed = 0
        """How many payloads went through the ring."""
        self.learned = 0
        """How often a full ring learned from the peer's control block that its reader had freed some of it."""
        self.published = 0
        """How often this process published its read position of the peer's ring in this ring's control block."""
        self.announced = 0
        """Position up to which the payloads placed have their headers on the wire (:meth:`announce`)."""
        self.feedback: RingReader | None = None
        """The peer's ring, mapped by this process, whose control block says how far the peer has read this one."""
        self._closed = False
        self._stalled = -1  # the tail at which a wait for room last ran out of patience
        self._publishing = threading.RLock()
        self._last_published = 0

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
        """The reader has read everything before position ``upto`` (an older position than one known is ignored:
        the control block and the control frames say the same thing at different times)."""
        if upto > self.head:
            raise RingError(f"the peer released ring position {upto}, beyond the {self.head} bytes placed in it")
        self.tail = max(self.tail, upto)

    def publish(self, read: int) -> None:
        """Say in this ring's control block that the peer's ring has been read up to ``read``."""
        if self._closed:
            return
        check = read ^ _COMPLEMENT
        # Any thread may publish (the last view of a lent payload dies where it dies): never an older position
        # after a newer one. Reentrant, as a collection inside may let go of a lent payload on this thread.
        with self._publishing:
            if read <= self._last_published:
                return
            with contextlib.suppress(ValueError):  # closed meanwhile by the sending thread: nothing to tell any more
                _PUBLISHED.pack_into(self._view, 0, read, check)
                self._last_published = read
                self.published += 1

    def reserve(self, size: int) -> tuple[int, memoryview] | None:
        """Room for ``size`` contiguous bytes: their start position and a view to fill; ``None`` if full.

        A full ring whose reader publishes its position (:attr:`feedback`) is waited on for as long as the reader
        frees some of it at least every :attr:`patience` seconds: a reader that keeps up a stream is worth waiting for
        (the socket would only add two copies to what it has to do), a reader that stopped is not, and is not waited
        for again until it frees some (a consumer keeping what it was lent holds its place for as long as it likes).
        Only room the reader can free is waited for: payloads placed after :attr:`announced` have no header on the
        wire yet, so waiting for them would only run out the patience.
        """
        span = self.span
        if not self.ready or size > span or self._closed:
            return None
        head = self.head
        skip, need = self._room(size)
        if need > self.tail:
            feedback = self.feedback
            if feedback is None or need > self.announced:
                return None
            last, since = self.tail, time.monotonic()
            # Given up on at this very position before: the reader holds its place (its consumer keeps what was lent
            # to it), so one look, and no wait for each payload until it frees some.
            patience = 0.0 if self._stalled == self.tail else self.patience
            while True:
                read = feedback.peer_read()
                if read is not None and read > self.tail:
                    self.release(read)
                    self.learned += 1
                if need <= self.tail:
                    break
                now = time.monotonic()
                if self.tail > last:
                    last, since = self.tail, now
                elif now - since >= patience or self._closed:
                    self._stalled = self.tail
                    return None
                time.sleep(_POLL)
        start = head + skip
        offset = CONTROL + start % span
        try:
            slot = self._view[offset : offset + size]
        except ValueError:  # closed meanwhile (the link is closing): the payload goes on the socket
            return None
        self.head = start + size
        self.placed += 1
        return start, slot

    def _room(self, size: int) -> tuple[int, int]:
        """Where a ``size``-byte payload would go: the bytes skipped at the ring's end first, and the position the
        reader must have read up to before it can be placed."""
        span, head = self.span, self.head
        at = head % span
        skip = span - at if at + size > span else 0  # a payload never wraps: the end of the ring is skipped
        # The bytes to overwrite were placed before ``need``: the previous lap's, or (at the start of the ring,
        # past the part this lap has written) this lap's up to ``head``.
        return skip, min(head, head + skip + size - span)

    def fits(self, size: int) -> bool:
        """Whether a ``size``-byte payload has room now, without waiting (after a look at the control block).

        A writer with payloads whose headers are not on the wire yet sends those before it waits for room: the
        reader cannot take out what it has not heard of, and would sit idle for the whole wait."""
        if not self.ready or size > self.span or self._closed:
            return False
        need = self._room(size)[1]
        if need > self.tail and self.feedback is not None:
            read = self.feedback.peer_read()
            if read is not None and read > self.tail:
                self.release(read)
                self.learned += 1
        return need <= self.tail

    def announce(self) -> None:
        """Every payload placed so far has its frame's header on the wire (the reader can take it out)."""
        self.announced = self.head

    def close(self) -> None:
        """Unmap the ring and remove its name."""
        self._closed = True
        self.unlink()
        self._view.release()
        with contextlib.suppress(BufferError):
            self._map.close()


class RingReader:
    """The receiving side of a ring: a read-only mapping of the peer's ring.

    A payload is either copied out of the ring (:meth:`payload`, then :meth:`taken`) or *lent* (:meth:`lend`): a
    read-only view of the ring's memory, on which the message is rebuilt without a copy, whose place is given back
    to the writer once the last view, array or Arrow buffer built on it is gone. Places are given back in the order
    they were taken (the writer learns one position), so a payload still alive (waiting in a mailbox, or kept by
    its consumer) holds back the places after it. Payloads are copied out instead while the bytes held would pass
    :attr:`lend_limit`; by default that is the whole ring, since a payload copied out behind a held one frees
    nothing for the writer before the held one is given back: what keeps a consumer's memory from holding up the
    sender is the writer's patience (:meth:`RingWriter.reserve`): it fills the ring up to the held place, then puts
    its payloads on the socket until the reader frees some, and a lent payload is never written over.
    """

    def __init__(self, offer: RingOffer, directory: Path, lend_share: float = 1.0) -> None:
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
        # Mapped: the name has served its purpose. Removed here and not only by the creator once it hears of the
        # mapping, so that a creator killed in between leaves no file behind for a later sweep to find.
        with contextlib.suppress(OSError):  # gone already, or not ours to remove: the mapping stands either way
            path.unlink()
        self.capacity = offer.capacity
        self.span = offer.capacity - CONTROL
        self._view = memoryview(self._map)
        self.read = 0
        """Position up to which the writer may reuse the ring: every payload before it was taken, and nothing built
        on a lent one is alive any more."""
        self.end = 0
        """Position up to which payloads have been taken (copied out or lent); the next descriptor points past it."""
        self.lend_limit = int(self.span * lend_share)
        """Bytes taken and not yet given back (see :attr:`held`) beyond which payloads are copied out, not lent."""
        self.lent = 0
        """How many payloads were lent (for tests and stats)."""
        self.on_release: Callable[[int], None] | None = None
        """Called with :attr:`read` whenever it advances, from whichever thread let go of the last view of a lent
        payload (the link publishes it in its own ring's control block; it must not block)."""
        self.copied = 0
        """How many payloads were copied out (for tests and stats)."""
        # Payloads taken and not yet given back, oldest first: [end position, given back, weak reference].
        self._taken: deque[list[Any]] = deque()
        # Reentrant: a collection inside the locked part may let go of a lent payload on this same thread.
        self._lock = threading.RLock()

    def payload(self, start: int, size: int) -> memoryview:
        """The ``size`` bytes placed at ``start``; call :meth:`taken` once they are opened (the descriptor saying
        where is authenticated only then)."""
        at = self._check(start, size)
        return self._view[CONTROL + at : CONTROL + at + size]

    def lend(self, start: int, size: int) -> memoryview | None:
        """A read-only view of the ``size`` bytes placed at ``start``, whose place stays the reader's until every
        object built on the view is gone; ``None`` (copy it out) when lending it would pass :attr:`lend_limit`.

        The payload counts as taken at once: authenticate it before anything is built on it."""
        at = self._check(start, size)
        if start + size - self.read > self.lend_limit:
            return None
        # The view's owner: an array that every slice, array or Arrow buffer rebuilt on the view refers to (through
        # the view's buffer), so it dies with the last of them. It refers to the mapping itself, which therefore
        # stays mapped while anything built on it lives, whenever the ring is closed.
        owner = np.frombuffer(self._map, dtype=np.uint8, count=size, offset=CONTROL + at)
        entry: list[Any] = [start + size, False, None]
        entry[2] = weakref.ref(owner, functools.partial(self._given_back, entry))
        with self._lock:
            self._taken.append(entry)
        self.end = start + size
        self.lent += 1
        return owner.data  # a view whose buffer is the owner's: every slice of it refers to the owner

    def _check(self, start: int, size: int) -> int:
        """Where in the ring's payload area the payload at ``start`` begins, after checking it lies in the unread
        part and does not wrap."""
        span = self.span
        at = start % span
        if start < self.end or size > span or at + size > span:
            raise RingError(f"a ring descriptor points at {start} (+{size} bytes), outside the ring's unread part")
        return at

    def peer_read(self) -> int | None:
        """How far the ring's creator says it has read this process's ring (``None``: not said, or torn)."""
        try:
            read, check = _PUBLISHED.unpack_from(self._view)
        except ValueError:  # unmapped meanwhile by the receiving thread
            return None
        return read if read ^ check == _COMPLEMENT and read else None

    def taken(self, start: int, size: int) -> None:
        """The payload at ``start`` is copied out of the ring: its place may be reused (once the lent payloads
        before it are given back)."""
        self.end = start + size
        self.copied += 1
        with self._lock:
            self._taken.append([start + size, True, None])
        self._settle()

    @property
    def held(self) -> int:
        """Bytes of the ring taken and not yet free for the writer (lent payloads still in use, and what follows)."""
        return self.end - self.read

    def _given_back(self, entry: list[Any], _ref: object) -> None:
        entry[1] = True
        entry[2] = None  # the entry, the reference and its callback form a cycle: broken here
        self._settle()

    def _settle(self) -> None:
        """Advance :attr:`read` past the payloads given back in order, and say so."""
        with self._lock:
            before = read = self.read
            taken = self._taken
            while taken and taken[0][1]:
                read = max(read, taken.popleft()[0])
            self.read = read
        callback = self.on_release
        if read > before and callback is not None:
            callback(read)

    def close(self) -> None:
        """Unmap the ring, or leave that to the last lent payload's end (an array still built on the ring keeps its
        mapping: closing it under the array would make every read of the array a crash)."""
        self.on_release = None
        self._view.release()
        with contextlib.suppress(BufferError):
            self._map.close()

"""Event streams: a captured stream's messages and progress as bytes, in files or over TCP (timely's
``EventWriter`` and ``EventReader``).

A captured worker's events are ``progress`` (changes ``[(time, diff)]`` to the captured stream's frontier at
that worker, which starts as ``{minimum: 1}``), ``messages`` (``(time, batch)``, the batch pickled with
protocol 5 so numpy arrays and Arrow batches come back as what they were) and a final ``end``. Each is a frame::

    kind u8 | sequence u64 | length u64 | body (payload.dumps) | tag

The tag is a CRC-32 of everything before it (files written without a secret: it finds corruption, not
forgery), or an HMAC-SHA256 under a key derived from the shared secret and both sides' nonces (sockets, and
files written with a secret). A file starts with ``PTEV | version | mode | nonce``. Reading is bounded: a frame
longer than ``max_frame`` is refused before it is read, and nothing is unpickled before its tag checks out.
A wrong tag, a sequence out of order or an unknown kind raise :class:`CorruptEventStreamError`; bytes ending
inside a frame, or a stream ending without its ``end``, :class:`TruncatedEventStreamError`.

Over TCP the capturing side connects to the replaying side, which authenticates it before reading any
frame: the writer sends ``PTEC | version | writer nonce``, the reader a fresh nonce of its own, and the writer
proves it knows the secret with ``HMAC(secret, "writer" | both nonces)``, which the reader acknowledges with one
byte. The reader's nonce makes each proof good for one connection only, and the reader reveals nothing that
depends on the secret. Frame keys are derived from the secret and both nonces, so recorded frames cannot be
replayed into another connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import select
import socket
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Literal, Protocol

from pytimely.communication.handshake import check_secret
from pytimely.communication.payload import dumps, loads
from pytimely.errors import (
    CorruptEventStreamError,
    EventStreamAuthError,
    EventStreamError,
    EventStreamTimeoutError,
    TruncatedEventStreamError,
)

__all__ = [
    "MAX_FRAME",
    "Event",
    "EventReader",
    "EventWriter",
    "FileEventReader",
    "FileEventWriter",
    "SocketEventReader",
    "SocketEventWriter",
    "accept_event_streams",
]

MAX_FRAME = 1 << 30
"""Longest frame body accepted by default (1 GiB)."""

PROGRESS, MESSAGES, END = 1, 2, 3
_KINDS = {PROGRESS: "progress", MESSAGES: "messages", END: "end"}
_FRAME = struct.Struct("<BQQ")
_FILE_MAGIC = b"PTEV"
_SOCKET_MAGIC = b"PTEC"
_VERSION = 1
_FILE_HEADER = struct.Struct("<4sBB32s")
_HELLO = struct.Struct("<4sB32s")
_NONCE = 32
_CRC, _HMAC = 0, 1
_ACCEPTED = b"\x01"

Event = tuple[Literal["progress", "messages", "end"], Any]
"""``("progress", [(time, diff)])``, ``("messages", (time, batch))`` or ``("end", None)``."""


class EventWriter(Protocol):
    """Where a capture operator writes one worker's events."""

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Append one event."""
        ...

    def close(self) -> None:
        """Finish: after an ``end`` event the stream is complete (a file appears under its name)."""
        ...


class EventReader(Protocol):
    """Where a replay operator reads one captured worker's events."""

    name: str

    def poll(self) -> list[Event]:
        """The events that have arrived (possibly none), without waiting long."""
        ...

    @property
    def ended(self) -> bool:
        """Whether the ``end`` event has been read."""
        ...

    def close(self) -> None:
        """Release the file or socket."""
        ...


def _derive(secret: bytes, label: bytes, *nonces: bytes) -> bytes:
    return hmac.new(secret, b"pytimely-capture-" + label + b"\0" + b"".join(nonces), hashlib.sha256).digest()


class _Sealer:
    """Frames events with a sequence number and a tag (CRC-32 or HMAC-SHA256)."""

    def __init__(self, key: bytes | None) -> None:
        self._key = key
        self._seq = 0

    def frame(self, kind: int, body: Any) -> list[bytes | memoryview]:
        parts, length = dumps(body)
        head = _FRAME.pack(kind, self._seq, length)
        self._seq += 1
        if self._key is None:
            crc = zlib.crc32(head)
            for p in parts:
                crc = zlib.crc32(p, crc)
            tag = struct.pack("<I", crc)
        else:
            mac = hmac.new(self._key, head, hashlib.sha256)
            for p in parts:
                mac.update(p)
            tag = mac.digest()
        return [head, *parts, tag]


class _Decoder:
    """Bytes in, events out: checks lengths, sequence numbers and tags before anything is unpickled."""

    def __init__(self, key: bytes | None, source: str, max_frame: int) -> None:
        self._key = key
        self._source = source
        self._max = max_frame
        self._tag = 4 if key is None else 32
        self._buffer = bytearray()
        self._seq = 0
        self.offset = 0
        """How many bytes of frames were consumed (for errors)."""
        self.ended = False

    def pending(self) -> int:
        """Bytes received and not yet part of a whole frame."""
        return len(self._buffer)

    def want(self) -> int:
        """How many more bytes complete the frame being read (at least 1): reads never go past it by much."""
        buf = self._buffer
        if len(buf) < _FRAME.size:
            return _FRAME.size - len(buf)
        _, _, length = _FRAME.unpack_from(buf)
        return max(1, int(_FRAME.size + length + self._tag - len(buf)))

    def feed(self, chunk: bytes) -> list[Event]:
        """Add ``chunk``; the events it completes."""
        buf = self._buffer
        buf += chunk
        events: list[Event] = []
        while len(buf) >= _FRAME.size:
            if self.ended:
                raise self._corrupt("bytes follow the stream's end event")
            kind, seq, length = _FRAME.unpack_from(buf)
            if kind not in _KINDS:
                raise self._corrupt(f"unknown event kind {kind}")
            if seq != self._seq:
                raise self._corrupt(f"event number {seq} where {self._seq} was due (lost, repeated or reordered)")
            if length > self._max:
                raise self._corrupt(f"an event of {length} bytes is longer than the limit of {self._max}")
            end = _FRAME.size + length
            if len(buf) < end + self._tag:
                break
            tag = bytes(buf[end : end + self._tag])
            if self._key is None:
                ok = struct.pack("<I", zlib.crc32(memoryview(buf)[:end])) == tag
            else:
                ok = hmac.compare_digest(hmac.new(self._key, memoryview(buf)[:end], hashlib.sha256).digest(), tag)
            if not ok:
                raise self._corrupt("an event fails its check (corrupted or forged)")
            body = bytearray(memoryview(buf)[_FRAME.size : end])  # writable: numpy batches come back writable
            del buf[: end + self._tag]
            self.offset += end + self._tag
            self._seq += 1
            try:
                value = loads(memoryview(body))
            except Exception as exc:
                raise self._corrupt(f"an event's body does not unpickle: {type(exc).__name__}: {exc}") from None
            if kind == END:
                self.ended = True
            events.append((_KINDS[kind], value))  # type: ignore[arg-type]
        return events

    def _corrupt(self, what: str) -> CorruptEventStreamError:
        return CorruptEventStreamError(
            f"event stream {self._source} at byte {self.offset}: {what}", source=self._source, offset=self.offset
        )

    def truncated(self, what: str) -> TruncatedEventStreamError:
        """The error for a stream that stopped before its end event."""
        return TruncatedEventStreamError(
            f"event stream {self._source} {what} after {self.offset} bytes, "
            f"{'inside an event' if self._buffer else 'without its end event'}",
            source=self._source,
            offset=self.offset,
        )


# -- files --------------------------------------------------------------------------------------------------


class FileEventWriter:
    """Writes events to ``path + ".partial"`` and renames it to ``path`` after the end: never a half file."""

    def __init__(self, path: str | os.PathLike[str], *, secret: bytes | None = None) -> None:
        self.path = Path(path)
        self._partial = self.path.with_name(self.path.name + ".partial")
        nonce = os.urandom(_NONCE)
        key = None if secret is None else _derive(check_secret(secret), b"file", nonce)
        self._sealer = _Sealer(key)
        self._file = open(self._partial, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(_FILE_HEADER.pack(_FILE_MAGIC, _VERSION, _CRC if secret is None else _HMAC, nonce))

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Append one event (progress and the end are flushed, so a follower sees them)."""
        code = {"progress": PROGRESS, "messages": MESSAGES, "end": END}[kind]
        self._file.writelines(self._sealer.frame(code, body))
        if code != MESSAGES:
            self._file.flush()

    def close(self) -> None:
        """Close; the file takes its name only if the end event was written."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._partial, self.path)


class FileEventReader:
    """Reads one captured worker's file, a bounded chunk per poll."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        secret: bytes | None = None,
        max_frame: int = MAX_FRAME,
        chunk: int = 1 << 20,
    ) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self._chunk = chunk
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise EventStreamError(f"cannot open event file {self.name}: {exc}", source=self.name) from None
        head = self._file.read(_FILE_HEADER.size)
        if len(head) < _FILE_HEADER.size:
            self._file.close()
            raise TruncatedEventStreamError(f"event file {self.name} is shorter than its header", source=self.name)
        magic, version, mode, nonce = _FILE_HEADER.unpack(head)
        if magic != _FILE_MAGIC or version != _VERSION or mode not in (_CRC, _HMAC):
            self._file.close()
            raise CorruptEventStreamError(
                f"{self.name} is not a pytimely event file (version {_VERSION})", source=self.name
            )
        if mode == _HMAC and secret is None:
            self._file.close()
            raise EventStreamAuthError(
                f"event file {self.name} is signed: give the secret to read it", source=self.name
            )
        key = None if mode == _CRC else _derive(check_secret(secret), b"file", nonce)
        self._decoder = _Decoder(key, self.name, max_frame)

    @property
    def ended(self) -> bool:
        """Whether the end event has been read."""
        return self._decoder.ended

    def poll(self) -> list[Event]:
        """The events in the next chunk of the file; the end of the file before the end event is an error."""
        if self._decoder.ended:
            return []
        data = self._file.read(max(self._chunk, self._decoder.want()) if self._decoder.pending() else self._chunk)
        if not data:
            self.close()
            raise self._decoder.truncated("ends")
        return self._decoder.feed(data)

    def close(self) -> None:
        """Close the file."""
        self._file.close()


# -- sockets ------------------------------------------------------------------------------------------------


def _read_exact(sock: socket.socket, n: int, deadline: float, what: str) -> bytes:
    """``n`` bytes from ``sock`` by ``deadline`` (monotonic), or a typed error."""
    data = bytearray()
    while len(data) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EventStreamTimeoutError(f"{what}: no {n} bytes before the deadline", source=what)
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            raise EventStreamTimeoutError(f"{what}: no {n} bytes before the deadline", source=what) from None
        if not chunk:
            raise TruncatedEventStreamError(f"{what}: the connection closed during the handshake", source=what)
        data += chunk
    return bytes(data)


class SocketEventWriter:
    """Sends events over TCP to a replaying reader, after proving it knows the shared secret."""

    def __init__(self, sock: socket.socket, key: bytes) -> None:
        self._sock = sock
        self._sealer = _Sealer(key)

    @classmethod
    def connect(cls, address: tuple[str, int], secret: bytes, *, timeout: float = 30.0) -> SocketEventWriter:
        """Connect to ``address`` and authenticate, all within ``timeout`` seconds."""
        secret = check_secret(secret)
        deadline = time.monotonic() + timeout
        sock = socket.create_connection(address, timeout=timeout)
        try:
            mine = os.urandom(_NONCE)
            sock.sendall(_HELLO.pack(_SOCKET_MAGIC, _VERSION, mine))
            theirs = _read_exact(sock, _NONCE, deadline, f"event reader at {address[0]}:{address[1]}")
            sock.sendall(_derive(secret, b"writer", mine, theirs))
            try:
                verdict = _read_exact(sock, 1, deadline, f"event reader at {address[0]}:{address[1]}")
            except (TruncatedEventStreamError, ConnectionError):
                verdict = b""
            if verdict != _ACCEPTED:
                raise EventStreamAuthError(
                    f"the event reader at {address[0]}:{address[1]} refused this capture: the secrets differ",
                    source=f"{address[0]}:{address[1]}",
                )
            sock.settimeout(max(1.0, timeout))
        except BaseException:
            sock.close()
            raise
        return cls(sock, _derive(secret, b"key", mine, theirs))

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Send one event."""
        code = {"progress": PROGRESS, "messages": MESSAGES, "end": END}[kind]
        self._sock.sendall(
            b"".join(bytes(p) if isinstance(p, memoryview) else p for p in self._sealer.frame(code, body))
        )

    def close(self) -> None:
        """Close the connection (after the end event the reader has everything)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)
        self._sock.close()


class SocketEventReader:
    """Reads one authenticated connection's events without blocking the worker for long."""

    def __init__(self, sock: socket.socket, key: bytes, name: str, *, timeout: float, max_frame: int) -> None:
        self._sock = sock
        self.name = name
        self._timeout = timeout
        self._decoder = _Decoder(key, name, max_frame)
        self._last = time.monotonic()
        sock.setblocking(False)

    @property
    def ended(self) -> bool:
        """Whether the end event has been read."""
        return self._decoder.ended

    def poll(self) -> list[Event]:
        """What has arrived (waiting at most a millisecond); silence longer than the timeout is an error."""
        if self.ended:
            return []
        events: list[Event] = []
        readable, _, _ = select.select([self._sock], [], [], 0.001)
        while readable:
            try:
                chunk = self._sock.recv(max(1 << 16, min(self._decoder.want(), 1 << 24)))
            except BlockingIOError:
                break
            except OSError as exc:
                raise self._decoder.truncated(f"failed ({exc})") from None
            if not chunk:
                self.close()
                raise self._decoder.truncated("closed")
            self._last = time.monotonic()
            events.extend(self._decoder.feed(chunk))
            if self._decoder.ended:
                self.close()
                break
        if not events and time.monotonic() - self._last > self._timeout:
            raise EventStreamTimeoutError(
                f"event stream {self.name} sent nothing for {self._timeout:g} s before its end", source=self.name
            )
        return events

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()


def accept_event_streams(
    listener: socket.socket,
    count: int,
    secret: bytes,
    *,
    timeout: float = 30.0,
    max_frame: int = MAX_FRAME,
) -> list[SocketEventReader]:
    """Accept and authenticate ``count`` capturing connections within ``timeout`` seconds, in arrival order.

    A connection that does not prove it knows ``secret`` raises :class:`EventStreamAuthError` (nothing it sent
    is unpickled); a silent one :class:`EventStreamTimeoutError`.
    """
    secret = check_secret(secret)
    deadline = time.monotonic() + timeout
    readers: list[SocketEventReader] = []
    try:
        while len(readers) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise EventStreamTimeoutError(
                    f"only {len(readers)} of {count} capturing connections arrived within {timeout:g} s"
                )
            listener.settimeout(remaining)
            try:
                sock, peer = listener.accept()
            except TimeoutError:
                continue
            name = f"from {peer[0]}:{peer[1]}"
            try:
                hello = _read_exact(sock, _HELLO.size, deadline, f"event stream {name}")
                magic, version, theirs = _HELLO.unpack(hello)
                if magic != _SOCKET_MAGIC or version != _VERSION:
                    raise EventStreamAuthError(f"event stream {name} is not a pytimely capture (version {_VERSION})")
                mine = os.urandom(_NONCE)
                sock.sendall(mine)
                proof = _read_exact(sock, 32, deadline, f"event stream {name}")
                if not hmac.compare_digest(proof, _derive(secret, b"writer", theirs, mine)):
                    raise EventStreamAuthError(
                        f"event stream {name} did not prove it knows the shared secret", source=name
                    )
                sock.sendall(_ACCEPTED)
            except BaseException:
                sock.close()
                raise
            readers.append(
                SocketEventReader(
                    sock, _derive(secret, b"key", theirs, mine), name, timeout=timeout, max_frame=max_frame
                )
            )
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return readers

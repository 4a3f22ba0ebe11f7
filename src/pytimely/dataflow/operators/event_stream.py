"""Event streams: a captured stream's messages and progress as bytes, in files or over TCP (timely's
``EventWriter`` and ``EventReader``).

A captured worker's events are ``progress`` (changes ``[(time, diff)]`` to the captured stream's frontier at
that worker, which starts as ``{minimum: 1}``), ``messages`` (``(time, batch)``, the batch pickled with
protocol 5 so numpy arrays and Arrow batches come back as what they were) and a final ``end``. Each is a frame::

    kind u8 | sequence u64 | length u64 | body (payload.dumps) | tag

Every stream is bound to its capture by a :class:`Binding`: the capture's id (16 random bytes drawn by worker 0
and shared with the others), the capturing worker's index and the count of capturing workers. A file starts with
``PTEV | version | mode | nonce | binding`` and a tag over those bytes; over TCP the writer's hello carries the
binding. With a secret, tags are HMAC-SHA256 under keys derived from the secret and those bytes, so a frame is
good only at its place in the stream it was written into: a file copied under another worker's name, renamed,
truncated, spliced from another stream or reordered is refused, and so is a stream cut anywhere, since only an
``end`` frame sealed at its place ends it. Without a secret the tags are CRC-32s (seeded with the header's, so a
frame from another file is still found out): they find corruption, not forgery, and a file written without a
secret is trusted like code, since its frames are unpickled.

Reading is bounded and checked before anything is unpickled: a reader given a secret refuses a file that is not
sealed with one before reading past its first six bytes; a frame longer than ``max_frame`` is refused before it
is read; nothing is unpickled before its tag checks out. A wrong tag, a sequence out of order or an unknown kind
raise :class:`CorruptEventStreamError`; bytes ending inside a frame, or a stream ending without its ``end``,
:class:`TruncatedEventStreamError`.

Over TCP the capturing side connects to the replaying side, which authenticates it before reading any frame:
the writer sends ``PTEC | version | writer nonce | binding``, the reader a fresh nonce of its own, and the writer
proves it knows the secret with ``HMAC(secret, "writer" | hello | reader nonce)``, which the reader acknowledges
with one byte. The reader's nonce makes each proof good for one connection only, and the reader reveals nothing
that depends on the secret. Frame keys are derived from the secret, the hello and the reader's nonce, so recorded
frames cannot be replayed into another connection. :func:`accept_event_streams` serves any number of handshakes
at once, drops and logs a connection that does not complete one within its deadline (a stranger) without giving
it a place, and returns the streams of the first capture all of whose workers arrived.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import select
import selectors
import socket
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pytimely.communication.handshake import check_secret
from pytimely.communication.payload import dumps, loads
from pytimely.errors import (
    CorruptEventStreamError,
    EventStreamAuthError,
    EventStreamError,
    EventStreamTimeoutError,
    InvalidArgument,
    TruncatedEventStreamError,
)

__all__ = [
    "MAX_FRAME",
    "Binding",
    "Event",
    "EventFileDecoder",
    "EventReader",
    "EventWriter",
    "FileEventReader",
    "FileEventWriter",
    "SocketEventReader",
    "SocketEventWriter",
    "accept_event_streams",
    "read_binding",
]

log = logging.getLogger("pytimely.capture")

MAX_FRAME = 1 << 30
"""Longest frame body accepted by default (1 GiB)."""

PROGRESS, MESSAGES, END = 1, 2, 3
_KINDS = {PROGRESS: "progress", MESSAGES: "messages", END: "end"}
_CODES = {"progress": PROGRESS, "messages": MESSAGES, "end": END}
_FRAME = struct.Struct("<BQQ")
_FILE_MAGIC = b"PTEV"
_SOCKET_MAGIC = b"PTEC"
_VERSION = 2
_PREFIX = struct.Struct("<4sBB")
_FILE_HEADER = struct.Struct("<4sBB32s16sII")
_HELLO = struct.Struct("<4sB32s16sII")
_NONCE = 32
_CRC, _HMAC = 0, 1
_TAGS = {_CRC: 4, _HMAC: 32}
_ACCEPTED = b"\x01"

Event = tuple[Literal["progress", "messages", "end"], Any]
"""``("progress", [(time, diff)])``, ``("messages", (time, batch))`` or ``("end", None)``."""


@dataclass(frozen=True, slots=True)
class Binding:
    """Which capture a stream belongs to: the capture's id, the capturing worker's index and how many captured."""

    capture: bytes
    """16 bytes drawn once per capture (by its worker 0) and shared by every worker's stream."""
    index: int
    count: int

    def __post_init__(self) -> None:
        if type(self.capture) is not bytes or len(self.capture) != 16:
            raise InvalidArgument(f"a capture id is 16 bytes, got {self.capture!r}")
        if type(self.index) is not int or type(self.count) is not int or not 0 <= self.index < self.count < 1 << 31:
            raise InvalidArgument(f"worker {self.index!r} of {self.count!r} is not a capturing worker")

    @classmethod
    def single(cls) -> Binding:
        """A capture of its own, by one worker (what a stream written by hand is bound to)."""
        return cls(os.urandom(16), 0, 1)

    def __str__(self) -> str:
        return f"worker {self.index} of {self.count} of capture {self.capture.hex()[:8]}"


def _derive(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"pytimely-capture-" + label + b"\0" + b"".join(parts), hashlib.sha256).digest()


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


class _Sealer:
    """Frames events with a sequence number and a tag (CRC-32 seeded with the stream's, or HMAC-SHA256)."""

    def __init__(self, key: bytes | None, seed: int = 0) -> None:
        self._key = key
        self._seed = seed
        self._seq = 0

    def frame(self, kind: Literal["progress", "messages", "end"], body: Any) -> list[bytes | memoryview]:
        parts, length = dumps(body)
        head = _FRAME.pack(_CODES[kind], self._seq, length)
        self._seq += 1
        if self._key is None:
            crc = zlib.crc32(head, self._seed)
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
    """Frames in, events out: checks lengths, sequence numbers and tags before anything is unpickled."""

    def __init__(self, key: bytes | None, source: str, max_frame: int, seed: int = 0, offset: int = 0) -> None:
        self._key = key
        self._seed = seed
        self._source = source
        self._max = max_frame
        self._tag = _TAGS[_CRC if key is None else _HMAC]
        self._buffer = bytearray()
        self._seq = 0
        self.offset = offset
        """How many bytes of the stream were consumed (for errors)."""
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
        return max(1, int(_FRAME.size + min(length, self._max) + self._tag - len(buf)))

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Event]:
        """Add ``chunk``; the events it completes."""
        buf = self._buffer
        buf += chunk
        events: list[Event] = []
        while buf:
            if self.ended:
                raise self.corrupt("bytes follow the stream's end event")
            if len(buf) < _FRAME.size:
                break
            kind, seq, length = _FRAME.unpack_from(buf)
            if kind not in _KINDS:
                raise self.corrupt(f"unknown event kind {kind}")
            if seq != self._seq:
                raise self.corrupt(f"event number {seq} where {self._seq} was due (lost, repeated or reordered)")
            if length > self._max:
                raise self.corrupt(f"an event of {length} bytes is longer than the limit of {self._max}")
            end = _FRAME.size + length
            if len(buf) < end + self._tag:
                break
            tag = bytes(buf[end : end + self._tag])
            if self._key is None:
                ok = struct.pack("<I", zlib.crc32(memoryview(buf)[:end], self._seed)) == tag
            else:
                ok = hmac.compare_digest(hmac.new(self._key, memoryview(buf)[:end], hashlib.sha256).digest(), tag)
            if not ok:
                raise self.corrupt("an event fails its check (corrupted, forged, or from another stream)")
            body = bytearray(memoryview(buf)[_FRAME.size : end])  # writable: numpy batches come back writable
            del buf[: end + self._tag]
            self.offset += end + self._tag
            self._seq += 1
            try:
                value = loads(memoryview(body))
            except Exception as exc:
                raise self.corrupt(f"an event's body does not unpickle: {type(exc).__name__}: {exc}") from None
            if kind == END:
                self.ended = True
            events.append((_KINDS[kind], value))  # type: ignore[arg-type]
        return events

    def corrupt(self, what: str) -> CorruptEventStreamError:
        """The error for bytes that are not the stream's."""
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


def _file_keys(header: bytes, mode: int, secret: bytes | None) -> tuple[bytes, bytes | None, int]:
    """A file header's tag, the key of its frames (``None``: CRC) and the seed of their CRCs."""
    if mode == _HMAC:
        assert secret is not None
        return _derive(secret, b"file-header", header), _derive(secret, b"file", header), 0
    crc = zlib.crc32(header)
    return struct.pack("<I", crc), None, crc


class FileEventWriter:
    """Writes events to ``path + ".partial"`` and renames it to ``path`` after the end: never a half file.

    ``binding`` says which capture and worker the file belongs to (by default a capture of its own, by one worker).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, secret: bytes | None = None, binding: Binding | None = None
    ) -> None:
        self.path = Path(path)
        self.binding = Binding.single() if binding is None else binding
        self._partial = self.path.with_name(self.path.name + ".partial")
        mode = _CRC if secret is None else _HMAC
        b = self.binding
        header = _FILE_HEADER.pack(_FILE_MAGIC, _VERSION, mode, os.urandom(_NONCE), b.capture, b.index, b.count)
        tag, key, seed = _file_keys(header, mode, None if secret is None else check_secret(secret))
        self._sealer = _Sealer(key, seed)
        self._file = open(self._partial, "wb")  # noqa: SIM115 - closed in close()
        self._file.write(header + tag)

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Append one event (progress and the end are flushed, so a follower sees them)."""
        self._file.writelines(self._sealer.frame(kind, body))
        if kind != "messages":
            self._file.flush()

    def close(self) -> None:
        """Close; the file takes its name only if the end event was written."""
        if self._file.closed:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._partial, self.path)


class EventFileDecoder:
    """An event file's bytes in, its events out (no I/O): the header and its seal first, then the frames.

    With ``secret``, a file not sealed with one is refused (:class:`EventStreamAuthError`) from its first six
    bytes; with ``expect``, a file bound to another capture or worker is refused
    (:class:`CorruptEventStreamError`).
    """

    def __init__(
        self, name: str, *, secret: bytes | None = None, max_frame: int = MAX_FRAME, expect: Binding | None = None
    ) -> None:
        self.name = name
        self._secret = None if secret is None else check_secret(secret)
        self._max = max_frame
        self._expect = expect
        self._head = bytearray()
        self._frames: _Decoder | None = None
        self.binding: Binding | None = None
        """Which capture and worker the file belongs to, once its header is read."""

    @property
    def ended(self) -> bool:
        """Whether the end event has been read."""
        return self._frames is not None and self._frames.ended

    def want(self) -> int:
        """How many more bytes complete the header or the frame being read (at least 1)."""
        if self._frames is None:
            if len(self._head) < _PREFIX.size:
                return _PREFIX.size - len(self._head)
            mode = self._head[_PREFIX.size - 1]
            return max(1, _FILE_HEADER.size + _TAGS.get(mode, 4) - len(self._head))
        return self._frames.want()

    def pending(self) -> int:
        """Bytes received and not yet part of the header or a whole frame."""
        return len(self._head) if self._frames is None else self._frames.pending()

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Event]:
        """Add ``chunk``; the events it completes."""
        if self._frames is not None:
            return self._frames.feed(chunk)
        self._head += chunk
        rest = self._header()
        return [] if rest is None or self._frames is None else self._frames.feed(rest)

    def finish(self) -> None:
        """The bytes have all been fed: :class:`TruncatedEventStreamError` unless the end event was among them."""
        if self._frames is None:
            raise TruncatedEventStreamError(f"event file {self.name} is shorter than its header", source=self.name)
        if not self._frames.ended:
            raise self._frames.truncated("ends")

    def _header(self) -> bytes | None:
        head = self._head
        if len(head) < _PREFIX.size:
            return None
        magic, version, mode = _PREFIX.unpack_from(head)
        if magic != _FILE_MAGIC or mode not in _TAGS:
            raise CorruptEventStreamError(f"{self.name} is not a pytimely event file", source=self.name, offset=0)
        if version != _VERSION:
            raise CorruptEventStreamError(
                f"{self.name} is an event file of version {version}; this pytimely reads version {_VERSION}",
                source=self.name,
                offset=0,
            )
        if mode == _CRC and self._secret is not None:
            raise EventStreamAuthError(
                f"event file {self.name} is not sealed with a secret, and a secret was given: it is refused unread "
                "(an unsealed file is trusted like code, since its events are unpickled)",
                source=self.name,
                offset=0,
            )
        if mode == _HMAC and self._secret is None:
            raise EventStreamAuthError(
                f"event file {self.name} is sealed: give the secret to read it", source=self.name
            )
        size = _FILE_HEADER.size + _TAGS[mode]
        if len(head) < size:
            return None
        header, tag = bytes(head[: _FILE_HEADER.size]), bytes(head[_FILE_HEADER.size : size])
        want, key, seed = _file_keys(header, mode, self._secret)
        if not hmac.compare_digest(want, tag):
            raise CorruptEventStreamError(
                f"event file {self.name}: its header fails its seal (written with another secret, or changed)",
                source=self.name,
                offset=0,
            )
        _, _, _, _, capture, index, count = _FILE_HEADER.unpack(header)
        try:
            self.binding = Binding(capture, index, count)
        except InvalidArgument as exc:
            raise CorruptEventStreamError(f"event file {self.name}: {exc}", source=self.name, offset=0) from None
        if self._expect is not None and self.binding != self._expect:
            raise CorruptEventStreamError(
                f"event file {self.name} now holds {self.binding}, not the {self._expect} it held when the replay "
                "began (replaced while being read?)",
                source=self.name,
                offset=0,
            )
        self._frames = _Decoder(key, self.name, self._max, seed, offset=size)
        rest = bytes(head[size:])
        self._head = bytearray()
        return rest


class FileEventReader:
    """Reads one captured worker's file, a bounded chunk per poll (see :class:`EventFileDecoder` for the checks)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        secret: bytes | None = None,
        max_frame: int = MAX_FRAME,
        chunk: int = 1 << 20,
        expect: Binding | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = str(self.path)
        self._chunk = chunk
        self._decoder = EventFileDecoder(self.name, secret=secret, max_frame=max_frame, expect=expect)
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as exc:
            raise EventStreamError(f"cannot open event file {self.name}: {exc}", source=self.name) from None
        self._queued: list[Event] = []
        try:
            # The header is read now, so a file of another capture or without its seal is refused at once.
            while self._decoder.binding is None:
                data = self._file.read(self._decoder.want())
                if not data:
                    self._decoder.finish()
                self._queued = self._decoder.feed(data)
        except BaseException:
            self._file.close()
            raise

    @property
    def binding(self) -> Binding:
        """Which capture and worker the file belongs to."""
        assert self._decoder.binding is not None
        return self._decoder.binding

    @property
    def ended(self) -> bool:
        """Whether the end event has been read."""
        return self._decoder.ended

    def poll(self) -> list[Event]:
        """The events in the next chunk of the file; the end of the file before the end event is an error."""
        if self._queued:
            events, self._queued = self._queued, []
            return events
        if self._decoder.ended:
            return []
        data = self._file.read(max(self._chunk, self._decoder.want()) if self._decoder.pending() else self._chunk)
        if not data:
            self.close()
            self._decoder.finish()
        return self._decoder.feed(data)

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def read_binding(path: str | os.PathLike[str], *, secret: bytes | None = None) -> Binding:
    """Which capture and worker an event file belongs to, from its header (checked, as a reader would)."""
    reader = FileEventReader(path, secret=secret, chunk=1)
    reader.close()
    return reader.binding


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
    def connect(
        cls, address: tuple[str, int], secret: bytes, *, binding: Binding | None = None, timeout: float = 30.0
    ) -> SocketEventWriter:
        """Connect to ``address`` and authenticate, all within ``timeout`` seconds (``binding``: see the module)."""
        secret = check_secret(secret)
        b = Binding.single() if binding is None else binding
        where = f"event reader at {address[0]}:{address[1]}"
        deadline = time.monotonic() + timeout
        sock = socket.create_connection(address, timeout=timeout)
        try:
            hello = _HELLO.pack(_SOCKET_MAGIC, _VERSION, os.urandom(_NONCE), b.capture, b.index, b.count)
            sock.sendall(hello)
            theirs = _read_exact(sock, _NONCE, deadline, where)
            sock.sendall(_derive(secret, b"writer", hello, theirs))
            try:
                verdict = _read_exact(sock, 1, deadline, where)
            except (TruncatedEventStreamError, ConnectionError):
                verdict = b""
            if verdict != _ACCEPTED:
                raise EventStreamAuthError(
                    f"the {where} refused this capture: the secrets differ, or it waits for no more streams",
                    source=f"{address[0]}:{address[1]}",
                )
            sock.settimeout(max(1.0, timeout))
        except BaseException:
            sock.close()
            raise
        return cls(sock, _derive(secret, b"key", hello, theirs))

    def write(self, kind: Literal["progress", "messages", "end"], body: Any) -> None:
        """Send one event."""
        parts = self._sealer.frame(kind, body)
        self._sock.sendall(b"".join(bytes(p) if isinstance(p, memoryview) else p for p in parts))

    def close(self) -> None:
        """Close the connection (after the end event the reader has everything)."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)
        self._sock.close()


class SocketEventReader:
    """Reads one authenticated connection's events without blocking the worker for long.

    A sender silent for longer than ``timeout`` before its end event raises :class:`EventStreamTimeoutError`, one
    that closes before it :class:`TruncatedEventStreamError`; both name it.
    """

    def __init__(
        self, sock: socket.socket, key: bytes, name: str, *, timeout: float, max_frame: int,
        binding: Binding | None = None,
    ) -> None:
        self._sock = sock
        self.name = name
        self.binding = binding
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
                self.close()
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
            self.close()
            raise EventStreamTimeoutError(
                f"event stream {self.name} sent nothing for {self._timeout:g} s before its end", source=self.name
            )
        return events

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()


@dataclass(slots=True)
class _Handshake:
    """One connection's handshake as the reader serves it, without blocking on it."""

    peer: str
    deadline: float
    hello: bytes = b""
    nonce: bytes = b""
    data: bytearray | None = None

    def want(self) -> int:
        got = 0 if self.data is None else len(self.data)
        return (_HELLO.size if not self.hello else 32) - got


def accept_event_streams(
    listener: socket.socket,
    count: int,
    secret: bytes,
    *,
    timeout: float = 30.0,
    handshake_timeout: float = 5.0,
    max_pending: int = 64,
    max_frame: int = MAX_FRAME,
) -> list[SocketEventReader]:
    """The streams of ``count`` capturing workers of one capture, in worker order, within ``timeout`` seconds.

    Handshakes are served side by side, each within ``handshake_timeout`` seconds. A connection that does not prove
    it knows ``secret`` in time (a stranger) is dropped and logged on the ``pytimely.capture`` logger, and holds no
    place: nothing it sent is unpickled, and at most ``max_pending`` handshakes wait at once (the longest waiting is
    dropped for a newcomer). A stream of a capture of another width, or a second stream of one worker, is dropped
    and logged too. Raises :class:`EventStreamTimeoutError` when no capture is complete in time.
    """
    secret = check_secret(secret)
    deadline = time.monotonic() + timeout
    pending: dict[socket.socket, _Handshake] = {}
    captures: dict[bytes, dict[int, SocketEventReader]] = {}
    dropped = 0
    selector = selectors.DefaultSelector()
    was = listener.gettimeout()
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ)

    def drop(sock: socket.socket, why: str) -> None:
        nonlocal dropped
        dropped += 1
        shake = pending.pop(sock, None)
        log.warning("replay: dropped the connection from %s: %s", shake.peer if shake else "?", why)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        sock.close()

    def authenticated(sock: socket.socket, shake: _Handshake) -> list[SocketEventReader] | None:
        _, _, _, capture, index, width = _HELLO.unpack(shake.hello)
        try:
            binding = Binding(capture, index, width)
        except InvalidArgument as exc:
            drop(sock, f"it names no capturing worker ({exc})")
            return None
        if binding.count != count:
            drop(sock, f"it is {binding}, and this replay waits for a capture of {count} workers")
            return None
        group = captures.setdefault(binding.capture, {})
        if binding.index in group:
            drop(sock, f"a second stream of {binding}")
            return None
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(sock)
        del pending[sock]
        try:
            sock.setblocking(True)
            sock.settimeout(max(0.001, shake.deadline - time.monotonic()))
            sock.sendall(_ACCEPTED)
        except OSError as exc:
            sock.close()
            log.warning("replay: the connection from %s failed as it was accepted: %s", shake.peer, exc)
            return None
        name = f"{binding} from {shake.peer}"
        group[binding.index] = SocketEventReader(
            sock, _derive(secret, b"key", shake.hello, shake.nonce), name,
            timeout=timeout, max_frame=max_frame, binding=binding,
        )
        return [group[i] for i in range(count)] if len(group) == count else None

    def step(sock: socket.socket, shake: _Handshake) -> list[SocketEventReader] | None:
        try:
            chunk = sock.recv(shake.want())
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            drop(sock, f"the connection failed ({exc})")
            return None
        if not chunk:
            drop(sock, "it closed before it proved it knows the secret")
            return None
        shake.data = (shake.data or bytearray()) + chunk
        if shake.want():
            return None
        data, shake.data = bytes(shake.data), None
        if not shake.hello:
            magic, version, _, _, _, _ = _HELLO.unpack(data)
            if magic != _SOCKET_MAGIC or version != _VERSION:
                drop(sock, f"it is not a pytimely capture of version {_VERSION}")
                return None
            shake.hello, shake.nonce = data, os.urandom(_NONCE)
            try:
                sock.send(shake.nonce)  # 32 bytes into an empty socket buffer
            except OSError as exc:
                drop(sock, f"the connection failed ({exc})")
            return None
        if not hmac.compare_digest(data, _derive(secret, b"writer", shake.hello, shake.nonce)):
            drop(sock, "it did not prove it knows the shared secret")
            return None
        return authenticated(sock, shake)

    try:
        while True:
            now = time.monotonic()
            for sock, shake in list(pending.items()):
                if shake.deadline <= now:
                    drop(sock, f"no handshake within {handshake_timeout:g} s")
            if now >= deadline:
                arrived = max((len(g) for g in captures.values()), default=0)
                raise EventStreamTimeoutError(
                    f"only {arrived} of {count} capturing workers of one capture connected within {timeout:g} s "
                    f"({dropped} other connection(s) dropped)"
                )
            wait = min([deadline, *(s.deadline for s in pending.values())]) - now
            for key, _ in selector.select(timeout=max(0.0, wait)):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                sock = ready
                if sock is listener:
                    try:
                        conn, peer = listener.accept()
                    except (BlockingIOError, InterruptedError):
                        continue
                    conn.setblocking(False)
                    if len(pending) >= max_pending:
                        drop(next(iter(pending)), f"more than {max_pending} handshakes waited at once")
                    pending[conn] = _Handshake(f"{peer[0]}:{peer[1]}", time.monotonic() + handshake_timeout)
                    selector.register(conn, selectors.EVENT_READ)
                elif sock in pending:
                    done = step(sock, pending[sock])
                    if done is not None:
                        for group in captures.values():
                            for reader in group.values():
                                if reader not in done:
                                    reader.close()
                        return done
    except BaseException:
        for group in captures.values():
            for reader in group.values():
                reader.close()
        raise
    finally:
        for sock in list(pending):
            sock.close()
        selector.close()
        listener.settimeout(was)

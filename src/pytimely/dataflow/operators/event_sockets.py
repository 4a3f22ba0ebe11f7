"""Event streams over TCP: the capturing side connects and proves it knows the secret; the replaying side
accepts the streams of one capture (see :mod:`.event_stream` for the handshake).
"""

from __future__ import annotations

import contextlib
import hmac
import os
import select
import selectors
import socket
import time
from dataclasses import dataclass
from typing import Any, Literal

from pytimely.communication.handshake import check_secret
from pytimely.dataflow.operators.event_codec import (
    ACCEPTED,
    HELLO,
    MAX_FRAME,
    NONCE,
    SOCKET_MAGIC,
    VERSION,
    Binding,
    Decoder,
    Event,
    Sealer,
    derive,
    log,
)
from pytimely.errors import EventStreamAuthError, EventStreamTimeoutError, InvalidArgument, TruncatedEventStreamError

__all__ = ["SocketEventReader", "SocketEventWriter", "accept_event_streams"]


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
        self._sealer = Sealer(key)

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
            hello = HELLO.pack(SOCKET_MAGIC, VERSION, os.urandom(NONCE), b.capture, b.index, b.count)
            sock.sendall(hello)
            theirs = _read_exact(sock, NONCE, deadline, where)
            sock.sendall(derive(secret, b"writer", hello, theirs))
            try:
                verdict = _read_exact(sock, 1, deadline, where)
            except (TruncatedEventStreamError, ConnectionError):
                verdict = b""
            if verdict != ACCEPTED:
                raise EventStreamAuthError(
                    f"the {where} refused this capture: the secrets differ, or it waits for no more streams",
                    source=f"{address[0]}:{address[1]}",
                )
            sock.settimeout(max(1.0, timeout))
        except BaseException:
            sock.close()
            raise
        return cls(sock, derive(secret, b"key", hello, theirs))

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
        self._decoder = Decoder(key, name, max_frame)
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
        return (HELLO.size if not self.hello else 32) - got


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
    acceptor = _Acceptor(
        listener, count, check_secret(secret), timeout, handshake_timeout, max_pending=max_pending, max_frame=max_frame
    )
    return acceptor.run()


class _Acceptor:
    """The state of one :func:`accept_event_streams`: handshakes under way and the streams of each capture."""

    def __init__(
        self,
        listener: socket.socket,
        count: int,
        secret: bytes,
        timeout: float,
        handshake_timeout: float,
        *,
        max_pending: int,
        max_frame: int,
    ) -> None:
        self.listener = listener
        self.count = count
        self.secret = secret
        self.timeout = timeout
        self.handshake_timeout = handshake_timeout
        self.max_pending = max_pending
        self.max_frame = max_frame
        self.deadline = time.monotonic() + timeout
        self.pending: dict[socket.socket, _Handshake] = {}
        self.captures: dict[bytes, dict[int, SocketEventReader]] = {}
        self.dropped = 0
        self.selector = selectors.DefaultSelector()

    def run(self) -> list[SocketEventReader]:
        """Serve handshakes until one capture is complete; close everything else."""
        listener = self.listener
        was = listener.gettimeout()
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ)
        try:
            while True:
                done = self._turn()
                if done is not None:
                    for group in self.captures.values():
                        for reader in group.values():
                            if reader not in done:
                                reader.close()
                    return done
        except BaseException:
            for group in self.captures.values():
                for reader in group.values():
                    reader.close()
            raise
        finally:
            for sock in list(self.pending):
                sock.close()
            self.selector.close()
            listener.settimeout(was)

    def _turn(self) -> list[SocketEventReader] | None:
        """Drop the handshakes past their deadline, then serve what is ready; the streams of a complete capture."""
        now = time.monotonic()
        for sock, shake in list(self.pending.items()):
            if shake.deadline <= now:
                self._drop(sock, f"no handshake within {self.handshake_timeout:g} s")
        if now >= self.deadline:
            arrived = max((len(g) for g in self.captures.values()), default=0)
            raise EventStreamTimeoutError(
                f"only {arrived} of {self.count} capturing workers of one capture connected within "
                f"{self.timeout:g} s ({self.dropped} other connection(s) dropped)"
            )
        wait = min([self.deadline, *(s.deadline for s in self.pending.values())]) - now
        for key, _ in self.selector.select(timeout=max(0.0, wait)):
            ready = key.fileobj
            assert isinstance(ready, socket.socket)
            if ready is self.listener:
                self._accept()
            elif ready in self.pending:
                done = self._step(ready, self.pending[ready])
                if done is not None:
                    return done
        return None

    def _accept(self) -> None:
        """Take a new connection, dropping the longest waiting handshake when too many wait."""
        try:
            conn, peer = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        conn.setblocking(False)
        if len(self.pending) >= self.max_pending:
            self._drop(next(iter(self.pending)), f"more than {self.max_pending} handshakes waited at once")
        self.pending[conn] = _Handshake(f"{peer[0]}:{peer[1]}", time.monotonic() + self.handshake_timeout)
        self.selector.register(conn, selectors.EVENT_READ)

    def _drop(self, sock: socket.socket, why: str) -> None:
        self.dropped += 1
        shake = self.pending.pop(sock, None)
        log.warning("replay: dropped the connection from %s: %s", shake.peer if shake else "?", why)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)
        sock.close()

    def _authenticated(self, sock: socket.socket, shake: _Handshake) -> list[SocketEventReader] | None:
        """Give a connection that proved it knows the secret its place in its capture."""
        _, _, _, capture, index, width = HELLO.unpack(shake.hello)
        try:
            binding = Binding(capture, index, width)
        except InvalidArgument as exc:
            self._drop(sock, f"it names no capturing worker ({exc})")
            return None
        if binding.count != self.count:
            self._drop(sock, f"it is {binding}, and this replay waits for a capture of {self.count} workers")
            return None
        group = self.captures.setdefault(binding.capture, {})
        if binding.index in group:
            self._drop(sock, f"a second stream of {binding}")
            return None
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)
        del self.pending[sock]
        try:
            sock.setblocking(True)
            sock.settimeout(max(0.001, shake.deadline - time.monotonic()))
            sock.sendall(ACCEPTED)
        except OSError as exc:
            sock.close()
            log.warning("replay: the connection from %s failed as it was accepted: %s", shake.peer, exc)
            return None
        name = f"{binding} from {shake.peer}"
        group[binding.index] = SocketEventReader(
            sock, derive(self.secret, b"key", shake.hello, shake.nonce), name,
            timeout=self.timeout, max_frame=self.max_frame, binding=binding,
        )
        count = self.count
        return [group[i] for i in range(count)] if len(group) == count else None

    def _step(self, sock: socket.socket, shake: _Handshake) -> list[SocketEventReader] | None:
        """Read what a handshake's connection sent; answer a hello, check a proof."""
        try:
            chunk = sock.recv(shake.want())
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            self._drop(sock, f"the connection failed ({exc})")
            return None
        if not chunk:
            self._drop(sock, "it closed before it proved it knows the secret")
            return None
        shake.data = (shake.data or bytearray()) + chunk
        if shake.want():
            return None
        data, shake.data = bytes(shake.data), None
        if not shake.hello:
            magic, version, _, _, _, _ = HELLO.unpack(data)
            if magic != SOCKET_MAGIC or version != VERSION:
                self._drop(sock, f"it is not a pytimely capture of version {VERSION}")
                return None
            shake.hello, shake.nonce = data, os.urandom(NONCE)
            try:
                sock.send(shake.nonce)  # 32 bytes into an empty socket buffer
            except OSError as exc:
                self._drop(sock, f"the connection failed ({exc})")
            return None
        if not hmac.compare_digest(data, derive(self.secret, b"writer", shake.hello, shake.nonce)):
            self._drop(sock, "it did not prove it knows the shared secret")
            return None
        return self._authenticated(sock, shake)

"""The transport seam: how a process listens, dials and moves bytes, over TCP or over a simulated network.

The cluster layer (:mod:`pytimely.communication.cluster`) and the handshake
(:mod:`pytimely.communication.handshake`) never touch a socket themselves: they
ask a :class:`Transport` for a :class:`Listener` and for connections, and move
bytes through a :class:`Connection`. In production that is :class:`TcpTransport`
(the sockets the cluster always used, with the same system calls: ``sendmsg``
and ``recv_into`` with ``MSG_DONTWAIT``, ``poll`` to wait); the simulator
(:mod:`pytimely.simulate`) hands in a network of its own, where time, delays,
partitions and damaged bytes are chosen by a seed.

Errors keep the socket module's types, whatever the transport: a refused or
broken connection is an :class:`OSError` (``ConnectionRefusedError``,
``BrokenPipeError``, ``ConnectionResetError``), a wait that ran out a
:class:`TimeoutError`; the layers above turn them into typed errors naming the
peer.
"""

from __future__ import annotations

import contextlib
import select
import socket
from collections.abc import Sequence
from typing import Protocol

from pytimely.communication.ring import same_host
from pytimely.errors import ConfigError

__all__ = ["TCP", "Connection", "Listener", "SocketConnection", "SocketListener", "TcpTransport", "Transport"]

Buffer = bytes | bytearray | memoryview


class Connection(Protocol):
    """One established, ordered, reliable byte stream to a peer (what a TCP socket is)."""

    def send(self, views: Sequence[memoryview]) -> int:
        """Hand as many bytes of ``views`` as fit now to the transport, without waiting; how many (0: none fit)."""
        ...

    def wait_writable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for room to send; whether there is."""
        ...

    def recv_into(self, buffer: memoryview) -> int | None:
        """Received bytes into ``buffer`` without waiting: how many, 0 at the end of the stream, ``None`` if none
        are there now."""
        ...

    def wait_readable(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for bytes (or the end of the stream); whether there are."""
        ...

    def send_all(self, data: bytes, timeout: float) -> None:
        """Send all of ``data`` within ``timeout`` seconds (:class:`TimeoutError` otherwise): for handshakes."""
        ...

    def recv(self, n: int, timeout: float) -> bytes:
        """Up to ``n`` bytes within ``timeout`` seconds (:class:`TimeoutError` otherwise; ``b""`` at the end)."""
        ...

    def start_streaming(self) -> None:
        """The handshake is over: from now on bytes go through :meth:`send` and :meth:`recv_into` (no delay)."""
        ...

    def same_host(self) -> bool | None:
        """Whether the peer runs on this host (``None``: the connection cannot tell)."""
        ...

    def shutdown(self) -> None:
        """End both directions now (a thread waiting on the connection wakes); errors are ignored."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


class Listener(Protocol):
    """Where a process accepts connections."""

    def accept(self, timeout: float) -> tuple[Connection, tuple[str, int]] | None:
        """The next connection and its peer's address, waiting up to ``timeout`` seconds (``None``: none came).
        An :class:`OSError` once the listener is closed."""
        ...

    def close(self) -> None:
        """Stop listening."""
        ...


class Transport(Protocol):
    """How a process listens and dials."""

    def listen(self, host: str, port: int, backlog: int) -> Listener:
        """A listener on ``host:port`` (:class:`OSError` if it cannot be had)."""
        ...

    def connect(self, host: str, port: int, timeout: float) -> Connection:
        """A connection to ``host:port`` within ``timeout`` seconds (:class:`OSError` if refused or unreachable)."""
        ...


class SocketConnection:
    """A :class:`Connection` over a TCP (or Unix) socket."""

    __slots__ = ("_readable", "_writable", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._readable: select.poll | None = None
        self._writable: select.poll | None = None

    def send(self, views: Sequence[memoryview]) -> int:
        """``sendmsg`` without waiting."""
        try:
            return self.sock.sendmsg(views, (), socket.MSG_DONTWAIT)
        except BlockingIOError:
            return 0

    def wait_writable(self, timeout: float) -> bool:
        """``poll`` for ``POLLOUT``."""
        poller = self._writable
        if poller is None:
            poller = self._writable = select.poll()
            poller.register(self.sock.fileno(), select.POLLOUT)
        return bool(poller.poll(int(timeout * 1000)))

    def recv_into(self, buffer: memoryview) -> int | None:
        """``recv_into`` without waiting."""
        try:
            return self.sock.recv_into(buffer, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None

    def wait_readable(self, timeout: float) -> bool:
        """``poll`` for input, an error or a hang-up."""
        poller = self._readable
        if poller is None:
            poller = self._readable = select.poll()
            poller.register(self.sock.fileno(), select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(int(timeout * 1000)))

    def send_all(self, data: bytes, timeout: float) -> None:
        """``sendall`` under a socket timeout."""
        self.sock.settimeout(timeout)
        self.sock.sendall(data)

    def recv(self, n: int, timeout: float) -> bytes:
        """``recv`` under a socket timeout."""
        self.sock.settimeout(timeout)
        return self.sock.recv(n)

    def start_streaming(self) -> None:
        """Blocking mode (each call says ``MSG_DONTWAIT`` itself) and no Nagle delay."""
        self.sock.settimeout(None)
        if self.sock.family in (socket.AF_INET, socket.AF_INET6):
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def same_host(self) -> bool | None:
        """Whether both ends' addresses are this host's (``None`` for a Unix socket)."""
        if self.sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        try:
            return same_host(self.sock.getpeername()[0], self.sock.getsockname()[0])
        except OSError:
            return False

    def shutdown(self) -> None:
        """``shutdown(SHUT_RDWR)``."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()


class SocketListener:
    """A :class:`Listener` over a listening socket."""

    __slots__ = ("sock",)

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def accept(self, timeout: float) -> tuple[Connection, tuple[str, int]] | None:
        """``accept`` under a socket timeout."""
        self.sock.settimeout(timeout)
        try:
            sock, address = self.sock.accept()
        except TimeoutError:
            return None
        return SocketConnection(sock), address

    def close(self) -> None:
        """Close the listening socket."""
        self.sock.close()


class TcpTransport:
    """The production :class:`Transport`: TCP sockets."""

    def listen(self, host: str, port: int, backlog: int) -> Listener:
        """``socket.create_server``."""
        return SocketListener(socket.create_server((host, port), backlog=backlog))

    def connect(self, host: str, port: int, timeout: float) -> Connection:
        """``socket.create_connection``."""
        return SocketConnection(socket.create_connection((host, port), timeout=timeout))

    @staticmethod
    def inherit(fd: int, port: int) -> Listener:
        """The listening socket a launcher handed down as ``fd``; :class:`ConfigError` unless it listens on
        ``port``."""
        try:
            sock = socket.socket(fileno=fd)
        except OSError as exc:
            raise ConfigError(f"PYTIMELY_LISTEN_FD={fd} is not an open socket: {exc}") from exc
        try:
            listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            bound = sock.getsockname()
        except OSError as exc:
            sock.detach()  # not ours to close: the descriptor was not a socket
            raise ConfigError(f"PYTIMELY_LISTEN_FD={fd} is not a socket: {exc}") from exc
        if sock.type != socket.SOCK_STREAM or not listening or not isinstance(bound, tuple) or bound[1] != port:
            sock.detach()
            raise ConfigError(
                f"PYTIMELY_LISTEN_FD={fd} is not a TCP socket listening on port {port}, this process's port in hosts "
                f"(it is bound to {bound!r}{'' if listening else ', not listening'})"
            )
        return SocketListener(sock)


TCP = TcpTransport()
"""The transport of every process that is not simulated."""

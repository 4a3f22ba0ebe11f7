"""The launcher's control endpoint: it answers the signed requests of :mod:`pytimely.membership.control`."""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from pytimely.errors import SignedLineError
from pytimely.membership.control import _PURPOSE, _REPLY, _WINDOW, OPERATIONS
from pytimely.signed_lines import LineBuffer, decode, encode

__all__ = ["ControlEndpoint"]


class ControlEndpoint:
    """The launcher's side: a loopback socket; each client sends one signed JSON line and gets one back.

    One thread serves every connection through a selector, so any number of silent or slow clients delay no one:
    each line is read within ``line_timeout`` seconds in all and :data:`~pytimely.signed_lines.MAX_LINE` bytes,
    and at most ``max_clients`` connections are held at once, the one waiting longest being closed for a
    newcomer (a member's request arrives with its connection, so it is never the one waiting longest). A
    request's answer is kept by its id for :data:`_WINDOW` seconds, so a member that tries again after losing an
    answer gets the same one and nothing is done twice.
    """

    def __init__(self, secret: bytes, handle: Callable[[str, int | None], dict[str, Any]], *,
                 line_timeout: float = 5.0, max_clients: int = 1024, port: int = 0) -> None:
        self._secret = secret
        self._handle = handle
        self.line_timeout = line_timeout
        self.max_clients = max_clients
        self._sock = socket.create_server(("127.0.0.1", port), backlog=1024)
        self._sock.setblocking(False)
        self.address = f"127.0.0.1:{self._sock.getsockname()[1]}"
        self._seen: dict[str, float] = {}
        self._answers: dict[str, tuple[float, dict[str, Any]]] = {}
        self._clients: dict[socket.socket, LineBuffer] = {}
        self.dropped = 0
        """Connections closed without a whole line (silent, slow, too long, or closed for a newcomer)."""
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._sock, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="pytimely-control", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            while not self._closed:
                for key, _ in self._selector.select(timeout=0.2):
                    if key.fileobj is self._wake_r:
                        return
                    if key.fileobj is self._sock:
                        self._accept()
                    else:
                        conn = key.fileobj
                        assert isinstance(conn, socket.socket)
                        self._read(conn)
                now = time.monotonic()
                for conn, buffer in list(self._clients.items()):
                    if buffer.deadline < now:
                        self._drop(conn)
        finally:
            for conn in list(self._clients):
                self._drop(conn)

    def _accept(self) -> None:
        for _ in range(256):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if len(self._clients) >= self.max_clients:
                self._drop(next(iter(self._clients)))  # the one waiting longest: silent or slow, not a member
            conn.setblocking(False)
            self._clients[conn] = LineBuffer(self.line_timeout)
            self._selector.register(conn, selectors.EVENT_READ)

    def _drop(self, conn: socket.socket) -> None:
        if self._clients.pop(conn, None) is not None:
            self.dropped += 1
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        conn.close()

    def _read(self, conn: socket.socket) -> None:
        buffer = self._clients.get(conn)
        if buffer is None:
            return
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return
        try:
            line = buffer.feed(chunk)
        except SignedLineError:
            self._drop(conn)
            return
        if line is None:
            return
        del self._clients[conn]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        try:
            answer = self._answer(line)
        except SignedLineError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # a bad request must not stop the endpoint
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(OSError), conn:
            conn.setblocking(True)
            conn.settimeout(1.0)  # an answer is a few hundred bytes: it fits any socket buffer
            conn.sendall(encode(self._secret, _REPLY, answer))

    def _answer(self, line: bytes) -> dict[str, Any]:
        message = decode(self._secret, _PURPOSE, line)
        nonce, sent, ident = str(message.get("nonce")), message.get("time"), message.get("id")
        now = time.time()
        if not isinstance(sent, (int, float)) or abs(now - sent) > _WINDOW:
            return {"error": "a request too old or from a clock far off (a replay?)"}
        for old in [n for n, t in self._seen.items() if now - t > 2 * _WINDOW]:
            del self._seen[old]
        for old in [i for i, (t, _) in self._answers.items() if now - t > _WINDOW]:
            del self._answers[old]
        if nonce in self._seen:
            return {"error": "a replayed request"}
        self._seen[nonce] = now
        if isinstance(ident, str) and ident in self._answers:
            return self._answers[ident][1]  # an attempt again, after the answer was lost: done once already
        op, process = message.get("op"), message.get("process")
        if op not in OPERATIONS:
            return {"error": f"unknown operation {op!r} ({', '.join(OPERATIONS)})"}
        if process is not None and type(process) is not int:
            return {"error": f"process must be an index, got {process!r}"}
        answer = self._handle(str(op), process)
        if isinstance(ident, str):
            self._answers[ident] = (now, answer)
        return answer

    def close(self) -> None:
        """Stop listening, and close every connection."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        self._selector.close()
        for sock in (self._sock, self._wake_r, self._wake_w):
            sock.close()

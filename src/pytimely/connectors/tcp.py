"""A TCP socket source: lines from connections to a listening socket, optionally authenticated.

Worker 0 accepts up to ``connections`` connections on ``listener`` without blocking the worker and sends every
line it reads (line ``i`` over all connections at the scope's first time, or at epoch ``i // epoch_lines``);
the stream ends once that many connections have come and closed. Every read is bounded: a line longer than
``max_line`` or not UTF-8 raises :class:`~pytimely.errors.InputFormatError` naming the peer and line, and with
``timeout`` a source that hears nothing for that long raises :class:`~pytimely.errors.SourceTimeoutError`.

With ``secret``, the network is not trusted: the source greets each connection with a fresh nonce (one line,
hex) and accepts only lines signed as :mod:`pytimely.signed_lines` does, ``{"seq": n, "line": text}`` with its
HMAC bound to that nonce, ``n`` counting from 0. A forged, replayed or reordered line raises
:class:`~pytimely.errors.BadSignatureError` (or ``MalformedLineError``) before its text goes anywhere.
:func:`send_lines` is the matching client.
"""

from __future__ import annotations

import os
import socket
import time as _time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pytimely.connectors.formats import MAX_LINE, LineSplitter
from pytimely.connectors.source import Action, End, polled_source
from pytimely.connectors.stdio import LineEpochs, _check_epoch_lines
from pytimely.errors import BadSignatureError, MalformedLineError, SourceTimeoutError
from pytimely.signed_lines import decode, encode, read_line

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["send_lines", "socket_source"]

_PURPOSE = "socket-source"


class _Connection:
    """One accepted connection: its bytes split into lines, checked against the secret when there is one."""

    def __init__(self, sock: socket.socket, peer: str, secret: bytes | None, max_line: int) -> None:
        self.sock = sock
        self.peer = peer
        self.secret = secret
        # A signed line is longer than its text: JSON quoting and the MAC.
        self.splitter = LineSplitter(f"connection from {peer}", max_line * 2 + 256 if secret else max_line)
        self.max_line = max_line
        self.nonce = os.urandom(16).hex()
        self.seq = 0
        sock.setblocking(False)
        if secret is not None:
            sock.sendall(self.nonce.encode() + b"\n")

    def lines(self, raw: list[str]) -> list[str]:
        if self.secret is None:
            return raw
        out = []
        for line in raw:
            body = decode(self.secret, f"{_PURPOSE}-{self.nonce}", line.encode())
            if body.get("seq") != self.seq or not isinstance(body.get("line"), str):
                raise BadSignatureError(
                    f"line {self.seq + 1} from {self.peer}: a signed line out of order (seq {body.get('seq')!r})"
                )
            self.seq += 1
            out.append(body["line"])
        return out


def socket_source(
    scope: Scope[Any],
    listener: socket.socket,
    *,
    connections: int = 1,
    secret: bytes | None = None,
    epoch_lines: int | None = None,
    max_line: int = MAX_LINE,
    timeout: float | None = None,
    name: str = "socket_source",
) -> Stream[str]:
    """Lines from connections to ``listener`` (read on worker 0); see the module doc."""
    _check_epoch_lines(epoch_lines, name)
    reader = scope.index == 0
    if reader:
        listener.setblocking(False)

    def make_poll(minimum: Any) -> Callable[[], list[Action]]:
        epochs = LineEpochs(minimum, epoch_lines)
        live: list[_Connection] = []
        state = {"accepted": 0, "closed": 0, "heard": _time.monotonic()}

        def poll() -> list[Action]:
            if not reader:
                return [End()]
            actions: list[Action] = []
            if state["accepted"] < connections:
                try:
                    sock, address = listener.accept()
                except BlockingIOError:
                    pass
                else:
                    live.append(_Connection(sock, f"{address[0]}:{address[1]}", secret, max_line))
                    state["accepted"] += 1
                    state["heard"] = _time.monotonic()
            for conn in list(live):
                try:
                    data = conn.sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                state["heard"] = _time.monotonic()
                if data:
                    actions.extend(epochs.actions(conn.lines(conn.splitter.feed(data))))
                else:
                    actions.extend(epochs.actions(conn.lines(conn.splitter.finish())))
                    conn.sock.close()
                    live.remove(conn)
                    state["closed"] += 1
            if state["closed"] >= connections:
                actions.append(End())
            elif not actions and timeout is not None and _time.monotonic() - state["heard"] > timeout:
                for conn in live:
                    conn.sock.close()
                raise SourceTimeoutError(f"{name}: nothing from the network for {timeout:g} s")
            return actions

        return poll

    return polled_source(scope, make_poll, name=name)


def send_lines(
    address: tuple[str, int], lines: Iterable[str], *, secret: bytes | None = None, timeout: float = 30
) -> None:
    """Connect to a :func:`socket_source` and send ``lines`` (signed when it has a ``secret``), then close."""
    with socket.create_connection(address, timeout=timeout) as sock:
        if secret is None:
            sock.sendall(b"".join(line.encode() + b"\n" for line in lines))
            return
        nonce = read_line(sock, timeout=timeout, limit=64).decode("ascii", "replace")
        if len(nonce) != 32:
            raise MalformedLineError(f"the socket source at {address[0]}:{address[1]} sent no nonce")
        sock.sendall(
            b"".join(encode(secret, f"{_PURPOSE}-{nonce}", {"seq": i, "line": line}) for i, line in enumerate(lines))
        )

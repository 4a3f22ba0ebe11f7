"""A TCP socket source: lines from connections to a listening socket, optionally authenticated.

Worker 0 accepts connections on ``listener`` without blocking the worker and sends every line it reads (line
``i`` over all connections at the scope's first time, or at epoch ``i // epoch_lines``); the stream ends once
``connections`` senders have finished. Every read is bounded: a line longer than ``max_line`` or not UTF-8 raises
:class:`~pytimely.errors.InputFormatError` naming the peer and line, and a source that hears nothing for
``timeout`` seconds, or a sender silent that long before its end, raises
:class:`~pytimely.errors.SourceTimeoutError` naming it.

With ``secret``, the network is not trusted. The source greets each connection with a fresh nonce (one line, hex)
and accepts only lines signed as :mod:`pytimely.signed_lines` does, ``{"seq": n, "line": text}`` with its HMAC
bound to that nonce, ``n`` counting from 0, and a signed end ``{"seq": n, "end": true}``, which it acknowledges
with a signed ``{"seq": n, "ok": true}``. A connection is a *sender* only once its first message checks out;
until then it is a stranger, which holds no place among the ``connections``: a stranger that closes, sends
something unsigned or signed with another secret, or stays silent for ``handshake_timeout`` seconds is dropped and
logged (on the ``pytimely.connectors`` logger), and at most ``max_pending`` strangers wait at once (the longest
waiting is dropped for a newcomer). A sender's later line that does not check out (forged, replayed, reordered)
raises :class:`~pytimely.errors.BadSignatureError` naming it before its text goes anywhere, and a sender that
closes before its signed end raises :class:`~pytimely.errors.SenderLostError` naming it and how many of its lines
came: a cut stream is an error, never a short one. :func:`send_lines` is the matching client.

Without a secret every connection is a sender, and its closing is its end: bind to an address only trusted peers
can reach.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time as _time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.connectors.formats import MAX_LINE, LineSplitter
from pytimely.connectors.source import Action, End, polled_source
from pytimely.connectors.stdio import LineEpochs, _check_epoch_lines
from pytimely.errors import (
    BadSignatureError,
    InputFormatError,
    MalformedLineError,
    SenderLostError,
    SignedLineError,
    SourceTimeoutError,
)
from pytimely.signed_lines import decode, encode, read_line

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["send_lines", "socket_source"]

log = logging.getLogger("pytimely.connectors")

_PURPOSE = "socket-source"
_ACCEPTS_PER_POLL = 64


class _Stranger(Exception):
    """A connection that never proved it knows the secret: dropped, not an error of the source."""


class _Connection:
    """One accepted connection: its bytes split into lines, checked against the secret when there is one."""

    def __init__(self, sock: socket.socket, peer: str, secret: bytes | None, max_line: int, deadline: float) -> None:
        self.sock = sock
        self.peer = peer
        self.secret = secret
        # A signed line is longer than its text: JSON quoting and the MAC.
        self.splitter = LineSplitter(f"connection from {peer}", max_line * 2 + 256 if secret else max_line)
        self.nonce = os.urandom(16).hex()
        self.seq = 0
        self.sender = secret is None
        """Whether it proved it knows the secret (every connection, without one)."""
        self.ended = False
        self.deadline = deadline
        """When a stranger is dropped, or a sender silent since is an error (``time.monotonic()``)."""
        sock.setblocking(False)
        if secret is not None:
            sock.send(self.nonce.encode() + b"\n")  # 33 bytes into an empty socket buffer

    def lines(self, raw: list[str]) -> list[str]:
        """The texts of ``raw`` lines (unsigned: themselves); raises for one that does not check out."""
        if self.secret is None:
            return raw
        out = []
        for line in raw:
            if self.ended:
                raise self._refused(f"a line after its signed end (line {self.seq + 1})")
            try:
                body = decode(self.secret, f"{_PURPOSE}-{self.nonce}", line.encode())
            except SignedLineError as exc:
                raise self._refused(f"line {self.seq + 1}: {exc}") from None
            if body.get("seq") != self.seq or not (isinstance(body.get("line"), str) or body.get("end") is True):
                raise self._refused(
                    f"line {self.seq + 1}: a signed line out of order or of no kind (seq {body.get('seq')!r})"
                )
            self.sender = True
            if body.get("end") is True:
                self.ended = True
                continue
            self.seq += 1
            out.append(body["line"])
        return out

    def acknowledge(self) -> None:
        """Say the signed end arrived (best effort: the lines are in whatever the sender hears)."""
        assert self.secret is not None
        with contextlib.suppress(OSError):
            self.sock.send(encode(self.secret, f"{_PURPOSE}-{self.nonce}-reply", {"seq": self.seq, "ok": True}))

    def _refused(self, what: str) -> Exception:
        if not self.sender:
            return _Stranger(what)
        return BadSignatureError(f"the sender at {self.peer}: {what}")

    def close(self) -> None:
        """Close the connection."""
        self.sock.close()


@dataclass(frozen=True, slots=True)
class _Senders:
    """What ``socket_source`` is told: how many senders, how they prove themselves, how long each may be silent."""

    name: str
    connections: int
    secret: bytes | None
    max_line: int
    timeout: float
    handshake_timeout: float
    max_pending: int


class _SocketReader:
    """Worker 0's side of ``socket_source``: accepts, reads and times out the connections, one poll at a time."""

    def __init__(self, listener: socket.socket, senders: _Senders, epochs: LineEpochs) -> None:
        self.listener = listener
        self.senders = senders
        self.epochs = epochs
        self.live: list[_Connection] = []
        self.proven = 0
        """How many connections became senders (at most ``connections``)."""
        self.ended = 0
        self.heard = _time.monotonic()
        """When a sender last sent something."""

    def poll(self) -> list[Action]:
        """Accept what waits, read every connection, and end or time out as the module doc says."""
        actions: list[Action] = []
        self._accept()
        for conn in list(self.live):
            actions.extend(self.epochs.actions(self._read(conn)))
        now = _time.monotonic()
        self._expire(now)
        if self.ended >= self.senders.connections:
            for conn in self.live:
                conn.close()
            actions.append(End())
        elif not actions and now - self.heard > self.senders.timeout and not any(c.sender for c in self.live):
            s = self.senders
            raise self._fail(
                SourceTimeoutError(
                    f"{s.name}: {self.ended} of {s.connections} senders finished, and no other sent anything "
                    f"for {s.timeout:g} s"
                )
            )
        return actions

    def _drop(self, conn: _Connection, why: str) -> None:
        log.warning("%s: dropped the connection from %s: %s", self.senders.name, conn.peer, why)
        conn.close()
        self.live.remove(conn)

    def _fail(self, error: Exception) -> Exception:
        """Close every connection and give back ``error`` to raise."""
        for conn in self.live:
            conn.close()
        self.live.clear()
        return error

    def _accept(self) -> None:
        """Take up to ``_ACCEPTS_PER_POLL`` waiting connections, refusing any beyond the senders expected."""
        s = self.senders
        for _ in range(_ACCEPTS_PER_POLL):
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise self._fail(InputFormatError(f"{s.name}: the listening socket failed: {exc}")) from None
            peer = f"{address[0]}:{address[1]}"
            if self.proven >= s.connections:
                log.warning("%s: refused the connection from %s: all %d senders are in", s.name, peer, s.connections)
                sock.close()
                continue
            strangers = [c for c in self.live if not c.sender]
            if len(strangers) >= s.max_pending:
                self._drop(strangers[0], f"more than {s.max_pending} connections waited to prove themselves at once")
            try:
                conn = _Connection(sock, peer, s.secret, s.max_line, _time.monotonic() + s.handshake_timeout)
            except OSError as exc:
                log.warning("%s: dropped the connection from %s: %s", s.name, peer, exc)
                sock.close()
                continue
            if conn.sender:
                self.proven += 1
                conn.deadline = _time.monotonic() + s.timeout
            self.live.append(conn)

    def _read(self, conn: _Connection) -> list[str]:
        """The lines ``conn`` has ready; a stranger that fails to prove itself is dropped, a sender that does raises."""
        try:
            data = conn.sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return []
        except OSError as exc:
            data, failure = b"", str(exc)
        else:
            failure = "it closed"
        was_sender = conn.sender
        # A signed stream ends with its signed end, never with a line cut short: what is left is dropped.
        raw = conn.splitter.feed(data) if data else conn.splitter.finish() if self.senders.secret is None else []
        try:
            lines = conn.lines(raw)
        except (_Stranger, InputFormatError) as exc:
            if conn.sender:
                raise self._fail(exc) from None
            self._drop(conn, str(exc))
            return []
        except BadSignatureError as exc:
            raise self._fail(exc) from None
        now = _time.monotonic()
        if conn.sender and not was_sender:
            self.proven += 1
        if conn.sender:
            conn.deadline = now + self.senders.timeout
            self.heard = now
        if conn.ended:
            conn.acknowledge()
            self._finished(conn)
        elif not data:
            self._closed(conn, failure)
        return lines

    def _finished(self, conn: _Connection) -> None:
        conn.close()
        self.live.remove(conn)
        self.ended += 1

    def _closed(self, conn: _Connection, failure: str) -> None:
        """``conn`` closed without a signed end: a stranger is dropped, an unsigned sender ends, a signed one is cut."""
        if not conn.sender:
            self._drop(conn, f"{failure} before it proved it knows the secret")
        elif self.senders.secret is None:
            self._finished(conn)
        else:
            raise self._fail(
                SenderLostError(
                    f"{self.senders.name}: the sender at {conn.peer} went away ({failure}) after {conn.seq} lines, "
                    "before its signed end: its stream is cut",
                    peer=conn.peer,
                    lines=conn.seq,
                )
            )

    def _expire(self, now: float) -> None:
        """Drop strangers past their handshake deadline; raise for a sender silent past its timeout."""
        s = self.senders
        for conn in list(self.live):
            if conn.deadline > now:
                continue
            if not conn.sender:
                self._drop(conn, f"nothing signed within {s.handshake_timeout:g} s")
            else:
                raise self._fail(
                    SourceTimeoutError(
                        f"{s.name}: the sender at {conn.peer} sent nothing for {s.timeout:g} s after {conn.seq} "
                        "lines, before its end"
                    )
                )


def socket_source(
    scope: Scope[Any],
    listener: socket.socket,
    *,
    connections: int = 1,
    secret: bytes | None = None,
    epoch_lines: int | None = None,
    max_line: int = MAX_LINE,
    timeout: float = 60.0,
    handshake_timeout: float = 5.0,
    max_pending: int = 64,
    name: str = "socket_source",
) -> Stream[str]:
    """Lines from ``connections`` senders to ``listener`` (read on worker 0); see the module doc."""
    _check_epoch_lines(epoch_lines, name)
    senders = _Senders(name, connections, secret, max_line, timeout, handshake_timeout, max_pending)
    reader = scope.index == 0
    if reader:
        listener.setblocking(False)

    def make_poll(minimum: Any) -> Callable[[], list[Action]]:
        if not reader:
            return lambda: [End()]
        return _SocketReader(listener, senders, LineEpochs(minimum, epoch_lines)).poll

    return polled_source(scope, make_poll, name=name)


def send_lines(
    address: tuple[str, int], lines: Iterable[str], *, secret: bytes | None = None, timeout: float = 30
) -> None:
    """Connect to a :func:`socket_source` and send ``lines``, then close; all within ``timeout`` seconds.

    With a ``secret``, the lines are signed and followed by a signed end, and the source's acknowledgement is
    awaited: :class:`~pytimely.errors.SignedLineError` (or :class:`OSError`) unless it came, so a sender knows
    whether its lines arrived.
    """
    deadline = _time.monotonic() + timeout
    with socket.create_connection(address, timeout=timeout) as sock:
        if secret is None:
            sock.sendall(b"".join(line.encode() + b"\n" for line in lines))
            return
        nonce = read_line(sock, timeout=timeout, limit=64).decode("ascii", "replace")
        if len(nonce) != 32:
            raise MalformedLineError(f"the socket source at {address[0]}:{address[1]} sent no nonce")
        purpose = f"{_PURPOSE}-{nonce}"
        signed = [encode(secret, purpose, {"seq": i, "line": line}) for i, line in enumerate(lines)]
        signed.append(encode(secret, purpose, {"seq": len(signed), "end": True}))
        sock.settimeout(max(0.001, deadline - _time.monotonic()))
        sock.sendall(b"".join(signed))
        reply = read_line(sock, timeout=max(0.001, deadline - _time.monotonic()))
        answer = decode(secret, f"{purpose}-reply", reply)
        if answer != {"seq": len(signed) - 1, "ok": True}:
            raise MalformedLineError(f"the socket source at {address[0]}:{address[1]} acknowledged {answer!r}")

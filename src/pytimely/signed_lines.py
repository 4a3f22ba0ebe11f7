"""Signed JSON lines: one JSON object per line, authenticated with HMAC-SHA256, read within bounds.

The launcher's control endpoint (:mod:`pytimely.membership`) and the Spark
driver's rendezvous (:mod:`pytimely.spark.rendezvous`) both talk this way. A
message is a JSON object whose ``"mac"`` field is the HMAC of the other fields
in canonical form (sorted keys, no spaces), keyed with the run's secret and
bound to a *purpose* (``"control"``, ``"rendezvous"``…), so a line signed for
one exchange is never accepted by another.

Everything read from the network is hostile until its MAC checks out: a line
is read up to :data:`MAX_LINE` bytes and within one overall deadline (not a
deadline per read, which a client sending a byte at a time would stretch
forever), and nothing in it is acted on before the MAC is verified (a server
may read one field first to pick the key to verify with, as the rendezvous
picks its run's secret).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from typing import Any

from pytimely.errors import BadSignatureError, LineTimeoutError, LineTooLongError, MalformedLineError

__all__ = ["MAX_LINE", "LineBuffer", "decode", "encode", "exchange", "read_line", "sign"]

MAX_LINE = 1 << 16
"""Longest line accepted (64 KiB): every message of these exchanges is far shorter."""


def sign(secret: bytes, purpose: str, body: dict[str, Any]) -> str:
    """The hex HMAC-SHA256 of ``body`` (canonical JSON) for ``purpose`` under ``secret``."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(secret, b"pytimely-" + purpose.encode() + b"\0" + text, hashlib.sha256).hexdigest()


def encode(secret: bytes, purpose: str, body: dict[str, Any]) -> bytes:
    """``body`` with its ``"mac"``, as one JSON line (newline included)."""
    if "mac" in body:
        raise MalformedLineError("a signed message cannot carry its own 'mac' field")
    return json.dumps({**body, "mac": sign(secret, purpose, body)}).encode() + b"\n"


def decode(secret: bytes, purpose: str, line: bytes) -> dict[str, Any]:
    """The fields of a signed line (``"mac"`` removed); raises unless its MAC is right for ``purpose``."""
    if len(line) > MAX_LINE + 1:
        raise LineTooLongError(f"a {purpose} line of {len(line)} bytes is longer than the limit of {MAX_LINE}")
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise MalformedLineError(f"a {purpose} line is not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("mac"), str):
        raise MalformedLineError(f"a {purpose} line is not a signed JSON object")
    mac = message.pop("mac")
    if not hmac.compare_digest(mac, sign(secret, purpose, message)):
        raise BadSignatureError(f"a {purpose} message is not signed with this run's secret")
    return message


class LineBuffer:
    """Bytes of one line as they arrive (for servers that multiplex sockets): bounded in length and time."""

    __slots__ = ("_data", "deadline", "limit")

    def __init__(self, timeout: float, limit: int = MAX_LINE) -> None:
        self._data = bytearray()
        self.limit = limit
        self.deadline = time.monotonic() + timeout
        """When the whole line must have arrived (``time.monotonic()``)."""

    def feed(self, chunk: bytes) -> bytes | None:
        """Add ``chunk``; the line without its newline once complete, else ``None``. Raises when too long."""
        self._data += chunk
        end = self._data.find(b"\n")
        if end < 0:
            if len(self._data) > self.limit:
                raise LineTooLongError(f"a line grew past {self.limit} bytes without ending")
            return None
        if end > self.limit:
            raise LineTooLongError(f"a line of {end} bytes is longer than the limit of {self.limit}")
        return bytes(self._data[:end])

    @property
    def expired(self) -> bool:
        """Whether the line's deadline has passed."""
        return time.monotonic() > self.deadline


def read_line(sock: socket.socket, *, timeout: float, limit: int = MAX_LINE) -> bytes:
    """One line from ``sock`` (without its newline), within ``timeout`` seconds in all and ``limit`` bytes.

    Raises :class:`LineTooLongError`, :class:`LineTimeoutError`, or :class:`MalformedLineError` when the
    peer closes before the line ends. Reads at most ``limit + 1`` bytes past the line's start, so memory stays
    bounded whatever the peer sends.
    """
    buffer = LineBuffer(timeout, limit)
    while True:
        remaining = buffer.deadline - time.monotonic()
        if remaining <= 0:
            raise LineTimeoutError(f"no complete line within {timeout:g} s")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(65536, limit + 1))
        except TimeoutError:
            raise LineTimeoutError(f"no complete line within {timeout:g} s") from None
        if not chunk:
            raise MalformedLineError("the connection closed before the line ended")
        line = buffer.feed(chunk)
        if line is not None:
            return line


def exchange(
    address: tuple[str, int],
    secret: bytes,
    purpose: str,
    body: dict[str, Any],
    *,
    timeout: float,
    reply_purpose: str | None = None,
    limit: int = MAX_LINE,
) -> dict[str, Any]:
    """Send ``body`` signed to ``address`` and return its signed reply, all within ``timeout`` seconds.

    The reply is verified under ``reply_purpose`` (default: ``purpose + "-reply"``), so a client's own line
    echoed back is refused. Raises :class:`OSError` when the address cannot be reached or the connection
    fails, and a :class:`~pytimely.errors.SignedLineError` for a reply that is late, too long or forged.
    """
    deadline = time.monotonic() + timeout
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(encode(secret, purpose, body))
        line = read_line(sock, timeout=max(0.001, deadline - time.monotonic()), limit=limit)
    return decode(secret, reply_purpose or f"{purpose}-reply", line)

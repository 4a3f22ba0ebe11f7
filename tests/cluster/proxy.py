"""A fault-injecting TCP proxy between two real pytimely processes, and strangers that knock on a port.

The proxy forwards one connection (the higher-indexed process dials the lower
one through it). Both handshake directions pass untouched; after that, each
direction is cut into frames (header plus sealed payload, as
:mod:`pytimely.communication.frame` lays them out) and every frame from the
dialling process is handed to a :class:`Fault`, which says what to forward
instead. Faults act on the first *data* frame (precedence 1), so they hit the
computation in the middle of its work rather than a heartbeat.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pytimely.communication.frame import HEADER, TAG

__all__ = ["FIELDS", "Fault", "Proxy", "Strangers"]

_HELLO = 4 + 1 + 4 + 4 + 8 + 32
_UP = (_HELLO, 32)  # client greeting; client proof
_DOWN = (32, 32 + 1)  # server nonce; server proof and verdict

FIELDS = {
    "magic": 0,
    "version": 2,
    "precedence": 3,
    "dataflow": 4,
    "channel": 8,
    "source": 12,
    "target": 16,
    "seq": 20,
    "length": 31,  # the high byte: a flip claims up to 1 GiB more
    "tag": 35,
}
"""A byte offset inside each header field, for bit flips."""

CLOSE = b"<fin>"
"""Forwarded as: shut the connection down cleanly (FIN) here."""
RESET = b"<rst>"
"""Forwarded as: abort the connection (RST) here."""


@dataclass
class Fault:
    """What to do to the first data frame: a function from that frame to the pieces to forward."""

    action: Callable[[bytes, Fault], list[bytes]]
    stash: bytes | None = None
    hit: bool = False
    hit_at: float | None = None
    """When the fault struck (monotonic), for measuring time to detection."""
    extra: dict[str, object] = field(default_factory=dict)

    def __call__(self, frame: bytes) -> list[bytes]:
        """The pieces to forward instead of ``frame``."""
        if self.stash is not None:
            stashed, self.stash = self.stash, None
            return [frame, stashed]
        if not self.hit and frame[3] == 1:
            self.hit = True
            self.hit_at = time.monotonic()
            return self.action(frame, self)
        return [frame]

    # -- the faults -----------------------------------------------------------------------

    @staticmethod
    def flip(offset: int) -> Fault:
        """Flip one bit at ``offset`` of the frame (a header field, or the payload past the header)."""

        def act(frame: bytes, _: Fault) -> list[bytes]:
            mangled = bytearray(frame)
            mangled[offset if offset >= 0 else len(frame) + offset] ^= 0x40
            return [bytes(mangled)]

        return Fault(act)

    @staticmethod
    def tamper() -> Fault:
        """Rewrite payload bytes and put a freshly computed digest where the tag goes, as a man in the middle can."""

        def act(frame: bytes, _: Fault) -> list[bytes]:
            body = bytearray(frame[HEADER.size : -TAG])
            body[: min(8, len(body))] = bytes(b ^ 0x01 for b in body[:8])
            return [frame[: HEADER.size] + bytes(body) + hashlib.sha256(frame[:32] + body).digest()[:TAG]]

        return Fault(act)

    @staticmethod
    def truncate() -> Fault:
        """Forward half the frame, then FIN."""
        return Fault(lambda f, _: [f[: len(f) // 2], CLOSE])

    @staticmethod
    def duplicate() -> Fault:
        """Forward the frame twice."""
        return Fault(lambda f, _: [f, f])

    @staticmethod
    def drop() -> Fault:
        """Forward nothing of the frame."""
        return Fault(lambda f, _: [])

    @staticmethod
    def reorder() -> Fault:
        """Hold the frame back and send it after the next one."""

        def act(frame: bytes, fault: Fault) -> list[bytes]:
            fault.stash = frame
            return []

        return Fault(act)

    @staticmethod
    def fin() -> Fault:
        """Close the connection cleanly (FIN) before the frame."""
        return Fault(lambda f, _: [CLOSE])

    @staticmethod
    def rst() -> Fault:
        """Abort the connection (RST) before the frame."""
        return Fault(lambda f, _: [RESET])

    @staticmethod
    def delay(seconds: float) -> Fault:
        """Hold this direction of the connection still for ``seconds`` (as a paused process would), then go on."""

        def act(frame: bytes, _: Fault) -> list[bytes]:
            time.sleep(seconds)
            return [frame]

        return Fault(act)


class Proxy:
    """Forwards one connection to ``target``, handing each frame of the dialling side to ``fault``."""

    def __init__(self, target: tuple[str, int], fault: Fault | None) -> None:
        self.target = target
        self.fault = fault
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = ("127.0.0.1", self.listener.getsockname()[1])
        self._sockets: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(60)
        try:
            client, _ = self.listener.accept()
        except OSError:
            return
        for _ in range(400):  # the process behind the proxy may not listen yet: retry as a real peer would
            try:
                server = socket.create_connection(self.target)
                break
            except OSError:
                time.sleep(0.05)
        else:
            client.close()
            return
        self._sockets += [client, server]
        threading.Thread(target=self._pipe, args=(server, client, _DOWN, None), daemon=True).start()
        self._pipe(client, server, _UP, self.fault)

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    def _pipe(self, src: socket.socket, dst: socket.socket, handshake: tuple[int, ...], fault: Fault | None) -> None:
        reset = False
        try:
            for size in handshake:
                piece = self._read(src, size)
                if piece is None:
                    return
                dst.sendall(piece)
            while True:
                header = self._read(src, HEADER.size)
                if header is None:
                    return
                length = struct.unpack_from("<I", header, HEADER.size - 12)[0] + TAG
                body = self._read(src, length)
                if body is None:
                    return
                for piece in fault(header + body) if fault is not None else [header + body]:
                    if piece is CLOSE:
                        return
                    if piece is RESET:
                        reset = True
                        return
                    dst.sendall(piece)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                if reset:
                    # SO_LINGER with a zero timeout turns close() into an RST.
                    with contextlib.suppress(OSError):
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        """Stop listening and cut whatever is still connected."""
        self.listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


class Strangers:
    """``count`` connections to ``address`` that never finish a handshake: silent ones, or ones trickling bytes."""

    def __init__(self, address: tuple[str, int], count: int, *, trickle: float | None = None) -> None:
        self.address = address
        self.count = count
        self.trickle = trickle
        self.connected = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._knock, daemon=True) for _ in range(count)]
        for t in self._threads:
            t.start()

    def _knock(self) -> None:
        sock = None
        while sock is None and not self._stop.is_set():
            try:
                sock = socket.create_connection(self.address, timeout=5)
            except OSError:
                time.sleep(0.05)
        if sock is None:
            return
        self.connected += 1
        with sock:
            while not self._stop.is_set():
                if self.trickle is not None:
                    try:
                        sock.sendall(b"P")
                    except OSError:
                        return
                self._stop.wait(self.trickle or 0.5)

    def close(self) -> None:
        """Hang up every stranger."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

"""The wire between a streaming query's control side, its feed tasks and its hosted processes.

A hosted process listens on a *feed* port. Whoever connects there (a Spark task sending its share of a
micro-batch, or the control side closing an epoch) first proves it knows the run's secret with the cluster's
own handshake (:mod:`pytimely.communication.handshake`, under a shape of its own, so a feed connection can never
pass for a cluster peer) and then speaks in the cluster's sealed frames (:mod:`pytimely.communication.frame`):
numbered, authenticated and encrypted per direction. Nothing is unpickled: a message is a small JSON header
and, for data, Arrow IPC bytes.

Messages (``Kind``): ``DATA`` carries Arrow record batches of one epoch from one sender partition, numbered;
``CLOSE`` tells a process the epoch's sender counts (what it must have received) and asks it to complete the
epoch; ``DONE`` answers with the process's output part; ``FAILED`` answers with what went wrong; ``STOP`` ends
the hosted dataflow. Every header names the host generation: a process refuses another generation's messages.
"""

from __future__ import annotations

import contextlib
import enum
import json
import socket
import struct
import time as _time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.communication.allocator import Precedence
from pytimely.communication.frame import FrameDecoder, FrameEncoder, LinkKeys
from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.errors import AuthenticationError, ConfigError, PytimelyError, StreamFeedError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FEEDER", "FeedLink", "Kind", "Message", "answer", "arrow_batches", "arrow_bytes", "dial"]

FEED_SHAPE = 0x46454544
"""The handshake's shape for feed connections ("FEED"): no cluster has it, so no feed passes for a peer."""
FEEDER = 1 << 20
"""The index a feed connection's client claims in the handshake (above any process index)."""
_LENGTH = struct.Struct("<I")


class Kind(enum.IntEnum):
    """What a feed message says."""

    DATA = 1
    CLOSE = 2
    DONE = 3
    FAILED = 4
    STOP = 5


@dataclass(frozen=True, slots=True)
class Message:
    """One feed message: its kind, its JSON header and its body (Arrow IPC bytes for ``DATA``)."""

    kind: Kind
    header: dict[str, Any]
    body: bytes | memoryview = b""


class FeedLink:
    """One authenticated feed connection: sealed messages out, checked messages in, every read bounded."""

    def __init__(self, sock: socket.socket, keys: LinkKeys, peer: str) -> None:
        self.sock = sock
        self.peer = peer
        self._encoder = FrameEncoder(keys.send)
        self._decoder = FrameDecoder(0, keys.receive)
        self._ready: list[Message] = []

    def send(
        self, kind: Kind, header: dict[str, Any], body: bytes | memoryview = b"", *, timeout: float = 60.0
    ) -> None:
        """Send one message (within ``timeout`` seconds, else :class:`StreamFeedError`)."""
        head = json.dumps(header, separators=(",", ":")).encode()
        parts: list[bytes | memoryview] = [_LENGTH.pack(len(head)) + head, body]
        length = _LENGTH.size + len(head) + len(body)
        buffers = self._encoder.encode(Precedence.DATA, 0, int(kind), 0, 0, parts, length)
        self.sock.settimeout(timeout)
        try:
            _send_buffers(self.sock, buffers)
        except OSError as exc:
            raise StreamFeedError(f"sending {kind.name} to {self.peer} failed: {exc}") from None

    def receive(self, timeout: float) -> Message:
        """The next message within ``timeout`` s; a closed connection or a silent peer is :class:`StreamFeedError`."""
        deadline = _time.monotonic() + timeout
        while not self._ready:
            left = deadline - _time.monotonic()
            if left <= 0:
                raise StreamFeedError(f"no answer from {self.peer} within {timeout:g} s")
            self.sock.settimeout(left)
            try:
                count = self.sock.recv_into(self._decoder.buffer())
            except TimeoutError:
                continue
            except OSError as exc:
                raise StreamFeedError(f"the connection to {self.peer} failed: {exc}") from None
            if count == 0:
                raise StreamFeedError(f"{self.peer} closed the connection")
            try:
                frames = self._decoder.advance(count)
            except PytimelyError as exc:
                raise StreamFeedError(f"a frame from {self.peer} does not check out: {exc}") from None
            for frame in frames:
                self._ready.append(_message(frame.channel, bytes(frame.payload), self.peer))
        return self._ready.pop(0)

    def open(self) -> bool:
        """Whether the connection still stands (the peer has not closed it, nothing unread is waiting on it)."""
        try:
            self.sock.setblocking(False)
            try:
                self.sock.recv(1, socket.MSG_PEEK)
            finally:
                self.sock.setblocking(True)
        except BlockingIOError:
            return True  # nothing to read: the normal state of a feed connection between tasks
        except OSError:
            return False
        return False  # closed by the peer (b""), or a message nobody asked for: not to be used again

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(OSError):
            self.sock.close()


def _send_buffers(sock: socket.socket, buffers: list[bytes | bytearray | memoryview]) -> None:
    """Write ``buffers`` in order, gathered by the kernel (no joined copy of a frame of megabytes)."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if views and sent:
            views[0] = views[0][sent:]


def _message(kind: int, payload: bytes, peer: str) -> Message:
    """A frame's payload as a message; anything malformed is :class:`StreamFeedError`."""
    try:
        (size,) = _LENGTH.unpack_from(payload)
        header = json.loads(payload[_LENGTH.size : _LENGTH.size + size])
        # The body is a view of the payload (the one copy out of the decoder's buffer): megabytes are not copied again.
        return Message(Kind(kind), header, memoryview(payload)[_LENGTH.size + size :])
    except (struct.error, ValueError) as exc:
        raise StreamFeedError(f"a malformed feed message from {peer}: {exc}") from None


def dial(address: str, secret: bytes, process: int, *, timeout: float = 30.0) -> FeedLink:
    """Connect to the feed port of hosted process ``process`` at ``host:port`` and authenticate."""
    host, port = address.rsplit(":", 1)
    peer = f"hosted process {process} ({address})"
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout)
    except OSError as exc:
        raise StreamFeedError(f"cannot reach {peer}: {exc}") from None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        keys = connect_peer(sock, secret, FEEDER, process, FEED_SHAPE, deadline=_time.monotonic() + timeout)
    except (AuthenticationError, ConfigError, OSError) as exc:
        sock.close()
        raise StreamFeedError(f"{peer} refused the feed connection: {exc}") from None
    return FeedLink(sock, keys, peer)


def answer(sock: socket.socket, secret: bytes, process: int, *, timeout: float = 30.0) -> FeedLink:
    """Authenticate a feed connection accepted by hosted process ``process`` (a stranger is refused)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _, keys = accept_peer(sock, secret, process, FEED_SHAPE, bound=FEEDER + 1, deadline=_time.monotonic() + timeout,
                          same_hashes=False)  # fmt: skip
    return FeedLink(sock, keys, "a feed sender")


def arrow_bytes(batches: list[pa.RecordBatch], schema: pa.Schema) -> memoryview:
    """``batches`` as one Arrow IPC stream (a view of Arrow's buffer: no copy)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return memoryview(sink.getvalue())


def arrow_batches(body: bytes | memoryview) -> list[pa.RecordBatch]:
    """The record batches of an Arrow IPC stream; bytes that are not one are :class:`StreamFeedError`."""
    import pyarrow as pa

    try:
        return list(pa.ipc.open_stream(pa.py_buffer(body)))
    except pa.ArrowInvalid as exc:
        raise StreamFeedError(f"a DATA message is not an Arrow stream: {exc}") from None

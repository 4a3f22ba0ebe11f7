"""The frames of an event stream (see :mod:`.event_stream`): kinds, tags, sequence numbers, and the binding of a
stream to its capture; sealing frames and decoding them, without I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import struct
import zlib
from dataclasses import dataclass
from typing import Any, Literal

from pytimely.communication.payload import dumps, loads
from pytimely.errors import CorruptEventStreamError, InvalidArgument, TruncatedEventStreamError

__all__ = ["MAX_FRAME", "Binding", "Decoder", "Event", "Sealer", "derive"]

log = logging.getLogger("pytimely.capture")

MAX_FRAME = 1 << 30
"""Longest frame body accepted by default (1 GiB)."""

PROGRESS, MESSAGES, END = 1, 2, 3
KINDS = {PROGRESS: "progress", MESSAGES: "messages", END: "end"}
CODES = {"progress": PROGRESS, "messages": MESSAGES, "end": END}
FRAME = struct.Struct("<BQQ")
FILE_MAGIC = b"PTEV"
SOCKET_MAGIC = b"PTEC"
VERSION = 2
PREFIX = struct.Struct("<4sBB")
FILE_HEADER = struct.Struct("<4sBB32s16sII")
HELLO = struct.Struct("<4sB32s16sII")
NONCE = 32
CRC, HMAC = 0, 1
TAGS = {CRC: 4, HMAC: 32}
ACCEPTED = b"\x01"

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


def derive(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"pytimely-capture-" + label + b"\0" + b"".join(parts), hashlib.sha256).digest()


class Sealer:
    """Frames events with a sequence number and a tag (CRC-32 seeded with the stream's, or HMAC-SHA256)."""

    def __init__(self, key: bytes | None, seed: int = 0) -> None:
        self._key = key
        self._seed = seed
        self._seq = 0

    def frame(self, kind: Literal["progress", "messages", "end"], body: Any) -> list[bytes | memoryview]:
        parts, length = dumps(body)
        head = FRAME.pack(CODES[kind], self._seq, length)
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


class Decoder:
    """Frames in, events out: checks lengths, sequence numbers and tags before anything is unpickled."""

    def __init__(self, key: bytes | None, source: str, max_frame: int, seed: int = 0, offset: int = 0) -> None:
        self._key = key
        self._seed = seed
        self._source = source
        self._max = max_frame
        self._tag = TAGS[CRC if key is None else HMAC]
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
        if len(buf) < FRAME.size:
            return FRAME.size - len(buf)
        _, _, length = FRAME.unpack_from(buf)
        return max(1, int(FRAME.size + min(length, self._max) + self._tag - len(buf)))

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[Event]:
        """Add ``chunk``; the events it completes."""
        buf = self._buffer
        buf += chunk
        events: list[Event] = []
        while buf:
            if self.ended:
                raise self.corrupt("bytes follow the stream's end event")
            if len(buf) < FRAME.size:
                break
            kind, seq, length = FRAME.unpack_from(buf)
            if kind not in KINDS:
                raise self.corrupt(f"unknown event kind {kind}")
            if seq != self._seq:
                raise self.corrupt(f"event number {seq} where {self._seq} was due (lost, repeated or reordered)")
            if length > self._max:
                raise self.corrupt(f"an event of {length} bytes is longer than the limit of {self._max}")
            end = FRAME.size + length
            if len(buf) < end + self._tag:
                break
            tag = bytes(buf[end : end + self._tag])
            if self._key is None:
                ok = struct.pack("<I", zlib.crc32(memoryview(buf)[:end], self._seed)) == tag
            else:
                ok = hmac.compare_digest(hmac.new(self._key, memoryview(buf)[:end], hashlib.sha256).digest(), tag)
            if not ok:
                raise self.corrupt("an event fails its check (corrupted, forged, or from another stream)")
            body = bytearray(memoryview(buf)[FRAME.size : end])  # writable: numpy batches come back writable
            del buf[: end + self._tag]
            self.offset += end + self._tag
            self._seq += 1
            try:
                value = loads(memoryview(body))
            except Exception as exc:
                raise self.corrupt(f"an event's body does not unpickle: {type(exc).__name__}: {exc}") from None
            if kind == END:
                self.ended = True
            events.append((KINDS[kind], value))  # type: ignore[arg-type]
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

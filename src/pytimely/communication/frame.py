"""Frames on the wire, free of I/O: a checked header and a payload.

Every frame sent between two processes is a fixed 40-byte header followed by
``length`` payload bytes::

    magic "PT" | version u8 | precedence u8 | dataflow u32 | channel u32
    | source u32 | target u32 | seq u64 | length u32 | checksum u64

``checksum`` is xxh3-64 over the first 32 header bytes and the payload, so a
flipped bit anywhere in a frame is caught. ``seq`` numbers every frame on a
*link* (one direction of one connection between two processes), starting at 0;
the receiver demands exactly the next number, so a lost, duplicated or
reordered frame shows up at the very next frame (heartbeats are frames too, so
a loss is seen within one heartbeat even on an idle link). Within a link, the
sender keeps each (channel, source worker) stream in order, so FIFO per
channel and sender follows.

Precedence follows seed ``003_f357c44874202187.txt`` (levels 1-3, higher goes
first): ``CONTROL`` > ``PROGRESS`` > ``DATA``. The sender's transport takes the
highest-precedence queued frame first.

:class:`FrameDecoder` turns received bytes into :class:`Frame` values and raises
a :class:`~pytimely.errors.FrameError` naming the peer and channel for anything
malformed; it never hands on a frame it has not checked. Payloads larger than
a threshold are read straight into their own buffer, so big columnar batches
are not copied on the way in.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import xxhash

from pytimely.communication.allocator import Precedence
from pytimely.errors import (
    ChecksumError,
    FrameFormatError,
    FrameLengthError,
    FrameSequenceError,
)

__all__ = [
    "CONTROL_CHANNEL",
    "HEADER",
    "MAX_FRAME",
    "VERSION",
    "Control",
    "Frame",
    "FrameDecoder",
    "FrameEncoder",
    "Precedence",
]

MAGIC = b"PT"
VERSION = 1
HEADER = struct.Struct("<2sBBIIIIQIQ")
_CHECKED = HEADER.size - 8
_PREFIX = struct.Struct("<2sBBIIIIQI")
MAX_FRAME = 1 << 30
"""The largest payload a frame may carry (1 GiB); bigger batches must be split by the sender."""
CONTROL_CHANNEL = 0xFFFFFFFF
"""The ``dataflow`` field of control frames; their ``channel`` field is a :class:`Control` code."""
_DIRECT = 1 << 16


class Control(enum.IntEnum):
    """What a control frame says."""

    HEARTBEAT = 0
    DONE = 1
    ABORT = 2
    JOIN = 3
    """A process that joins a running computation says so, naming its bootstrap server and workers per process."""
    LEAVING = 4
    """A process that leaves says so; each member answers, once it sends it nothing more, with ``DONE``."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One checked frame: where it belongs and its payload bytes."""

    precedence: Precedence
    dataflow: int
    channel: int
    source: int
    target: int
    seq: int
    payload: memoryview | bytes

    @property
    def is_control(self) -> bool:
        """Whether this is a control frame (heartbeat, done, abort)."""
        return self.dataflow == CONTROL_CHANNEL


class FrameEncoder:
    """Numbers and checksums the frames of one link, in the order they go on the wire."""

    __slots__ = ("seq",)

    def __init__(self) -> None:
        self.seq = 0

    def encode(
        self,
        precedence: int,
        dataflow: int,
        channel: int,
        source: int,
        target: int,
        parts: list[bytes | memoryview],
        length: int,
    ) -> bytes:
        """The header for a frame whose payload is ``parts`` (``length`` bytes in all); the next number is used."""
        if length > MAX_FRAME:
            raise FrameLengthError(
                f"a {length}-byte payload on channel {dataflow}.{channel} exceeds the {MAX_FRAME}-byte frame limit",
                peer=None,
                channel=(dataflow, channel),
            )
        prefix = _PREFIX.pack(MAGIC, VERSION, precedence, dataflow, channel, source, target, self.seq, length)
        self.seq += 1
        digest = xxhash.xxh3_64(prefix)
        for part in parts:
            digest.update(part)
        return prefix + digest.intdigest().to_bytes(8, "little")


class FrameDecoder:
    """Checks and splits the byte stream received on one link into frames.

    Use it with a socket as ``n = sock.recv_into(decoder.buffer()); frames = decoder.advance(n)``,
    or hand it bytes with :meth:`feed`. ``peer`` names the sending process in errors.
    """

    def __init__(self, peer: int, *, chunk: int = 1 << 18, max_frame: int = MAX_FRAME) -> None:
        self.peer = peer
        self.expected = 0
        self.max_frame = max_frame
        self._buf = bytearray(chunk)
        self._start = 0
        self._end = 0
        self._header: tuple[int, ...] | None = None
        self._prefix = b""
        self._payload: bytearray | None = None
        self._filled = 0

    @property
    def idle(self) -> bool:
        """Whether no partial frame is buffered (an EOF now is a clean end of stream)."""
        return self._header is None and self._start == self._end

    def buffer(self) -> memoryview:
        """Where the next received bytes should go."""
        if self._payload is not None and len(self._payload) - self._filled >= _DIRECT:
            return memoryview(self._payload)[self._filled :]
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buf) - self._end < 4096:
            pending = self._end - self._start
            self._buf[:pending] = self._buf[self._start : self._end]
            self._start, self._end = 0, pending
        return memoryview(self._buf)[self._end :]

    def advance(self, count: int) -> list[Frame]:
        """Account for ``count`` bytes received into :meth:`buffer`; return the frames they complete."""
        if self._payload is not None and len(self._payload) - self._filled >= _DIRECT:
            self._filled += count
            if self._filled < len(self._payload):
                return []
            frames = [self._finish()]
        else:
            self._end += count
            frames = []
        self._parse(frames)
        return frames

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Take ``data`` as received; return the frames it completes."""
        frames: list[Frame] = []
        view = memoryview(data)
        while len(view):
            target = self.buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            view = view[n:]
            frames.extend(self.advance(n))
        return frames

    def _parse(self, frames: list[Frame]) -> None:
        buf = self._buf
        while True:
            if self._header is None:
                if self._end - self._start < HEADER.size:
                    return
                self._read_header()
            payload = self._payload
            assert payload is not None and self._header is not None
            need = len(payload) - self._filled
            have = self._end - self._start
            take = min(need, have)
            if take:
                payload[self._filled : self._filled + take] = buf[self._start : self._start + take]
                self._filled += take
                self._start += take
            if self._filled < len(payload):
                return
            frames.append(self._finish())

    def _read_header(self) -> None:
        start = self._start
        raw = bytes(self._buf[start : start + HEADER.size])
        magic, version, precedence, dataflow, channel, source, target, seq, length, checksum = HEADER.unpack(raw)
        where = (dataflow, channel)
        if magic != MAGIC:
            raise FrameFormatError(
                f"process {self.peer} sent bytes that are not a pytimely frame (bad magic {magic!r}); "
                "the stream is corrupt or truncated",
                peer=self.peer,
                channel=None,
            )
        if version != VERSION:
            raise FrameFormatError(
                f"process {self.peer} speaks frame version {version}, this process speaks {VERSION}",
                peer=self.peer,
                channel=None,
            )
        if length > self.max_frame:
            raise FrameLengthError(
                f"process {self.peer} announced a {length}-byte frame on channel {dataflow}.{channel}, "
                f"over the {self.max_frame}-byte limit",
                peer=self.peer,
                channel=where,
            )
        if precedence not in (1, 2, 3):
            raise FrameFormatError(
                f"process {self.peer} sent a frame of unknown precedence {precedence} on channel {dataflow}.{channel}",
                peer=self.peer,
                channel=where,
            )
        self._start = start + HEADER.size
        self._header = (precedence, dataflow, channel, source, target, seq, checksum)
        self._prefix = raw[:_CHECKED]
        self._payload = bytearray(length)
        self._filled = 0

    def _finish(self) -> Frame:
        header, payload = self._header, self._payload
        assert header is not None and payload is not None
        self._header = None
        self._payload = None
        precedence, dataflow, channel, source, target, seq, checksum = header
        digest = xxhash.xxh3_64(self._prefix)
        digest.update(payload)
        where = (dataflow, channel)
        if digest.intdigest() != checksum:
            raise ChecksumError(
                f"frame {seq} from process {self.peer} on channel {_name(dataflow, channel)} fails its checksum "
                "(corrupted in transit)",
                peer=self.peer,
                channel=where,
            )
        if seq != self.expected:
            kind = "a duplicate or replayed frame" if seq < self.expected else "frames were lost or reordered"
            raise FrameSequenceError(
                f"process {self.peer} sent frame {seq} on channel {_name(dataflow, channel)} where frame "
                f"{self.expected} was due: {kind}",
                peer=self.peer,
                channel=where,
                expected=self.expected,
                received=seq,
            )
        self.expected += 1
        return Frame(Precedence(precedence), dataflow, channel, source, target, seq, memoryview(payload))


def _name(dataflow: int, channel: int) -> str:
    if dataflow == CONTROL_CHANNEL:
        try:
            return f"control/{Control(channel).name.lower()}"
        except ValueError:
            return f"control/{channel}"
    return f"{dataflow}.{channel}"

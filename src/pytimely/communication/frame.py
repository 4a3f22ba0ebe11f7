"""Frames on the wire, free of I/O: an authenticated header and an authenticated, encrypted payload.

Every frame sent between two processes is a fixed 40-byte header followed by
``length`` payload bytes sealed with AES-GCM (``length + 16`` bytes on the wire)::

    magic "PT" | version u8 | precedence u8 | dataflow u32 | channel u32
    | source u32 | target u32 | seq u64 | length u32 | header tag 8 bytes

The *header tag* is a keyed BLAKE2b-64 of the first 32 header bytes under the
link's header key, checked before anything in the header is believed or
allocated from: a flipped bit in ``length`` is a
:class:`~pytimely.errors.FrameAuthenticationError` at once, not a 1 GiB
buffer and a wait. The payload is sealed with AES-GCM under the link's payload
key, with ``seq`` as the nonce and the 32 header bytes as associated data, so a
payload is decrypted (and later unpickled) only when it is exactly what the
peer sent, in that place of the stream.

Keys are per connection and per direction (:class:`LinkKeys`, derived by the
handshake from the run's secret and both sides' nonces), so a frame of one
connection or direction is refused on any other. ``seq`` numbers every frame on
a *link* (one direction of one connection), starting at 0; the receiver demands
exactly the next number *in the header*, so a replayed, duplicated, reordered or
dropped frame is refused before its payload is read. Within a link, the sender
keeps each (channel, source worker) stream in order, so FIFO per channel and
sender follows.

Precedence follows seed ``003_f357c44874202187.txt`` (levels 1-3, higher goes
first): ``CONTROL`` > ``PROGRESS`` > ``DATA``. The sender's transport takes the
highest-precedence queued frame first.

:class:`FrameDecoder` turns received bytes into :class:`Frame` values and raises
a :class:`~pytimely.errors.FrameError` naming the peer (and the channel, once
the header is authenticated) for anything malformed; it never hands on a frame
it has not checked. Payloads larger than a threshold are read straight into
their own buffer.

A frame may instead carry its payload in a shared-memory ring
(:mod:`pytimely.communication.ring`, processes on one host): its precedence byte
has :data:`RING_FLAG` set, its ``length`` is that of a 16-byte descriptor
(position and length in the ring) that follows the header in the clear, and its
16-byte tag on the wire is an AES-GCM tag under the link's payload key and the
frame's own nonce, over the payload in the ring (as associated data) and the
header and descriptor (as the plaintext, whose ciphertext is dropped): a GMAC of
all three. A payload in the ring is *authenticated, not
encrypted*, whatever :attr:`FrameKeys.encrypt` says of the socket: the ring is a
file of this user's, mode 0600, unlinked once mapped, so whoever could read it
could read either process's memory as well, and a cipher pass would hide nothing
from anyone. The tag still refuses a payload changed in the ring, one copied
there from another frame or link (another nonce, another key), a descriptor
pointing elsewhere, and a ring planted by anyone without the run's secret.
GMAC is the fastest keyed MAC available here (``bench_cluster.py --macs``:
15-23 GB/s on 1-8 MiB payloads, against 6-12 for Poly1305, 1.4-1.8 for
HMAC-SHA256 and under 1 for keyed BLAKE2b). On the wire every frame is still a
header, ``length`` bytes and a tag.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pytimely.communication.allocator import Precedence
from pytimely.communication.buffers import PayloadBuffers
from pytimely.communication.ring import DESCRIPTOR, RingReader, RingWriter
from pytimely.errors import (
    FrameAuthenticationError,
    FrameFormatError,
    FrameLengthError,
    FrameSequenceError,
    InvalidArgument,
    RingError,
)

__all__ = [
    "CONTROL_CHANNEL",
    "EVERY_WORKER",
    "HEADER",
    "MAX_FRAME",
    "RING_FLAG",
    "RING_MIN",
    "TAG",
    "VERSION",
    "Control",
    "Frame",
    "FrameDecoder",
    "FrameEncoder",
    "FrameKeys",
    "LinkKeys",
    "Precedence",
]

MAGIC = b"PT"
VERSION = 5
"""Version 5: payloads in a shared-memory ring are authenticated (an AES-GCM tag, no cipher pass), not encrypted."""
HEADER = struct.Struct("<2sBBIIIIQI8s")
_PREFIX = struct.Struct("<2sBBIIIIQI")
_CHECKED = _PREFIX.size
TAG = 16
"""Bytes the AES-GCM tag adds to every payload on the wire."""
MAX_FRAME = 1 << 30
"""The largest payload a frame may carry (1 GiB); bigger batches must be split by the sender."""
CONTROL_CHANNEL = 0xFFFFFFFF
"""The ``dataflow`` field of control frames; their ``channel`` field is a :class:`Control` code."""
RING_FLAG = 0x80
"""Set in a frame's precedence byte when its payload is in the link's shared-memory ring."""
RING_MIN = 1 << 16
"""Payloads shorter than this go on the socket even when there is a ring (a system call costs more than the copy)."""
EVERY_WORKER = 0xFFFFFFFF
"""The ``target`` field of a frame for every worker of the receiving process (sent once, handed to each)."""
_DIRECT = 1 << 16
_NONCE_PAD = b"\x00\x00\x00\x00"
_MIN_SPARE = 1 << 16
_MAX_SPARE = 8 << 20
_SPARE_BYTES = 16 << 20


class Control(enum.IntEnum):
    """What a control frame says."""

    HEARTBEAT = 0
    DONE = 1
    ABORT = 2
    JOIN = 3
    """A process that joins a running computation says so, naming its bootstrap server and workers per process."""
    LEAVING = 4
    """A process that leaves says so; each member answers, once it sends it nothing more, with ``DONE``."""
    RING = 5
    """A process offers the ring it will put payloads for the peer in (a :class:`~.ring.RingOffer`)."""
    RING_ACCEPT = 6
    """The answer to ``RING``: ``1`` once the ring is mapped (payloads may go there), ``0`` if it cannot be."""
    RING_FREE = 7
    """The reader of a ring has taken every payload before the position it names."""


@dataclass(frozen=True, slots=True)
class FrameKeys:
    """The keys of one direction of one connection: the payload's AES-GCM key and the header's BLAKE2b key.

    ``encrypt`` False seals payloads on the socket with the same AES-GCM tag but leaves them readable (GMAC:
    authenticated, not secret), which saves the copy and the cipher pass over each payload. Payloads in a
    shared-memory ring are authenticated only, either way (module doc).
    """

    payload: bytes
    header: bytes
    encrypt: bool = True

    def __post_init__(self) -> None:
        if len(self.payload) != 32 or len(self.header) != 32:
            raise InvalidArgument("frame keys are 32 bytes each")

    def __repr__(self) -> str:
        return "FrameKeys(<hidden>)"


@dataclass(frozen=True, slots=True)
class LinkKeys:
    """The keys of one connection, as one side sees it: what it sends under and what it receives under."""

    send: FrameKeys
    receive: FrameKeys


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


def _header_mac(keys: FrameKeys) -> hashlib.blake2b:
    return hashlib.blake2b(key=keys.header, digest_size=8)


def _nonce(seq: int) -> bytes:
    return _NONCE_PAD + seq.to_bytes(8, "little")


def _ring_tag(aead: AESGCM, seq: int, head: bytes, payload: memoryview | bytearray) -> bytes:
    """The AES-GMAC tag of a ring payload under frame ``seq``'s nonce: AES-GCM with ``payload`` as associated data and
    ``head`` (header and descriptor, 56 bytes) as the plaintext, whose ciphertext is dropped. The tag covers both;
    the nonce is used once per key, as every frame of a link has its own number. (One call, no cipher object per
    frame: a cipher context costs more than the tag of a 64 KiB payload.)"""
    return aead.encrypt(_nonce(seq), head, payload)[-TAG:]


class FrameEncoder:
    """Numbers, authenticates and seals the frames of one link, in the order they go on the wire."""

    __slots__ = ("_aead", "_encrypt", "_key", "_lent", "_mac", "_reuse", "_spare", "seq")

    def __init__(self, keys: FrameKeys, *, reuse: bool = False) -> None:
        self.seq = 0
        # With ``reuse`` the sealing buffers come back through recycle() once written: a fresh buffer per frame
        # costs page faults and zeroing on every frame, much of the sender's time on megabyte frames.
        self._reuse = reuse
        self._spare: list[bytearray] = []
        self._lent: list[bytearray] = []
        self._aead = AESGCM(keys.payload)
        self._key = keys.payload
        self._encrypt = keys.encrypt
        self._mac = _header_mac(keys)

    def encode(
        self,
        precedence: int,
        dataflow: int,
        channel: int,
        source: int,
        target: int,
        parts: list[bytes | memoryview],
        length: int,
        ring: RingWriter | None = None,
    ) -> list[bytes | bytearray | memoryview]:
        """The buffers to write for a frame of ``parts`` (``length`` bytes in all), under the next number.

        With a ``ring`` that has room, the payload is sealed into it and only the header and descriptor are
        returned for the socket.
        """
        if length > MAX_FRAME:
            raise FrameLengthError(
                f"a {length}-byte payload on channel {dataflow}.{channel} exceeds the {MAX_FRAME}-byte frame limit",
                peer=None,
                channel=(dataflow, channel),
            )
        if ring is not None and length >= RING_MIN:
            slot = ring.reserve(length)
            if slot is not None:
                return self._encode_in_ring((precedence, dataflow, channel, source, target), parts, length, *slot)
        seq = self.seq
        prefix = _PREFIX.pack(MAGIC, VERSION, precedence, dataflow, channel, source, target, seq, length)
        self.seq = seq + 1
        mac = self._mac.copy()
        mac.update(prefix)
        if not self._encrypt:
            # The parts go out as they are (scatter-gather, no copy), followed by their GMAC tag.
            sealer = Cipher(algorithms.AES(self._key), modes.GCM(_nonce(seq))).encryptor()
            sealer.authenticate_additional_data(prefix)
            for part in parts:
                sealer.authenticate_additional_data(part)
            sealer.finalize()
            return [prefix + mac.digest(), *parts, sealer.tag]
        # One buffer, sealed in place: gathering the parts is the only copy.
        sealed = self._borrow(length + TAG)
        offset = 0
        for part in parts:
            view = memoryview(part).cast("B")
            sealed[offset : offset + len(view)] = view
            offset += len(view)
        self._aead.encrypt_into(_nonce(seq), sealed[:length], prefix, sealed)
        return [prefix + mac.digest(), sealed]

    def _encode_in_ring(
        self,
        where: tuple[int, int, int, int, int],
        parts: list[bytes | memoryview],
        length: int,
        start: int,
        slot: memoryview,
    ) -> list[bytes | bytearray | memoryview]:
        """Copy ``parts`` into ``slot`` (at ring position ``start``); the header, descriptor and tag for the socket.

        ``where`` is the frame's precedence, dataflow, channel, source and target. The payload is authenticated,
        not encrypted (module doc): its tag, under this frame's nonce, covers the header, the descriptor and the
        bytes as they are in the ring."""
        precedence, dataflow, channel, source, target = where
        seq = self.seq
        prefix = _PREFIX.pack(
            MAGIC, VERSION, precedence | RING_FLAG, dataflow, channel, source, target, seq, DESCRIPTOR.size
        )
        self.seq = seq + 1
        mac = self._mac.copy()
        mac.update(prefix)
        descriptor = DESCRIPTOR.pack(start, length)
        offset = 0
        for part in parts:
            view = memoryview(part).cast("B")
            slot[offset : offset + len(view)] = view
            offset += len(view)
        return [prefix + mac.digest(), descriptor, _ring_tag(self._aead, seq, prefix + descriptor, slot[:length])]

    def _borrow(self, size: int) -> memoryview:
        """A ``size``-byte view of a spare sealing buffer (or of a new one), lent until :meth:`recycle`."""
        if not self._reuse or size < _MIN_SPARE:
            # Small frames (progress, control) are cheap to allocate and would pin big buffers.
            return memoryview(bytearray(size))
        spare = self._spare
        for i, buf in enumerate(spare):
            if len(buf) >= size:
                del spare[i]
                break
        else:
            buf = bytearray(size)
        self._lent.append(buf)
        return memoryview(buf)[:size]

    def recycle(self) -> None:
        """Take back the sealing buffers of every frame encoded so far (``reuse``): only once they are written.

        Until then they stay lent and are not handed out again. At most ``_SPARE_BYTES`` are kept, smallest
        first; a buffer over ``_MAX_SPARE`` is let go rather than held for the life of the link.
        """
        kept: list[bytearray] = []
        total = 0
        for buf in sorted(self._spare + [b for b in self._lent if len(b) <= _MAX_SPARE], key=len):
            if total + len(buf) > _SPARE_BYTES:
                break
            kept.append(buf)
            total += len(buf)
        self._lent = []
        self._spare = kept


class FrameDecoder:
    """Checks and splits the byte stream received on one link into frames.

    Use it with a socket as ``n = sock.recv_into(decoder.buffer()); frames = decoder.advance(n)``,
    or hand it bytes with :meth:`feed`. ``peer`` names the sending process in errors.
    """

    def __init__(self, peer: int, keys: FrameKeys, *, chunk: int = 1 << 18, max_frame: int = MAX_FRAME) -> None:
        self.peer = peer
        self.expected = 0
        self.max_frame = max_frame
        self._aead = AESGCM(keys.payload)
        self._key = keys.payload
        self._encrypt = keys.encrypt
        self._mac = _header_mac(keys)
        self._buf = bytearray(chunk)
        self._start = 0
        self._end = 0
        self._header: tuple[int, ...] | None = None
        self._prefix = b""
        self._payload: bytearray | memoryview | None = None
        self._filled = 0
        self.buffers = PayloadBuffers(_DIRECT)
        """Where payloads of 64 KiB and more are received (or decrypted out of the ring) into."""
        self.ring: RingReader | None = None
        """The peer's ring, once mapped: frames with :data:`RING_FLAG` have their payload there."""
        self.spilled = False
        """Set when a payload big enough for the ring came on the socket although the ring is mapped (its writer
        found it full); cleared by whoever acts on it."""
        self.held = False
        """Whether the last :meth:`advance` stopped after a frame from the ring with more bytes buffered: call
        ``advance(0)`` for the rest (a few buffered bytes may describe many megabytes in the ring, so a reader that
        bounds what it has taken and not yet handed on gets a say after each)."""

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
        self.held = False
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
        while self.held:
            frames.extend(self.advance(0))
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
            if self._prefix[3] & RING_FLAG and self._start < self._end:
                self.held = True
                return

    def _read_header(self) -> None:
        start = self._start
        raw = bytes(self._buf[start : start + HEADER.size])
        prefix, tag = raw[:_CHECKED], raw[_CHECKED:]
        mac = self._mac.copy()
        mac.update(prefix)
        # Nothing in the header is believed, and nothing allocated from it, before its tag checks.
        if not hmac.compare_digest(mac.digest(), tag):
            raise FrameAuthenticationError(
                f"the header of frame {self.expected} from process {self.peer} fails authentication: it was "
                "corrupted in transit or forged (the stream cannot be trusted past this point)",
                peer=self.peer,
                channel=None,
            )
        magic, version, precedence, dataflow, channel, source, target, seq, length = _PREFIX.unpack(prefix)
        where = (dataflow, channel)
        if magic != MAGIC or version != VERSION:
            raise FrameFormatError(
                f"process {self.peer} sent an authenticated frame of another format ({magic!r}, version {version}; "
                f"this process speaks version {VERSION})",
                peer=self.peer,
                channel=None,
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
        if length > self.max_frame:
            raise FrameLengthError(
                f"process {self.peer} announced a {length}-byte frame on channel {dataflow}.{channel}, "
                f"over the {self.max_frame}-byte limit",
                peer=self.peer,
                channel=where,
            )
        in_ring = bool(precedence & RING_FLAG)
        if precedence & ~RING_FLAG not in (1, 2, 3):
            raise FrameFormatError(
                f"process {self.peer} sent a frame of unknown precedence {precedence} on channel {dataflow}.{channel}",
                peer=self.peer,
                channel=where,
            )
        if in_ring and (self.ring is None or length != DESCRIPTOR.size):
            raise FrameFormatError(
                f"process {self.peer} sent frame {seq} on channel {_name(dataflow, channel)} with its payload in a "
                "shared-memory ring this process has not mapped, or with a malformed descriptor",
                peer=self.peer,
                channel=where,
            )
        self._start = start + HEADER.size
        self._header = (precedence, dataflow, channel, source, target, seq)
        self._prefix = prefix
        self._payload = self.buffers.take(length + TAG)
        self._filled = 0

    def _finish(self) -> Frame:
        header, sealed = self._header, self._payload
        assert header is not None and sealed is not None
        self._header = None
        self._payload = None
        precedence, dataflow, channel, source, target, seq = header
        if precedence & RING_FLAG:
            return self._finish_from_ring(header, sealed)
        plain = memoryview(sealed)[: len(sealed) - TAG]
        try:
            if self._encrypt:
                # In place: the payload's one buffer is what the message is later rebuilt on, without a copy.
                self._aead.decrypt_into(_nonce(seq), sealed, self._prefix, plain)
            else:
                opener = Cipher(algorithms.AES(self._key), modes.GCM(_nonce(seq), bytes(sealed[-TAG:]))).decryptor()
                opener.authenticate_additional_data(self._prefix)
                opener.authenticate_additional_data(plain)
                opener.finalize()
        except InvalidTag:
            raise FrameAuthenticationError(
                f"the payload of frame {seq} from process {self.peer} on channel {_name(dataflow, channel)} fails "
                "authentication: it was corrupted in transit or forged, and was not decoded",
                peer=self.peer,
                channel=(dataflow, channel),
            ) from None
        self.expected += 1
        if len(plain) >= RING_MIN and self.ring is not None:
            self.spilled = True
        return Frame(Precedence(precedence), dataflow, channel, source, target, seq, plain)

    def _finish_from_ring(self, header: tuple[int, ...], sealed: bytearray | memoryview) -> Frame:
        """The frame whose ``header`` says its payload is in the ring; ``sealed`` is its descriptor and tag."""
        precedence, dataflow, channel, source, target, seq = header
        precedence &= ~RING_FLAG
        ring = self.ring
        assert ring is not None
        descriptor, tag = bytes(sealed[: DESCRIPTOR.size]), bytes(sealed[DESCRIPTOR.size :])
        start, length = DESCRIPTOR.unpack(descriptor)
        if length > self.max_frame:
            raise FrameLengthError(
                f"process {self.peer} put a {length}-byte payload in its ring for channel {dataflow}.{channel}, "
                f"over the {self.max_frame}-byte limit",
                peer=self.peer,
                channel=(dataflow, channel),
            )
        try:
            lent = ring.lend(start, length)
        except RingError as exc:
            raise RingError(f"process {self.peer} sent frame {seq} with {exc}", self.peer) from None
        if lent is not None:
            # Authenticated where it lies and decoded there: only the writer can change the ring, and it writes a
            # place only once this process gave it back, which happens when nothing built on the view is left.
            plain: bytearray | memoryview = lent
        else:
            # Too much of the ring is held already (payloads not yet decoded, or kept): copied out into a buffer
            # of its own and authenticated there, so that it holds no place in the ring once taken.
            plain = self.buffers.take(length)
            plain[:length] = ring.payload(start, length)[:length]
        if not hmac.compare_digest(_ring_tag(self._aead, seq, self._prefix + descriptor, plain), tag):
            raise FrameAuthenticationError(
                f"the payload of frame {seq} from process {self.peer} on channel {_name(dataflow, channel)} fails "
                "authentication in the shared-memory ring: it was changed there or the descriptor was forged, "
                "and was not decoded",
                peer=self.peer,
                channel=(dataflow, channel),
            )
        if lent is None:
            ring.taken(start, length)
        self.expected += 1
        return Frame(Precedence(precedence), dataflow, channel, source, target, seq, memoryview(plain))


def _name(dataflow: int, channel: int) -> str:
    if dataflow == CONTROL_CHANNEL:
        try:
            return f"control/{Control(channel).name.lower()}"
        except ValueError:
            return f"control/{channel}"
    return f"{dataflow}.{channel}"

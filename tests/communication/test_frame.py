"""The frame codec: what it accepts round-trips exactly; every kind of damage is caught and named."""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.communication.allocator import Precedence
from pytimely.communication.frame import HEADER, MAX_FRAME, TAG, VERSION, FrameDecoder, FrameEncoder, FrameKeys
from pytimely.communication.payload import dumps, loads
from pytimely.errors import (
    ChecksumError,
    FrameAuthenticationError,
    FrameFormatError,
    FrameLengthError,
    FrameSequenceError,
)
from tests.profiles import examples

KEYS = FrameKeys(os.urandom(32), os.urandom(32))
"""One direction's keys, as a handshake would derive them."""

frames = st.lists(
    st.tuples(
        st.sampled_from(list(Precedence)),
        st.integers(0, 5),
        st.integers(0, 9),
        st.integers(0, 7),
        st.integers(0, 7),
        st.binary(max_size=3000),
    ),
    max_size=12,
)


def encode_all(specs: list[tuple[int, int, int, int, int, bytes]]) -> bytes:
    """The wire bytes of a link carrying ``specs`` in order."""
    encoder = FrameEncoder(KEYS)
    out = bytearray()
    for precedence, dataflow, channel, source, target, payload in specs:
        for part in encoder.encode(precedence, dataflow, channel, source, target, [payload], len(payload)):
            out += part
    return bytes(out)


@settings(max_examples=examples(200), deadline=None)
@given(frames, st.lists(st.integers(1, 5000), min_size=1, max_size=20))
def test_frames_round_trip_whatever_the_chunking(
    specs: list[tuple[int, int, int, int, int, bytes]], cuts: list[int]
) -> None:
    wire = encode_all(specs)
    decoder = FrameDecoder(3, KEYS, chunk=4096)
    got = []
    position = 0
    i = 0
    while position < len(wire):
        step = cuts[i % len(cuts)]
        got.extend(decoder.feed(wire[position : position + step]))
        position += step
        i += 1
    assert decoder.idle
    assert [(f.precedence, f.dataflow, f.channel, f.source, f.target, bytes(f.payload)) for f in got] == specs
    assert [f.seq for f in got] == list(range(len(specs)))


def test_large_payload_is_read_into_its_own_buffer() -> None:
    payload = np.arange(1 << 18, dtype=np.int64).tobytes()
    wire = encode_all([(1, 0, 1, 0, 1, payload), (2, 0, 0, 0, 1, b"x")])
    decoder = FrameDecoder(0, KEYS, chunk=1 << 16)
    got = []
    view = memoryview(wire)
    while view:
        target = decoder.buffer()
        n = min(len(target), len(view), 50_000)
        target[:n] = view[:n]
        view = view[n:]
        got.extend(decoder.advance(n))
    assert [bytes(f.payload) for f in got] == [payload, b"x"]


@settings(max_examples=examples(150), deadline=None)
@given(st.binary(min_size=1, max_size=200), st.data())
def test_every_single_bit_flip_is_caught(payload: bytes, data: st.DataObject) -> None:
    wire = bytearray(encode_all([(1, 2, 3, 0, 1, payload)]))
    bit = data.draw(st.integers(0, len(wire) * 8 - 1))
    wire[bit // 8] ^= 1 << (bit % 8)
    # Every flip is refused at once, by the header's tag or the payload's: none leaves a frame waiting for bytes.
    with pytest.raises(FrameAuthenticationError):
        FrameDecoder(1, KEYS).feed(bytes(wire))


@pytest.mark.parametrize(
    "field", ["magic", "version", "precedence", "dataflow", "channel", "source", "target", "seq", "length", "tag"]
)
def test_a_flipped_header_field_is_refused_before_anything_is_allocated(field: str) -> None:
    offsets = {
        "magic": 0,
        "version": 2,
        "precedence": 3,
        "dataflow": 4,
        "channel": 8,
        "source": 12,
        "target": 16,
        "seq": 20,
        "length": 31,
        "tag": 35,
    }
    wire = bytearray(encode_all([(1, 2, 3, 0, 1, b"payload")]))
    wire[offsets[field]] ^= 0x40  # in the length field: the high byte, a 1 GiB claim
    decoder = FrameDecoder(1, KEYS)
    with pytest.raises(FrameAuthenticationError, match="header of frame 0 from process 1"):
        decoder.feed(bytes(wire[: HEADER.size]))
    assert decoder._payload is None  # nothing was allocated from the header


def test_checksum_error_names_peer_and_channel() -> None:
    wire = bytearray(encode_all([(1, 2, 3, 0, 1, b"hello world")]))
    wire[-1] ^= 0x10
    with pytest.raises(ChecksumError, match=r"process 4 on channel 2\.3") as info:
        FrameDecoder(4, KEYS).feed(bytes(wire))
    assert info.value.peer == 4 and info.value.channel == (2, 3)


def test_a_payload_rewritten_with_a_recomputed_checksum_is_refused() -> None:
    # What beat the unkeyed checksum: rewrite the payload, recompute every unkeyed digest an attacker can.
    wire = bytearray(encode_all([(1, 2, 3, 0, 1, b"count=9")]))
    body = bytearray(wire[HEADER.size :])
    body[:7] = bytes(a ^ b ^ c for a, b, c in zip(body[:7], b"count=9", b"count=1", strict=True))
    tampered = bytes(wire[: HEADER.size]) + bytes(body[:-TAG]) + hashlib.sha256(body[:-TAG]).digest()[:TAG]
    with pytest.raises(FrameAuthenticationError, match="payload of frame 0"):
        FrameDecoder(4, KEYS).feed(tampered)


def test_frames_of_another_connection_or_direction_are_refused() -> None:
    wire = encode_all([(1, 2, 3, 0, 1, b"x")])
    with pytest.raises(FrameAuthenticationError):
        FrameDecoder(1, FrameKeys(os.urandom(32), KEYS.header)).feed(wire)
    with pytest.raises(FrameAuthenticationError):
        FrameDecoder(1, FrameKeys(KEYS.payload, os.urandom(32))).feed(wire)


def frames_of(specs: list[tuple[int, int, int, int, int, bytes]]) -> list[bytes]:
    """Each frame's bytes separately, numbered as one link would number them."""
    encoder = FrameEncoder(KEYS)
    return [b"".join(encoder.encode(p, d, c, s, t, [b], len(b))) for p, d, c, s, t, b in specs]


SPECS = [(1, 0, 1, 0, 1, b"a" * 10), (2, 0, 0, 0, 1, b"b" * 5), (1, 0, 1, 0, 1, b"c")]


@pytest.mark.parametrize(
    ("mangle", "kind", "match"),
    [
        (lambda f: [f[0], f[0], f[1], f[2]], "duplicate", "duplicate"),
        (lambda f: [f[0], f[2]], "gap", "lost or reordered"),
        (lambda f: [f[1], f[0], f[2]], "reorder", "lost or reordered"),
    ],
)
def test_duplicates_gaps_and_reordering_are_caught(mangle: object, kind: str, match: str) -> None:
    wire = b"".join(mangle(frames_of(SPECS)))  # type: ignore[operator]
    with pytest.raises(FrameSequenceError, match=match) as info:
        FrameDecoder(1, KEYS).feed(wire)
    assert info.value.peer == 1


def test_truncation_leaves_a_partial_frame_and_garbage_is_not_a_frame() -> None:
    wire = b"".join(frames_of(SPECS))
    decoder = FrameDecoder(1, KEYS)
    assert len(decoder.feed(wire[: len(wire) - 1])) == 2
    assert not decoder.idle
    with pytest.raises(FrameAuthenticationError, match="header of frame 0"):
        FrameDecoder(1, KEYS).feed(b"GET / HTTP/1.1\r\n" + b"\0" * HEADER.size)


def signed(*fields: object) -> bytes:
    """A header with a valid tag (as only a holder of the link's key could make)."""
    prefix = struct.pack("<2sBBIIIIQI", *fields)
    return prefix + hashlib.blake2b(prefix, key=KEYS.header, digest_size=8).digest()


def test_oversized_and_unknown_precedence_frames_are_refused() -> None:
    with pytest.raises(FrameLengthError, match="over the"):
        FrameDecoder(2, KEYS).feed(signed(b"PT", VERSION, 1, 0, 1, 0, 1, 0, MAX_FRAME + 1))
    with pytest.raises(FrameFormatError, match="precedence 9"):
        FrameDecoder(2, KEYS).feed(signed(b"PT", VERSION, 9, 0, 1, 0, 1, 0, 0))
    with pytest.raises(FrameFormatError, match="version 1"):
        FrameDecoder(2, KEYS).feed(signed(b"PT", 1, 1, 0, 1, 0, 1, 0, 0))
    with pytest.raises(FrameLengthError):
        FrameEncoder(KEYS).encode(1, 0, 1, 0, 1, [], MAX_FRAME + 1)


def test_payloads_round_trip_and_columnar_buffers_travel_out_of_band() -> None:
    array = np.arange(100_000, dtype=np.int64).reshape(-1, 2)
    parts, length = dumps((7, array))
    assert length == sum(memoryview(p).nbytes for p in parts)
    assert any(memoryview(p).nbytes == array.nbytes for p in parts)  # the array's own memory, not a copy in the pickle
    wire = bytearray(b"".join(bytes(p) for p in parts))
    time, back = loads(memoryview(wire))
    assert time == 7 and np.array_equal(back, array)
    assert np.shares_memory(back, np.frombuffer(wire, dtype=np.uint8))
    records = [(i, str(i)) for i in range(100)]
    parts, _ = dumps((1, records))
    assert loads(b"".join(bytes(p) for p in parts)) == (1, records)


def test_arrow_batches_round_trip() -> None:
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"a": list(range(1000)), "b": [str(i) for i in range(1000)]})
    parts, _ = dumps(table)
    assert loads(b"".join(bytes(p) for p in parts)).equals(table)


@pytest.mark.parametrize("encrypt", [True, False])
def test_encrypted_or_only_authenticated_frames_round_trip_and_refuse_any_change(encrypt: bool) -> None:
    keys = FrameKeys(KEYS.payload, KEYS.header, encrypt)
    secret = b"the count is 9 " * 20
    wire = b"".join(FrameEncoder(keys).encode(1, 2, 3, 0, 1, [secret[:100], secret[100:]], len(secret)))
    assert (secret in wire) is not encrypt  # readable on the wire only when not encrypted
    assert bytes(FrameDecoder(1, keys).feed(wire)[0].payload) == secret
    for position in (HEADER.size, HEADER.size + 150, len(wire) - 1):
        mangled = bytearray(wire)
        mangled[position] ^= 0x01
        with pytest.raises(FrameAuthenticationError, match="payload of frame 0"):
            FrameDecoder(1, keys).feed(bytes(mangled))
    # A receiver expecting the other mode refuses the frame rather than misreading it.
    with pytest.raises(FrameAuthenticationError):
        FrameDecoder(1, FrameKeys(KEYS.payload, KEYS.header, not encrypt)).feed(wire)


@settings(max_examples=examples(100), deadline=None)
@given(
    st.lists(
        st.lists(
            # Payloads on both sides of the pooling threshold (64 KiB), each one's bytes its own.
            st.tuples(st.integers(0, 200_000), st.integers(0, 255)).map(
                lambda t: (bytes([t[1]]) + t[0].to_bytes(4, "little")) * (t[0] // 5)
            ),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_reused_sealing_buffers_never_overwrite_a_frame_not_yet_written(batches: list[list[bytes]]) -> None:
    # A link encodes a batch, writes it, then recycles: a frame's sealed bytes must stay as they were until
    # then, however the buffers of earlier batches are lent out again.
    encoder = FrameEncoder(KEYS, reuse=True)
    decoder = FrameDecoder(1, KEYS)
    for batch in batches:
        encoded = [encoder.encode(1, 0, 1, 0, 1, [p], len(p)) for p in batch]
        wire = b"".join(bytes(part) for frame in encoded for part in frame)
        encoder.recycle()
        assert [bytes(f.payload) for f in decoder.feed(wire)] == batch
    assert decoder.idle


def test_sealing_buffers_are_lent_until_recycled_and_then_reused() -> None:
    encoder = FrameEncoder(KEYS, reuse=True)
    size = 100_000
    first = encoder.encode(1, 0, 1, 0, 1, [b"a" * size], size)[1]
    second = encoder.encode(1, 0, 1, 0, 1, [b"b" * size], size)[1]
    assert isinstance(first, memoryview) and isinstance(second, memoryview)
    assert first.obj is not second.obj
    encoder.recycle()
    third = encoder.encode(1, 0, 1, 0, 1, [b"c" * size], size)[1]
    assert isinstance(third, memoryview) and third.obj in (first.obj, second.obj)
    fourth = encoder.encode(1, 0, 1, 0, 1, [b"e" * size], size)[1]
    assert isinstance(fourth, memoryview) and fourth.obj is not third.obj
    # A small frame (progress, control) gets a buffer of its own size, never a pooled one.
    small = encoder.encode(1, 0, 1, 0, 1, [b"d" * 100], 100)[1]
    assert isinstance(small, memoryview) and len(small.obj) == 100 + TAG
    # Without reuse every frame has a buffer of its own, kept by nobody after it is written.
    plain = FrameEncoder(KEYS)
    a, b = (plain.encode(1, 0, 1, 0, 1, [b"x"], 1)[1] for _ in range(2))
    plain.recycle()
    assert isinstance(a, memoryview) and isinstance(b, memoryview) and a.obj is not b.obj


def test_decoding_a_batch_sets_off_no_collection_and_leaves_the_collector_as_it_was() -> None:
    import gc

    batch = (3, [(i, -i, str(i)) for i in range(20_000)])
    parts, _ = dumps(batch)
    payload = b"".join(bytes(p) for p in parts)
    started: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(watch)
    try:
        assert gc.isenabled()
        assert loads(payload) == batch
        during = list(started)
        assert gc.isenabled()
        gc.disable()
        try:
            assert loads(payload) == batch
            assert not gc.isenabled()  # the program's choice is kept
        finally:
            gc.enable()
    finally:
        gc.callbacks.remove(watch)
    # 20,000 new tuples would set off about 28 young collections while they were built; decoded as a burst, none
    # (or one, if the process's young count was already near the raised threshold).
    assert len(during) <= 1, during

"""The frame codec: what it accepts round-trips exactly; every kind of damage is caught and named."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.communication.allocator import Precedence
from pytimely.communication.frame import HEADER, MAX_FRAME, FrameDecoder, FrameEncoder
from pytimely.communication.payload import dumps, loads
from pytimely.errors import ChecksumError, FrameFormatError, FrameLengthError, FrameSequenceError

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
    encoder = FrameEncoder()
    out = bytearray()
    for precedence, dataflow, channel, source, target, payload in specs:
        out += encoder.encode(precedence, dataflow, channel, source, target, [payload], len(payload))
        out += payload
    return bytes(out)


@settings(max_examples=200, deadline=None)
@given(frames, st.lists(st.integers(1, 5000), min_size=1, max_size=20))
def test_frames_round_trip_whatever_the_chunking(
    specs: list[tuple[int, int, int, int, int, bytes]], cuts: list[int]
) -> None:
    wire = encode_all(specs)
    decoder = FrameDecoder(peer=3, chunk=4096)
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
    decoder = FrameDecoder(peer=0, chunk=1 << 16)
    got = []
    view = memoryview(wire)
    while view:
        target = decoder.buffer()
        n = min(len(target), len(view), 50_000)
        target[:n] = view[:n]
        view = view[n:]
        got.extend(decoder.advance(n))
    assert [bytes(f.payload) for f in got] == [payload, b"x"]


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=1, max_size=200), st.data())
def test_every_single_bit_flip_is_caught(payload: bytes, data: st.DataObject) -> None:
    wire = bytearray(encode_all([(1, 2, 3, 0, 1, payload)]))
    bit = data.draw(st.integers(0, len(wire) * 8 - 1))
    wire[bit // 8] ^= 1 << (bit % 8)
    decoder = FrameDecoder(peer=1)
    # A flipped length may leave the frame incomplete: then it never comes out, which an EOF turns into an error.
    try:
        out = decoder.feed(bytes(wire))
    except (ChecksumError, FrameFormatError, FrameLengthError, FrameSequenceError):
        return
    assert out == [] and not decoder.idle


def test_checksum_error_names_peer_and_channel() -> None:
    wire = bytearray(encode_all([(1, 2, 3, 0, 1, b"hello world")]))
    wire[-1] ^= 0x10
    with pytest.raises(ChecksumError, match=r"process 4 on channel 2\.3") as info:
        FrameDecoder(peer=4).feed(bytes(wire))
    assert info.value.peer == 4 and info.value.channel == (2, 3)


def frames_of(specs: list[tuple[int, int, int, int, int, bytes]]) -> list[bytes]:
    """Each frame's bytes separately, numbered as one link would number them."""
    encoder = FrameEncoder()
    return [encoder.encode(p, d, c, s, t, [b], len(b)) + b for p, d, c, s, t, b in specs]


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
        FrameDecoder(peer=1).feed(wire)
    assert info.value.peer == 1


def test_truncation_leaves_a_partial_frame_and_garbage_is_not_a_frame() -> None:
    wire = b"".join(frames_of(SPECS))
    decoder = FrameDecoder(peer=1)
    assert len(decoder.feed(wire[: len(wire) - 1])) == 2
    assert not decoder.idle
    with pytest.raises(FrameFormatError, match="not a pytimely frame"):
        FrameDecoder(peer=1).feed(b"GET / HTTP/1.1\r\n" + b"\0" * HEADER.size)


def test_oversized_and_unknown_precedence_frames_are_refused() -> None:
    header = struct.pack("<2sBBIIIIQIQ", b"PT", 1, 1, 0, 1, 0, 1, 0, MAX_FRAME + 1, 0)
    with pytest.raises(FrameLengthError, match="over the"):
        FrameDecoder(peer=2).feed(header)
    header = struct.pack("<2sBBIIIIQIQ", b"PT", 1, 9, 0, 1, 0, 1, 0, 0, 0)
    with pytest.raises(FrameFormatError, match="precedence 9"):
        FrameDecoder(peer=2).feed(header)
    with pytest.raises(FrameLengthError):
        FrameEncoder().encode(1, 0, 1, 0, 1, [], MAX_FRAME + 1)


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

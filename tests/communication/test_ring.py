"""Shared-memory rings under the frame codec: payloads round-trip through real ``/dev/shm`` files, the ring wraps
and fills without ever overwriting an unread payload, and a payload in the ring is authenticated, not encrypted: one
changed there, copied there from another frame, swapped with another or placed by a ring planted in the peer's
stead is refused, as is a ring frame replayed or reordered on the socket."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytimely.communication.frame import RING_MIN, TAG, Frame, FrameDecoder, FrameEncoder, FrameKeys
from pytimely.communication.ring import (
    MIN_CAPACITY,
    RingOffer,
    RingReader,
    RingWriter,
    same_host,
    shared_memory_dir,
    sweep,
)
from pytimely.errors import FrameAuthenticationError, FrameFormatError, FrameSequenceError, RingError

pytestmark = pytest.mark.skipif(shared_memory_dir() is None, reason="needs /dev/shm")
SHM = shared_memory_dir() or Path("/dev/shm")


@pytest.fixture(params=[True, False], ids=["encrypted", "authenticated-only"])
def keys(request: pytest.FixtureRequest) -> FrameKeys:
    return FrameKeys(os.urandom(32), os.urandom(32), encrypt=request.param)


@pytest.fixture
def ring() -> Iterator[tuple[RingWriter, RingReader]]:
    writer = RingWriter(1 << 20, SHM)
    reader = RingReader(RingOffer.decode(writer.offer.encode()), SHM)
    writer.accepted()
    yield writer, reader
    writer.close()
    reader.close()


def send(encoder: FrameEncoder, payload: bytes, writer: RingWriter | None) -> bytes:
    """The socket bytes of one frame (its payload in the ring when there is room)."""
    return b"".join(bytes(b) for b in encoder.encode(1, 2, 3, 0, 1, [payload[:7], payload[7:]], len(payload), writer))


def test_payloads_go_through_the_ring_and_round_trip(keys: FrameKeys, ring: tuple[RingWriter, RingReader]) -> None:
    writer, reader = ring
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    decoder.ring = reader
    rng = random.Random(1)
    sent, got = [], []
    for _ in range(40):
        payload = rng.randbytes(rng.choice([100, RING_MIN, 200_000, 300_000]))
        wire = send(encoder, payload, writer)
        in_ring = len(payload) >= RING_MIN and len(wire) < len(payload)
        got += [bytes(f.payload) for f in decoder.feed(wire)]  # a lent payload's place is given back once copied
        sent.append(payload)
        if in_ring:
            writer.release(reader.read)  # what the link's RING_FREE tells the writer
        assert not os.path.exists(SHM / writer.name), "the ring's name outlives the peer mapping it"
    assert got == sent
    assert writer.placed > 20
    assert writer.head > writer.capacity, "the ring never wrapped"


def test_a_full_ring_sends_on_the_socket_and_never_overwrites_an_unread_payload(
    keys: FrameKeys, ring: tuple[RingWriter, RingReader]
) -> None:
    writer, reader = ring
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    decoder.ring = reader
    payloads = [bytes([i]) * 300_000 for i in range(6)]
    wires = [send(encoder, p, writer) for p in payloads]  # nothing released: the ring (1 MiB) fills after three
    assert [len(w) < 1000 for w in wires] == [True, True, True, False, False, False]
    frames: list[Frame] = []
    for wire in wires:
        frames += decoder.feed(wire)
    assert [bytes(f.payload) for f in frames] == payloads


def test_a_payload_changed_in_the_ring_is_refused(keys: FrameKeys) -> None:
    writer = RingWriter(1 << 20, SHM)
    reader = RingReader(writer.offer, SHM)
    writer.accepted()
    try:
        encoder, decoder = FrameEncoder(keys), FrameDecoder(4, keys)
        decoder.ring = reader
        wire = send(encoder, b"x" * RING_MIN, writer)
        writer._view[100] ^= 1  # the writer's mapping is the only writable one
        with pytest.raises(FrameAuthenticationError, match=r"process 4 .* in the shared-memory ring"):
            decoder.feed(wire)
    finally:
        writer.close()
        reader.close()


def test_a_ring_payload_is_authenticated_and_not_encrypted(
    keys: FrameKeys, ring: tuple[RingWriter, RingReader]
) -> None:
    # The ring is readable only by this user, who could read either process anyway: a cipher would hide nothing
    # there. The socket still encrypts whatever its keys say.
    writer, reader = ring
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    decoder.ring = reader
    secret = b"in the ring, in the clear " * 4000
    wire = send(encoder, secret, writer)
    assert len(wire) < 100 and secret[:64] in bytes(writer._view)
    assert [bytes(f.payload) for f in decoder.feed(wire)] == [secret]
    small = b"on the socket " * 100
    assert (small[:40] in send(encoder, small, writer)) is not keys.encrypt


def test_a_ring_payload_copied_from_an_earlier_frame_is_refused(
    keys: FrameKeys, ring: tuple[RingWriter, RingReader]
) -> None:
    # A replay in the ring: the bytes of an earlier payload, complete and once valid, in the place of a later one.
    writer, reader = ring
    encoder, decoder = FrameEncoder(keys), FrameDecoder(4, keys)
    decoder.ring = reader
    size = RING_MIN
    first, second = send(encoder, b"a" * size, writer), send(encoder, b"b" * size, writer)
    assert [bytes(f.payload) for f in decoder.feed(first)] == [b"a" * size]
    at = 64 + size  # the second payload follows the first after the 64-byte control block
    writer._view[at : at + size] = writer._view[64 : 64 + size]
    with pytest.raises(FrameAuthenticationError, match=r"frame 1 from process 4 .* in the shared-memory ring"):
        decoder.feed(second)


def test_ring_payloads_swapped_in_the_ring_are_refused(keys: FrameKeys, ring: tuple[RingWriter, RingReader]) -> None:
    # Reordered in the ring: each payload in the other's place, so each descriptor points at the other's bytes.
    writer, reader = ring
    encoder, decoder = FrameEncoder(keys), FrameDecoder(4, keys)
    decoder.ring = reader
    size = RING_MIN
    first = send(encoder, b"a" * size, writer)
    send(encoder, b"b" * size, writer)
    a, b = bytes(writer._view[64 : 64 + size]), bytes(writer._view[64 + size : 64 + 2 * size])
    writer._view[64 : 64 + size], writer._view[64 + size : 64 + 2 * size] = b, a
    with pytest.raises(FrameAuthenticationError, match=r"frame 0 from process 4"):
        decoder.feed(first)


def test_a_replayed_or_reordered_ring_frame_is_refused_by_its_number(
    keys: FrameKeys, ring: tuple[RingWriter, RingReader]
) -> None:
    writer, reader = ring
    encoder = FrameEncoder(keys)
    first, second = send(encoder, b"a" * RING_MIN, writer), send(encoder, b"b" * RING_MIN, writer)
    decoder = FrameDecoder(4, keys)
    decoder.ring = reader
    decoder.feed(first)
    with pytest.raises(FrameSequenceError, match="duplicate or replayed"):
        decoder.feed(first)
    swapped = FrameDecoder(4, keys)
    swapped.ring = reader
    with pytest.raises(FrameSequenceError, match="lost or reordered"):
        swapped.feed(second)


def test_a_ring_planted_in_place_of_the_peers_is_refused(keys: FrameKeys) -> None:
    # Someone of this user's, without the run's secret, puts a ring of their own where the peer's offer points
    # (or fills one like it): whatever they place is sealed under other keys, or under none.
    genuine, planted = RingWriter(1 << 20, SHM), RingWriter(1 << 20, SHM)
    reader = RingReader(planted.offer, SHM)  # mapped in place of the one the peer offered
    genuine.accepted()
    planted.accepted()
    try:
        wire = send(FrameEncoder(keys), b"x" * RING_MIN, genuine)
        forged = FrameKeys(os.urandom(32), os.urandom(32), keys.encrypt)
        send(FrameEncoder(forged), b"y" * RING_MIN, planted)
        decoder = FrameDecoder(4, keys)
        decoder.ring = reader
        with pytest.raises(FrameAuthenticationError, match="in the shared-memory ring"):
            decoder.feed(wire)
    finally:
        for end in (genuine, planted, reader):
            end.close()


def test_a_descriptor_pointing_elsewhere_is_refused(keys: FrameKeys, ring: tuple[RingWriter, RingReader]) -> None:
    writer, reader = ring
    encoder, decoder = FrameEncoder(keys), FrameDecoder(4, keys)
    decoder.ring = reader
    first = send(encoder, b"a" * RING_MIN, writer)
    second = bytearray(send(encoder, b"b" * RING_MIN, writer))
    # Point the second frame's descriptor at the first payload (header and its tag untouched).
    second[40:48] = first[40:48]
    decoder.feed(first)
    with pytest.raises(RingError, match="outside the ring's unread part"):
        decoder.feed(bytes(second))


def test_a_ring_frame_without_a_mapped_ring_is_refused(keys: FrameKeys, ring: tuple[RingWriter, RingReader]) -> None:
    writer, _ = ring
    wire = send(FrameEncoder(keys), b"z" * RING_MIN, writer)
    with pytest.raises(FrameFormatError, match="ring this process has not mapped"):
        FrameDecoder(2, keys).feed(wire)


def test_the_reader_maps_read_only_and_checks_what_it_maps(tmp_path: Path) -> None:
    writer = RingWriter(MIN_CAPACITY, SHM)
    try:
        with pytest.raises(RingError, match="not a file this process would map"):
            RingReader(RingOffer(writer.name, 2 * MIN_CAPACITY), SHM)  # another size than the file's
        assert os.path.exists(SHM / writer.name), "a ring the reader refused is its creator's to remove"
        reader = RingReader(writer.offer, SHM)
        # Removed as soon as it is mapped: a creator killed before it hears so leaves nothing behind.
        assert not os.path.exists(SHM / writer.name)
        with pytest.raises(TypeError):
            reader._view[0] = 1  # type: ignore[index]
        reader.close()
    finally:
        writer.close()
    assert not os.path.exists(SHM / writer.name)
    for text in ["../etc/passwd,10", "pytimely-ring-zz,10", f"{writer.name},0", f"{writer.name},x"]:
        with pytest.raises(RingError, match="names no ring"):
            RingOffer.decode(text)


def test_a_release_outside_what_the_writer_placed_is_refused(ring: tuple[RingWriter, RingReader]) -> None:
    writer, _ = ring
    assert writer.reserve(RING_MIN + TAG) is not None
    with pytest.raises(RingError, match="released ring position"):
        writer.release(writer.head + 1)


def test_rings_are_offered_only_to_peers_on_this_host() -> None:
    assert same_host("127.0.0.1", "localhost") and same_host("::1", "127.0.0.2")
    assert same_host("node-3", "node-3") and same_host("10.0.0.5", "10.0.0.5")
    assert not same_host("10.0.0.5", "10.0.0.6") and not same_host("127.0.0.1", "10.0.0.6")
    assert not same_host("node-3", "localhost")


def _start_of(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_bytes()
    return int(text[text.rindex(b")") + 2 :].split()[19])


def test_rings_of_processes_that_are_gone_are_swept_and_no_others(tmp_path: Path) -> None:
    import subprocess
    import sys

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)
    me = os.getpid()
    names = {
        "dead": f"pytimely-ring-{dead}-5-{'a' * 32}",
        "dead, without its start": f"pytimely-ring-{dead}-{'c' * 32}",
        "alive": f"pytimely-ring-{me}-{_start_of(me)}-{'b' * 32}",
        "alive, without its start": f"pytimely-ring-{me}-{'d' * 32}",
        "other": "pytimely-ring-notours",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"")
    assert sorted(sweep(tmp_path)) == sorted([names["dead"], names["dead, without its start"]])
    left = sorted(names[k] for k in ("alive", "alive, without its start", "other"))
    assert sorted(p.name for p in tmp_path.iterdir()) == left


def test_a_ring_whose_pid_another_process_now_has_is_swept(tmp_path: Path) -> None:
    """Why: the sweep kept a stale ring file whose pid was now a live process's."""
    me = os.getpid()
    stale = f"pytimely-ring-{me}-{_start_of(me) - 1}-{'e' * 32}"  # this pid, another process's start time
    (tmp_path / stale).write_bytes(b"")
    writer = RingWriter(MIN_CAPACITY, tmp_path)  # its own name: this process, this start time
    try:
        assert sweep(tmp_path) == [stale]
        assert (tmp_path / writer.name).exists()
    finally:
        writer.close()


@pytest.fixture
def pair() -> Iterator[tuple[RingWriter, RingReader, RingWriter, RingReader]]:
    """Two processes' rings towards each other: A writes ``ab`` (B reads it), B writes ``ba`` (A reads it)."""
    # A patience far above any pause of a loaded machine, so a reader freeing room every 20 ms is never given up on.
    ab, ba = RingWriter(MIN_CAPACITY * 2, SHM, patience=0.5), RingWriter(MIN_CAPACITY * 2, SHM)
    b_reads, a_reads = RingReader(ab.offer, SHM), RingReader(ba.offer, SHM)
    ab.accepted()
    ba.accepted()
    ab.feedback = a_reads  # A learns how far B read ``ab`` from the control block of ``ba``
    yield ab, b_reads, ba, a_reads
    for end in (ab, ba, b_reads, a_reads):
        end.close()


def test_a_full_ring_learns_what_its_reader_freed_from_the_peers_control_block(
    pair: tuple[RingWriter, RingReader, RingWriter, RingReader],
) -> None:
    ab, b_reads, ba, _ = pair
    size = RING_MIN + TAG
    slots = [ab.reserve(size) for _ in range(3)]
    ab.announce()  # their headers went out
    assert all(slots[:3]) and ab.reserve(size) is None, "three payloads fill the ring"
    start, _ = slots[0]  # type: ignore[misc]
    b_reads.taken(start, size)
    ba.publish(b_reads.read)  # what B's receiving thread does after taking payloads out
    assert ab.reserve(size) is not None and ab.tail == b_reads.read
    ba.publish(ab.head + 1)
    with pytest.raises(RingError, match="beyond the"):
        ab.reserve(size)


def test_a_torn_or_stale_position_is_ignored(pair: tuple[RingWriter, RingReader, RingWriter, RingReader]) -> None:
    ab, _, ba, a_reads = pair
    size = RING_MIN + TAG
    for _ in range(3):
        assert ab.reserve(size) is not None
    ab.announce()
    ba._view[:16] = (size).to_bytes(8, "little") + (12345).to_bytes(8, "little")  # the halves of two writes
    assert a_reads.peer_read() is None and ab.reserve(size) is None
    ab.release(2 * size)  # a RING_FREE ahead of the control block
    ba.publish(size)
    assert ab.reserve(size) is not None and ab.tail == 2 * size, "an older position moved the tail back"


def test_a_full_ring_waits_for_a_reader_that_frees_it_and_not_for_one_that_stopped(
    pair: tuple[RingWriter, RingReader, RingWriter, RingReader],
) -> None:
    import threading
    import time

    ab, _, ba, _ = pair
    size = RING_MIN + TAG
    for _ in range(3):
        assert ab.reserve(size) is not None
    ab.announce()
    started = time.monotonic()
    assert ab.reserve(size) is None  # nobody frees anything: given up after the patience
    waited = time.monotonic() - started
    assert ab.patience <= waited < ab.patience + 2, waited

    def reader() -> None:
        # Frees one payload's room at a time, each within the writer's patience.
        for k in range(2, 4):
            time.sleep(0.02)
            ba.publish(k * size)

    started = time.monotonic()
    assert ab.reserve(size) is None  # nor waited for again, while it frees nothing
    assert time.monotonic() - started < ab.patience / 2, "waited again for a reader that had stopped"
    ba.publish(size)  # until it frees some
    thread = threading.Thread(target=reader)
    thread.start()
    got = []
    for _ in range(3):
        got.append(ab.reserve(size))
        ab.announce()
    thread.join()
    assert all(got), "the writer gave up on a reader that was freeing the ring"


def test_payloads_whose_headers_are_not_out_yet_are_not_waited_for(
    pair: tuple[RingWriter, RingReader, RingWriter, RingReader],
) -> None:
    import time

    ab, _, ba, _ = pair
    size = RING_MIN + TAG
    for _ in range(3):
        assert ab.reserve(size) is not None  # one batch's payloads, not yet written to the socket
    assert not ab.fits(size), "the link would not know to write out the batch before waiting"
    started = time.monotonic()
    assert ab.reserve(size) is None
    assert time.monotonic() - started < ab.patience / 2, "waited for room only this batch's own payloads hold"
    ab.announce()
    assert not ab.fits(size)  # full still: the link writes out what it has before it waits
    learned = ab.learned
    ba.publish(size)  # the reader took the first payload out
    assert ab.fits(size), "room the reader freed was not seen without waiting"
    assert ab.learned == learned + 1
    assert ab.reserve(size) is not None


def test_an_empty_ring_takes_a_payload_that_must_start_at_its_beginning(
    pair: tuple[RingWriter, RingReader, RingWriter, RingReader],
) -> None:
    ab, b_reads, ba, _ = pair
    small = RING_MIN + TAG
    start, _ = ab.reserve(small)  # type: ignore[misc]
    ab.announce()
    b_reads.taken(start, small)
    ba.publish(b_reads.read)
    big = ab.span * 4 // 5  # does not fit after the first payload: it starts at the ring's beginning
    got = ab.reserve(big)
    assert got is not None and got[0] == ab.span and ab.head == ab.span + big


def test_a_closed_ring_takes_nothing(ring: tuple[RingWriter, RingReader]) -> None:
    writer, _ = ring
    writer.close()
    assert writer.reserve(RING_MIN + TAG) is None


def test_a_lent_payload_keeps_its_place_until_its_last_array_is_gone(
    keys: FrameKeys, ring: tuple[RingWriter, RingReader]
) -> None:
    import gc

    import numpy as np

    from pytimely.communication.payload import dumps, loads

    writer, reader = ring
    given_back: list[int] = []
    reader.on_release = given_back.append
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    decoder.ring = reader
    sent = np.arange(40_000, dtype=np.int64)
    parts, length = dumps(sent)
    wire = b"".join(bytes(b) for b in encoder.encode(1, 2, 3, 0, 1, parts, length, writer))
    assert len(wire) < 200, "the payload did not go through the ring"
    [frame] = decoder.feed(wire)
    array = loads(frame.payload)
    del frame
    gc.collect()
    # Rebuilt on the ring's memory, not on a copy: read-only (the mapping is), and its place still lent.
    assert reader.lent == 1 and not array.flags.writeable and (array == sent).all()
    assert reader.read == 0 and given_back == [] and reader.held == length
    tail = array[30_000:]  # a view of a view keeps it too
    del array
    gc.collect()
    assert reader.read == 0 and tail[0] == 30_000
    del tail
    assert reader.read == length and given_back == [length], "the last array's end did not give the place back"


def test_past_the_lend_limit_payloads_are_copied_out_and_nothing_lent_is_overwritten(
    keys: FrameKeys, ring: tuple[RingWriter, RingReader]
) -> None:
    # A consumer that keeps what it received (in its state): the ring is lent up to its limit, then payloads are
    # copied out; the writer never writes over a payload still lent, and keeps the rest of the ring.
    writer, reader = ring
    reader.lend_limit = reader.span // 2
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    decoder.ring = reader
    size = 100_000
    kept, sent = [], []
    for i in range(30):
        payload = bytes([i]) * size
        kept += decoder.feed(send(encoder, payload, writer))
        sent.append(payload)
        writer.release(reader.read)
    assert reader.lent == reader.lend_limit // size, "lent past the limit, or not up to it"
    assert writer.placed > reader.lent, "nothing went through the ring past the lent payloads"
    assert [bytes(f.payload) for f in kept] == sent, "a payload still lent was overwritten"
    kept.clear()
    assert reader.read == reader.end, "payloads let go of were not given back"
    writer.release(reader.read)
    # Nothing held any more: payloads are lent again.
    lent = reader.lent
    wire = send(encoder, b"k" * size, writer)
    assert len(wire) < 200, "the payload did not go through the ring"
    assert bytes(decoder.feed(wire)[0].payload) == b"k" * size and reader.lent == lent + 1


def test_a_payload_changed_in_the_ring_is_refused_when_copied_out_too(keys: FrameKeys) -> None:
    writer = RingWriter(1 << 20, SHM)
    reader = RingReader(writer.offer, SHM, lend_share=0.0)  # never lends: every payload is copied out
    writer.accepted()
    try:
        encoder, decoder = FrameEncoder(keys), FrameDecoder(4, keys)
        decoder.ring = reader
        good = send(encoder, b"y" * RING_MIN, writer)
        assert [bytes(f.payload) for f in decoder.feed(good)] == [b"y" * RING_MIN] and reader.lent == 0
        wire = send(encoder, b"x" * RING_MIN, writer)
        writer._view[64 + RING_MIN + 100] ^= 1
        with pytest.raises(FrameAuthenticationError, match=r"process 4 .* in the shared-memory ring"):
            decoder.feed(wire)
    finally:
        writer.close()
        reader.close()


def test_an_array_lent_from_a_ring_outlives_the_ring_s_closing(keys: FrameKeys) -> None:
    import numpy as np

    from pytimely.communication.payload import dumps, loads

    writer = RingWriter(1 << 20, SHM)
    reader = RingReader(writer.offer, SHM)
    writer.accepted()
    encoder, decoder = FrameEncoder(keys), FrameDecoder(0, keys)
    decoder.ring = reader
    parts, length = dumps(np.full(30_000, 7, dtype=np.int64))
    wire = b"".join(bytes(b) for b in encoder.encode(1, 2, 3, 0, 1, parts, length, writer))
    array = loads(decoder.feed(wire)[0].payload)
    reader.close()  # the link ends while the worker still holds the array: the mapping stays until it is gone
    writer.close()
    assert reader.lent == 1 and int(array.sum()) == 7 * 30_000
    del array

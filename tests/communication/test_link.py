"""A link's send deadline over a real socket pair: a slow reader is waited for, one that takes nothing fails."""

from __future__ import annotations

import os
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from pytimely.communication.cluster.link import Link
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.cluster.quiescence import Quiescence
from pytimely.communication.frame import FrameDecoder, FrameKeys, LinkKeys
from pytimely.communication.platform import REAL
from pytimely.communication.ring import RingReader, RingWriter, shared_memory_dir
from pytimely.communication.transport import SocketConnection
from pytimely.config import Config
from pytimely.errors import SendTimeoutError

KEYS = LinkKeys(FrameKeys(os.urandom(32), os.urandom(32)), FrameKeys(os.urandom(32), os.urandom(32)))


def link_over(sock: socket.socket, send_timeout: float) -> Link:
    """A link with no process behind it: sending needs only its configuration."""
    config = Config(send_timeout=send_timeout)
    return Link(1, SocketConnection(sock), KEYS, config, SimpleNamespace(), Quiescence(1), REAL)  # type: ignore[arg-type]


def batch(frames: int, size: int = 1 << 20) -> list[OutgoingFrame]:
    """``frames`` data frames of ``size`` bytes each."""
    payload = bytes(size)
    return [OutgoingFrame(1, 0, 0, 0, 1, [payload], size) for _ in range(frames)]  # type: ignore[arg-type]


def test_a_peer_that_takes_nothing_fails_after_the_send_timeout() -> None:
    a, b = socket.socketpair()
    try:
        link = link_over(a, send_timeout=1.0)
        started = time.monotonic()
        with pytest.raises(SendTimeoutError, match=r"process 1 took no data for 1\.0 s"):
            link._write(batch(16))
        assert 1.0 <= time.monotonic() - started < 4
    finally:
        a.close()
        b.close()


def test_a_slow_reader_is_waited_for_past_the_send_timeout() -> None:
    a, b = socket.socketpair()
    total = 8 * ((1 << 20) + 56)
    got = [0]

    def slow_reader() -> None:
        while got[0] < total:
            data = b.recv(256 << 10)
            if not data:
                return
            got[0] += len(data)
            time.sleep(0.1)  # 2.5 MiB/s: the whole batch takes longer than the send timeout

    reader = threading.Thread(target=slow_reader)
    reader.start()
    try:
        started = time.monotonic()
        link_over(a, send_timeout=1.0)._write(batch(8))
        assert time.monotonic() - started > 1.0
    finally:
        a.close()
        reader.join(10)
        b.close()
    assert got[0] == total


@pytest.mark.skipif(shared_memory_dir() is None, reason="needs /dev/shm")
def test_headers_of_ring_payloads_go_out_every_256_kib_not_at_the_end_of_the_batch() -> None:
    # The reader cannot take a payload out of the ring before its header arrives: headers held back until the
    # batch ends would leave it idle while the writer seals the rest.
    directory = shared_memory_dir()
    assert directory is not None
    a, b = socket.socketpair()
    writer = RingWriter(8 << 20, directory)
    reader = RingReader(writer.offer, directory)
    writer.accepted()
    try:
        link = link_over(a, send_timeout=5.0)
        link.ring = writer
        placed_when_sent: list[int] = []
        send = link._send

        def spy(buffers: list[bytes | bytearray | memoryview]) -> bool:
            placed_when_sent.append(writer.placed)
            return send(buffers)

        link._send = spy  # type: ignore[method-assign]
        link._write(batch(8, 128 << 10))
        assert writer.placed == 8, "every payload goes through the ring"
        assert placed_when_sent[:4] == [2, 4, 6, 8], placed_when_sent
    finally:
        reader.close()
        writer.close()
        a.close()
        b.close()


@pytest.mark.skipif(shared_memory_dir() is None, reason="needs /dev/shm")
def test_a_full_ring_is_waited_on_for_a_reader_that_frees_it_and_nothing_spills_to_the_socket() -> None:
    # A ring of room for two 100 KiB payloads and a batch of twelve: the third must wait for the reader to take
    # out the first. Its header was not written out yet when the ring filled, so the link writes it out and then
    # waits, rather than sending the payload over the socket.
    directory = shared_memory_dir()
    assert directory is not None
    a, b = socket.socketpair()
    ab, ba = RingWriter(256 << 10, directory, patience=5.0), RingWriter(256 << 10, directory)
    b_reads, a_reads = RingReader(ab.offer, directory), RingReader(ba.offer, directory)
    ab.accepted()
    ba.accepted()
    ab.feedback = a_reads
    frames = 12
    got: list[bytes] = []

    def reader() -> None:
        decoder = FrameDecoder(0, KEYS.send)
        decoder.ring = b_reads
        while len(got) < frames:
            n = b.recv_into(decoder.buffer())
            if not n:
                return
            taken = decoder.advance(n)
            while decoder.held:
                taken += decoder.advance(0)
            got.extend(bytes(f.payload) for f in taken)
            del taken  # a payload lent from the ring keeps its place there while its frame lives
            ba.publish(b_reads.read)  # what the reader freed, in its own ring's control block

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        link = link_over(a, send_timeout=5.0)
        link.ring = ab
        link._write(batch(frames, 100 << 10))
        thread.join(timeout=10)
        assert len(got) == frames and all(len(p) == 100 << 10 for p in got)
        assert ab.placed == frames, f"{frames - ab.placed} of {frames} payloads went over the socket"
    finally:
        for end in (ab, ba, b_reads, a_reads):
            end.close()
        a.close()
        b.close()
        thread.join(timeout=5)

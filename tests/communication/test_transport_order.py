"""Seed 003's Transport and Receive on the real send queues and codec: precedence first, FIFO per channel, nothing lost.

A Hypothesis state machine puts frames of random channels and precedences into
:class:`SendQueues`, takes batches as the sending thread does, encodes them
with :class:`FrameEncoder` and decodes them with :class:`FrameDecoder` in
random-sized pieces, checking at every step what the seed demands of
Transport (nothing is taken while a frame of higher precedence waits), what we
promise per channel (FIFO per (channel, source)), and the seed's invariant
(every frame is in exactly one place: queued, on the wire, or received).
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pytimely.communication.allocator import Precedence
from pytimely.communication.cluster import OutgoingFrame, SendQueues
from pytimely.communication.frame import FrameDecoder, FrameEncoder, FrameKeys
from tests.profiles import examples

CHANNELS = {(0, 0): 2, (0, 1): 1, (0, 2): 1, (1, 0): 2, (4294967295, 0): 3}
"""Channel -> its precedence (progress channels are 2, data 1, control 3)."""


class Transport(RuleBasedStateMachine):
    """Put, take, encode, and decode in pieces; check order, precedence and conservation."""

    def __init__(self) -> None:
        super().__init__()
        self.queues = SendQueues()
        keys = FrameKeys(bytes(range(32)), bytes(range(32, 64)))
        self.encoder = FrameEncoder(keys)
        self.decoder = FrameDecoder(1, keys, chunk=512)
        self.wire = bytearray()
        self.sent: list[tuple[int, int, int, int]] = []
        self.on_wire: list[tuple[int, int, int, int]] = []
        self.received: list[tuple[int, int, int, int]] = []
        self.counter = 0

    @rule(channel=st.sampled_from(sorted(CHANNELS)), source=st.integers(0, 2), size=st.integers(0, 300))
    def send(self, channel: tuple[int, int], source: int, size: int) -> None:
        """Seed 003 Send: a process appends a datagram to its Out_Buffer."""
        self.counter += 1
        payload = self.counter.to_bytes(4, "little") + bytes(size)
        frame = OutgoingFrame(Precedence(CHANNELS[channel]), channel[0], channel[1], source, 0, [payload], len(payload))
        self.queues.put(frame)
        self.sent.append((channel[0], channel[1], source, self.counter))

    @precondition(lambda self: len(self.queues) > 0)
    @rule(max_frames=st.integers(1, 6))
    def transport(self, max_frames: int) -> None:
        """Seed 003 Transport: the highest-precedence frames leave first."""
        waiting = [f.precedence for q in self.queues.queues.values() for f in q]
        batch = self.queues.take(max_frames=max_frames)
        assert batch
        remaining = [f.precedence for q in self.queues.queues.values() for f in q]
        for taken in batch:
            assert all(taken.precedence >= other for other in remaining), "a lower precedence left before a higher one"
        assert sorted(waiting) == sorted([f.precedence for f in batch] + remaining)
        for f in batch:
            for part in self.encoder.encode(f.precedence, f.dataflow, f.channel, f.source, f.target, f.parts, f.length):
                self.wire += part
            self.on_wire.append((f.dataflow, f.channel, f.source, int.from_bytes(f.parts[0][:4], "little")))

    @precondition(lambda self: len(self.wire) > 0)
    @rule(cut=st.integers(1, 700))
    def receive(self, cut: int) -> None:
        """Seed 003 Receive: checked frames come out of the decoder in wire order."""
        piece, self.wire = bytes(self.wire[:cut]), self.wire[cut:]
        for frame in self.decoder.feed(piece):
            key = (frame.dataflow, frame.channel, frame.source, int.from_bytes(frame.payload[:4], "little"))
            assert key == self.on_wire[len(self.received)]
            self.received.append(key)

    @invariant()
    def every_frame_is_in_exactly_one_place(self) -> None:
        queued = [
            (f.dataflow, f.channel, f.source, int.from_bytes(f.parts[0][:4], "little"))
            for q in self.queues.queues.values()
            for f in q
        ]
        in_flight = self.on_wire[len(self.received) :]
        places = Counter(queued) + Counter(in_flight) + Counter(self.received)
        assert places == Counter(self.sent)

    @invariant()
    def fifo_per_channel_and_source(self) -> None:
        for stream in {(d, c, s) for d, c, s, _ in self.sent}:
            order = [n for d, c, s, n in self.sent if (d, c, s) == stream]
            got = [n for d, c, s, n in self.on_wire if (d, c, s) == stream]
            assert got == order[: len(got)]


TestTransport = Transport.TestCase
TestTransport.settings = settings(max_examples=examples(150), stateful_step_count=40, deadline=None)

"""The simulated network against its reference: each direction of a connection is an ordered, reliable byte stream
(TCP's promise) whatever the delays and partitions; frames sent by real links arrive FIFO per channel with the
highest precedence first (seed 003's Transport); a frame lost, duplicated or damaged below the frame layer is
never handed on, the link fails with a typed error instead."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from pytimely.communication.allocator import Precedence
from pytimely.communication.cluster.link import Link
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.cluster.quiescence import Quiescence
from pytimely.communication.frame import Frame, FrameKeys, LinkKeys
from pytimely.communication.platform import Platform
from pytimely.config import Config
from pytimely.errors import FrameError
from pytimely.simulate.kernel import Kernel, SimProcess
from pytimely.simulate.network import Delays, SimConnection, SimNetwork
from pytimely.simulate.threads import SimClock, SimThreads

pytestmark = pytest.mark.timeout(120)


def world(seed: int, delays: Delays | None = None) -> tuple[Kernel, SimNetwork, list[SimProcess]]:
    """A kernel, a network and three simulated processes."""
    kernel = Kernel(random.Random(seed))
    network = SimNetwork(kernel, random.Random(seed + 1), delays or Delays(base=(1e-4, 5e-3), jitter=2e-3))
    return kernel, network, [SimProcess(f"p{i}") for i in range(3)]


def run(kernel: Kernel, done: Callable[[], bool], until: float = 600.0) -> None:
    """Run the kernel until ``done()``; fail the test otherwise."""
    try:
        assert kernel.run(done, until=until, max_switches=500_000), "the simulated run did not finish"
    finally:
        kernel.shutdown()


def pair(network: SimNetwork, kernel: Kernel, procs: list[SimProcess], a: int, b: int) -> list[SimConnection]:
    """Connect process ``a`` to ``b`` (in a task of ``a``); both ends, once connected."""
    port = 9000 + 10 * a + b
    listener = network.transport(procs[b], b).listen("127.0.0.1", port, 4)
    ends: list[SimConnection] = []

    def dial() -> None:
        conn = network.transport(procs[a], a).connect("127.0.0.1", port, 5.0)
        got = listener.accept(5.0)
        assert got is not None
        ends.extend([conn, got[0]])  # type: ignore[list-item]

    kernel.spawn(procs[a], "dial", dial)
    assert kernel.run(lambda: len(ends) == 2, until=10.0, max_switches=1000)
    return ends


@pytest.mark.parametrize("seed", range(6))
def test_every_direction_is_an_ordered_reliable_byte_stream_under_delays_and_partitions(seed: int) -> None:
    kernel, network, procs = world(seed)
    rng = random.Random(seed)
    conns = pair(network, kernel, procs, 1, 0) + pair(network, kernel, procs, 2, 0) + pair(network, kernel, procs, 2, 1)
    sent: dict[int, bytearray] = {id(c): bytearray() for c in conns}
    got: dict[int, bytearray] = {id(c): bytearray() for c in conns}
    written: set[int] = set()
    finished: list[int] = []
    arrivals: list[tuple[float, int]] = []

    def writer(conn: SimConnection, chunks: int) -> None:
        for n in range(chunks):
            data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40_000)))
            sent[id(conn)] += data
            view = memoryview(data)
            while view:
                k = conn.send([view])
                view = view[k:]
                if view:
                    assert conn.wait_writable(60.0)
            if n % 3 == 0:
                kernel.sleep(rng.uniform(0, 0.01))
        written.add(id(conn))

    def reader(conn: SimConnection) -> None:
        peer = conn.peer
        assert peer is not None
        buffer = bytearray(1 << 15)
        while not (id(peer) in written and len(got[id(conn)]) == len(sent[id(peer)])):
            n = conn.recv_into(memoryview(buffer))
            if n is None:
                conn.wait_readable(0.5)
                continue
            assert n > 0, "the stream ended early"
            got[id(conn)] += buffer[:n]
            arrivals.append((kernel.now, id(conn)))
        finished.append(id(conn))

    for i in range(0, len(conns), 2):
        a, b = conns[i], conns[i + 1]
        kernel.spawn(a.owner, f"write-{i}", writer, a, rng.randint(5, 30))
        kernel.spawn(b.owner, f"write-{i}b", writer, b, rng.randint(5, 30))
        kernel.spawn(b.owner, f"read-{i}", reader, b)
        kernel.spawn(a.owner, f"read-{i}b", reader, a)
    network.partition(0, 2, 0.05)
    network.partition(1, 2, 0.2)
    run(kernel, lambda: len(finished) == len(conns))
    for i in range(0, len(conns), 2):
        a, b = conns[i], conns[i + 1]
        assert got[id(b)] == sent[id(a)], "a direction lost, reordered or changed bytes"
        assert got[id(a)] == sent[id(b)], "a direction lost, reordered or changed bytes"
    # Closing one end ends the stream for the other after every byte sent before it.
    kernel2, network2, procs2 = world(seed)
    near, far = pair(network2, kernel2, procs2, 1, 0)
    near.send([memoryview(b"last words")])
    near.close()
    ends: list[bytes] = []

    def drain() -> None:
        buffer = bytearray(64)
        while True:
            if not far.wait_readable(5.0):
                continue
            n = far.recv_into(memoryview(buffer))
            ends.append(bytes(buffer[: n or 0]))
            if n == 0:
                return

    kernel2.spawn(procs2[0], "drain", drain)
    run(kernel2, lambda: bool(ends) and ends[-1] == b"")
    assert b"".join(ends) == b"last words"
    assert network.counts.get("held", 0) > 0, "the partitions held nothing back: the test proves nothing"
    # Directions overtake one another: arrivals are interleaved across connections.
    order = [c for _, c in arrivals]
    assert any(x != y for x, y in itertools.pairwise(order))


class Recorder:
    """A link's process, reduced to what it hears: every frame delivered, and the error it fails with."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.failure: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error

    def deliver(self, peer: int, frame: Frame) -> None:
        self.frames.append(Frame(frame.precedence, frame.dataflow, frame.channel, frame.source, frame.target,
                                 frame.seq, bytes(frame.payload)))

    def joined(self, peer: int, text: str) -> None: ...

    def leaving(self, peer: int) -> None: ...

    def done(self, peer: int) -> None: ...

    def sender_blocked(self, delta: int) -> None: ...

    def receiving_full(self) -> bool:
        return False

    def throttle(self) -> bool:
        return False


KEYS = FrameKeys(bytes(range(32)), bytes(range(32, 64)))
CHANNELS = {(0, 0): Precedence.PROGRESS, (0, 1): Precedence.DATA, (0, 2): Precedence.DATA, (1, 0): Precedence.PROGRESS}


def links(seed: int, fault: str | None = None) -> tuple[list[tuple[int, int, int, int, int]], Recorder, Any]:
    """Frames of random channels and precedences queued at once on a real link from process 1 to process 0; what
    process 0's link delivered (in order) and its error; and the reference order."""
    kernel, network, procs = world(seed)
    rng = random.Random(seed)
    conn_1, conn_0 = pair(network, kernel, procs, 1, 0)
    conn_1.start_streaming()
    conn_0.start_streaming()
    config = Config(heartbeat=30.0, timeout=120.0)
    sender_events, receiver = Recorder(), Recorder()

    def platform(i: int) -> Platform:
        return Platform(SimClock(kernel), SimThreads(kernel, procs[i]), network.transport(procs[i], i))

    out = Link(0, conn_1, LinkKeys(KEYS, KEYS), config, sender_events, Quiescence(1), platform(1))  # type: ignore[arg-type]
    into = Link(1, conn_0, LinkKeys(KEYS, KEYS), config, receiver, Quiescence(1), platform(0))  # type: ignore[arg-type]
    queued: list[tuple[int, int, int, int, int]] = []
    frames = []
    for n in range(rng.randint(20, 120)):
        channel = rng.choice(sorted(CHANNELS))
        source = rng.randrange(3)
        payload = n.to_bytes(4, "little") + bytes(rng.randint(0, 3000))
        frames.append(OutgoingFrame(CHANNELS[channel], channel[0], channel[1], source, 0, [payload], len(payload)))
        queued.append((int(CHANNELS[channel]), channel[0], channel[1], source, n))
    out.enqueue(frames)
    if fault is not None:
        network.arm(1, 0, "duplicate" if fault == "duplicate" else fault)
        # Not the first frame: some arrive whole before the fault.
        network.connections[0].out.arm.appendleft(None)  # type: ignore[union-attr,arg-type]
    into.start()
    out.start()
    wanted = len(queued)
    run(kernel, lambda: receiver.failure is not None or len(receiver.frames) >= wanted, until=60.0)
    # Seed 003's Transport as the reference: the highest precedence first, each level in the order queued.
    reference = sorted(queued, key=lambda f: -f[0])
    return reference, receiver, queued


@pytest.mark.parametrize("seed", range(8))
def test_real_links_over_the_simulated_network_keep_precedence_and_fifo_per_channel(seed: int) -> None:
    reference, receiver, _ = links(seed)
    assert receiver.failure is None
    got = [(int(f.precedence), f.dataflow, f.channel, f.source, int.from_bytes(f.payload[:4], "little"))
           for f in receiver.frames]
    assert got == reference


@pytest.mark.parametrize("fault", ["loss", "duplicate", "damage"])
@pytest.mark.parametrize("seed", range(3))
def test_a_frame_lost_duplicated_or_damaged_is_never_handed_on(fault: str, seed: int) -> None:
    reference, receiver, _ = links(seed, fault)
    assert isinstance(receiver.failure, FrameError), receiver.failure
    got = [(int(f.precedence), f.dataflow, f.channel, f.source, int.from_bytes(f.payload[:4], "little"))
           for f in receiver.frames]
    # What was delivered is exactly the frames before the fault, whole and in order.
    assert got == reference[: len(got)]
    assert len(got) < len(reference)

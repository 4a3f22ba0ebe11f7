"""The simulated network: connections that behave like TCP, with delays, partitions and damage a seed chooses.

A :class:`SimNetwork` carries every connection between simulated processes.
Each direction of a connection is an ordered byte stream, as TCP's is: bytes
arrive in the order they were sent, after a delay drawn per connection (so
streams on different connections overtake one another), never before bytes
sent earlier on the same connection. A sender may have at most
:data:`SNDBUF` bytes in flight or unread at the receiver: a receiver that stops
reading slows its sender down, as TCP's window does.

Below the frame layer, once both ends stream frames (after the handshake), the
network cuts each direction into whole frames (it reads their 40-byte headers)
and a fault armed on that direction applies to the next frame: it is *lost*,
*duplicated* or *damaged* (one byte flipped). A partition between two
processes holds every byte between them until it heals (in order); a killed
process's connections end: its peers read the bytes already on the way, then
the end of the stream.

Everything the network does goes into the simulation's trace (:attr:`SimNetwork.trace`).
"""

from __future__ import annotations

import random
import struct
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytimely.communication.frame import CONTROL_CHANNEL, HEADER, TAG
from pytimely.communication.transport import Connection, Listener
from pytimely.errors import InvalidArgument
from pytimely.simulate.kernel import Kernel, SimProcess, SimTask

__all__ = ["SNDBUF", "Delays", "SimConnection", "SimListener", "SimNetwork", "SimTransport"]

SNDBUF = 256 << 10
"""Bytes a connection's sender may have in flight or unread at the receiver."""

_LENGTH = struct.Struct("<I")
_LENGTH_AT = 28
"""Where a frame header's ``length`` field starts (see :mod:`pytimely.communication.frame`)."""
_KIND = struct.Struct("<BII")
_KIND_AT = 3
"""Precedence, dataflow and channel of a frame header."""

_EOF = object()
"""In a direction's queue: the sender closed its end (delivered in order, after its bytes)."""


@dataclass(slots=True)
class Delays:
    """How long bytes take: each connection direction gets a base latency, each chunk some jitter on top."""

    base: tuple[float, float] = (50e-6, 200e-6)
    jitter: float = 50e-6


class _Direction:
    """One direction of a connection: what is on the way, in order."""

    __slots__ = ("arm", "last_due", "latency", "pending", "scheduled", "splitter", "unacked")

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.pending: deque[tuple[float, object]] = deque()
        """``(due, bytes or _EOF)`` in sending order."""
        self.scheduled = False
        self.last_due = 0.0
        self.unacked = 0
        """Bytes sent and not yet read by the receiver."""
        self.splitter: bytearray | None = None
        """Once both ends stream frames: bytes of a frame not yet complete."""
        self.arm: deque[str] = deque()
        """Faults armed on this direction, applied to its next frames."""


class SimConnection:
    """One end of a simulated connection (a :class:`~pytimely.communication.transport.Connection`)."""

    def __init__(self, network: SimNetwork, owner: SimProcess, index: int, remote: int, name: str) -> None:
        self.network = network
        self.owner = owner
        self.index = index
        """The simulated process index this end belongs to."""
        self.remote = remote
        """The process index of the other end."""
        self.name = name
        self.peer: SimConnection | None = None
        self.out: _Direction | None = None
        self._inbox: deque[bytes] = deque()
        self._inbox_bytes = 0
        self._eof = False
        self._closed = False
        self.streaming = False
        self._readers: list[SimTask] = []
        self._writers: list[SimTask] = []

    # -- sending -------------------------------------------------------------------------------------------

    def send(self, views: Sequence[memoryview]) -> int:
        """Take as many bytes as the window allows now."""
        if self._closed:
            raise BrokenPipeError(32, "Broken pipe (this end is closed)")
        peer, out = self.peer, self.out
        assert peer is not None and out is not None
        if peer._closed:
            raise ConnectionResetError(104, "Connection reset by peer")
        room = SNDBUF - out.unacked
        if room <= 0:
            return 0
        data = bytearray()
        for view in views:
            if len(data) >= room:
                break
            data += view[: room - len(data)]
        if not data:
            return 0
        out.unacked += len(data)
        self.network._carry(self, bytes(data))
        return len(data)

    def wait_writable(self, timeout: float) -> bool:
        """Wait for room in the window."""
        out = self.out
        assert out is not None
        if self._closed or out.unacked < SNDBUF:
            return True
        kernel = self.network.kernel
        kernel.wait_on(self._writers, timeout)
        return self._closed or out.unacked < SNDBUF

    def send_all(self, data: bytes, timeout: float) -> None:
        """Send everything within ``timeout`` simulated seconds."""
        kernel = self.network.kernel
        deadline = kernel.now + timeout
        view = memoryview(data)
        while view:
            sent = self.send([view])
            view = view[sent:]
            if view:
                remaining = deadline - kernel.now
                if remaining <= 0 or not self.wait_writable(remaining):
                    raise TimeoutError("timed out")

    # -- receiving ------------------------------------------------------------------------------------------

    def recv_into(self, buffer: memoryview) -> int | None:
        """Copy received bytes into ``buffer``; 0 at the end of the stream, ``None`` if nothing is there."""
        if self._closed:
            return 0
        inbox = self._inbox
        if not inbox:
            return 0 if self._eof else None
        taken = 0
        room = len(buffer)
        while inbox and taken < room:
            chunk = inbox[0]
            n = min(len(chunk), room - taken)
            buffer[taken : taken + n] = chunk[:n]
            taken += n
            if n == len(chunk):
                inbox.popleft()
            else:
                inbox[0] = chunk[n:]
        self._inbox_bytes -= taken
        self._acknowledge(taken)
        return taken

    def _acknowledge(self, n: int) -> None:
        peer = self.peer
        if peer is not None and peer.out is not None:
            peer.out.unacked -= n
            if peer._writers:
                self.network.kernel.notify(peer._writers)

    def wait_readable(self, timeout: float) -> bool:
        """Wait for bytes or the end of the stream."""
        if self._inbox or self._eof or self._closed:
            return True
        self.network.kernel.wait_on(self._readers, timeout)
        return bool(self._inbox) or self._eof or self._closed

    def recv(self, n: int, timeout: float) -> bytes:
        """Up to ``n`` bytes within ``timeout`` simulated seconds."""
        if not self.wait_readable(timeout):
            raise TimeoutError("timed out")
        buffer = bytearray(n)
        got = self.recv_into(memoryview(buffer))
        return bytes(buffer[: got or 0])

    def _arrive(self, data: object) -> None:
        if self._closed:
            return
        if data is _EOF:
            self._eof = True
        else:
            assert isinstance(data, bytes)
            self._inbox.append(data)
            self._inbox_bytes += len(data)
        if self._readers:
            self.network.kernel.notify(self._readers)

    # -- the rest ----------------------------------------------------------------------------------------------

    def start_streaming(self) -> None:
        """From now on this end sends frames: the network may cut them out and damage them."""
        self.streaming = True
        if self.out is not None:
            self.out.splitter = bytearray()

    def same_host(self) -> bool | None:
        """Simulated processes share no memory: never the same host."""
        return False

    def shutdown(self) -> None:
        """End both directions (the peer reads what was sent, then the end)."""
        self._end()

    def close(self) -> None:
        """Release the connection."""
        self._end()

    def _end(self) -> None:
        if self._closed:
            return
        self._closed = True
        unread = self._inbox_bytes
        self._inbox.clear()
        self._inbox_bytes = 0
        self._acknowledge(unread)
        self.network._carry(self, _EOF)
        kernel = self.network.kernel
        kernel.notify(self._readers)
        kernel.notify(self._writers)

    def __repr__(self) -> str:
        return f"<SimConnection {self.name}>"


class SimListener:
    """Where a simulated process accepts connections."""

    def __init__(self, network: SimNetwork, owner: SimProcess, index: int, port: int) -> None:
        self.network = network
        self.owner = owner
        self.index = index
        self.port = port
        self.backlog: deque[tuple[SimConnection, tuple[str, int]]] = deque()
        self.closed = False
        self._acceptors: list[SimTask] = []

    def accept(self, timeout: float) -> tuple[Connection, tuple[str, int]] | None:
        """The next connection, waiting up to ``timeout`` simulated seconds."""
        if self.closed:
            raise OSError(9, "Bad file descriptor (the listener is closed)")
        if not self.backlog:
            self.network.kernel.wait_on(self._acceptors, timeout)
            if self.closed:
                raise OSError(9, "Bad file descriptor (the listener is closed)")
        if not self.backlog:
            return None
        return self.backlog.popleft()

    def _offer(self, conn: SimConnection, address: tuple[str, int]) -> None:
        self.backlog.append((conn, address))
        self.network.kernel.notify(self._acceptors, 1)

    def close(self) -> None:
        """Stop listening: connections not yet accepted are reset."""
        if self.closed:
            return
        self.closed = True
        if self.network.listeners.get(self.port) is self:
            del self.network.listeners[self.port]
        while self.backlog:
            self.backlog.popleft()[0].close()
        self.network.kernel.notify(self._acceptors)


class SimNetwork:
    """Every connection between simulated processes, and the faults that befall them."""

    def __init__(self, kernel: Kernel, rng: random.Random, delays: Delays | None = None) -> None:
        self.kernel = kernel
        self.rng = rng
        self.delays = delays or Delays()
        self.listeners: dict[int, SimListener] = {}
        self.connections: list[SimConnection] = []
        self.partitions: dict[frozenset[int], float] = {}
        """Process pairs cut off from each other, and when each partition heals."""
        self.trace: list[str] = []
        self.counts: dict[str, int] = {}
        """How often each fault befell a frame (``loss``, ``duplicate``, ``damage``) or a byte waited (``held``)."""
        self.frames = 0
        self.watch: Callable[[int, int, bytes], None] | None = None
        """Told ``(from, to, frame)`` of every whole frame delivered (for tests of the network)."""

    def transport(self, process: SimProcess, index: int) -> SimTransport:
        """The transport of simulated process ``index``."""
        return SimTransport(self, process, index)

    def _note(self, text: str) -> None:
        self.trace.append(f"{self.kernel.now:.6f} {text}")

    # -- faults --------------------------------------------------------------------------------------------------

    def partition(self, a: int, b: int, heal_at: float) -> None:
        """Cut processes ``a`` and ``b`` off from each other until simulated time ``heal_at``."""
        self.partitions[frozenset((a, b))] = heal_at
        self._note(f"partition {a}|{b} until {heal_at:.6f}")
        self.kernel.at(heal_at, lambda: self._heal(a, b, heal_at))

    def _heal(self, a: int, b: int, heal_at: float) -> None:
        if self.partitions.get(frozenset((a, b))) == heal_at:
            del self.partitions[frozenset((a, b))]
            self._note(f"heal {a}|{b}")

    def _cut(self, a: int, b: int) -> float | None:
        return self.partitions.get(frozenset((a, b)))

    def arm(self, sender: int, receiver: int, fault: str) -> bool:
        """Apply ``fault`` (``loss``, ``duplicate``, ``damage``) to the next frame ``sender`` streams to
        ``receiver``; whether such a connection exists."""
        for conn in self.connections:
            if conn.index == sender and conn.remote == receiver and conn.streaming and not conn._closed:
                assert conn.out is not None
                conn.out.arm.append(fault)
                return True
        return False

    def kill(self, index: int) -> None:
        """Process ``index`` died: its listener goes, its connections end (peers read what was on the way)."""
        for listener in [x for x in self.listeners.values() if x.index == index]:
            listener.close()
        for conn in self.connections:
            if conn.index == index and not conn._closed:
                conn._end()
        # Connections closed at both ends are gone for good.
        self.connections = [c for c in self.connections if not (c._closed and c.peer is not None and c.peer._closed)]

    # -- moving bytes ------------------------------------------------------------------------------------------

    def connect(self, src: SimProcess, index: int, port: int, timeout: float) -> SimConnection:
        """A connection from process ``index`` to whoever listens on ``port``."""
        kernel = self.kernel
        listener = self.listeners.get(port)
        remote = listener.index if listener is not None else -1
        latency = self.rng.uniform(*self.delays.base)
        cut = self._cut(index, remote) if listener is not None else None
        if cut is not None:
            # SYNs go unanswered until the partition heals (or the caller gives up).
            wait = min(timeout, max(latency, cut - kernel.now + latency))
            kernel.sleep(wait)
            if wait >= timeout:
                raise TimeoutError("timed out")
        else:
            kernel.sleep(2 * latency)
        listener = self.listeners.get(port)
        if listener is None or listener.closed:
            raise ConnectionRefusedError(111, "Connection refused")
        client = SimConnection(self, src, index, listener.index, f"{index}->{listener.index}")
        server = SimConnection(self, listener.owner, listener.index, index, f"{listener.index}->{index}")
        client.peer, server.peer = server, client
        client.out = _Direction(latency)
        server.out = _Direction(self.rng.uniform(*self.delays.base))
        self.connections += [client, server]
        listener._offer(server, ("127.0.0.1", 40000 + index))
        self._note(f"connect {index}->{listener.index}")
        return client

    def _carry(self, conn: SimConnection, data: object) -> None:
        """Put ``data`` (bytes, or the end of the stream) on its way from ``conn`` to its peer."""
        out = conn.out
        assert out is not None
        if data is not _EOF and out.splitter is not None:
            assert isinstance(data, bytes)
            for piece in self._frames(conn, out, data):
                self._queue(conn, out, piece)
            return
        self._queue(conn, out, data)

    def _frames(self, conn: SimConnection, out: _Direction, data: bytes) -> list[bytes]:
        """The whole frames ``data`` completes (faults applied); a partial frame waits for its rest."""
        splitter = out.splitter
        assert splitter is not None
        splitter += data
        pieces: list[bytes] = []
        while len(splitter) >= HEADER.size:
            (length,) = _LENGTH.unpack_from(splitter, _LENGTH_AT)
            size = HEADER.size + length + TAG
            if len(splitter) < size:
                break
            frame = bytes(splitter[:size])
            del splitter[:size]
            self.frames += 1
            fault = out.arm.popleft() if out.arm else None
            if fault is None:
                pieces.append(frame)
                continue
            self.counts[fault] = self.counts.get(fault, 0) + 1
            _, dataflow, channel = _KIND.unpack_from(frame, _KIND_AT)
            what = "control" if dataflow == CONTROL_CHANNEL else f"{dataflow}.{channel}"
            self._note(f"{fault} frame {conn.index}->{conn.remote} ({what}, {size} bytes)")
            if fault == "duplicate":
                pieces += [frame, frame]
            elif fault == "damage":
                at = self.rng.randrange(len(frame))
                damaged = bytearray(frame)
                damaged[at] ^= 1 << self.rng.randrange(8)
                pieces.append(bytes(damaged))
            elif fault != "loss":
                raise InvalidArgument(f"unknown frame fault {fault!r}")
            if fault == "loss":
                # Lost in transit: the receiver never reads it, so it never frees the sender's window for it.
                out.unacked -= size
        return pieces

    def _queue(self, conn: SimConnection, out: _Direction, data: object) -> None:
        kernel = self.kernel
        due = max(out.last_due, kernel.now + out.latency + self.rng.uniform(0.0, self.delays.jitter))
        out.last_due = due
        out.pending.append((due, data))
        if not out.scheduled:
            out.scheduled = True
            kernel.at(due, lambda: self._deliver(conn, out))

    def _deliver(self, conn: SimConnection, out: _Direction) -> None:
        """Hand the head of ``out`` to the peer (or hold it while a partition stands), then schedule the next."""
        kernel = self.kernel
        peer = conn.peer
        assert peer is not None
        while out.pending and out.pending[0][0] <= kernel.now:
            cut = self._cut(conn.index, conn.remote)
            if cut is not None:
                self.counts["held"] = self.counts.get("held", 0) + 1
                kernel.at(cut, lambda: self._deliver(conn, out))
                return
            _, data = out.pending.popleft()
            if data is not _EOF and peer._closed:
                assert isinstance(data, bytes)
                out.unacked -= len(data)  # the peer's end is gone: nothing will read it
                continue
            if self.watch is not None and data is not _EOF and out.splitter is not None:
                assert isinstance(data, bytes)
                self.watch(conn.index, conn.remote, data)
            peer._arrive(data)
        if out.pending:
            kernel.at(out.pending[0][0], lambda: self._deliver(conn, out))
        else:
            out.scheduled = False


class SimTransport:
    """One simulated process's view of the network (a :class:`~pytimely.communication.transport.Transport`)."""

    def __init__(self, network: SimNetwork, process: SimProcess, index: int) -> None:
        self.network = network
        self.process = process
        self.index = index

    def listen(self, host: str, port: int, backlog: int) -> Listener:
        """Listen on ``port`` (hosts are all the same simulated one)."""
        network = self.network
        held = network.listeners.get(port)
        if held is not None and not held.closed:
            raise OSError(98, f"Address already in use (port {port})")
        listener = network.listeners[port] = SimListener(network, self.process, self.index, port)
        return listener

    def connect(self, host: str, port: int, timeout: float) -> Connection:
        """Dial whoever listens on ``port``."""
        return self.network.connect(self.process, self.index, port, timeout)

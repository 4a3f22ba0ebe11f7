"""Workers in several processes connected over TCP: links, mailboxes, flow control, failure detection.

One :class:`Cluster` per process holds a *link* to every other process: one
authenticated TCP connection (see :mod:`~pytimely.communication.handshake`)
with a sending and a receiving thread. Workers of the same process exchange
messages by reference, as in :mod:`~pytimely.communication.local`; messages for
another process are pickled when the worker releases them at the end of its
step and travel as checked frames (:mod:`~pytimely.communication.frame`).

Transport takes the highest precedence first (control > progress > data);
within a channel and sender, order is kept. What can go wrong stops the whole
computation with a :class:`~pytimely.errors.CommunicationError` naming the
peer, in every process:

* a malformed frame (checksum, length, sequence gap, duplicate, unknown
  channel) is a :class:`~pytimely.errors.FrameError`;
* a peer that closes its connection before saying it is done (it died or was
  killed) is noticed at once; one silent for ``timeout`` seconds (it is
  stalled; idle links carry a heartbeat every ``heartbeat`` seconds) is noticed
  then. Either is a :class:`~pytimely.errors.PeerFailedError`;
* a process that fails tells every peer why (an ``ABORT`` control frame).

Flow control: a worker waits before queueing more data frames for a peer while
``send_window`` bytes are queued for it, and a process stops reading from its
peers while ``recv_window`` bytes it received are not yet taken by its workers,
so a slow receiver slows its senders down through TCP instead of growing
memory. A process whose own worker waits to send keeps reading regardless, so
two processes sending to each other cannot deadlock.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from pytimely.communication.frame import CONTROL_CHANNEL, HEADER, Control, Frame, FrameDecoder, FrameEncoder, Precedence
from pytimely.communication.handshake import accept_peer, connect_peer
from pytimely.communication.payload import dumps, loads
from pytimely.config import Config
from pytimely.errors import (
    AuthenticationError,
    CommunicationError,
    ConfigError,
    FrameError,
    MembershipError,
    PayloadError,
    PeerFailedError,
    UnknownChannelError,
)

__all__ = ["Cluster", "ClusterAllocator", "Membership", "SendQueues"]

log = logging.getLogger("pytimely.cluster")

_IOV = 512
_BATCH_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Membership:
    """A process joined or left: its workers' ids and, for a join, the worker its workers bootstrap from."""

    kind: str
    """``"join"`` or ``"leave"``."""
    process: int
    workers: tuple[int, ...]
    server: int | None


class _Pushes:
    """Push ends of one channel by worker id, for a cluster whose members change (entries come and go)."""

    __slots__ = ("_by_id", "_initial", "_live")

    def __init__(self, initial: int) -> None:
        self._by_id: dict[int, Any] = {}
        self._live: list[tuple[int, Any]] = []
        self._initial = initial

    def add(self, worker: int, push: Any) -> None:
        if worker not in self._by_id:
            self._by_id[worker] = push
            self._live = sorted(self._by_id.items())

    def remove(self, worker: int) -> None:
        if self._by_id.pop(worker, None) is not None:
            self._live = sorted(self._by_id.items())

    def targets(self) -> list[tuple[int, Any]]:
        """``(worker id, push)`` of every member, by id."""
        return self._live

    def __len__(self) -> int:
        # ``exchange`` spreads records over the workers the computation started with, whoever joins later.
        return self._initial

    def __getitem__(self, worker: int) -> Any:
        push = self._by_id.get(worker)
        if push is None:
            raise MembershipError(f"worker {worker} is not a member of the computation (it left, or never joined)")
        return push

    def __iter__(self) -> Any:
        return iter([push for _, push in self._live])


class _Wire:
    """A checked payload from another process, decoded when its worker drains it."""

    __slots__ = ("channel", "payload", "peer")

    def __init__(self, payload: memoryview, peer: int, channel: tuple[int, int]) -> None:
        self.payload = payload
        self.peer = peer
        self.channel = channel


class _Mailbox:
    """One worker's incoming side of one channel, fed by local workers (objects) and links (payloads)."""

    __slots__ = ("_cluster", "_queue", "_wake")

    def __init__(self, cluster: Cluster, wake: threading.Event) -> None:
        self._cluster = cluster
        self._queue: deque[Any] = deque()
        self._wake = wake

    def push(self, message: Any) -> None:
        """A message from a worker of this process."""
        self._queue.append(message)
        self._wake.set()

    def drain(self) -> list[Any]:
        """Every queued message, oldest first; payloads from other processes are decoded here."""
        queue = self._queue
        if not queue:
            return []
        out = []
        popleft = queue.popleft
        consumed = 0
        for _ in range(len(queue)):
            message = popleft()
            if type(message) is _Wire:
                consumed += len(message.payload)
                try:
                    message = loads(message.payload)
                except Exception as exc:
                    error = PayloadError(
                        f"a checked frame from process {message.peer} on channel "
                        f"{message.channel[0]}.{message.channel[1]} holds a payload that cannot be decoded: "
                        f"{type(exc).__name__}: {exc}",
                        peer=message.peer,
                        channel=message.channel,
                    )
                    self._cluster.fail(error)
                    raise error from exc
            out.append(message)
        if consumed:
            self._cluster._consumed(consumed)
        return out


class _RemotePush:
    """The push end towards a worker of another process: pickles into the worker's outbox."""

    __slots__ = ("_channel", "_dataflow", "_outbox", "_precedence", "_source", "_target")

    def __init__(self, outbox: list[Any], precedence: int, channel: tuple[int, int], source: int, target: int) -> None:
        self._outbox = outbox
        self._precedence = precedence
        self._dataflow, self._channel = channel
        self._source = source
        self._target = target

    def push(self, message: Any) -> None:
        """Serialise ``message`` now (the sender may reuse its objects) and queue it until release."""
        parts, length = dumps(message)
        self._outbox.append(
            (self._precedence, self._dataflow, self._channel, self._source, self._target, parts, length)
        )


class SendQueues:
    """Frames waiting for one link, by precedence: seed 003's Transport takes the highest precedence first.

    A frame is ``(precedence, dataflow, channel, source, target, parts, length)``.
    Each precedence level is one FIFO queue, so frames of one (channel, source)
    (a channel has one precedence) leave in the order they were put.
    """

    __slots__ = ("_levels", "queues")

    def __init__(self) -> None:
        self.queues: dict[int, deque[Any]] = {p: deque() for p in (3, 2, 1)}
        self._levels = [self.queues[3], self.queues[2], self.queues[1]]

    def put(self, frame: Any) -> None:
        """Queue ``frame`` behind the frames of its precedence."""
        self.queues[frame[0]].append(frame)

    def take(self, max_frames: int = _IOV, max_bytes: int = _BATCH_BYTES) -> list[Any]:
        """The next frames to write, highest precedence first, up to ``max_frames`` or about ``max_bytes``."""
        batch: list[Any] = []
        size = 0
        for queue in self._levels:
            while queue and len(batch) < max_frames and size < max_bytes:
                frame = queue.popleft()
                batch.append(frame)
                size += frame[6]
        return batch

    def __len__(self) -> int:
        return sum(len(q) for q in self._levels)


class _Link:
    """The connection to one other process: a sending and a receiving thread."""

    def __init__(self, cluster: Cluster, peer: int, sock: socket.socket) -> None:
        self.cluster = cluster
        self.peer = peer
        self.sock = sock
        self.cond = threading.Condition()
        self.outgoing = SendQueues()
        self.queues = self.outgoing.queues
        self.queued = 0
        self.max_queued = 0
        self.waits = 0
        self.done_wanted = False
        self.done_sent = False
        self.done_received = False
        self.closed = False
        # Control frames queued but not yet written: leaving the queue is not being on the wire.
        self.controls_unsent = 0
        self.encoder = FrameEncoder()
        self.decoder = FrameDecoder(peer)
        self.last_heard = time.monotonic()
        self.frames_sent = 0
        self.bytes_sent = 0
        self._sender = threading.Thread(target=self._send_loop, name=f"pytimely-send-{peer}", daemon=True)
        self._receiver = threading.Thread(target=self._receive_loop, name=f"pytimely-recv-{peer}", daemon=True)

    def start(self) -> None:
        self._sender.start()
        self._receiver.start()

    # -- sending ---------------------------------------------------------------------------

    def enqueue(self, frames: list[Any]) -> None:
        """Queue frames for sending; data frames wait while the send window is full."""
        cluster = self.cluster
        window = cluster.config.send_window
        with self.cond:
            for frame in frames:
                if frame[0] == Precedence.DATA and self.queued > window:
                    self.waits += 1
                    cluster._sender_blocked(+1)
                    try:
                        while self.queued > window and cluster.failure is None and not self.closed:
                            self.cond.wait(0.1)
                    finally:
                        cluster._sender_blocked(-1)
                    cluster.check()
                self.outgoing.put(frame)
                self.queued += frame[6]
            self.max_queued = max(self.max_queued, self.queued)
            self.cond.notify_all()

    def control(self, code: Control, text: str = "") -> None:
        """Queue a control frame (it overtakes every queued progress and data frame)."""
        body = text.encode("utf-8", "replace")
        with self.cond:
            self.queues[3].append(
                (3, CONTROL_CHANNEL, int(code), self.cluster.config.process, self.peer, [body], len(body))
            )
            self.controls_unsent += 1
            self.cond.notify_all()

    def _send_loop(self) -> None:
        heartbeat = self.cluster.config.heartbeat
        me = self.cluster.config.process
        last_sent = time.monotonic()
        done_taken = False
        try:
            while True:
                with self.cond:
                    while True:
                        if self.closed or (self.done_sent and self.done_received and self.cluster.elastic):
                            return
                        # Only control() queues at precedence 3, so what leaves that level is its control frames.
                        controls = len(self.queues[3])
                        batch = self.outgoing.take()
                        controls -= len(self.queues[3])
                        if batch:
                            break
                        if self.done_wanted and not done_taken:
                            batch = [(3, CONTROL_CHANNEL, int(Control.DONE), me, self.peer, [], 0)]
                            done_taken = True
                            break
                        wait = heartbeat - (time.monotonic() - last_sent)
                        if wait <= 0:
                            batch = [(3, CONTROL_CHANNEL, int(Control.HEARTBEAT), me, self.peer, [], 0)]
                            break
                        self.cond.wait(wait)
                self._write(batch)
                last_sent = time.monotonic()
                with self.cond:
                    self.queued -= sum(f[6] for f in batch)
                    self.controls_unsent -= controls
                    # Only now is DONE on the wire: closing earlier could cut it off.
                    self.done_sent = done_taken
                    self.cond.notify_all()
                if done_taken:
                    self.cluster._wake_all()
        except OSError as exc:
            if not self.closed and not (self.done_sent and self.done_received):
                self.cluster.fail(self._lost(exc))
        except CommunicationError as exc:
            self.cluster.fail(exc)

    def _write(self, batch: list[Any]) -> None:
        buffers: list[Any] = []
        encode = self.encoder.encode
        total = 0
        for precedence, dataflow, channel, source, target, parts, length in batch:
            buffers.append(encode(precedence, dataflow, channel, source, target, parts, length))
            buffers.extend(parts)
            total += HEADER.size + length
        self.frames_sent += len(batch)
        self.bytes_sent += total
        sock = self.sock
        views = [memoryview(b).cast("B") for b in buffers]
        while views:
            sent = sock.sendmsg(views[:1024])
            while sent:
                head = views[0]
                if sent >= len(head):
                    sent -= len(head)
                    views.pop(0)
                else:
                    views[0] = head[sent:]
                    sent = 0
            while views and not len(views[0]):
                views.pop(0)

    # -- receiving -------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        cluster = self.cluster
        config = cluster.config
        sock = self.sock
        decoder = self.decoder
        try:
            sock.settimeout(config.heartbeat)
            while not self.closed:
                try:
                    n = sock.recv_into(decoder.buffer())
                except TimeoutError:
                    silent = time.monotonic() - self.last_heard
                    if silent > config.timeout and not self.done_received:
                        raise PeerFailedError(
                            f"process {self.peer} has been silent for {silent:.1f} s (timeout {config.timeout} s): "
                            "it is stalled or unreachable",
                            self.peer,
                        ) from None
                    continue
                if n == 0:
                    if self.done_received or self.closed:
                        return
                    detail = "" if decoder.idle else " in the middle of a frame"
                    raise PeerFailedError(
                        f"process {self.peer} closed its connection{detail} before finishing: it died or was killed",
                        self.peer,
                    )
                self.last_heard = time.monotonic()
                for frame in decoder.advance(n):
                    self._handle(frame)
                cluster._throttle()
                self.last_heard = time.monotonic()
        except OSError as exc:
            if not self.closed and not self.done_received:
                cluster.fail(self._lost(exc))
        except (CommunicationError, MembershipError) as exc:
            cluster.fail(exc)

    def _handle(self, frame: Frame) -> None:
        if frame.dataflow == CONTROL_CHANNEL:
            if frame.channel == Control.HEARTBEAT:
                return
            if frame.channel == Control.DONE:
                self.done_received = True
                self.cluster._wake_all()
                return
            if frame.channel == Control.ABORT:
                reason = bytes(frame.payload).decode("utf-8", "replace")
                raise PeerFailedError(f"process {self.peer} stopped: {reason}", self.peer)
            if frame.channel == Control.JOIN and self.cluster.elastic:
                self.cluster._joined(self.peer, bytes(frame.payload).decode("ascii", "replace"))
                return
            if frame.channel == Control.LEAVING and self.cluster.elastic:
                self.cluster._leaving(self.peer)
                return
            raise FrameError(
                f"process {self.peer} sent an unknown control frame {frame.channel}",
                peer=self.peer,
                channel=(frame.dataflow, frame.channel),
            )
        self.cluster._deliver(self.peer, frame)

    def _lost(self, exc: OSError) -> PeerFailedError:
        return PeerFailedError(
            f"the connection to process {self.peer} failed ({type(exc).__name__}: {exc}): it died or is unreachable",
            self.peer,
        )

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for thread in (self._sender, self._receiver):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(timeout=2)


def _inherited_listener(fd: int, port: int) -> socket.socket:
    """The listening socket a launcher handed down as ``fd``; :class:`ConfigError` unless it listens on ``port``."""
    try:
        sock = socket.socket(fileno=fd)
    except OSError as exc:
        raise ConfigError(f"PYTIMELY_LISTEN_FD={fd} is not an open socket: {exc}") from exc
    try:
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
        bound = sock.getsockname()
    except OSError as exc:
        sock.detach()  # not ours to close: the descriptor was not a socket
        raise ConfigError(f"PYTIMELY_LISTEN_FD={fd} is not a socket: {exc}") from exc
    if sock.type != socket.SOCK_STREAM or not listening or not isinstance(bound, tuple) or bound[1] != port:
        sock.detach()
        raise ConfigError(
            f"PYTIMELY_LISTEN_FD={fd} is not a TCP socket listening on port {port}, this process's port in hosts "
            f"(it is bound to {bound!r}{'' if listening else ', not listening'})"
        )
    return sock


class Cluster:
    """This process's part of a cluster: connections to every other process and its workers' mailboxes."""

    def __init__(self, config: Config, *, listener: socket.socket | None = None) -> None:
        self.config = config
        self.me = config.process
        self.workers = config.workers
        self.first = config.first_worker
        self.peers = config.peers
        self.failure: BaseException | None = None
        self.links: dict[int, _Link] = {}
        self._lock = threading.Condition()
        self._mailboxes: dict[tuple[int, tuple[int, int]], _Mailbox] = {}
        self._pending: dict[tuple[int, tuple[int, int]], list[_Wire]] = {}
        self._highest: tuple[int, int] = (-1, -1)
        self._sealed = -1
        self._wakes = [threading.Event() for _ in range(config.workers)]
        self._unconsumed = 0
        self.max_unconsumed = 0
        self._blocked = 0
        # A host that hands out addresses before the cluster starts (Spark's barrier stage) binds the
        # listening socket itself, so the port it announced cannot be taken in between.
        self._listener: socket.socket | None = listener
        self.elastic = config.elastic
        self.initial_peers = config.initial_peers if config.elastic else config.peers
        self.events: list[Membership] = []
        """Every membership change this process has heard of, in order (its workers apply them between steps)."""
        self._applied: list[int] = []
        self._retired = 0
        self.live: set[int] = set(range(config.processes)) - set(config.left)
        """Processes taking part (as far as this process knows), itself included."""
        self.server: int | None = None
        """For a joining process: the worker whose progress state its workers bootstrap from."""
        self.leave_requested = False
        """Set when someone asked this process to leave (``pytimely launch``'s control endpoint)."""
        self._ready = 0
        self._acceptor: threading.Thread | None = None

    # -- setting up ------------------------------------------------------------------------

    def start(self) -> None:
        """Listen, connect to every other process, authenticate, and start the links."""
        if self.config.join:
            self._start_joining()
            return
        self._start()
        if self.elastic:
            self._accept_later()

    def _listen(self, backlog: int) -> socket.socket:
        """The listener on this process's port (made here unless one was handed in)."""
        if self._listener is not None:
            return self._listener
        config = self.config
        port = config.hosts[self.me][1]
        if config.listen_fd is not None:
            self._listener = _inherited_listener(config.listen_fd, port)
            return self._listener
        try:
            self._listener = socket.create_server((config.bind, port), backlog=backlog)
        except OSError as exc:
            raise CommunicationError(f"process {self.me} cannot listen on {config.bind}:{port}: {exc}") from exc
        return self._listener

    def _link(self, peer: int, sock: socket.socket) -> _Link:
        """The link to ``peer`` over an authenticated socket (not started yet)."""
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = self.links[peer] = _Link(self, peer, sock)
        return link

    def _start(self) -> None:
        config = self.config
        secret = config.secret
        assert secret is not None
        listener = self._listen(backlog=max(16, config.processes))
        deadline = time.monotonic() + config.connect_timeout
        accepted: dict[int, socket.socket] = {}
        accept_error: list[BaseException] = []
        acceptor = threading.Thread(
            target=self._accept_all,
            args=(secret, deadline, accepted, accept_error),
            name="pytimely-accept",
            daemon=True,
        )
        acceptor.start()
        sockets: dict[int, socket.socket] = {}
        try:
            for peer in range(self.me):
                sockets[peer] = self._connect(peer, secret, deadline)
        finally:
            acceptor.join()
            if not self.elastic:
                listener.close()
        if accept_error:
            for s in sockets.values():
                s.close()
            raise accept_error[0]
        sockets.update(accepted)
        for peer, sock in sorted(sockets.items()):
            self._link(peer, sock)
        for link in self.links.values():
            link.start()

    def _start_joining(self) -> None:
        """Join a running computation: connect to every live process, say so, and keep accepting later joiners."""
        config = self.config
        secret = config.secret
        assert secret is not None
        listener = self._listen(backlog=16)
        deadline = time.monotonic() + config.connect_timeout
        members = sorted(self.live - {self.me})
        if not members:
            raise MembershipError(f"process {self.me} has no running process to join")
        sockets: dict[int, socket.socket] = {}
        try:
            for peer in members:
                sockets[peer] = self._connect(peer, secret, deadline)
        except BaseException:
            for sock in sockets.values():
                sock.close()
            listener.close()
            raise
        # The lowest member's first worker serves every newcomer: all members agree on it without asking.
        self.server = members[0] * self.workers
        for peer, sock in sockets.items():
            link = self._link(peer, sock)
            link.control(Control.JOIN, f"{self.server},{self.workers}")
            link.start()
        self._accept_later()

    def _accept_later(self) -> None:
        """Accept processes that join later, for as long as this process runs."""
        self._acceptor = threading.Thread(target=self._accept_joiners, name="pytimely-accept-joiners", daemon=True)
        self._acceptor.start()

    def _accept_joiners(self) -> None:
        listener = self._listener
        assert listener is not None and self.config.secret is not None
        listener.settimeout(0.2)
        while self.failure is None:
            try:
                sock, address = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed: this process is finishing
            try:
                sock.settimeout(10.0)
                peer = accept_peer(sock, self.config.secret, self.me, self._shape(), bound=1 << 16)
            except (AuthenticationError, ConfigError, OSError) as exc:
                log.warning(
                    "process %d refused a joining connection from %s:%s: %s", self.me, address[0], address[1], exc
                )
                sock.close()
                continue
            with self._lock:
                if self._ready:
                    log.warning("process %d is leaving and refused process %d, which tried to join", self.me, peer)
                    sock.close()
                    continue
                if peer in self.links or peer in self.live:
                    log.warning("process %d refused a second connection claiming to be process %d", self.me, peer)
                    sock.close()
                    continue
                link = self._link(peer, sock)
            link.start()

    def _shape(self) -> int:
        """What the handshake compares: the process count, or for elastic clusters the initial count and a flag."""
        return (self.config.initial_processes | 1 << 31) if self.elastic else self.config.processes

    def _joined(self, peer: int, text: str) -> None:
        """A process connected to every member and said it joins (its ``JOIN`` frame)."""
        try:
            server, workers = (int(x) for x in text.split(","))
        except ValueError:
            raise FrameError(
                f"process {peer} sent a malformed join frame {text!r}", peer=peer, channel=(CONTROL_CHANNEL, 3)
            ) from None
        if workers != self.workers:
            raise MembershipError(
                f"process {peer} runs {workers} workers; every process of an elastic computation runs the same "
                f"number ({self.workers} here)"
            )
        first = peer * self.workers
        with self._lock:
            self.live.add(peer)
            self.events.append(Membership("join", peer, tuple(range(first, first + workers)), server))
            self._applied.append(self._retired)
        log.info("process %d: process %d joins (bootstrap server: worker %d)", self.me, peer, server)
        self._wake_all()

    def _leaving(self, peer: int) -> None:
        """A process said it leaves: once every worker here stops sending to it, tell it ``DONE``."""
        first = peer * self.workers
        with self._lock:
            self.live.discard(peer)
            self.events.append(Membership("leave", peer, tuple(range(first, first + self.workers)), None))
            self._applied.append(self._retired)
            self._check_applied(len(self.events) - 1)
        log.info("process %d: process %d leaves", self.me, peer)
        self._wake_all()

    def _applied_by_worker(self, index: int) -> None:
        with self._lock:
            self._applied[index] += 1
            self._check_applied(index)

    def _check_applied(self, index: int) -> None:
        event = self.events[index]
        if event.kind == "leave" and self._applied[index] >= self.workers:
            link = self.links.get(event.process)
            if link is not None:
                with link.cond:
                    link.done_wanted = True
                    link.cond.notify_all()

    def _retire_worker(self) -> None:
        """A worker here has finished: it applies no more membership changes, so count it as having applied all."""
        with self._lock:
            self._retired += 1
            for index in range(len(self._applied)):
                self._applied[index] += 1
                self._check_applied(index)

    def _worker_leaves(self) -> None:
        """A worker here is ready to leave; once all are, tell every other process."""
        with self._lock:
            self._ready += 1
            ready = self._ready == self.workers
        if ready:
            for link in list(self.links.values()):
                link.control(Control.LEAVING)

    def left_by_all(self) -> bool:
        """Whether every other process has said ``DONE`` to this leaving one (it sends it nothing more)."""
        return all(link.done_received for link in list(self.links.values()))

    def _connect(self, peer: int, secret: bytes, deadline: float) -> socket.socket:
        host, port = self.config.hosts[peer]
        delay = 0.02
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
            except OSError as exc:
                if time.monotonic() + delay > deadline:
                    raise CommunicationError(
                        f"process {self.me} could not reach process {peer} at {host}:{port} within "
                        f"{self.config.connect_timeout} s: {exc}",
                        peer,
                    ) from exc
                time.sleep(delay)
                delay = min(0.5, delay * 2)
                continue
            try:
                sock.settimeout(max(1.0, deadline - time.monotonic()))
                connect_peer(sock, secret, self.me, peer, self._shape())
            except BaseException:
                sock.close()
                raise
            return sock

    def _accept_all(
        self, secret: bytes, deadline: float, accepted: dict[int, socket.socket], errors: list[BaseException]
    ) -> None:
        expected = set(range(self.me + 1, self.config.processes))
        listener = self._listener
        assert listener is not None
        try:
            while expected - set(accepted):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    missing = ", ".join(str(p) for p in sorted(expected - set(accepted)))
                    raise CommunicationError(
                        f"process {self.me} waited {self.config.connect_timeout} s but process(es) {missing} never "
                        "connected with the cluster secret"
                    )
                listener.settimeout(remaining)
                try:
                    sock, address = listener.accept()
                except TimeoutError:
                    continue
                try:
                    sock.settimeout(max(1.0, min(10.0, remaining)))
                    peer = accept_peer(sock, secret, self.me, self._shape(), bound=1 << 16 if self.elastic else None)
                except (AuthenticationError, OSError) as exc:
                    log.warning("process %d refused a connection from %s:%s: %s", self.me, address[0], address[1], exc)
                    sock.close()
                    continue
                except ConfigError:
                    sock.close()
                    raise
                if peer in accepted:
                    log.warning("process %d refused a second connection claiming to be process %d", self.me, peer)
                    sock.close()
                    continue
                accepted[peer] = sock
        except BaseException as exc:
            errors.append(exc)
            for s in accepted.values():
                s.close()

    def allocator(self, local: int) -> ClusterAllocator:
        """The allocator of this process's ``local``-th worker."""
        return ClusterAllocator(self, local)

    # -- delivering ------------------------------------------------------------------------

    def _mailbox(self, target: int, channel: tuple[int, int]) -> _Mailbox:
        key = (target, channel)
        box = self._mailboxes.get(key)
        if box is None:
            box = self._mailboxes[key] = _Mailbox(self, self._wakes[target - self.first])
            pending = self._pending.pop(key, None)
            if pending:
                box._queue.extend(pending)
                box._wake.set()
        return box

    def open(self, channel: tuple[int, int]) -> list[_Mailbox]:
        """The mailboxes of ``channel`` for every worker of this process (created on first use)."""
        with self._lock:
            if channel > self._highest:
                self._highest = channel
                self._reject_pending_below(channel)
            return [self._mailbox(self.first + i, channel) for i in range(self.workers)]

    def seal(self, dataflow: int) -> None:
        """A worker here has built ``dataflow``: it opens no more of its channels."""
        with self._lock:
            if dataflow > self._sealed:
                self._sealed = dataflow
                self._reject_pending_below((dataflow + 1, -1))

    def _reject_pending_below(self, channel: tuple[int, int]) -> None:
        for (_, ch), wires in self._pending.items():
            if ch < channel and wires:
                self._unknown(wires[0])

    def _unknown(self, wire: _Wire) -> None:
        raise UnknownChannelError(
            f"process {wire.peer} sent data on channel {wire.channel[0]}.{wire.channel[1]}, which no worker here "
            "opens: the processes are not running the same dataflows",
            peer=wire.peer,
            channel=wire.channel,
        )

    def _deliver(self, peer: int, frame: Frame) -> None:
        target = frame.target
        channel = (frame.dataflow, frame.channel)
        if not self.first <= target < self.first + self.workers:
            raise FrameError(
                f"process {peer} sent a frame for worker {target}, which does not run on process {self.me}",
                peer=peer,
                channel=channel,
            )
        payload = frame.payload
        assert isinstance(payload, memoryview)
        wire = _Wire(payload, peer, channel)
        with self._lock:
            box = self._mailboxes.get((target, channel))
            self._unconsumed += len(payload)
            if self._unconsumed > self.max_unconsumed:
                self.max_unconsumed = self._unconsumed
            if box is None:
                if channel < self._highest or channel[0] <= self._sealed:
                    self._unknown(wire)
                self._pending.setdefault((target, channel), []).append(wire)
                return
        box._queue.append(wire)
        box._wake.set()

    def _consumed(self, nbytes: int) -> None:
        with self._lock:
            self._unconsumed -= nbytes
            self._lock.notify_all()

    def _sender_blocked(self, delta: int) -> None:
        with self._lock:
            self._blocked += delta
            self._lock.notify_all()

    def _throttle(self) -> None:
        """Called by receiving threads: wait while too much received data is untaken (unless a worker waits to send)."""
        window = self.config.recv_window
        if self._unconsumed <= window:
            return
        with self._lock:
            while self._unconsumed > window and self._blocked == 0 and self.failure is None:
                self._lock.wait(0.1)

    def _wake_all(self) -> None:
        for wake in self._wakes:
            wake.set()
        with self._lock:
            self._lock.notify_all()

    # -- failing and finishing ---------------------------------------------------------------

    def check(self) -> None:
        """Raise the cluster's failure, if there is one."""
        failure = self.failure
        if failure is not None:
            raise failure

    def fail(self, error: BaseException) -> None:
        """Stop the computation: remember the first error, tell every peer why, wake every worker."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = error
        reason = f"{type(error).__name__}: {error}"
        log.debug("process %d fails: %s", self.me, reason)
        for link in list(self.links.values()):
            link.control(Control.ABORT, reason)
        self._wake_all()

    def finish(self) -> None:
        """After this process's workers are done: say so to every peer and wait until every peer has said so."""
        self.check()
        with self._lock:
            for wires in self._pending.values():
                if wires:
                    self._unknown(wires[0])
        for link in list(self.links.values()):
            with link.cond:
                link.done_wanted = True
                link.cond.notify_all()
        while True:
            self.check()
            if all(link.done_received and link.done_sent for link in list(self.links.values())):
                return
            with self._lock:
                self._lock.wait(0.05)

    def close(self, *, grace: float = 1.0) -> None:
        """Close every link; after a failure, first give the ABORT frames ``grace`` seconds to leave."""
        if self._listener is not None and self.elastic:
            self._listener.close()
        if self.failure is not None:
            deadline = time.monotonic() + grace
            for link in self.links.values():
                with link.cond:
                    while link.controls_unsent and not link.closed and time.monotonic() < deadline:
                        link.cond.wait(0.02)
        for link in list(self.links.values()):
            link.close()

    def stats(self) -> dict[str, Any]:
        """Counters for tests and benchmarks: queue peaks, waits, frames and bytes sent per peer."""
        return {
            "max_unconsumed": self.max_unconsumed,
            "links": {
                peer: {
                    "max_queued": link.max_queued,
                    "waits": link.waits,
                    "frames_sent": link.frames_sent,
                    "bytes_sent": link.bytes_sent,
                }
                for peer, link in self.links.items()
            },
        }


class ClusterAllocator:
    """The allocator of one worker of a :class:`Cluster`."""

    def __init__(self, cluster: Cluster, local: int) -> None:
        self._cluster = cluster
        self._local = local
        self._index = cluster.first + local
        self._wake = cluster._wakes[local]
        self._outbox: list[Any] = []
        self.elastic = cluster.elastic
        self._handed: list[tuple[tuple[int, int], int, _Pushes]] = []
        self.seen = 0
        """How many of :attr:`events` this worker has applied to its channels."""
        workers = cluster.workers
        self._members: set[int] = {p * workers + i for p in cluster.live for i in range(workers)}
        self.joining: tuple[int, tuple[int, ...], tuple[int, ...]] | None = None
        """For a worker of a joining process: its bootstrap server, the members it hears from, its fellow newcomers."""
        if cluster.config.join:
            assert cluster.server is not None
            fresh = tuple(range(cluster.first, cluster.first + workers))
            self.joining = (cluster.server, tuple(sorted(self._members - set(fresh))), fresh)

    @property
    def index(self) -> int:
        """This worker's global index (stable while processes join and leave)."""
        return self._index

    @property
    def peers(self) -> int:
        """Workers in the whole cluster (for an elastic one, those it started with)."""
        return self._cluster.initial_peers if self.elastic else self._cluster.peers

    @property
    def workers_per_process(self) -> int:
        """How many workers each process runs."""
        return self._cluster.workers

    @property
    def events(self) -> list[Membership]:
        """The cluster's membership changes; the first :attr:`seen` are applied to this worker's channels."""
        return self._cluster.events

    @property
    def members(self) -> list[int]:
        """The ids of the workers taking part, as this worker has applied the changes so far."""
        return sorted(self._members)

    @property
    def leave_requested(self) -> bool:
        """Whether this worker's process was asked to leave."""
        return self._cluster.leave_requested

    def allocate(self, channel: Hashable, precedence: int = Precedence.DATA) -> tuple[Any, Any]:
        """Push ends to every worker (by reference locally, as frames remotely) and this worker's mailbox."""
        if not (
            isinstance(channel, tuple)
            and len(channel) == 2
            and all(type(c) is int and 0 <= c < CONTROL_CHANNEL for c in channel)
        ):
            raise ValueError(f"cluster channels are (dataflow, channel) pairs of small ints, got {channel!r}")
        key: tuple[int, int] = (channel[0], channel[1])
        cluster = self._cluster
        boxes = cluster.open(key)
        if self.elastic:
            pushes = _Pushes(cluster.initial_peers)
            for target in sorted(self._members):
                pushes.add(target, self._push_to(boxes, key, int(precedence), target))
            self._handed.append((key, int(precedence), pushes))
            return pushes, boxes[self._local]
        return [self._push_to(boxes, key, int(precedence), t) for t in range(cluster.peers)], boxes[self._local]

    def _push_to(self, boxes: list[_Mailbox], key: tuple[int, int], precedence: int, target: int) -> Any:
        cluster = self._cluster
        if cluster.first <= target < cluster.first + cluster.workers:
            return boxes[target - cluster.first]
        return _RemotePush(self._outbox, precedence, key, self._index, target)

    def built(self, dataflow: int) -> None:
        """Frames for channels of ``dataflow`` that no worker here opened are now known to be errors."""
        self._cluster.seal(dataflow)

    def receive(self) -> None:
        """Raise if the cluster has failed; apply membership changes to this worker's channels."""
        cluster = self._cluster
        if cluster.failure is not None:
            raise cluster.failure
        if self.elastic and len(cluster.events) > self.seen:
            self._apply(cluster.events[self.seen :])

    def _apply(self, events: list[Membership]) -> None:
        cluster = self._cluster
        for event in events:
            if event.kind == "join":
                self._members.update(event.workers)
                for key, precedence, pushes in self._handed:
                    boxes = cluster.open(key)
                    for target in event.workers:
                        pushes.add(target, self._push_to(boxes, key, precedence, target))
            else:
                self._members.difference_update(event.workers)
                for _, _, pushes in self._handed:
                    for target in event.workers:
                        pushes.remove(target)
            cluster._applied_by_worker(self.seen)
            self.seen += 1

    def retire(self) -> None:
        """This worker has finished; it applies no further membership changes."""
        if self.elastic:
            self._cluster._retire_worker()

    def ready_to_leave(self) -> None:
        """This worker may go; once every worker of the process is ready, the process says it leaves."""
        self._cluster._worker_leaves()

    def left_by_all(self) -> bool:
        """Whether every other process has stopped sending to this leaving one."""
        return self._cluster.left_by_all()

    def release(self) -> None:
        """Hand this step's frames to the links (waiting while a peer's send window is full)."""
        outbox = self._outbox
        if not outbox:
            return
        cluster = self._cluster
        workers = cluster.workers
        by_process: dict[int, list[Any]] = {}
        for frame in outbox:
            by_process.setdefault(frame[4] // workers, []).append(frame)
        outbox.clear()
        for process, frames in by_process.items():
            cluster.links[process].enqueue(frames)

    def park(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for something to arrive for this worker."""
        wake = self._wake
        if not wake.is_set():
            wake.wait(timeout)
        wake.clear()
        self._cluster.check()

    def stats(self) -> dict[str, Any]:
        """The cluster's counters (see :meth:`Cluster.stats`)."""
        return self._cluster.stats()

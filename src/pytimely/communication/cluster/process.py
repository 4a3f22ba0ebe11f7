"""This process's part of a cluster: its links, its workers' mailboxes, flow control and failing together."""

from __future__ import annotations

import logging
import socket
import weakref
from collections.abc import Callable
from typing import Any

from pytimely.communication.allocator import Deferred, Precedence
from pytimely.communication.cluster.allocator import ClusterAllocator
from pytimely.communication.cluster.counters import cluster_stats
from pytimely.communication.cluster.link import Link
from pytimely.communication.cluster.membership import Membership
from pytimely.communication.cluster.networking import accept_all, accept_one, connect
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.cluster.quiescence import Quiescence
from pytimely.communication.cluster.router import ClusterMailbox, Wire
from pytimely.communication.frame import CONTROL_CHANNEL, EVERY_WORKER, Control, Frame, LinkKeys
from pytimely.communication.handshake import check_secret
from pytimely.communication.payload import has_buffers
from pytimely.communication.platform import REAL, Event, Lock, Platform, Task
from pytimely.communication.transport import Connection, Listener, SocketListener, TcpTransport
from pytimely.config import Config
from pytimely.errors import (
    CommunicationError,
    ConfigError,
    FrameError,
    MembershipError,
    UnknownChannelError,
)

__all__ = ["Cluster"]

log = logging.getLogger("pytimely.cluster")
_LENT_PRUNE = 256
"""Wires tracked per peer as lent (see :meth:`Cluster.unlend`) past which those decoded already are forgotten."""


class Cluster:
    """This process's part of a cluster: connections to every other process and its workers' mailboxes."""

    def __init__(
        self,
        config: Config,
        *,
        listener: socket.socket | None = None,
        on_leave: Callable[[int], None] | None = None,
        platform: Platform = REAL,
    ) -> None:
        self.config = config
        self.platform = platform
        """The clock, threads and transport this process runs on (:data:`~pytimely.communication.platform.REAL`
        unless simulated)."""
        self._clock = platform.clock
        threads = self._threads = platform.threads
        self._on_leave = on_leave
        """Told this process's index before it says ``LEAVING`` (whoever starts newcomers must hear of it first)."""
        self.me = config.process
        self.workers = config.workers
        self.first = config.first_worker
        self.peers = config.peers
        self.failure: BaseException | None = None
        self.links: dict[int, Link] = {}
        self._lock = threads.condition()
        self._mailboxes: dict[tuple[int, tuple[int, int]], ClusterMailbox] = {}
        self._pending: dict[tuple[int, tuple[int, int]], list[Wire]] = {}
        # Per peer, the wires delivered here whose payloads are lent from the peer's shared-memory ring (see unlend).
        self._lent: dict[int, list[weakref.ref[Wire]]] = {}
        self._highest: tuple[int, int] = (-1, -1)
        self._sealed = -1
        self._wakes = [threads.event() for _ in range(config.workers)]
        self._unconsumed = 0
        self.max_unconsumed = 0
        self._blocked = 0
        # A host that hands out addresses before the cluster starts (Spark's barrier stage) binds the
        # listening socket itself, so the port it announced cannot be taken in between.
        self._listener: Listener | None = None if listener is None else SocketListener(listener)
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
        self._acceptor: Task | None = None
        self._allocators: dict[int, ClusterAllocator] = {}
        self._shared: dict[tuple[int, int], tuple[Any, Lock]] = {}
        self._deferred = threads.condition()
        self._deferred_due = float("inf")
        self._flusher: Task | None = None
        self._closing = False
        self.quiescence = Quiescence(config.workers, clock=platform.clock.monotonic)
        """How long this process and its peers have been quiet (heartbeats carry its reports)."""

    # -- setting up ------------------------------------------------------------------------

    def start(self) -> None:
        """Listen, connect to every other process, authenticate, and start the links."""
        check_secret(self.config.secret)
        if self.config.join:
            self._start_joining()
            return
        self._start()
        if self.elastic:
            self._accept_later()

    def _listen(self, backlog: int) -> Listener:
        """The listener on this process's port (made here unless one was handed in)."""
        if self._listener is not None:
            return self._listener
        config = self.config
        port = config.hosts[self.me][1]
        if config.listen_fd is not None:
            self._listener = TcpTransport.inherit(config.listen_fd, port)
            return self._listener
        try:
            self._listener = self.platform.transport.listen(config.bind, port, backlog)
        except OSError as exc:
            raise CommunicationError(f"process {self.me} cannot listen on {config.bind}:{port}: {exc}") from exc
        return self._listener

    def _link(self, peer: int, sock: Connection, keys: LinkKeys) -> Link:
        """The link to ``peer`` over an authenticated connection with its keys (not started yet)."""
        sock.start_streaming()
        link = self.links[peer] = Link(peer, sock, keys, self.config, self, self.quiescence, self.platform)
        link.unlend = self.unlend
        return link

    def unlend(self, peer: int) -> int:
        """Copy out the payloads lent from ``peer``'s ring that still wait in a mailbox here, so that their places
        in the ring go back to it; the number copied (a payload a worker decoded already stays lent: arrays live on
        it). Called by the link's receiving thread when much of the ring is held."""
        copied = 0
        with self._lock:
            refs, self._lent[peer] = self._lent.get(peer, []), []
            for ref in refs:
                # Alive means a mailbox holds it still (or its worker is decoding it just now: then the copy is
                # wasted, and harmless, as the worker decodes one of the two and lets go of the other).
                wire = ref()
                if wire is not None and wire.payload.readonly:
                    wire.payload = memoryview(bytearray(wire.payload))
                    copied += 1
        return copied

    def _start(self) -> None:
        config = self.config
        secret = config.secret
        assert secret is not None
        listener = self._listen(backlog=max(16, config.processes))
        deadline = self._clock.monotonic() + config.connect_timeout
        accepted: dict[int, tuple[Connection, LinkKeys]] = {}
        accept_error: list[BaseException] = []
        acceptor = self._threads.spawn(
            accept_all,
            "pytimely-accept",
            listener,
            config,
            secret,
            deadline,
            self._shape(),
            accepted,
            accept_error,
            self.platform,
            self._link_joiner if self.elastic else None,
        )
        sockets: dict[int, tuple[Connection, LinkKeys]] = {}
        try:
            for peer in range(self.me):
                sockets[peer] = connect(self.config, peer, secret, deadline, self._shape(), self.platform)
        finally:
            acceptor.join()
            if not self.elastic:
                listener.close()
        if accept_error:
            for sock, _ in sockets.values():
                sock.close()
            raise accept_error[0]
        sockets.update(accepted)
        links = [self._link(peer, sock, keys) for peer, (sock, keys) in sorted(sockets.items())]
        for link in links:
            link.start()

    def _start_joining(self) -> None:
        """Join a running computation: connect to every live process, say so, and keep accepting later joiners."""
        config = self.config
        secret = config.secret
        assert secret is not None
        listener = self._listen(backlog=16)
        deadline = self._clock.monotonic() + config.connect_timeout
        members = sorted(self.live - {self.me})
        if not members:
            raise MembershipError(f"process {self.me} has no running process to join")
        sockets: dict[int, tuple[Connection, LinkKeys]] = {}
        try:
            for peer in members:
                sockets[peer] = connect(self.config, peer, secret, deadline, self._shape(), self.platform)
        except BaseException:
            for sock, _ in sockets.values():
                sock.close()
            listener.close()
            raise
        # The lowest member's first worker serves every newcomer: all members agree on it without asking.
        self.server = members[0] * self.workers
        for peer, (sock, keys) in sockets.items():
            link = self._link(peer, sock, keys)
            link.control(Control.JOIN, f"{self.server},{self.workers}")
            link.start()
        self._accept_later()

    def _accept_later(self) -> None:
        """Accept processes that join later, for as long as this process runs."""
        self._acceptor = self._threads.spawn(self._accept_joiners, "pytimely-accept-joiners")

    def _accept_joiners(self) -> None:
        listener = self._listener
        assert listener is not None and self.config.secret is not None
        while self.failure is None:
            try:
                got = listener.accept(0.2)
            except OSError:
                return  # closed: this process is finishing
            if got is None:
                continue
            # Each handshake in a thread of its own: a silent stranger must not hold up a joiner.
            self._threads.spawn(self._admit_joiner, "pytimely-handshake", *got)

    def _admit_joiner(self, sock: Connection, address: tuple[str, int]) -> None:
        """Authenticate a process that joins; link it unless this process is leaving or knows it already."""
        assert self.config.secret is not None
        clock = self._clock
        try:
            got = accept_one(
                sock, address, self.config, self.config.secret, clock.monotonic() + 3600, self._shape(), clock
            )
        except ConfigError as exc:
            log.warning("process %d refused a joining connection from %s:%s: %s", self.me, address[0], address[1], exc)
            return
        if got is not None:
            self._link_joiner(got[0], sock, got[1])

    def _link_joiner(self, peer: int, sock: Connection, keys: LinkKeys) -> None:
        """Link an authenticated process that joins, unless this process is leaving or knows it already."""
        with self._lock:
            if self._ready or self._closing:
                log.warning("process %d is leaving or closing and refused process %d, which tried to join",
                            self.me, peer)
                sock.close()
                return
            if peer in self.links or peer in self.live:
                log.warning("process %d refused a second connection claiming to be process %d", self.me, peer)
                sock.close()
                return
            link = self._link(peer, sock, keys)
        link.start()

    def _shape(self) -> int:
        """What the handshake compares: the process count, or for elastic clusters the initial count and a flag."""
        shape = (self.config.initial_processes | 1 << 31) if self.elastic else self.config.processes
        # Processes that disagree on encrypting frames or on aggregating progress are refused at the handshake.
        shape = shape if self.config.encrypt else shape | 1 << 30
        return shape if self.config.aggregate_progress else shape | 1 << 29

    def joined(self, peer: int, text: str) -> None:
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

    def leaving(self, peer: int) -> None:
        """A process said it leaves: once every worker here stops sending to it, tell it ``DONE``."""
        first = peer * self.workers
        with self._lock:
            self.live.discard(peer)
            self.events.append(Membership("leave", peer, tuple(range(first, first + self.workers)), None))
            self._applied.append(self._retired)
            self._check_applied(len(self.events) - 1)
        log.info("process %d: process %d leaves", self.me, peer)
        self._wake_all()

    def applied_by_worker(self, index: int) -> None:
        """A worker here has applied membership event ``index`` to its channels."""
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

    def retire_worker(self) -> None:
        """A worker here has finished: it applies no more membership changes, so count it as having applied all."""
        with self._lock:
            self._retired += 1
            for index in range(len(self._applied)):
                self._applied[index] += 1
                self._check_applied(index)

    def worker_leaves(self) -> None:
        """A worker here is ready to leave; once all are, tell every other process."""
        with self._lock:
            self._ready += 1
            ready = self._ready == self.workers
        if ready:
            # Before any peer hears of the leave, so a newcomer started from now on is not told to dial it.
            if self._on_leave is not None:
                self._on_leave(self.me)
            for link in list(self.links.values()):
                link.control(Control.LEAVING)

    def left_by_all(self) -> bool:
        """Whether every other process has said ``DONE`` to this leaving one (it sends it nothing more)."""
        return all(link.done_received for link in list(self.links.values()))

    def allocator(self, local: int) -> ClusterAllocator:
        """The allocator of this process's ``local``-th worker (one per worker: asking again gives the same)."""
        with self._lock:
            allocator = self._allocators.get(local)
            if allocator is None:
                allocator = self._allocators[local] = ClusterAllocator(self, local)
            return allocator

    # -- delivering ------------------------------------------------------------------------

    def _mailbox(self, target: int, channel: tuple[int, int]) -> ClusterMailbox:
        key = (target, channel)
        box = self._mailboxes.get(key)
        if box is None:
            box = self._mailboxes[key] = ClusterMailbox(self, self._wakes[target - self.first])
            pending = self._pending.pop(key, None)
            if pending:
                box.wire(pending)
        return box

    def open(self, channel: tuple[int, int]) -> list[ClusterMailbox]:
        """The mailboxes of ``channel`` for every worker of this process (created on first use)."""
        with self._lock:
            if channel > self._highest:
                self._highest = channel
                self._reject_pending_below(channel)
            return [self._mailbox(self.first + i, channel) for i in range(self.workers)]

    def shared(self, channel: tuple[int, int], make: Callable[[], Any]) -> tuple[Any, Lock]:
        """The object this process's workers share for a grouped ``channel`` (made once) and their lock."""
        with self._lock:
            entry = self._shared.get(channel)
            if entry is None:
                entry = self._shared[channel] = (make(), self._threads.lock())
            return entry

    def awake(self) -> list[int]:
        """This process's workers with messages waiting for their next step (global indices)."""
        return [self.first + i for i, wake in enumerate(self._wakes) if wake.is_set()]

    def wake_by(self, deadline: float) -> None:
        """Have every grouped channel's :class:`~pytimely.communication.allocator.Deferred` shared object here
        looked at by ``deadline`` (monotonic time): its workers may all be waiting, or busy outside their steps."""
        with self._deferred:
            if deadline < self._deferred_due:
                self._deferred_due = deadline
                self._deferred.notify()
            if self._flusher is None:
                self._flusher = self._threads.spawn(self._flush_deferred, "pytimely-outbox")

    def monotonic(self) -> float:
        """The time on this process's clock (what :meth:`wake_by`'s deadlines are measured on)."""
        return self._clock.monotonic()

    def flush_deferred(self) -> None:
        """Send everything every :class:`~pytimely.communication.allocator.Deferred` shared object here holds back
        (before this process says it is done: nothing may follow that)."""
        with self._lock:
            entries = list(self._shared.values())
        for shared, lock in entries:
            if isinstance(shared, Deferred):
                with lock:
                    shared.flush_due(float("inf"))

    def _flush_deferred(self) -> None:
        """The thread that sends what :class:`Deferred` shared objects still hold at their deadlines."""
        deferred = self._deferred
        now = self._clock.monotonic
        try:
            while True:
                with deferred:
                    while self._deferred_due > now() and not self._closing:
                        deferred.wait(min(1.0, self._deferred_due - now()))
                    if self._closing:
                        return
                    self._deferred_due = float("inf")
                with self._lock:
                    entries = list(self._shared.values())
                at = now()
                for shared, lock in entries:
                    if isinstance(shared, Deferred):
                        with lock:  # the lock the workers change it under
                            if (due := shared.deadline()) is None:
                                continue
                            if due <= at:
                                shared.flush_due(at)
                                due = shared.deadline()
                        if due is not None:
                            self.wake_by(due)
        except Exception as exc:  # a flush that fails stops the computation, as a worker's would
            self.fail(exc)

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

    def _unknown(self, wire: Wire) -> None:
        raise UnknownChannelError(
            f"process {wire.peer} sent data on channel {wire.channel[0]}.{wire.channel[1]}, which no worker here "
            "opens: the processes are not running the same dataflows",
            peer=wire.peer,
            channel=wire.channel,
        )

    def deliver(self, peer: int, frame: Frame) -> None:
        """A checked data or progress frame from ``peer``: into the mailboxes of the workers it is for."""
        target = frame.target
        channel = (frame.dataflow, frame.channel)
        if target == EVERY_WORKER:
            targets = range(self.first, self.first + self.workers)  # sent once by the peer, handed to each here
        elif self.first <= target < self.first + self.workers:
            targets = range(target, target + 1)
        else:
            raise FrameError(
                f"process {peer} sent a frame for worker {target}, which does not run on process {self.me}",
                peer=peer,
                channel=channel,
            )
        payload = frame.payload
        assert isinstance(payload, memoryview)
        # A message with out-of-band buffers (numpy, Arrow) is rebuilt on top of its payload: every worker but the
        # first gets a copy of its own, made here rather than on the wire.
        copies = len(targets) > 1 and has_buffers(payload)
        with self._lock:
            # Each worker handed the payload decodes it, and counts it consumed, on its own.
            self._unconsumed += len(payload) * len(targets)
            if self._unconsumed > self.max_unconsumed:
                self.max_unconsumed = self._unconsumed
            for worker in targets:
                own = memoryview(bytearray(payload)) if copies and worker != targets[0] else payload
                wire = Wire(own, peer, channel, data=frame.precedence == Precedence.DATA)
                if own.readonly:  # lent from the peer's ring: copied out later if it waits long (unlend)
                    lent = self._lent.setdefault(peer, [])
                    if len(lent) >= _LENT_PRUNE:
                        lent[:] = [ref for ref in lent if ref() is not None]
                    lent.append(weakref.ref(wire))
                box = self._mailboxes.get((worker, channel))
                if box is None:
                    if channel < self._highest or channel[0] <= self._sealed:
                        self._unknown(wire)
                    self._pending.setdefault((worker, channel), []).append(wire)
                else:
                    box.arrive(wire)

    def consumed(self, nbytes: int) -> None:
        """A worker here took ``nbytes`` of received payloads: receiving threads may read again."""
        with self._lock:
            self._unconsumed -= nbytes
            self._lock.notify_all()

    def sender_blocked(self, delta: int) -> None:
        """A worker here starts (+1) or stops (-1) waiting for a full send window."""
        with self._lock:
            self._blocked += delta
            self._lock.notify_all()

    def receiving_full(self) -> bool:
        """Whether received data not yet taken has reached the hard bound (receive window plus send window)."""
        return self._unconsumed > self.config.recv_window + self.config.send_window

    def throttle(self) -> bool:
        """Called by receiving threads: wait while too much received data is untaken; whether it waited.

        While a worker here waits to send, reading goes on up to ``recv_window + send_window`` so that two
        processes sending to each other do not deadlock; past that, reading stops regardless, so memory stays
        bounded (a worker that then cannot send within the timeout fails with a FlowControlError).
        """
        config = self.config
        if self._unconsumed <= config.recv_window:
            return False
        hard = config.recv_window + config.send_window
        waited = False
        with self._lock:
            while self.failure is None and self._unconsumed > (config.recv_window if self._blocked == 0 else hard):
                waited = True
                self._lock.wait(0.1)
        return waited

    def done(self, peer: int) -> None:
        """``DONE`` went to or came from ``peer``: wake every worker and whoever waits in :meth:`finish`."""
        self._wake_all()

    def wake_event(self, local: int) -> Event:
        """What this process's ``local``-th worker waits on between idle steps."""
        return self._wakes[local]

    def linked(self, process: int) -> bool:
        """Whether this process has a link to ``process``."""
        return process in self.links

    def enqueue(self, process: int, frames: list[OutgoingFrame]) -> None:
        """Queue ``frames`` on the link to ``process`` (data frames wait while its send window is full)."""
        self.links[process].enqueue(frames)

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
        """After this process's workers are done: send what grouped channels hold back, say so to every peer and
        wait until every peer has said so."""
        self.check()
        self.flush_deferred()
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
        with self._deferred:
            self._closing = True
            self._deferred.notify()
        if self._flusher is not None and not self._flusher.is_current():
            self._flusher.join(timeout=2)
        if self._listener is not None and self.elastic:
            self._listener.close()
        with self._lock:
            self._closing = True  # no process that joins from now on is linked
            links = list(self.links.values())
        if self.failure is not None:
            now = self._clock.monotonic
            deadline = now() + grace
            for link in links:
                with link.cond:
                    while link.controls_unsent and link.sending and now() < deadline:
                        link.cond.wait(0.02)
        for link in links:
            link.close()

    def stats(self) -> dict[str, Any]:
        """Counters for tests and benchmarks: queue peaks, waits, frames and bytes sent per peer and per precedence."""
        return cluster_stats(self.max_unconsumed, list(self._allocators.values()), self.links)

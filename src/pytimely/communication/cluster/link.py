"""A link: the authenticated connection to one other process, with its sending and receiving threads.

Sending and receiving have separate deadlines. The sending thread waits for
as long as the peer is slow to read (backpressure, never a failure by itself);
only a peer that takes no byte at all for ``send_timeout`` seconds while frames
wait for it has failed. The receiving thread waits for
readable bytes in slices of one heartbeat and judges the peer by *whole
frames*: a peer from which no complete frame (data or heartbeat) arrived for
``timeout`` seconds has failed. Bytes trickling into a half-read frame keep
nothing alive. A peer that is really gone is noticed by the receiving side,
which fails the cluster; closing the link then unblocks the sender.

A link knows its process only through :class:`~.events.LinkEvents` (where received frames go, whom it tells of
the peer's control frames, the receiving side's flow control) and its :class:`~.quiescence.Quiescence`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pytimely.communication.allocator import Precedence
from pytimely.communication.cluster.events import LinkEvents
from pytimely.communication.cluster.queues import OutgoingFrame, SendQueues
from pytimely.communication.cluster.quiescence import Quiescence
from pytimely.communication.frame import (
    CONTROL_CHANNEL,
    HEADER,
    RING_MIN,
    TAG,
    Control,
    Frame,
    FrameDecoder,
    FrameEncoder,
    LinkKeys,
)
from pytimely.communication.platform import Platform, Task
from pytimely.communication.ring import RingOffer, RingReader, RingWriter, same_host, shared_memory_dir, sweep
from pytimely.communication.transport import Connection
from pytimely.config import Config
from pytimely.errors import (
    CommunicationError,
    FlowControlError,
    FrameError,
    MembershipError,
    PeerFailedError,
    PeerStalledError,
    RingError,
    SendTimeoutError,
    StalledError,
)

__all__ = ["Link"]

log = logging.getLogger("pytimely.cluster")

_RECEIVER_FIRST = 1.0
"""Seconds a sending thread that lost its connection waits for the receiving thread to report why."""
_ANNOUNCE = 256 << 10
"""Bytes placed in the ring after which the headers of their frames are written out, before the batch ends."""


class Link:
    """The connection to one other process: a sending and a receiving thread."""

    def __init__(
        self,
        peer: int,
        sock: Connection,
        keys: LinkKeys,
        config: Config,
        events: LinkEvents,
        quiescence: Quiescence,
        platform: Platform,
    ) -> None:
        self.config = config
        self.events = events
        self.quiescence = quiescence
        self.platform = platform
        self._now = platform.clock.monotonic
        self.peer = peer
        self.sock = sock
        self.cond = platform.threads.condition()
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
        self.encoder = FrameEncoder(keys.send, reuse=True)
        self.decoder = FrameDecoder(peer, keys.receive)
        self.last_heard = self._now()
        """When the last *whole* frame from the peer arrived (or reading resumed after this process paused it)."""
        self.frames_sent = 0
        self.bytes_sent = 0
        self.ring: RingWriter | None = None
        """The ring this process puts big payloads for the peer in, once offered (see :mod:`~.ring`)."""
        self._ring_reported = 0
        self.unlend: Callable[[int], int] | None = None
        """Set by the process: copies out the payloads lent from the peer's ring that still wait in a mailbox
        (given the peer), so that their places go back to the writer; the number copied."""
        self.unlent = 0
        """Payloads lent from the peer's ring and copied out while they waited for their worker."""
        self._sender: Task | None = None
        self._receiver: Task | None = None

    @property
    def sending(self) -> bool:
        """Whether frames queued now can still leave (the link is open and its sending thread runs)."""
        return not self.closed and self._sender is not None and self._sender.is_alive()

    def start(self) -> None:
        """Start the sending and receiving threads, offering the peer a shared-memory ring if configured."""
        config = self.config
        directory = shared_memory_dir()
        if config.shared_memory and directory is not None and self._on_this_host():
            try:
                sweep(directory)
                self.ring = RingWriter(config.shared_memory, directory)
            except OSError as exc:
                log.warning("process %d sends to process %d without a ring: %s", self.config.process, self.peer, exc)
            else:
                # Offered before anything else goes on the link; used once the peer says it mapped it.
                self.control(Control.RING, self.ring.offer.encode())
        threads, peer = self.platform.threads, self.peer
        self._sender = threads.spawn(self._send_loop, f"pytimely-send-{peer}")
        self._receiver = threads.spawn(self._receive_loop, f"pytimely-recv-{peer}")

    def _on_this_host(self) -> bool:
        """Whether the peer runs on this host: its address on this connection is this end's own, or both are
        loopback (for a process that joined later too, whose address no host list names)."""
        known = self.sock.same_host()
        if known is not None:
            return known
        hosts, me = self.config.hosts, self.config.process
        return self.peer < len(hosts) and me < len(hosts) and same_host(hosts[self.peer][0], hosts[me][0])

    # -- sending ---------------------------------------------------------------------------

    def enqueue(self, frames: list[OutgoingFrame]) -> None:
        """Queue frames for sending; data frames wait while the send window is full."""
        window = self.config.send_window
        with self.cond:
            for frame in frames:
                if frame.precedence == Precedence.DATA and self.queued > window:
                    self._wait_for_window(window)
                self.outgoing.put(frame)
                self.queued += frame.length
            self.max_queued = max(self.max_queued, self.queued)
            self.cond.notify_all()

    def _wait_for_window(self, window: int) -> None:
        """Wait (holding ``cond``) until the queue is under ``window``: a slow peer slows this worker down."""
        events, config = self.events, self.config
        self.waits += 1
        events.sender_blocked(+1)
        now = self._now
        since = now()
        try:
            while self.queued > window and events.failure is None and not self.closed:
                self.cond.wait(0.1)
                # Waiting on a slow peer is fine; waiting while this process can read no more is a deadlock.
                if events.receiving_full() and now() - since > config.timeout:
                    raise FlowControlError(
                        f"process {config.process} waited {config.timeout} s to send to process {self.peer} "
                        "while its own receive buffer was full: one step's output exceeds the send and receive "
                        "windows in both directions (send smaller batches per step, or raise PYTIMELY_SEND_WINDOW "
                        "and PYTIMELY_RECV_WINDOW)",
                        self.peer,
                    )
                if not events.receiving_full():
                    since = now()
        finally:
            events.sender_blocked(-1)
        failure = events.failure
        if failure is not None:
            raise failure

    def control(self, code: Control, text: str = "") -> None:
        """Queue a control frame (it overtakes every queued progress and data frame)."""
        body = text.encode("utf-8", "replace")
        with self.cond:
            self.queues[Precedence.CONTROL].append(
                OutgoingFrame.control(code, self.config.process, self.peer, body)
            )
            self.controls_unsent += 1
            self.cond.notify_all()

    def _send_loop(self) -> None:
        heartbeat = self.config.heartbeat
        me = self.config.process
        elastic = self.config.elastic
        now = self._now
        checkpoint = self.platform.threads.checkpoint
        last_sent = now()
        done_taken = False
        try:
            while True:
                with self.cond:
                    while True:
                        if self.closed or (self.done_sent and self.done_received and elastic):
                            return
                        # Only control() queues at CONTROL precedence, so what leaves that level is its control frames.
                        controls = len(self.queues[Precedence.CONTROL])
                        batch = self.outgoing.take()
                        controls -= len(self.queues[Precedence.CONTROL])
                        if batch:
                            break
                        if self.done_wanted and not done_taken:
                            batch = [OutgoingFrame.control(Control.DONE, me, self.peer)]
                            done_taken = True
                            break
                        wait = heartbeat - (now() - last_sent)
                        if wait <= 0:
                            report = self.quiescence.report()
                            batch = [OutgoingFrame.control(Control.HEARTBEAT, me, self.peer, report)]
                            break
                        self.cond.wait(wait)
                checkpoint("link-send")
                self._write(batch)
                last_sent = now()
                with self.cond:
                    self.queued -= sum(f.length for f in batch)
                    self.controls_unsent -= controls
                    # Only now is DONE on the wire: closing earlier could cut it off.
                    self.done_sent = done_taken
                    self.cond.notify_all()
                if done_taken:
                    self.events.done(self.peer)
        except OSError as exc:
            if not self.closed and not (self.done_sent and self.done_received):
                # A broken pipe says less than what the receiving thread sees of the same end (a frame cut off, a
                # peer's ABORT): let it name the cause first, for a moment.
                if self._receiver is not None and self._receiver.is_alive():
                    self._receiver.join(timeout=_RECEIVER_FIRST)
                self.events.fail(self._lost(exc))
        except CommunicationError as exc:
            self.events.fail(exc)
        finally:
            # Nothing more goes into this process's ring (a peer that left, or the end): give its pages back now,
            # not when the cluster closes (the peer's mapping, if any, keeps what it still has to read).
            if self.ring is not None:
                self.ring.close()

    def _write(self, batch: list[OutgoingFrame]) -> None:
        buffers: list[bytes | bytearray | memoryview] = []
        encode = self.encoder.encode
        ring = self.ring
        if ring is not None and not ring.ready:
            ring = None
        if ring is not None:
            ring.announce()  # every earlier batch was handed to the kernel whole
        try:
            for f in batch:
                if ring is not None and buffers and f.length >= RING_MIN and not ring.fits(f.length):
                    # The ring must be waited on: send what is encoded first, so that it is not held up by the wait
                    # and the reader can free the room its payloads hold.
                    if not self._send(buffers):
                        return
                    buffers = []
                    ring.announce()
                buffers.extend(encode(f.precedence, f.dataflow, f.channel, f.source, f.target, f.parts, f.length, ring))
                self.frames_sent += 1
                self.bytes_sent += HEADER.size + f.length + TAG
                if ring is not None and ring.head - ring.announced >= _ANNOUNCE:
                    # Payloads in the ring are announced once they add up to a fair amount of work: the reader
                    # cannot take out a payload whose header has not arrived, and would otherwise sit idle while
                    # this thread seals the rest of the batch (at most one system call per 256 KiB placed).
                    if not self._send(buffers):
                        return
                    buffers = []
                    ring.announce()
        except RingError as exc:  # the peer's control block claims it read what was never placed
            raise RingError(f"process {self.peer}: {exc}", self.peer) from None
        self._send(buffers)

    def _send(self, buffers: list[bytes | bytearray | memoryview]) -> bool:
        """Hand ``buffers`` to the kernel whole; ``False`` if the link closed meanwhile."""
        sock = self.sock
        views = [memoryview(b).cast("B") for b in buffers]
        send_timeout = self.config.send_timeout
        now = self._now
        progress = now()
        while views:
            # A slow reader holds this thread here, which is the backpressure; only a reader that takes no byte at
            # all for send_timeout seconds fails.
            sent = sock.send(views[:1024])
            if not sent:
                if self.closed:
                    return False
                if now() - progress > send_timeout:
                    raise SendTimeoutError(
                        f"process {self.peer} took no data for {send_timeout} s while frames waited for it "
                        "(PYTIMELY_SEND_TIMEOUT): it is stalled or no longer reads",
                        self.peer,
                    )
                sock.wait_writable(0.1)
                continue
            progress = now()
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
        # Every byte is with the kernel: the sealing buffers may be used again.
        self.encoder.recycle()
        return True

    # -- receiving -------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        events = self.events
        config = self.config
        sock = self.sock
        decoder = self.decoder
        now = self._now
        checkpoint = self.platform.threads.checkpoint
        slice_seconds = config.heartbeat
        waited = False
        try:
            while not self.closed:
                if decoder.held:
                    n = 0  # frames already received wait behind the one just taken from the ring
                else:
                    # Read first and wait only when nothing is there: while a stream flows, one system call (and
                    # one release of the interpreter lock) per read instead of two.
                    got = sock.recv_into(decoder.buffer())
                    if got is None:
                        if waited:
                            # A whole slice passed without a byte, and none is there now that this thread runs
                            # again: judged only after that second look, since a busy worker may have kept it from
                            # running long after its wait ended while frames queued up.
                            self._check_silence()
                        waited = not sock.wait_readable(slice_seconds)
                        continue
                    n = got
                    waited = False
                    if n == 0:
                        self._peer_closed()
                        return
                frames = decoder.advance(n)
                if frames:
                    checkpoint("link-receive")
                    self.last_heard = now()
                    self._take(frames)
                    # Not held while this thread waits for more: a frame lent from the ring keeps its place there.
                    del frames
                else:
                    self._check_silence()
                if events.throttle():
                    # This process stopped reading, not the peer: its silence meanwhile proves nothing.
                    self.last_heard = max(self.last_heard, now())
        except OSError as exc:
            if not self.closed and not self.done_received:
                events.fail(self._lost(exc))
        except (CommunicationError, MembershipError) as exc:
            events.fail(exc)
        finally:
            if decoder.ring is not None:
                decoder.ring.close()  # nothing more is read from the peer's ring

    def _peer_closed(self) -> None:
        """The peer closed its end: fine once it said it was done (or this link closed), else it failed."""
        if self.done_received or self.closed:
            return
        detail = "" if self.decoder.idle else " in the middle of a frame"
        raise PeerFailedError(
            f"process {self.peer} closed its connection{detail} before finishing: it died or was killed",
            self.peer,
        )

    def _take(self, frames: list[Frame]) -> None:
        """Handle received frames, then free their place in the peer's ring if they came through it."""
        for frame in frames:
            self._handle(frame)
        ring = self.decoder.ring
        if ring is not None and self.decoder.spilled and self.unlend is not None:
            # The peer sent a big payload on the socket: its ring was full past its patience, held by payloads lent
            # here. Those still waiting for their worker (it lags) are copied out now, as all payloads once were, so
            # that the next ones go through the ring again; those decoded already stay lent.
            self.decoder.spilled = False
            self.unlent += self.unlend(self.peer)
        if ring is not None and ring.read > self._ring_reported:
            # Copied out, or lent and given back already: the writer may reuse their place. A peer that mapped
            # this process's ring reads that in its control block at once; otherwise it is told.
            self._ring_reported = ring.read
            own = self.ring
            if own is not None and own.ready:
                own.publish(ring.read)
            else:
                self.control(Control.RING_FREE, str(ring.read))

    def _ring_given_back(self, read: int) -> None:
        """The peer's ring is free up to ``read`` (called on any thread): publish it if this process has a ring."""
        own = self.ring
        if own is not None and own.ready:
            own.publish(read)

    def _check_silence(self) -> None:
        """Fail the peer if no whole frame came from it for ``timeout`` seconds."""
        timeout = self.config.timeout
        silent = self._now() - self.last_heard
        if silent > timeout and not self.done_received and not self.closed:
            partial = "" if self.decoder.idle else " (a frame it started never completed)"
            raise PeerFailedError(
                f"process {self.peer} sent no complete frame for {silent:.1f} s (timeout {timeout} s){partial}: "
                "it is stalled or unreachable",
                self.peer,
            )

    def _handle(self, frame: Frame) -> None:
        if frame.dataflow == CONTROL_CHANNEL:
            if frame.channel == Control.HEARTBEAT:
                self.quiescence.heard(self.peer, bytes(frame.payload))
                return
            if frame.channel == Control.DONE:
                self.done_received = True
                self.events.done(self.peer)
                return
            if frame.channel == Control.ABORT:
                reason = bytes(frame.payload).decode("utf-8", "replace")
                # A stall is the computation's, not the peer's: every process reports it as one.
                kind = PeerStalledError if reason.startswith(f"{StalledError.__name__}:") else PeerFailedError
                raise kind(f"process {self.peer} stopped: {reason}", self.peer)
            if frame.channel == Control.JOIN and self.config.elastic:
                self.events.joined(self.peer, bytes(frame.payload).decode("ascii", "replace"))
                return
            if frame.channel == Control.LEAVING and self.config.elastic:
                self.events.leaving(self.peer)
                return
            if frame.channel in (Control.RING, Control.RING_ACCEPT, Control.RING_FREE):
                self._ring_control(Control(frame.channel), bytes(frame.payload).decode("ascii", "replace"))
                return
            raise FrameError(
                f"process {self.peer} sent an unknown control frame {frame.channel}",
                peer=self.peer,
                channel=(frame.dataflow, frame.channel),
            )
        self.quiescence.active(self.peer)
        self.events.deliver(self.peer, frame)

    def _ring_control(self, code: Control, text: str) -> None:
        """The peer offers its ring, answers this process's offer, or frees part of this process's ring."""
        if code == Control.RING:
            offer = RingOffer.decode(text)
            directory = shared_memory_dir()
            try:
                if directory is None or not self.config.shared_memory or self.decoder.ring is not None:
                    raise OSError("no shared memory here (or PYTIMELY_SHARED_MEMORY=0), or a ring is mapped already")
                self.decoder.ring = RingReader(offer, directory)
                # A payload lent to the worker is given back wherever its last array dies: the writer hears of it
                # at once through this process's control block, when there is one (else with the next frames).
                self.decoder.ring.on_release = self._ring_given_back
                if self.ring is not None:
                    # The peer's ring's control block says how far the peer has read this process's ring.
                    self.ring.feedback = self.decoder.ring
            except (OSError, RingError) as exc:
                # Another host, or no /dev/shm: the peer keeps sending on the socket.
                me = self.config.process
                log.info("process %d takes process %d's frames without its ring: %s", me, self.peer, exc)
                self.control(Control.RING_ACCEPT, "0")
            else:
                self.control(Control.RING_ACCEPT, "1")
            return
        ring = self.ring
        if code == Control.RING_ACCEPT and (ring is None or ring.ready):
            raise RingError(f"process {self.peer} answered a ring offer this process did not make", self.peer)
        if ring is None:
            raise RingError(f"process {self.peer} freed space in a ring this process never offered it", self.peer)
        if code == Control.RING_ACCEPT:
            if text == "1":
                ring.accepted()
            else:
                ring.close()
                self.ring = None
            return
        if not text.isdigit():
            raise RingError(f"process {self.peer} freed ring position {text[:40]!r}", self.peer)
        try:
            ring.release(int(text))
        except RingError as exc:
            raise RingError(f"process {self.peer}: {exc}", self.peer) from None

    def _lost(self, exc: OSError) -> PeerFailedError:
        return PeerFailedError(
            f"the connection to process {self.peer} failed ({type(exc).__name__}: {exc}): it died or is unreachable",
            self.peer,
        )

    def close(self) -> None:
        """Stop both threads and close the socket."""

        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.sock.shutdown()
        for thread in (self._sender, self._receiver):
            if thread is not None and thread.is_alive() and not thread.is_current():
                thread.join(timeout=2)
        self.sock.close()
        if self.ring is not None:
            self.ring.close()
        if self.decoder.ring is not None:
            self.decoder.ring.close()

"""A link: the authenticated connection to one other process, with its sending and receiving threads."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from pytimely.communication.allocator import Precedence
from pytimely.communication.cluster.queues import OutgoingFrame, SendQueues
from pytimely.communication.frame import CONTROL_CHANNEL, HEADER, Control, Frame, FrameDecoder, FrameEncoder
from pytimely.errors import CommunicationError, FrameError, MembershipError, PeerFailedError

if TYPE_CHECKING:
    from pytimely.communication.cluster.process import Cluster

__all__ = ["Link"]


class Link:
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

    def enqueue(self, frames: list[OutgoingFrame]) -> None:
        """Queue frames for sending; data frames wait while the send window is full."""
        cluster = self.cluster
        window = cluster.config.send_window
        with self.cond:
            for frame in frames:
                if frame.precedence == Precedence.DATA and self.queued > window:
                    self.waits += 1
                    cluster._sender_blocked(+1)
                    try:
                        while self.queued > window and cluster.failure is None and not self.closed:
                            self.cond.wait(0.1)
                    finally:
                        cluster._sender_blocked(-1)
                    cluster.check()
                self.outgoing.put(frame)
                self.queued += frame.length
            self.max_queued = max(self.max_queued, self.queued)
            self.cond.notify_all()

    def control(self, code: Control, text: str = "") -> None:
        """Queue a control frame (it overtakes every queued progress and data frame)."""
        body = text.encode("utf-8", "replace")
        with self.cond:
            self.queues[Precedence.CONTROL].append(
                OutgoingFrame.control(code, self.cluster.config.process, self.peer, body)
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
                        wait = heartbeat - (time.monotonic() - last_sent)
                        if wait <= 0:
                            batch = [OutgoingFrame.control(Control.HEARTBEAT, me, self.peer)]
                            break
                        self.cond.wait(wait)
                self._write(batch)
                last_sent = time.monotonic()
                with self.cond:
                    self.queued -= sum(f.length for f in batch)
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

    def _write(self, batch: list[OutgoingFrame]) -> None:
        buffers: list[Any] = []
        encode = self.encoder.encode
        total = 0
        for f in batch:
            buffers.append(encode(f.precedence, f.dataflow, f.channel, f.source, f.target, f.parts, f.length))
            buffers.extend(f.parts)
            total += HEADER.size + f.length
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

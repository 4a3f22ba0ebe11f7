"""Routing messages to workers: mailboxes fed by local workers and links, and push ends towards every worker.

A worker's mailbox is the in-process :class:`~pytimely.communication.mailbox.Mailbox`
that also takes checked payloads from other processes (:class:`Wire`), decoded
only when the worker drains them. Push ends towards workers of another process
pickle into the worker's outbox as typed :class:`~pytimely.communication.cluster.queues.OutgoingFrame`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pytimely.communication.allocator import Precedence
from pytimely.communication.cluster.events import Hub, MailboxOwner
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.frame import EVERY_WORKER
from pytimely.communication.mailbox import Mailbox
from pytimely.communication.payload import dumps, has_buffers, loads
from pytimely.communication.platform import Event
from pytimely.errors import MembershipError, PayloadError

__all__ = ["DECODE_BUDGET", "ClusterMailbox", "ProcessPush", "ProcessPushes", "Pushes", "RemotePush", "Wire"]


def _broadcast(live: list[tuple[int, Any]], workers: int, message: Any, skip: int | None) -> None:
    """Send ``message`` to every ``(worker id, push)`` of ``live`` but ``skip``: by reference to this process's
    workers, one frame to each other process all of whose ``workers`` workers are in ``live``."""
    remote: dict[int, list[RemotePush]] = {}
    for worker, push in live:
        if worker == skip:
            continue
        if type(push) is RemotePush:
            remote.setdefault(worker // workers, []).append(push)
        else:
            push.push(message)
    encoded: tuple[list[bytes | memoryview], int] | None = None
    for pushes in remote.values():
        if len(pushes) == workers:
            if encoded is None:
                encoded = dumps(message)
            # Numpy and Arrow buffers cross once too: the receiving process hands each of its workers its own copy
            # to rebuild them on (Cluster.deliver), so one worker's writes never show in another's.
            pushes[0].push_to_process(*encoded)
            continue
        # Not every worker there is a member: each member gets its own.
        for push in pushes:
            push.push(message)


class ProcessPushes(list[Any]):
    """Push ends of one channel by worker index, for a cluster whose members do not change: a list whose
    :meth:`broadcast` serialises a message once and sends it once to each other process, for all its workers."""

    __slots__ = ("_targets", "_workers")

    def __init__(self, pushes: list[Any], workers: int) -> None:
        super().__init__(pushes)
        self._targets = list(enumerate(pushes))
        self._workers = workers

    def targets(self) -> list[tuple[int, Any]]:
        """``(worker index, push)`` of every worker, by index."""
        return self._targets

    def broadcast(self, message: Any, skip: int | None = None) -> None:
        """Send ``message`` to every worker but ``skip``: by reference to this process's workers, one frame to each
        other process."""
        _broadcast(self._targets, self._workers, message, skip)


class Pushes:
    """Push ends of one channel by worker id, for a cluster whose members change (entries come and go).

    :meth:`broadcast` sends a message to every member serialised once, and once to each other process for all
    of its ``workers`` workers (handed to each of them there), not once per worker there.
    """

    __slots__ = ("_by_id", "_initial", "_live", "_workers")

    def __init__(self, initial: int, workers: int) -> None:
        self._by_id: dict[int, Any] = {}
        self._live: list[tuple[int, Any]] = []
        self._initial = initial
        self._workers = workers

    def broadcast(self, message: Any, skip: int | None = None) -> None:
        """Send ``message`` to every member but ``skip``: by reference to this process's workers, one frame to each
        other process."""
        _broadcast(self._live, self._workers, message, skip)

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


DECODE_BUDGET = 256 << 10
"""Bytes of pickled data payloads (records pickled in-band: no numpy or Arrow buffers) a worker decodes in one drain
of a mailbox, after the first: the rest wait for its next step (see :meth:`ClusterMailbox.drain`)."""


class Wire:
    """A checked payload from another process, decoded when its worker drains it (``data``: of a data channel,
    not progress)."""

    # Weakly referable: the process keeps track of the wires whose payloads are lent from a ring (without keeping
    # them, which would keep their places in the ring).
    __slots__ = ("__weakref__", "channel", "data", "payload", "peer")

    def __init__(self, payload: memoryview, peer: int, channel: tuple[int, int], *, data: bool = True) -> None:
        self.payload = payload
        self.peer = peer
        self.channel = channel
        self.data = data


class ClusterMailbox(Mailbox):
    """One worker's incoming side of one channel, fed by local workers (objects) and links (payloads)."""

    __slots__ = ("_owner", "_wake")

    def __init__(self, owner: MailboxOwner, wake: Event) -> None:
        super().__init__()
        self._owner = owner
        self._wake = wake
        self.push = self._push_and_wake

    def _push_and_wake(self, message: Any) -> None:
        """A message from a worker of this process."""
        self._queue.append(message)
        self._wake.set()

    def arrive(self, wire: Wire) -> None:
        """A payload that arrived from another process, to decode when drained; wakes the worker."""
        self._queue.append(wire)
        self._wake.set()

    def wire(self, messages: list[Wire]) -> None:
        """Payloads that arrived from another process, to decode when drained."""
        self._queue.extend(messages)
        self._wake.set()

    def drain(self) -> list[Any]:
        """The queued messages, oldest first; payloads from other processes are decoded here.

        Every message, but for data payloads of records pickled in-band (lists of tuples, not numpy or Arrow
        buffers): once :data:`DECODE_BUDGET` bytes of those are decoded, the rest stay queued, in order, for the
        worker's next step (its wake is set for them). A worker that fell behind would otherwise rebuild every
        batch that piled up at once, thousands of tuples each, all alive together: past the collector's young
        threshold of a step (:mod:`pytimely.collector`) a young collection walks them all and promotes them, and
        they leave the caches before their operator reads them. Progress payloads are always drained whole.
        """
        queue = self._queue
        if not queue:
            return []
        out = []
        popleft = queue.popleft
        consumed = 0
        decoded = 0
        for _ in range(len(queue)):
            message = queue[0]
            if type(message) is Wire and message.data and not has_buffers(message.payload):
                if decoded >= DECODE_BUDGET:
                    self._wake.set()
                    break
                decoded += len(message.payload)
            popleft()
            if type(message) is Wire:
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
                    self._owner.fail(error)
                    raise error from exc
            out.append(message)
        if consumed:
            self._owner.consumed(consumed)
        return out


class RemotePush:
    """The push end towards a worker of another process: pickles into the worker's outbox of ``(process, frame)``."""

    __slots__ = ("_channel", "_dataflow", "_outbox", "_precedence", "_process", "_source", "_target")

    def __init__(
        self,
        outbox: list[tuple[int, OutgoingFrame]],
        precedence: Precedence,
        channel: tuple[int, int],
        source: int,
        target: int,
        process: int,
    ) -> None:
        self._outbox = outbox
        self._precedence = precedence
        self._dataflow, self._channel = channel
        self._source = source
        self._target = target
        self._process = process

    def push(self, message: Any) -> None:
        """Serialise ``message`` now (the sender may reuse its objects) and queue it until release."""
        parts, length = dumps(message)
        self._outbox.append((self._process, self._frame(self._target, parts, length)))

    def push_to_process(self, parts: list[bytes | memoryview], length: int) -> None:
        """Queue a serialised message for every worker of this end's process, on its channel, in its outbox."""
        self._outbox.append((self._process, self._frame(EVERY_WORKER, parts, length)))

    def _frame(self, target: int, parts: list[bytes | memoryview], length: int) -> OutgoingFrame:
        return OutgoingFrame(self._precedence, self._dataflow, self._channel, self._source, target, parts, length)


class ProcessPush:
    """The push end towards every worker of every other process: serialised once, one frame per link, queued at once.

    It bypasses the worker's outbox so that pushes from several workers of this process reach each link in the
    order they were made (under the caller's lock): the link's queue of a precedence is one FIFO.
    """

    __slots__ = ("_channel", "_dataflow", "_hub", "_precedence", "_tally")

    def __init__(self, hub: Hub, precedence: Precedence, channel: tuple[int, int], tally: list[int]) -> None:
        self._hub = hub
        self._precedence = precedence
        self._dataflow, self._channel = channel
        self._tally = tally

    def push(self, message: Any, processes: Iterable[int] | None = None) -> None:
        """Serialise ``message`` and queue it for the link to each of ``processes`` (default: every other process
        taking part) that still takes part; never waits for the send window."""
        hub = self._hub
        parts, length = dumps(message)  # the parts are bytes, shared by every frame
        frame = OutgoingFrame(self._precedence, self._dataflow, self._channel, hub.me, EVERY_WORKER, parts, length)
        live = hub.live
        wanted = live if processes is None else processes
        # A process that said it leaves gets nothing more (it left ``live`` then), as from every worker's push ends.
        others = sorted(p for p in wanted if p != hub.me and p in live and hub.linked(p))
        self._tally[0] += len(others)
        self._tally[1] += length * len(others)
        hub.quiescence.sent(len(others))
        for process in others:
            hub.enqueue(process, [frame])

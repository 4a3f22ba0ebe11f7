"""The allocator of one worker of a cluster: channels to every worker, membership changes applied between steps."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from pytimely.communication.allocator import Grouped, Precedence
from pytimely.communication.cluster.events import Hub, Inbox
from pytimely.communication.cluster.membership import Membership
from pytimely.communication.cluster.queues import OutgoingFrame
from pytimely.communication.cluster.router import ProcessPush, ProcessPushes, Pushes, RemotePush
from pytimely.communication.frame import CONTROL_CHANNEL
from pytimely.errors import InvalidArgument

__all__ = ["ClusterAllocator"]

S = TypeVar("S")


class ClusterAllocator:
    """The allocator of one worker of a :class:`~pytimely.communication.cluster.Cluster` (which it knows as a
    :class:`~.events.Hub`)."""

    def __init__(self, cluster: Hub, local: int) -> None:
        self._cluster = cluster
        self._local = local
        self._index = cluster.first + local
        self._wake = cluster.wake_event(local)
        self._checkpoint = cluster.platform.threads.checkpoint
        self._outbox: list[tuple[int, OutgoingFrame]] = []
        self.sent: dict[Precedence, list[int]] = {p: [0, 0] for p in Precedence}
        """Frames and payload bytes this worker sent to other processes, by precedence (progress traffic)."""
        self.elastic = cluster.elastic
        self._handed: list[tuple[tuple[int, int], Precedence, Pushes]] = []
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

    def allocate(self, channel: Hashable, precedence: Precedence = Precedence.DATA) -> tuple[Any, Any]:
        """Push ends to every worker (by reference locally, as frames remotely) and this worker's mailbox."""
        key = _channel_key(channel)
        cluster = self._cluster
        boxes = cluster.open(key)
        if self.elastic:
            pushes = Pushes(cluster.initial_peers, cluster.workers)
            for target in sorted(self._members):
                pushes.add(target, self._push_to(boxes, key, Precedence(precedence), target))
            self._handed.append((key, Precedence(precedence), pushes))
            return pushes, boxes[self._local]
        pushes_to = [self._push_to(boxes, key, Precedence(precedence), t) for t in range(cluster.peers)]
        return ProcessPushes(pushes_to, cluster.workers), boxes[self._local]

    @property
    def groups(self) -> bool:
        """Whether channels are grouped by process: a cluster of several workers a process that allows it, elastic
        or of several processes (with one worker a process, a message crosses to another process once either way)."""
        config = self._cluster.config
        return config.aggregate_progress and config.workers > 1 and (self.elastic or config.processes > 1)

    def allocate_grouped(
        self, channel: tuple[int, int], precedence: Precedence, make: Callable[[int], S]
    ) -> Grouped[S]:
        """Channel ``(dataflow, index)`` with one push end per worker here and one per other process (fanned out
        there to each of its workers); ``make`` builds the object this process's workers share for it."""
        if not self.groups:
            raise InvalidArgument(
                "only a cluster of several workers a process, elastic or of several processes, groups channels by "
                "process"
            )
        if precedence == Precedence.DATA:
            raise InvalidArgument("a grouped channel bypasses the send window, so it cannot carry data")
        key = _channel_key(channel)
        cluster = self._cluster
        boxes = cluster.open(key)
        shared, lock = cluster.shared(key, lambda: make(cluster.me))
        others = ProcessPush(cluster, Precedence(precedence), key, self.sent[Precedence(precedence)])
        return Grouped(
            cluster.me, cluster.config.processes, list(boxes), others, boxes[self._local], shared, lock, cluster
        )

    def _push_to(self, boxes: Sequence[Inbox], key: tuple[int, int], precedence: Precedence, target: int) -> Any:
        cluster = self._cluster
        if cluster.first <= target < cluster.first + cluster.workers:
            return boxes[target - cluster.first]
        return RemotePush(self._outbox, precedence, key, self._index, target, target // cluster.workers)

    def built(self, dataflow: int) -> None:
        """Frames for channels of ``dataflow`` that no worker here opened are now known to be errors."""
        self._cluster.seal(dataflow)

    def receive(self) -> None:
        """Raise if the cluster has failed; apply membership changes to this worker's channels."""
        self._checkpoint("worker-step")
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
            cluster.applied_by_worker(self.seen)
            self.seen += 1

    def retire(self) -> None:
        """This worker has finished; it applies no further membership changes."""
        self._cluster.quiescence.quiet(self._local, True)
        if self.elastic:
            self._cluster.retire_worker()

    def quiet(self, flag: bool) -> None:
        """Whether this worker now only waits for its dataflows and its last steps found nothing to do."""
        self._cluster.quiescence.quiet(self._local, flag)

    def stalled(self) -> bool:
        """Whether the whole cluster has been quiet for ``Config.stall_timeout`` seconds (nothing can move)."""
        cluster = self._cluster
        peers = [p for p in cluster.live if p != cluster.me]
        return cluster.quiescence.quiet_for(peers) >= cluster.config.stall_timeout

    def ready_to_leave(self) -> None:
        """This worker may go; once every worker of the process is ready, the process says it leaves."""
        self._cluster.worker_leaves()

    def left_by_all(self) -> bool:
        """Whether every other process has stopped sending to this leaving one."""
        return self._cluster.left_by_all()

    def release(self) -> None:
        """Hand this step's frames to the links (waiting while a peer's send window is full)."""
        outbox = self._outbox
        if not outbox:
            return
        cluster = self._cluster
        by_process: dict[int, list[OutgoingFrame]] = {}
        sent = self.sent
        for process, frame in outbox:
            by_process.setdefault(process, []).append(frame)
            tally = sent[frame.precedence]
            tally[0] += 1
            tally[1] += frame.length
        cluster.quiescence.sent(len(outbox))
        outbox.clear()
        for process, frames in by_process.items():
            cluster.enqueue(process, frames)

    def park(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for something to arrive for this worker."""
        wake = self._wake
        if not wake.is_set():
            wake.wait(timeout)
        wake.clear()
        self._cluster.check()

    def stats(self) -> dict[str, Any]:
        """The cluster's counters (see :meth:`Cluster.stats`) and, as ``sent_by_worker``, this worker's frames and bytes
        sent to other processes by precedence."""
        mine = {p.name.lower(): {"frames": f, "bytes": b} for p, (f, b) in self.sent.items()}
        return {**self._cluster.stats(), "sent_by_worker": mine}


def _channel_key(channel: Hashable) -> tuple[int, int]:
    """``channel`` as a cluster channel key, or a ValueError saying what it must be."""
    if not (
        isinstance(channel, tuple)
        and len(channel) == 2
        and all(type(c) is int and 0 <= c < CONTROL_CHANNEL for c in channel)
    ):
        raise InvalidArgument(f"cluster channels are (dataflow, channel) pairs of small ints, got {channel!r}")
    return (channel[0], channel[1])

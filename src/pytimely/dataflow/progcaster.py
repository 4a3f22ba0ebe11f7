"""One dataflow's progress channel on one worker: batches out and in, and bootstraps of joining workers.

timely keeps its progcaster apart from the subgraph that schedules operators; so does
pytimely. :class:`Progcaster` owns the channel (``(dataflow, 0)`` at progress
precedence), the :class:`~pytimely.progress.broadcast.ProgressSender` operators record
their pointstamp changes with, the receiver's sequence numbers, this worker's own
capabilities, and both ends of the bootstrap of seed 002 (a joining worker's
:class:`~pytimely.progress.bootstrap.Bootstrap`, a member's
:class:`~pytimely.progress.bootstrap.BootstrapServer`). The subgraph hands it the
tracker and its operators when a step needs them, and schedules what it reports.

In a cluster of several workers a process, fixed or elastic, progress is aggregated per process
(seed 002 §3.3, footnote 4; models :mod:`pytimely.verify.aggregate` and the aggregated senders of
:mod:`pytimely.verify.rescale`): a worker's batch goes to the workers of its own process directly and
into the process's :class:`ProcessOutbox`, whose queued batches leave combined, as one, to every other
process once, fanned out there to each worker. A worker's send is atomic with respect to the other
workers' sends of its process, as ``send_upd`` is in the model (one lock per process and dataflow);
offering and flushing are separate steps (``send_upd`` and ``agg_send``): the queue leaves once every
worker of the process that may still add to it (inside a step, or woken by a message) has ended a step,
or once its oldest batch has waited ``AGGREGATE_DELAY`` (the cluster's outbox thread sees to that when
no worker steps). In an elastic cluster each process's outbox greets a joining process with the number
of its next combined batch, and a bootstrap server flushes its outbox and takes in what arrived before it
takes its state (:meth:`Progcaster._flush_and_take_in`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytimely.communication.allocator import (
    ElasticAllocator,
    Grouped,
    GroupingAllocator,
    Precedence,
    broadcast,
    elastic_view,
    grouping_view,
)
from pytimely.communication.payload import dumps
from pytimely.errors import BootstrapError
from pytimely.progress.bootstrap import (
    Bootstrap,
    BootstrapServer,
    Hello,
    ProgressState,
    RangeReply,
    RangeRequest,
    mint,
)
from pytimely.progress.broadcast import (
    ProgressAggregator,
    ProgressBatch,
    ProgressReceiver,
    ProgressSender,
    aggregate_sender,
)
from pytimely.progress.change_batch import ChangeBatch
from pytimely.progress.location import Source, Target

if TYPE_CHECKING:
    from pytimely.communication.allocator import Allocator, Pull, Push
    from pytimely.dataflow.operator import OperatorCore
    from pytimely.observe.eventlog import EventLogger
    from pytimely.progress.reachability import Tracker

__all__ = ["ProcessOutbox", "Progcaster"]


class ProcessOutbox:
    """This process's progress outbox of one dataflow, shared by its workers (a grouped channel's shared object):
    the :class:`~pytimely.progress.broadcast.ProgressAggregator` that decides when queued batches leave, and the
    push end they leave by. Changed only under the channel's lock."""

    def __init__(self, process: int) -> None:
        self.aggregator: ProgressAggregator[Any] = ProgressAggregator(process)
        self._grouped: Grouped[ProcessOutbox] | None = None
        self.targets: set[int] | None = None
        """The processes combined batches go to (``None``: every other process; an elastic cluster's outbox names
        them, each greeted first with :meth:`greet`)."""

    def attach(self, grouped: Grouped[ProcessOutbox], targets: Iterable[int] | None = None) -> None:
        """Send through ``grouped``'s ends (the first worker's to ask: any serves, they reach the same links), to
        ``targets`` (default every other process)."""
        if self._grouped is None:
            self._grouped = grouped
            self.targets = None if targets is None else set(targets)

    def greet(self, process: int) -> None:
        """Start sending to ``process`` (which joined): its first message from here is a :class:`Hello` naming the
        next combined batch (the model's bootstrap message of this process's aggregate sender)."""
        grouped = self._grouped
        assert grouped is not None and self.targets is not None
        if process in self.targets:
            return
        aggregator = self.aggregator
        grouped.others.push(Hello(aggregator.sender, aggregator.next_seq()), [process])
        self.targets.add(process)

    def forget(self, process: int) -> None:
        """Send nothing more to ``process`` (it leaves)."""
        if self.targets is not None:
            self.targets.discard(process)

    def end(self, worker: int, now: float) -> bool:
        """``worker``'s step ended: send what may leave now, or have it looked at by its deadline; whether it sent."""
        grouped = self._grouped
        assert grouped is not None
        aggregator = self.aggregator
        if aggregator.end(worker, now, grouped.group.awake()):
            return self._flush(grouped)
        deadline = aggregator.deadline()
        if deadline is not None:
            grouped.group.wake_by(deadline)
        return False

    def deadline(self) -> float | None:
        """When the oldest held batch must leave (``None``: none is held)."""
        return self.aggregator.deadline()

    def flush_due(self, now: float) -> bool:
        """Send what must leave by ``now`` (every worker may be waiting, or busy outside its steps)."""
        grouped = self._grouped
        if grouped is None or not self.aggregator.due(now, grouped.group.awake()):
            return False
        return self._flush(grouped)

    def _flush(self, grouped: Grouped[ProcessOutbox]) -> bool:
        """``agg_send`` of every queued batch, as one, to every other process."""
        combined = self.aggregator.flush()
        if combined is not None:
            grouped.others.push(combined, self.targets)
        return True

    def flush_all(self) -> None:
        """``agg_send`` of whatever is queued, now (a bootstrap server's state must include it)."""
        grouped = self._grouped
        if grouped is not None and self.aggregator.queued():
            self._flush(grouped)


class Progcaster:
    """This worker's end of one dataflow's progress exchange (module doc)."""

    def __init__(self, allocator: Allocator, ident: int, name: str, log: EventLogger | None = None) -> None:
        self.worker = allocator.index
        self.peers = allocator.peers
        self.name = name
        self.log = log
        self.sender: ProgressSender[Any] = ProgressSender(self.worker)
        self.record = self.sender.record
        view = elastic_view(allocator)
        self.elastic_allocator: ElasticAllocator | None = view if view is not None and view.elastic else None
        self._events_seen = 0 if view is None else view.seen
        members = self.elastic_allocator.members if self.elastic_allocator is not None else self.peers
        self._receiver = ProgressReceiver(members)
        self._server = BootstrapServer(self.worker)
        self._own: ChangeBatch[tuple[Source, Any]] = ChangeBatch()
        """This worker's own capabilities, as far as it has sent them (pending changes come on top)."""
        self._sent: list[Any] = []
        """The updates of batches sent since ``_own`` was last brought up to date (see ``_fold_sent``)."""
        joining = None if view is None else view.joining
        self._boot: Bootstrap | None = None if joining is None else Bootstrap(self.worker, *joining)
        self._boot_started = time.perf_counter()
        self._boot_report: dict[str, float] = {}
        self._taken_in = False
        """Whether batches were applied outside :meth:`receive` (by a bootstrap server) and not yet propagated."""
        self._progress_push: Sequence[Push[Any]]
        self._progress_pull: Pull[Any]
        grouping = grouping_view(allocator)
        self._grouped: Grouped[ProcessOutbox] | None = None
        if grouping is None:
            self._progress_push, self._progress_pull = allocator.allocate((ident, 0), Precedence.PROGRESS)
        elif self.elastic_allocator is None:
            grouped = self._group(grouping, ident, None)
            self._progress_push, self._progress_pull = grouped.local, grouped.pull
            workers = len(grouped.local)
            first = grouped.process * workers
            self._receiver = ProgressReceiver(
                [
                    *range(first, first + workers),
                    *(aggregate_sender(p) for p in range(grouped.processes) if p != grouped.process),
                ]
            )
        else:
            # Batches go to this process's workers and through its outbox; bootstrap messages to single workers.
            self._progress_push, self._progress_pull = allocator.allocate((ident, 0), Precedence.PROGRESS)
            elastic = self.elastic_allocator
            per = elastic.workers_per_process
            mine = self.worker // per
            # A process whose join this worker has yet to apply is greeted then (_membership), not sent to before.
            pending = {e.process for e in elastic.events[self._events_seen :] if e.kind == "join"}
            processes = {w // per for w in elastic.members} - {mine} - pending
            self._group(grouping, ident, processes)
            self._receiver = ProgressReceiver(
                [
                    *(w for w in elastic.members if w // per == mine),
                    *(aggregate_sender(p) for p in sorted(processes)),
                ]
            )
            if joining is not None:
                server, members_then, fresh = joining
                heard = sorted({aggregate_sender(w // per) for w in members_then if w // per != mine})
                self._boot = Bootstrap(self.worker, server, heard, [w for w in fresh if w // per == mine])

    def _group(
        self, grouping: GroupingAllocator, ident: int, targets: Iterable[int] | None
    ) -> Grouped[ProcessOutbox]:
        """The grouped ends of the progress channel, its process's outbox attached (sending to ``targets``)."""
        grouped: Grouped[ProcessOutbox] = grouping.allocate_grouped((ident, 0), Precedence.PROGRESS, ProcessOutbox)
        with grouped.lock:
            grouped.shared.attach(grouped, targets)
        self._grouped = grouped
        return grouped

    @property
    def bootstrapped(self) -> bool:
        """Whether this worker's view of the progress state is complete (always, unless it is joining)."""
        return self._boot is None

    def close(self) -> Pull[Any]:
        """Stop exchanging progress (the dataflow was dropped); returns the channel's receiving end to drain."""
        self._progress_pull.drain()
        self._progress_push = []
        grouped, self._grouped = self._grouped, None
        if grouped is not None:
            # This worker steps the dataflow no more: the others' batches must not wait for its step to end.
            self._send_grouped(grouped, self.worker, None)
        return self._progress_pull

    # -- building -------------------------------------------------------------------------

    def start(self, tracker: Tracker[Any], operators: Sequence[OperatorCore]) -> None:
        """Count every worker's initial capabilities (a joining worker learns them from its bootstrap)."""
        # Every worker's copy of an operator starts with a capability per output, so each worker
        # counts all of them; a worker's drop of its own copy then arrives as an ordinary update.
        if self._boot is None:
            for op in operators:
                if op.initial_caps:
                    for port in op.outputs:
                        tracker.update(port.source, op.scope.minimum, self.peers)
                        self._own.update((port.source, op.scope.minimum), len(port.initial))
        self._boot_started = time.perf_counter()  # a newcomer's bootstrap is timed from here

    # -- a member's step ------------------------------------------------------------------

    def membership(self, tracker: Tracker[Any], operators: Sequence[OperatorCore]) -> bool:
        """Apply the membership events that arrived since the last step; return whether there were any."""
        elastic = self.elastic_allocator
        if elastic is None:
            return False
        seen = elastic.seen
        if seen <= self._events_seen:
            return False
        self._membership(elastic.events[self._events_seen : seen], tracker, operators)
        self._events_seen = seen
        return True

    def receive(self, tracker: Tracker[Any]) -> dict[Target, Any] | None:
        """Apply the batches that arrived and propagate: the input frontiers that moved, or None if none came."""
        grouped = self._grouped
        if grouped is not None:
            with grouped.lock:
                # From now until this step's send, this worker may add a batch the others' could leave with.
                grouped.shared.aggregator.begin(self.worker)
        batches = self._progress_pull.drain()
        if not batches and not self._taken_in:
            return None
        self._taken_in = False
        self._take_in(batches, tracker)
        return tracker.propagate_all()

    def _take_in(self, messages: list[Any], tracker: Tracker[Any]) -> None:
        """Apply the batches among ``messages`` to ``tracker`` (their senders' order checked), handle the rest."""
        log = self.log
        receiver = self._receiver
        server = self._server
        for batch in messages:
            if type(batch) is not ProgressBatch:
                self._control(batch)
                continue
            tracker.update_batch(receiver.accept(batch))
            if log is not None:
                log.progress("received", len(batch.updates))
            if server.serving:
                server.applied(batch)

    def send(self) -> bool:
        """Broadcast, as one batch, the changes recorded since the last send; serve newcomers' requests."""
        worked = False
        batch = self.sender.flush()
        grouped = self._grouped
        if batch is not None:
            worked = True
            # Kept in every dataflow (explain() names the worker holding a capability), folded into _own when read.
            self._sent.append(batch.updates)
            if len(self._sent) > 1024:
                self._fold_sent()
            if self.log is not None:
                self._log_batch(self.log, batch)
            if grouped is None:
                broadcast(self._progress_push, batch)
        if grouped is not None:
            worked = self._send_grouped(grouped, self.worker, batch) or worked
        if self._server.serving:
            for newcomer, reply in self._server.replies(self._receiver):
                self._progress_push[newcomer].push(reply)
        return worked

    @staticmethod
    def _send_grouped(grouped: Grouped[ProcessOutbox], worker: int, batch: ProgressBatch[Any] | None) -> bool:
        """The end of ``worker``'s step: ``send_upd`` of the aggregate model for ``batch`` (if any), to this process's
        workers and into its outbox; then ``agg_send`` of what the outbox lets leave now (whether anything did)."""
        # Under the process's lock: no other worker's batch enters the outbox between this one's local pushes and
        # its own (the model's send_upd is one step), and combined batches reach each link in order.
        with grouped.lock:
            outbox = grouped.shared
            now = grouped.group.monotonic()
            if batch is not None:
                for push in grouped.local:
                    push.push(batch)
                outbox.aggregator.offer(batch, now)
            return outbox.end(worker, now)

    def _log_batch(self, log: EventLogger, batch: ProgressBatch[Any]) -> None:
        """Log a progress batch this worker sends, and the capability changes in it."""
        log.progress("sent", len(batch.updates))
        for location, t, diff in batch.updates:
            if type(location) is Source:
                log.capability(location.node, location.port, t, diff)

    # -- membership (seed 002) --------------------------------------------------------------

    def _control(self, message: Any) -> None:
        """A message on the progress channel that is not a batch: a newcomer's range request."""
        if type(message) is RangeRequest:
            self._server.request(message)
            return
        raise BootstrapError(
            f"worker {self.worker} is a member of dataflow {self.name!r} and got {type(message).__name__}, which only "
            "a joining worker expects"
        )

    def _fold_sent(self) -> None:
        """Fold the capability changes of the batches this worker sent into ``_own``."""
        own = self._own
        for updates in self._sent:
            own.extend([((u[0], u[1]), u[2]) for u in updates if type(u[0]) is Source])
        self._sent.clear()
        own.compact()

    def own_capabilities(self) -> dict[tuple[Source, Any], int]:
        """The capabilities this worker's operators hold, by output and time (sent and pending changes)."""
        self._fold_sent()
        own = ChangeBatch(self._own.items())
        own.extend(((p, d) for p, d in self.sender.pending().items() if type(p[0]) is Source))
        return dict(own.items())

    def _membership(self, events: list[Any], tracker: Tracker[Any], operators: Sequence[OperatorCore]) -> None:
        """Processes joined or left: greet newcomers on the progress channel and, as their server, bootstrap them."""
        grouped = self._grouped
        for event in events:
            if self.log is not None:
                self.log.membership(event.kind, event.workers)
            if event.kind != "join":
                if grouped is not None:
                    with grouped.lock:
                        grouped.shared.forget(event.process)
                continue  # a leaver's batches still count until its link closes; nothing more goes to it
            if grouped is None:
                hello = Hello(self.worker, self.sender.next_seq())
                if self._boot is not None:
                    self._boot.joined(event.workers)  # a later newcomer, greeted while this one still bootstraps
                for n in event.workers:
                    self._receiver.add(n, 0)
                    self._progress_push[n].push(hello)
            else:
                # The process's outbox greets the newcomers' process once; their combined batches count from 0.
                sender = aggregate_sender(event.process)
                with grouped.lock:
                    grouped.shared.greet(event.process)
                if self._boot is not None:
                    self._boot.joined([sender])
                self._receiver.add(sender, 0)
            if event.server != self.worker:
                continue
            own: dict[int, int] = {}
            if grouped is not None:
                own = self._flush_and_take_in(grouped, tracker)
            updates = self.held_updates(tracker)
            held: dict[Source, list[Any]] = {}
            for (src, t), c in self.own_capabilities().items():
                if c > 0:
                    held.setdefault(src, []).append(t)
            outputs = [port.source for op in operators if op.initial_caps for port in op.outputs]
            for n in event.workers:
                # Strictly above a capability this worker holds, reported in its next batch (§6.2): a copy
                # at the same time could be retired, and its -1 reach a member before this +1.
                minted = mint(held, outputs)
                for source, t in minted:
                    self.record(source, t, 1)
                    self._own.update((source, t), -1)
                state = self._server.state(n, updates, self._receiver, minted, own)
                self._progress_push[n].push(state)

    def _flush_and_take_in(self, grouped: Grouped[ProcessOutbox], tracker: Tracker[Any]) -> dict[int, int]:
        """Before a bootstrap server takes its state: flush the process's outbox and take in every batch arrived so
        far, so that the state includes exactly what the process's combined batches carried (the rescale model's
        ``bootstrap_state`` with aggregated senders); how many those are, by the process's aggregate sender."""
        with grouped.lock:
            # Under the lock no worker here offers or pushes: every batch of theirs is in the outbox and in this
            # worker's mailbox, and the flush empties the outbox.
            outbox = grouped.shared
            outbox.flush_all()
            messages = self._progress_pull.drain()
            own = {outbox.aggregator.sender: outbox.aggregator.next_seq()}
        self._take_in(messages, tracker)
        self._taken_in = True  # propagated by this step's receive
        return own

    # -- a joining worker's step ----------------------------------------------------------

    def bootstrap_step(
        self,
        tracker: Tracker[Any],
        operators: Sequence[OperatorCore],
        rejoined: Sequence[Callable[[], None]],
    ) -> tuple[bool, dict[Target, Any] | None]:
        """Take bootstrap messages; once complete, install the state: (whether anything happened, frontiers moved)."""
        boot = self._boot
        assert boot is not None
        messages = self._progress_pull.drain()
        for message in messages:
            kind = type(message)
            if kind is ProgressBatch:
                boot.batch(message)
            elif kind is Hello:
                boot.hello(message)
            elif kind is ProgressState:
                boot.state(message)
            elif kind is RangeReply:
                boot.reply(message)
            else:
                raise BootstrapError(f"worker {self.worker} is joining and got {message!r} on the progress channel")
        request = boot.request()
        if request is not None:
            self._progress_push[boot.server].push(request)
        changed = None
        if boot.done:
            changed = self._finish_bootstrap(boot, tracker, operators, rejoined)
        return bool(messages) or request is not None, changed

    def _finish_bootstrap(
        self,
        boot: Bootstrap,
        tracker: Tracker[Any],
        operators: Sequence[OperatorCore],
        rejoined: Sequence[Callable[[], None]],
    ) -> dict[Target, Any]:
        updates, receiver, state = boot.finish()
        self._boot_report = {
            "bootstrap_seconds": time.perf_counter() - self._boot_started,
            "bootstrap_pointstamps": len(state.updates),
            "bootstrap_bytes": dumps(state)[1],
        }
        for sender, next_seq in self._receiver.numbers().items():
            receiver.add(sender, next_seq)  # workers that joined while this one bootstrapped
        self._receiver = receiver
        tracker.update_batch(updates)
        minted = dict(state.minted)
        for op in operators:
            if not op.initial_caps:
                continue
            for port in op.outputs:
                t = minted.get(port.source)
                for i, cap in enumerate(port.initial):
                    cap._retime(t if i == 0 else None)
                if t is not None:
                    self._own.update((port.source, t), 1)
        for hook in rejoined:
            hook()
        changed = tracker.propagate_all()
        self._boot = None
        return changed

    def held_updates(self, tracker: Tracker[Any]) -> list[tuple[Any, Any, int]]:
        """The tracker's nonzero pointstamp counts, as updates (what a bootstrap state carries): changes recorded and
        not yet propagated included, as the batches they came in are counted in the receiver's numbers."""
        return [(loc, t, c) for loc, counts in tracker.counts().items() for t, c in counts.items()]

    def progress_stats(self, tracker: Tracker[Any]) -> dict[str, float]:
        """The size of the progress state a bootstrap server would send now, the batches this worker has broadcast,
        with progress aggregated per process the outbox's counts (``outbox_*``) and, if it joined, the size of the
        state it bootstrapped from and how long that took (from its dataflow's build to a complete view)."""
        updates = self.held_updates(tracker)
        state = ProgressState(self.worker, tuple(updates), self._receiver.numbers())
        stats: dict[str, float] = {
            "pointstamps": len(updates),
            "state_bytes": dumps(state)[1],
            "senders": len(state.included),
            "batches_sent": self.sender.next_seq(),
            **self._boot_report,
        }
        grouped = self._grouped
        if grouped is not None:
            # The process's outbox, shared by its workers: combined batches it sent, the workers' batches they held,
            # and how many held the batches of more than one worker.
            with grouped.lock:
                aggregator = grouped.shared.aggregator
                stats.update(
                    outbox_flushes=aggregator.flushes,
                    outbox_batches=aggregator.flushed,
                    outbox_combined=aggregator.combined,
                )
        return stats

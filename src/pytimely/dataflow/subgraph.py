"""One dataflow on one worker: its operators, its progress tracker, and how a step runs it.

Every worker builds the same dataflow, so operators, ports and channels get the
same indices everywhere. Nested scopes are laid out flat: their operators sit in
the same graph, and ``enter``/``leave`` operators change the timestamp's shape
(see :class:`~pytimely.progress.timestamp.Enter`), so one tracker follows every
location at once.

A step (:meth:`Subgraph.step`) does, in order:

1. apply the progress batches other workers (and this one) broadcast, and
   propagate them, scheduling operators whose input frontiers moved;
2. take data that arrived from other workers;
3. run each scheduled operator once, in graph order, so a chain of pipelined
   operators finishes within the step;
4. broadcast, as one atomic batch, every pointstamp change the step caused:
   capabilities taken, moved or dropped, messages sent and received.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytimely.communication.allocator import ElasticAllocator, Precedence, elastic_view
from pytimely.communication.payload import dumps
from pytimely.dataflow.operator import OperatorCore
from pytimely.dataflow.ports import InputPort, OutputPort, _Broadcast, _Direct, _Exchange, _Pipeline
from pytimely.errors import BootstrapError, MembershipError, OperatorError, PytimelyError, ScopeError
from pytimely.eventlog import EventLogger, Sink
from pytimely.progress.bootstrap import (
    Bootstrap,
    BootstrapServer,
    Hello,
    ProgressState,
    RangeReply,
    RangeRequest,
    mint,
)
from pytimely.progress.broadcast import ProgressBatch, ProgressReceiver, ProgressSender
from pytimely.progress.change_batch import ChangeBatch
from pytimely.progress.location import Source, Target
from pytimely.progress.reachability import Builder, Tracker
from pytimely.progress.timestamp import identity_for

if TYPE_CHECKING:
    from pytimely.communication.allocator import Allocator, Pull, Push
    from pytimely.dataflow.scope import Scope

__all__ = ["Pact", "Subgraph"]

Pact = tuple[Any, ...] | None
"""How an edge moves data: ``None`` (pipeline), ``("exchange", route, vectorized)`` or ``("broadcast",)``."""


class Subgraph:
    """A dataflow as one worker runs it."""

    def __init__(self, allocator: Allocator, ident: int, name: str, log: Sink | None = None) -> None:
        self.allocator = allocator
        self.ident = ident
        self.name = name
        self.worker = allocator.index
        self.peers = allocator.peers
        self.operators: list[OperatorCore] = []
        self.sender: ProgressSender[Any] = ProgressSender(self.worker)
        self.record = self.sender.record
        view = elastic_view(allocator)
        self._elastic: ElasticAllocator | None = view if view is not None and view.elastic else None
        self.elastic = self._elastic is not None
        self._events_seen = 0 if view is None else view.seen
        self._receiver = ProgressReceiver(self._elastic.members if self._elastic is not None else self.peers)
        self._server = BootstrapServer(self.worker)
        self._own: ChangeBatch[tuple[Source, Any]] = ChangeBatch()
        """This worker's own capabilities, as far as it has sent them (pending changes come on top)."""
        self._sent: list[Any] = []
        """The updates of batches sent since ``_own`` was last brought up to date (see ``_fold_sent``)."""
        self._pinned: list[str] = []
        joining = None if view is None else view.joining
        self._boot: Bootstrap | None = None if joining is None else Bootstrap(self.worker, *joining)
        self._boot_started = time.perf_counter()
        self._boot_report: dict[str, float] = {}
        self._progress_push: list[Push[Any]]
        self._progress_push, self._progress_pull = allocator.allocate((ident, 0), Precedence.PROGRESS)
        self._channels = 1
        self._edges: list[tuple[Source, Target]] = []
        self.channel_kinds: list[str] = []
        """The contract each of ``_edges`` was connected with (``pipeline``, ``exchange``, ...), for graph views."""
        self._remote: list[tuple[Pull[Any], InputPort[Any, Any]]] = []
        self._active: set[int] = set()
        self._queue: list[int] = []
        self._queued: set[int] = set()
        self._running = -1
        self._before_step: list[Callable[[], bool]] = []
        self._finalizers: list[Callable[[], None]] = []
        self.inputs: list[Any] = []
        """Input handles, closed for the worker when its function returns."""
        self.tracker: Tracker[Any] | None = None
        self.built = False
        self.log: EventLogger | None = None if log is None else EventLogger(log, self.worker, name)
        """Where this dataflow's events go (see :mod:`pytimely.eventlog`); ``None``, the default, logs nothing."""

    # -- building -------------------------------------------------------------------------

    def add_operator(self, name: str, scope: Scope[Any], inputs: int, outputs: int) -> OperatorCore:
        """Create an operator record with unconnected ports."""
        if self.built:
            raise ScopeError(f"dataflow {self.name!r} is already built; add operators inside its build function")
        op = OperatorCore(len(self.operators), name, scope)
        op.inputs = [InputPort(op, i, self.record, self.activate) for i in range(inputs)]
        op.outputs = [OutputPort(op, o, self.record) for o in range(outputs)]
        if self.log is not None:
            for inport in op.inputs:
                inport._log = self.log
            for outport in op.outputs:
                outport._log = self.log
        self.operators.append(op)
        return op

    def connect(self, output: OutputPort[Any, Any], target: InputPort[Any, Any], pact: Pact) -> None:
        """Add an edge from ``output`` to ``target`` moving data by ``pact``."""
        if self.built:
            raise ScopeError(f"dataflow {self.name!r} is already built; connect streams inside its build function")
        if pact is None or (self.peers == 1 and not self.elastic and pact[0] in ("exchange", "broadcast", "direct")):
            output._connect(_Pipeline(target, self.record))
        else:
            pushes, pull = self.allocator.allocate((self.ident, self._channels), Precedence.DATA)
            self._channels += 1
            if pact[0] == "exchange":
                self._pinned.append(target._op.name)
                output._connect(_Exchange(target, pushes, self.worker, pact[1], pact[2], self.record))
            elif pact[0] == "direct":
                output._connect(_Direct(target, pushes, self.worker, pact[1], self.record))
            elif pact[0] == "broadcast":
                output._connect(_Broadcast(target, pushes, self.worker, self.record))
            else:  # pragma: no cover - pacts are made by this package only
                raise ValueError(f"unknown pact {pact!r}")
            self._remote.append((pull, target))
        self._edges.append((output.source, target.location))
        self.channel_kinds.append("pipeline" if pact is None else str(pact[0]))

    def on_step(self, hook: Callable[[], bool]) -> None:
        """Run ``hook`` at the start of every step (input handles flush there); it says whether it did work."""
        self._before_step.append(hook)

    def on_build(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when the dataflow is built (checks that need the whole graph)."""
        self._finalizers.append(hook)

    def build(self, summaries: dict[int, dict[tuple[int, int], Any]]) -> None:
        """Compile the graph into a tracker; ``summaries`` overrides the identity summaries of some operators."""
        for hook in self._finalizers:
            hook()
        builder: Builder[Any, Any] = Builder()
        for op in self.operators:
            identity = identity_for(op.scope.minimum)
            summary = summaries.get(op.index)
            if summary is None:
                summary = {(i, o): identity for i in range(len(op.inputs)) for o in range(len(op.outputs))}
            builder.add_node(len(op.inputs), len(op.outputs), summary, name=op.name, identity=identity)
        for source, target in self._edges:
            builder.add_edge(source, target)
        tracker: Tracker[Any] = builder.build()
        # Every worker's copy of an operator starts with a capability per output, so each worker
        # counts all of them; a worker's drop of its own copy then arrives as an ordinary update.
        # A joining worker's copies hold nothing yet: its view comes from its bootstrap (progress/bootstrap.py).
        if self._boot is None:
            for op in self.operators:
                if op.initial_caps:
                    for port in op.outputs:
                        tracker.update(port.source, op.scope.minimum, self.peers)
                        self._own.update((port.source, op.scope.minimum), len(port.initial))
        tracker.propagate_all()
        for op in self.operators:
            for inport in op.inputs:
                inport.frontier = tracker.live_frontier(inport.location)
        if self.log is not None:
            for op in self.operators:
                self.log.operates(op.index, op.name, len(op.inputs), len(op.outputs), op.scope.name)
        self.tracker = tracker
        self.built = True
        self._boot_started = time.perf_counter()  # a newcomer's bootstrap is timed from here
        for op in self.operators:
            if op.logic is not None:
                self._active.add(op.index)

    # -- running --------------------------------------------------------------------------

    def activate(self, index: int) -> None:
        """Schedule operator ``index``: later this step if it comes after the one running, else next step."""
        if index > self._running:
            if index not in self._queued:
                self._queued.add(index)
                heapq.heappush(self._queue, index)
        else:
            self._active.add(index)

    def step(self) -> bool:
        """Run one step (see the module docstring); return whether anything happened."""
        tracker = self.tracker
        assert tracker is not None
        worked = False
        if self._elastic is not None:
            seen = self._elastic.seen
            if seen > self._events_seen:
                self._membership(self._elastic.events[self._events_seen : seen])
                self._events_seen = seen
                worked = True
        if self._boot is not None:
            return self._bootstrap_step() or worked
        for hook in self._before_step:
            worked = hook() or worked
        batches = self._progress_pull.drain()
        log = self.log
        if batches:
            worked = True
            receiver = self._receiver
            server = self._server
            for batch in batches:
                if type(batch) is not ProgressBatch:
                    self._control(batch)
                    continue
                tracker.update_batch(receiver.accept(batch))
                if log is not None:
                    log.progress("received", len(batch.updates))
                if server.serving:
                    server.applied(batch)
            operators = self.operators
            changed = tracker.propagate_all()
            if log is not None:
                self._log_frontiers(log, changed)
            for target in changed:
                if operators[target.node].notify:
                    self.activate(target.node)
        for pull, port in self._remote:
            messages = pull.drain()
            if messages:
                port._queue.extend(messages)
                self.activate(port._op.index)
        if self._active or self._queue:
            worked = True
            self._run()
        batch = self.sender.flush()
        if batch is not None:
            worked = True
            # Kept in every dataflow (explain() names the worker holding a capability), folded into _own when read.
            self._sent.append(batch.updates)
            if len(self._sent) > 1024:
                self._fold_sent()
            if log is not None:
                self._log_batch(log, batch)
            for push in self._progress_push:
                push.push(batch)
        if self._server.serving:
            for newcomer, reply in self._server.replies(self._receiver):
                self._progress_push[newcomer].push(reply)
        return worked

    def _log_frontiers(self, log: EventLogger, changed: dict[Target, Any]) -> None:
        """Log the input frontiers a propagation moved."""
        operators = self.operators
        for target in changed:
            port = operators[target.node].inputs[target.port]
            log.frontier(target.node, target.port, port.frontier.frontier_elements())

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

    def _membership(self, events: list[Any]) -> None:
        """Processes joined or left: greet newcomers on the progress channel and, as their server, bootstrap them."""
        for event in events:
            if self.log is not None:
                self.log.membership(event.kind, event.workers)
            if event.kind != "join":
                continue  # a leaver's batches still count until its link closes; nothing more goes to it
            hello = Hello(self.worker, self.sender.next_seq())
            if self._boot is not None:
                self._boot.joined(event.workers)  # a later newcomer, greeted while this one still bootstraps
            for n in event.workers:
                self._receiver.add(n, 0)
                self._progress_push[n].push(hello)
            if event.server != self.worker:
                continue
            updates = self._held_updates()
            held: dict[Source, list[Any]] = {}
            for (src, t), c in self.own_capabilities().items():
                if c > 0:
                    held.setdefault(src, []).append(t)
            outputs = [port.source for op in self.operators if op.initial_caps for port in op.outputs]
            for n in event.workers:
                # Strictly above a capability this worker holds, reported in its next batch (§6.2): a copy
                # at the same time could be retired, and its -1 reach a member before this +1.
                minted = mint(held, outputs)
                for source, t in minted:
                    self.record(source, t, 1)
                    self._own.update((source, t), -1)
                state = self._server.state(n, updates, self._receiver, minted)
                self._progress_push[n].push(state)

    @property
    def bootstrapped(self) -> bool:
        """Whether this worker's view of the progress state is complete (always, unless it is joining)."""
        return self._boot is None

    def _bootstrap_step(self) -> bool:
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
        if boot.done:
            self._finish_bootstrap(boot)
        return bool(messages) or request is not None

    def _finish_bootstrap(self, boot: Bootstrap) -> None:
        tracker = self.tracker
        assert tracker is not None
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
        for op in self.operators:
            if not op.initial_caps:
                continue
            for port in op.outputs:
                t = minted.get(port.source)
                for i, cap in enumerate(port.initial):
                    cap._retime(t if i == 0 else None)
                if t is not None:
                    self._own.update((port.source, t), 1)
        for handle in self.inputs:
            handle._rejoined()
        operators = self.operators
        for target in tracker.propagate_all():
            if operators[target.node].notify:
                self.activate(target.node)
        self._boot = None

    def _held_updates(self) -> list[tuple[Any, Any, int]]:
        """The tracker's nonzero pointstamp counts, as updates (what a bootstrap state carries)."""
        assert self.tracker is not None
        return [(loc, t, c) for loc, counts in self.tracker.held().items() for t, c in counts.items()]

    def progress_stats(self) -> dict[str, float]:
        """The size of the progress state a bootstrap server would send now and, if this worker joined, of the
        one it bootstrapped from and how long that took (from its dataflow's build to a complete view)."""
        updates = self._held_updates()
        state = ProgressState(self.worker, tuple(updates), self._receiver.numbers())
        return {
            "pointstamps": len(updates),
            "state_bytes": dumps(state)[1],
            "senders": len(state.included),
            **self._boot_report,
        }

    def may_leave(self, at: Any = None) -> bool:
        """Whether this worker holds no capability, has no queued message, and (given ``at``) can receive
        nothing earlier than ``at`` any more."""
        if any(c for c in self.own_capabilities().values()):
            return False
        for op in self.operators:
            for port in op.inputs:
                if port.pending():
                    return False
                if at is not None and any(not at <= e for e in port.frontier.frontier_elements()):
                    return False
        return True

    def check_leave(self) -> None:
        """:class:`MembershipError` if a channel of this dataflow pins records to the workers it started with."""
        # ``exchange`` spreads records over the workers the computation started with: only those receive on it.
        if self._pinned and self.worker < self.peers:
            names = ", ".join(repr(n) for n in sorted(set(self._pinned)))
            raise MembershipError(
                f"dataflow {self.name!r} exchanges records into {names} by worker index, which ties them to the "
                "workers the computation started with; only keyed operators given a control stream (bins) let a "
                "process leave"
            )

    def _run(self) -> None:
        queue = self._queue
        queued = self._queued
        for index in self._active:
            if index not in queued:
                queued.add(index)
                queue.append(index)
        self._active = set()
        heapq.heapify(queue)
        operators = self.operators
        pop = heapq.heappop
        log = self.log
        clock = time.perf_counter
        start = 0.0
        try:
            while queue:
                index = pop(queue)
                queued.discard(index)
                self._running = index
                op = operators[index]
                logic = op.logic
                if logic is None:
                    continue
                op.time = None
                if log is not None:
                    start = clock()
                try:
                    logic()
                except PytimelyError as exc:
                    exc.add_note(f"in operator {op.name!r} on worker {self.worker} at time {op.time!r}")
                    raise
                except Exception as exc:
                    raise OperatorError(
                        f"operator {op.name!r} failed on worker {self.worker} at time {op.time!r}: "
                        f"{type(exc).__name__}: {exc}",
                        operator=op.name,
                        worker=self.worker,
                        time=op.time,
                    ) from exc
                finally:
                    if log is not None:
                        log.schedule(index, op.name, start, clock())
                    if op.input_caps:
                        for cap in op.input_caps:
                            cap._valid = False
                        op.input_caps.clear()
        finally:
            self._running = -1

    @property
    def complete(self) -> bool:
        """Whether no capability or message remains anywhere (as far as this worker has heard)."""
        assert self.tracker is not None
        return self._boot is None and self.tracker.is_idle() and not self.sender.pending()

    def held(self) -> list[str]:
        """Descriptions of the pointstamps keeping the dataflow alive (for stall reports)."""
        assert self.tracker is not None
        out = []
        for location, counts in self.tracker.held().items():
            op = self.operators[location.node]
            kind = "capability on output" if isinstance(location, Source) else "message(s) for input"
            out.append(f"{op.name!r} {kind} {location.port} at {sorted(counts, key=repr)!r}")
        return out

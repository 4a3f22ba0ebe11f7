"""One dataflow on one worker: its operators, its progress tracker, and how a step runs it.

Every worker builds the same dataflow, so operators, ports and channels get the
same indices everywhere. Nested scopes are laid out flat: their operators sit in
the same graph, and ``enter``/``leave`` operators change the timestamp's shape
(see :class:`~pytimely.progress.timestamp.Enter`), so one tracker follows every
location at once.

A step (:meth:`Subgraph.step`) does, in order:

1. apply the progress batches other workers (and this one) broadcast, and
   propagate them, scheduling operators whose input frontiers moved (and those
   other threads activated);
2. take data that arrived from other workers;
3. run each scheduled operator once, in graph order, so a chain of pipelined
   operators finishes within the step;
4. broadcast, as one atomic batch, every pointstamp change the step caused:
   capabilities taken, moved or dropped, messages sent and received.

Steps 1 and 4, and the bootstrap of a worker joining a running computation, are
the progcaster's (:mod:`pytimely.dataflow.progcaster`); the subgraph schedules.

Recovery (:mod:`pytimely.recovery.runtime`) hooks in at three places: while an operator that declared state
(:mod:`pytimely.dataflow.state`) has a fence (:attr:`Subgraph.fences`), it is not handed messages of later
epochs; :attr:`Subgraph.snapshot_hook` runs right after step 1, before any operator (it schedules the
operators whose frontiers passed their fences), and :attr:`Subgraph.stateful_ran` right after such an
operator ran (it has then done what those frontiers let it do: its snapshot is taken there); in a resumed
run, what source operators send at epochs before :attr:`Subgraph.resume_epoch` (already committed) is
dropped.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pytimely.communication.allocator import Precedence
from pytimely.dataflow.activate import Doorbell, SyncActivator
from pytimely.dataflow.channels import Pact, Pipeline, pact_of
from pytimely.dataflow.channels.pushers import CheckedPusher, Pusher
from pytimely.dataflow.operator import OperatorCore
from pytimely.dataflow.ports import InputPort, OutputPort
from pytimely.dataflow.progcaster import Progcaster
from pytimely.errors import BatchError, MembershipError, OperatorError, PytimelyError, ScopeError
from pytimely.observe.eventlog import EventLogger, Sink
from pytimely.progress.broadcast import ProgressSender
from pytimely.progress.location import Source, Target
from pytimely.progress.reachability import Builder, Tracker
from pytimely.progress.timestamp import identity_for

if TYPE_CHECKING:
    from pytimely.communication.allocator import Allocator, Pull, Push
    from pytimely.dataflow.scope import Scope

__all__ = ["Subgraph"]


class Subgraph:
    """A dataflow as one worker runs it."""

    def __init__(
        self, allocator: Allocator, ident: int, name: str, log: Sink | None = None, doorbell: Doorbell | None = None
    ) -> None:
        self.allocator = allocator
        self.ident = ident
        self.name = name
        self.worker = allocator.index
        self.peers = allocator.peers
        self.operators: list[OperatorCore] = []
        self.log: EventLogger | None = None if log is None else EventLogger(log, self.worker, name)
        """Where this dataflow's events go (:mod:`pytimely.observe.eventlog`); ``None``, the default, logs nothing."""
        self.progress = Progcaster(allocator, ident, name, self.log)
        """The progress exchange and bootstrap of this dataflow on this worker (:mod:`.progcaster`)."""
        self.record = self.progress.record
        self.elastic = self.progress.elastic_allocator is not None
        self._pinned: dict[str, tuple[int, ...]] = {}
        self._channels = 1
        self._edges: list[tuple[Source, Target]] = []
        self.pacts: list[Pact] = []
        """The contract each of ``_edges`` was connected with, for graph views."""
        self._remote: list[tuple[Pull[Any], InputPort[Any, Any]]] = []
        self._active: set[int] = set()
        self._external: deque[int] = deque()
        """Operators other threads asked to schedule (see :mod:`.activate`)."""
        self.doorbell = Doorbell() if doorbell is None else doorbell
        self._activators: list[SyncActivator] = []
        self.dropped = False
        """Whether ``Worker.drop_dataflow`` released this dataflow."""
        self._queue: list[int] = []
        self._queued: set[int] = set()
        self._running = -1
        self._before_step: list[Callable[[], bool]] = []
        self._finalizers: list[Callable[[], None]] = []
        self._rejoin: list[Callable[[], None]] = []
        self.inputs: list[Any] = []
        """Input handles, closed for the worker when its function returns."""
        self.tracker: Tracker[Any] | None = None
        self.built = False
        self.snapshot_hook: Callable[[], None] | None = None
        """Called in every step in which progress arrived, after it is applied and before any operator runs."""
        self.stateful_ran: Callable[[OperatorCore], None] | None = None
        """Called after an operator with a fence ran (its state now reflects the frontiers it saw)."""
        self.fences: dict[int, int | None] = {}
        """Per operator that declared state: while set, it takes no message of an epoch after it (a snapshot's
        fence), and changes its state at no later epoch."""
        self.resume_epoch: int | None = None
        """In a resumed run, the first epoch to compute: source operators' records of earlier epochs are dropped."""

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

    def connect(
        self,
        output: OutputPort[Any, Any],
        target: InputPort[Any, Any],
        pact: Pact | None,
        *,
        check_serialization: bool = False,
    ) -> None:
        """Add an edge from ``output`` to ``target`` moving data by ``pact`` (``None``: a pipeline).

        The contract connects the edge (:meth:`Pipeline.connect <pytimely.dataflow.channels.Pipeline.connect>`);
        with ``check_serialization``, a contract other than a pipeline serialises every batch as the network
        would, even where it stays in this process.
        """
        if self.built:
            raise ScopeError(f"dataflow {self.name!r} is already built; connect streams inside its build function")
        pact = pact_of(pact, target.operator_name)
        channel: Pusher = pact.connect(self, target)
        if not self.operators[output.source.node].inputs:
            # A source: in a resumed run, what it sends at a committed epoch is dropped here.
            channel = _Replayed(channel, self)
        if check_serialization and type(pact) is not Pipeline:
            channel = CheckedPusher(channel, pact.kind, target, output.operator_name)
        output._connect(channel)
        self._edges.append((output.source, target.location))
        self.pacts.append(pact)

    @property
    def channel_kinds(self) -> list[str]:
        """The name of the contract each edge was connected with (``pipeline``, ``exchange``, ...)."""
        return [pact.kind for pact in self.pacts]

    @property
    def local(self) -> bool:
        """Whether this worker is the dataflow's only one and none may join (every edge is then a pipeline)."""
        return self.peers == 1 and not self.elastic

    def allocate_channel(self, target: InputPort[Any, Any]) -> Sequence[Push[Any]]:
        """A new data channel between the workers; this worker's receiving end feeds ``target`` each step."""
        pushes, pull = self.allocator.allocate((self.ident, self._channels), Precedence.DATA)
        self._channels += 1
        self._remote.append((pull, target))
        return pushes

    def pin_started(self, operator: str) -> None:
        """Say that records reach ``operator`` on the workers the computation started with, unless it is pinned."""
        self._pinned.setdefault(operator, tuple(range(self.peers)))

    def on_step(self, hook: Callable[[], bool]) -> None:
        """Run ``hook`` at the start of every step (input handles flush there); it says whether it did work."""
        self._before_step.append(hook)

    def on_rejoin(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when this worker, joining a running computation, has its progress state."""
        self._rejoin.append(hook)

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
        # A joining worker's copies hold nothing yet: its view comes from its bootstrap (progress/bootstrap.py).
        self.progress.start(tracker, self.operators)
        tracker.propagate_all()
        for op in self.operators:
            for inport in op.inputs:
                inport.frontier = tracker.live_frontier(inport.location)
        if self.log is not None:
            for op in self.operators:
                self.log.operates(op.index, op.name, len(op.inputs), len(op.outputs), op.scope.name)
        self.tracker = tracker
        self.built = True
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

    def drop(self) -> list[Pull[Any]]:
        """Release the operators, their logic and state, and every queued message (``Worker.drop_dataflow``).

        Returns the receiving ends of the dataflow's channels: peers may still send on them until they drop
        it too, and the worker drains them so nothing piles up.
        """
        self.dropped = True
        for activator in self._activators:
            activator.close()
        self._activators.clear()
        for handle in self.inputs:
            handle._dropped(self.name)
        for pull, _ in self._remote:
            pull.drain()
        for op in self.operators:
            op.logic = None
            for port in op.inputs:
                port._queue.clear()
        self._before_step.clear()
        self._finalizers.clear()
        self._active.clear()
        self._queue.clear()
        self._queued.clear()
        self._external.clear()
        self.inputs = []
        pulls = [pull for pull, _ in self._remote]
        self._remote = []
        pulls.append(self.progress.close())
        return pulls

    def sync_activator(self, index: int) -> SyncActivator:
        """An activator of operator ``index`` that another thread may call."""
        activator = SyncActivator(index, self.operators[index].name, self._external, self.doorbell)
        self._activators.append(activator)
        return activator

    @property
    def sender(self) -> ProgressSender[Any]:
        """Where this dataflow's operators record their pointstamp changes (the progcaster's sender)."""
        return self.progress.sender

    def step(self) -> bool:
        """Run one step (see the module docstring); return whether anything happened."""
        tracker = self.tracker
        assert tracker is not None
        progress = self.progress
        worked = progress.membership(tracker, self.operators)
        if not progress.bootstrapped:
            rejoined = [h._rejoined for h in self.inputs] + self._rejoin
            booted, changed = progress.bootstrap_step(tracker, self.operators, rejoined)
            if changed is not None:
                self._notify(changed)
            return booted or worked
        for hook in self._before_step:
            worked = hook() or worked
        external = self._external
        if external:
            worked = True
            while external:
                self._active.add(external.popleft())
        changed = progress.receive(tracker)
        if changed is not None:
            worked = True
            if self.log is not None:
                self._log_frontiers(self.log, changed)
            self._notify(changed)
            if self.snapshot_hook is not None:
                self.snapshot_hook()
        for pull, port in self._remote:
            messages = pull.drain()
            if messages:
                port._queue.extend(messages)
                self.activate(port._op.index)
        if self._active or self._queue:
            worked = True
            self._run()
        return progress.send() or worked

    def declare_stateful(self) -> list[OperatorCore]:
        """The operators that declared state (recovery fences them); called once the dataflow is built."""
        return [op for op in self.operators if op.states]

    def may_change(self, index: int, time: Any) -> bool:
        """Whether operator ``index``'s declared state may change at ``time`` now: no snapshot of an earlier epoch
        is pending for it."""
        return may_change_at(self.fences.get(index), time)

    def set_fence(self, index: int, fence: int | None) -> None:
        """Move operator ``index``'s fence; it is scheduled, so held messages and waiting changes go."""
        self.fences[index] = fence
        self.activate(index)

    def _hold_back(self, op: OperatorCore, fence: int) -> list[tuple[Any, list[Any]]]:
        """Take the messages of epochs after ``fence`` out of ``op``'s queues until the fence moves."""
        held: list[tuple[Any, list[Any]]] = []
        for port in op.inputs:
            queue = port._queue
            if queue and any(epoch_of(t) > fence for t, _ in queue):
                later = [m for m in queue if epoch_of(m[0]) > fence]
                kept = [m for m in queue if epoch_of(m[0]) <= fence]
                queue.clear()
                queue.extend(kept)
                held.append((port, later))
        return held

    def _notify(self, changed: dict[Target, Any]) -> None:
        """Schedule the operators that asked to hear of their input frontiers moving."""
        operators = self.operators
        for target in changed:
            if operators[target.node].notify:
                self.activate(target.node)

    def _log_frontiers(self, log: EventLogger, changed: dict[Target, Any]) -> None:
        """Log the input frontiers a propagation moved."""
        operators = self.operators
        for target in changed:
            port = operators[target.node].inputs[target.port]
            log.frontier(target.node, target.port, port.frontier.frontier_elements())

    def own_capabilities(self) -> dict[tuple[Source, Any], int]:
        """The capabilities this worker's operators hold, by output and time (sent and pending changes)."""
        return self.progress.own_capabilities()

    @property
    def bootstrapped(self) -> bool:
        """Whether this worker's view of the progress state is complete (always, unless it is joining)."""
        return self.progress.bootstrapped

    def progress_stats(self) -> dict[str, float]:
        """Progress-state sizes of this dataflow (see :meth:`Progcaster.progress_stats`)."""
        assert self.tracker is not None
        return self.progress.progress_stats(self.tracker)

    def may_leave(self, at: Any = None) -> bool:
        """Whether this worker holds no capability, has no queued message, and (given ``at``) can receive
        nothing earlier than ``at`` any more."""
        if any(c for c in self.own_capabilities().values()):
            return False
        if self.receiving():
            return False
        for op in self.operators:
            for port in op.inputs:
                if port.pending():
                    return False
                if at is not None and any(not at <= e for e in port.frontier.frontier_elements()):
                    return False
        return True

    def receiving(self) -> bool:
        """Whether received messages wait for this worker's next step (a cluster mailbox decodes a budget of data
        payloads a step and holds the rest back)."""
        return any(pull.waiting() for pull, _ in self._remote)

    def pin(self, operator: str, workers: Iterable[int]) -> None:
        """Say that records reach ``operator`` on ``workers`` only, by index: none of them may leave."""
        self._pinned[operator] = tuple(sorted({*self._pinned.get(operator, ()), *workers}))

    @property
    def pinned(self) -> dict[str, tuple[int, ...]]:
        """The operators that records reach by worker index, and the workers each one pins."""
        return dict(self._pinned)

    def check_leave(self) -> None:
        """:class:`MembershipError` if an operator of this dataflow pins records to this worker."""
        names = sorted(name for name, workers in self._pinned.items() if self.worker in workers)
        if names:
            raise MembershipError(
                f"dataflow {self.name!r}: worker {self.worker} cannot leave, since {', '.join(map(repr, names))} "
                "receive records on it by worker index (a plain exchange pins the workers the computation started "
                "with, a gather the worker it gathers on); keyed operators given a control stream (bins) let a "
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
        fences = self.fences
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
                fence = fences.get(index) if fences else None
                held = self._hold_back(op, fence) if fence is not None else None
                try:
                    logic()
                except BatchError as exc:
                    exc.name_operator(op.name, self.worker, op.time)
                    raise
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
                    if held:
                        for port, later in held:
                            port._queue.extendleft(reversed(later))
                    if log is not None:
                        log.schedule(index, op.name, start, clock())
                    if op.input_caps:
                        for cap in op.input_caps:
                            cap._valid = False
                        op.input_caps.clear()
                if fence is not None and self.stateful_ran is not None:
                    self.stateful_ran(op)
        finally:
            self._running = -1

    @property
    def complete(self) -> bool:
        """Whether no capability or message remains anywhere (as far as this worker has heard)."""
        assert self.tracker is not None
        return self.progress.bootstrapped and self.tracker.is_idle() and not self.progress.sender.pending()

    def held(self) -> list[str]:
        """Descriptions of the pointstamps keeping the dataflow alive (for stall reports)."""
        assert self.tracker is not None
        out = []
        for location, counts in self.tracker.held().items():
            op = self.operators[location.node]
            kind = "capability on output" if isinstance(location, Source) else "message(s) for input"
            out.append(f"{op.name!r} {kind} {location.port} at {sorted(counts, key=repr)!r}")
        return out


def may_change_at(fence: int | None, time: Any) -> bool:
    """Whether state may change at ``time`` while the fence stands at ``fence`` (``None``: no fence)."""
    return fence is None or epoch_of(time) <= fence


def epoch_of(time: Any) -> int:
    """The epoch of a timestamp: an int itself, a :class:`~pytimely.order.Product`'s outermost coordinate."""
    while type(time) is not int:
        time = time.outer
    return time


class _Replayed:
    """A channel from a source operator that drops what it sends at epochs a resumed run has committed."""

    __slots__ = ("_inner", "_subgraph")

    def __init__(self, inner: Pusher, subgraph: Subgraph) -> None:
        self._inner = inner
        self._subgraph = subgraph

    @property
    def sender(self) -> str | None:
        """The operator whose output feeds this channel (for the channel's errors)."""
        return self._inner.sender

    @sender.setter
    def sender(self, name: str | None) -> None:
        self._inner.sender = name

    def push(self, time: Any, batch: Any) -> None:
        resume = self._subgraph.resume_epoch
        if resume is not None and epoch_of(time) < resume:
            return
        self._inner.push(time, batch)

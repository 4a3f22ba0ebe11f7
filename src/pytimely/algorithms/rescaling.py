"""Jobs that run while processes join and leave: a driver and two keyed stages (word count, components).

:func:`run_while_rescaling` feeds each member worker's share of every epoch
into a stage whose keyed state lives in bins, and sends the stage's control
stream the moves that make the bins follow the members
(:func:`migration_schedule`). A leaver gives its bins away at the epoch it is
gone in, then :meth:`Worker.leave <pytimely.worker.Worker.leave>`. A newcomer
takes its share in small groups over several epochs from the one it joins in
(Megaphone's fluid migration, seed ``002_640294948a1fdfd3.txt`` §3.5), so no
epoch ships every moving bin's state at once. What the stage emits is gathered
on the first worker of a process that takes part in every epoch
(:meth:`RescalePlan.gatherer`), so any other process may leave, one that started
the computation included; a plan that would have a process leave on which an
operator receives records by worker index is refused before anything runs.

The stages:

- :func:`count_keys`: each key's running count (behind ``wordcount --rescale``);
- :func:`union_components`: weakly connected components of a growing edge
  set, labelled by their least vertex. Edges go to one of ``shards`` keyed
  states by their first vertex; each shard keeps the partition of the
  vertices its edges touch (a label per vertex) and, per epoch, merges the new
  edges into it with one vectorised pass. The vertices whose shard label
  changed then go, as ``vertex -- label`` edges, to a single keyed state that
  merges the shards' partitions the same way. Both levels are keyed state in
  bins, so both move with their bins when processes come and go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from pytimely.algorithms.connected_components import _components
from pytimely.dataflow.bins import DEFAULT_BINS, Move
from pytimely.dataflow.stream import Stream
from pytimely.errors import InvalidArgument, JoinTimeoutError, LeaveTimeoutError, StepTimeoutError
from pytimely.membership import RescalePlan
from pytimely.worker import Worker

__all__ = [
    "components_while_rescaling",
    "count_keys",
    "count_while_rescaling",
    "migration_schedule",
    "rebalance",
    "run_while_rescaling",
    "union_components",
]

Stage = Callable[[Stream[Any], Stream[Any]], Stream[Any]]
"""A dataflow fragment from ``(records, control)`` to what it emits; its keyed state follows ``control``."""

Share = Callable[[int, int, list[int]], Any]
"""``share(worker, epoch, members)``: the records a member worker feeds in at an epoch."""


class Request(Protocol):
    """A request in flight (see :class:`pytimely.membership.Pending`): polled between steps, never waited on."""

    def done(self) -> bool:
        """Whether it was answered; raises if it failed."""
        ...


class Join(Protocol):
    """A newcomer being started (see :class:`pytimely.membership.JoinRequest`)."""

    def check(self) -> None:
        """Raise if the newcomer can no longer arrive."""
        ...


class Coordinator(Protocol):
    """Whoever starts newcomers and hears of leaves (see :class:`pytimely.membership.Launcher`)."""

    def join(self) -> Join:
        """Ask for a newcomer."""
        ...

    def leaving(self, process: int) -> Request:
        """Say ``process`` leaves (before it sends ``LEAVING``)."""
        ...

    def joined(self, worker: int) -> Request:
        """Say newcomer worker ``worker`` has bootstrapped."""
        ...

    def reached(self, process: int, states: tuple[str, ...]) -> Request:
        """Done once ``process`` is in one of ``states`` (``joined``, ``leaving``, ``exited``)."""
        ...


def _step_until(
    worker: Worker, done: Callable[[], bool], timeout: float, late: Callable[[], Exception],
    check: Callable[[], None] | None = None,
) -> None:
    """Step ``worker`` until ``done()``; raise ``late()`` after ``timeout`` seconds (``check()`` may raise sooner)."""

    def waiting() -> bool:
        if check is not None:
            check()
        return not done()

    try:
        worker.step_while(waiting, timeout=timeout)
    except StepTimeoutError:
        raise late() from None


FLUID_BINS = 16
"""Bins a newcomer takes per epoch unless told otherwise (of the 256 a keyed operator has by default)."""


def rebalance(owners: Sequence[int], members: Sequence[int]) -> list[tuple[int, int]]:
    """The fewest ``(bin, new owner)`` changes after which every bin has a member as owner, shares within one.

    Bins of workers that are no longer members come first (they must move); the rest leave the members
    holding the most, one donor after another, and go to the members holding the fewest, one after
    another, so that any prefix of the list draws on every donor and feeds every receiver alike.
    """
    ordered = sorted(set(members))
    if not ordered:
        raise InvalidArgument("a bin assignment needs at least one member")
    held: dict[int, list[int]] = {m: [] for m in ordered}
    orphans: list[int] = []
    for b, w in enumerate(owners):
        held.get(w, orphans).append(b)
    share, extra = divmod(len(owners), len(ordered))
    # The members holding the most keep the larger quotas, so the fewest bins move.
    by_size = sorted(ordered, key=lambda m: (-len(held[m]), m))
    quota = {m: share + (i < extra) for i, m in enumerate(by_size)}
    surplus = [held[m][quota[m] :] for m in by_size if len(held[m]) > quota[m]]
    pool = list(orphans)
    for i in range(max(map(len, surplus), default=0)):
        pool += [bins[i] for bins in surplus if i < len(bins)]
    wanting = [[m] * (quota[m] - len(held[m])) for m in reversed(by_size) if len(held[m]) < quota[m]]
    receivers: list[int] = []
    for i in range(max(map(len, wanting), default=0)):
        receivers += [want[i] for want in wanting if i < len(want)]
    return list(zip(pool, receivers, strict=True))


def migration_schedule(
    plan: RescalePlan, epochs: int, *, bins: int = DEFAULT_BINS, bins_per_epoch: int | None = FLUID_BINS
) -> dict[int, list[Move]]:
    """For each epoch ``E`` at which the members change, the moves sent at ``E`` (on the control stream).

    The table starts as ``BinTable.default`` (bin ``b`` on worker ``b % peers``). At ``E`` the bins change
    hands as :func:`rebalance` says. When processes only join, the moves are spread over ``E, E + 1, ...``,
    ``bins_per_epoch`` bins at each (Megaphone's fluid migration: each epoch ships a few bins' state rather
    than every one at once), all done by the epoch before the next change and by the last epoch. When a
    process leaves at ``E``, every move is at ``E``: the leaver holds no bin from then on. ``bins_per_epoch
    = None`` moves every bin at ``E`` always. At an epoch with newcomers the list also restates, at ``E``,
    the owner of every bin not moving then (their routers know no earlier move). Every worker computes the
    same schedule from the plan.
    """
    if bins_per_epoch is not None and (type(bins_per_epoch) is not int or bins_per_epoch < 1):
        raise InvalidArgument(f"bins_per_epoch must be a positive int or None, got {bins_per_epoch!r}")
    first = plan.members_at(0)
    owners = [first[b % len(first)] for b in range(bins)]
    changes = sorted({e + 1 for e, _ in plan.changes if e + 1 < epochs})
    schedule: dict[int, list[Move]] = {}
    for i, at in enumerate(changes):
        last = min(changes[i + 1] - 1 if i + 1 < len(changes) else epochs - 1, epochs - 1)
        fluid = bins_per_epoch is not None and not plan.leavers_at(at)
        moves = []
        for n, (b, worker) in enumerate(rebalance(owners, plan.members_at(at))):
            time = min(at + n // bins_per_epoch, last) if fluid and bins_per_epoch is not None else at
            moves.append(Move(time, b, worker))
        if plan.newcomers_at(at):
            # A newcomer's router starts from the default table and hears only moves sent from now on: every
            # bin not moving at ``at`` is restated with its owner, so its table is the members' from ``at`` on.
            now = {m.bin for m in moves if m.time == at}
            moves = [Move(at, b, w) for b, w in enumerate(owners) if b not in now] + moves
        for move in moves:
            owners[move.bin] = move.worker
        schedule[at] = moves
    return schedule


def run_while_rescaling(
    worker: Worker,
    stage: Stage,
    share: Share,
    epochs: int,
    plan: RescalePlan,
    *,
    coordinator: Coordinator | None = None,
    linger: float = 0.0,
    on_epoch: Callable[[int], None] | None = None,
    join_timeout: float = 60.0,
    leave_timeout: float = 60.0,
    bins_per_epoch: int | None = FLUID_BINS,
) -> list[tuple[int, list[tuple[Any, int]]]] | None:
    """Feed ``share(worker, epoch, members)`` into ``stage`` for ``epochs`` epochs, following ``plan``.

    Before anything runs, the plan is checked against the operators that receive records by worker index
    (:meth:`RescalePlan.check_pinned`): a stage with a plain ``exchange`` cannot lose a process that started the
    computation, and the gather of what the stage emits stays on a process that never leaves
    (:meth:`RescalePlan.gatherer`); either way a :class:`MembershipError` names the operator at once.

    ``coordinator`` starts newcomers and hears of leaves (``pytimely launch --elastic``'s control endpoint;
    ``None`` when something else starts them). Its requests are handles polled between steps, so no worker
    stops stepping while one is in flight:

    - in the epoch before a process joins, once its records are sent, the first worker of the lowest process that
      stays (:meth:`RescalePlan.coordinator_at`) waits until the coordinator has heard of every leave the plan had
      before it, then asks for the newcomer; every member then steps until
      the newcomer's workers are members (they hold that epoch's records meanwhile, so the server can mint the
      newcomer's capabilities strictly above them);
    - a newcomer's workers say when they have bootstrapped;
    - a leaving process's first worker says it leaves before it does. A leave in the same epoch as a join
      waits until the newcomer has bootstrapped (so nobody leaves while a newcomer still bootstraps, and the
      newcomer, started while the leaver still runs, dials it and hears its ``LEAVING``).

    Every wait has a deadline: a newcomer not there within ``join_timeout`` seconds raises :class:`JoinTimeoutError`
    naming it on every member (at once on the asking worker, if the launcher reports the newcomer exited); a leave
    not heard
    of within ``leave_timeout`` raises :class:`LeaveTimeoutError`, and so does a leaving worker that has not left
    within it. A leaving worker waits ``linger`` seconds before it leaves. ``on_epoch(epoch)`` is called once this
    worker's probe has passed ``epoch``. The bins follow :func:`migration_schedule` with ``bins_per_epoch``. The
    gathering worker returns, per emitted batch, its epoch and ``(record, emitting worker)`` pairs; the others
    return ``None``.
    """
    gatherer = plan.gatherer(epochs)
    schedule = migration_schedule(plan, epochs, bins_per_epoch=bins_per_epoch)
    handle, control_handle, captured, probe = worker.dataflow(_gathering(stage, gatherer, worker.index))
    plan.check_pinned(worker.pinned(), epochs)
    run = _Rescaling(
        worker, plan, epochs, schedule, coordinator, join_timeout, leave_timeout, handle, control_handle, probe
    )
    if not run.feed(share, linger, on_epoch) or worker.index != gatherer:
        return None
    return [(t, list(batch)) for t, batch in captured]


def _gathering(stage: Stage, gatherer: int, me: int) -> Callable[[Any], Any]:
    """The dataflow of :func:`run_while_rescaling`: inputs for records and control, ``stage``, and its gather."""

    def tag(record: Any) -> tuple[Any, int]:
        return record, me

    def build(scope: Any) -> Any:
        handle, records = scope.new_input(name="records")
        control_handle, control = scope.new_input(name="control")
        gathered = stage(records, control).map(tag).gather(gatherer, name="gather")
        return handle, control_handle, gathered.capture(), gathered.probe()

    return build


class _Rescaling:
    """One worker's run of :func:`run_while_rescaling`: the epochs it feeds, the joins it waits for, its leave."""

    def __init__(
        self, worker: Worker, plan: RescalePlan, epochs: int, schedule: dict[int, list[Move]],
        coordinator: Coordinator | None, join_timeout: float, leave_timeout: float,
        handle: Any, control_handle: Any, probe: Any,
    ) -> None:
        self.worker = worker
        self.plan = plan
        self.epochs = epochs
        self.schedule = schedule
        self.sent_at = sorted(schedule)
        self.coordinator = coordinator
        self.join_timeout = join_timeout
        self.leave_timeout = leave_timeout
        self.handle = handle
        self.control_handle = control_handle
        self.probe = probe
        self.me = worker.index
        self.process = worker.index // worker.workers_per_process

    def control_until(self, epoch: int) -> int:
        """After ``epoch``, how far control may move: to the next epoch at which moves are sent (or the end).

        Routers route data at a time only once the control frontier has passed it, and ship a moving bin only
        once it has passed the move's time: control kept ahead of the data spares a round of progress per epoch.
        """
        return next((e for e in self.sent_at if e > epoch), self.epochs)

    def feed(self, share: Share, linger: float, on_epoch: Callable[[int], None] | None) -> bool:
        """Feed every epoch this worker is a member at; ``False`` if it left before the end."""
        worker, plan, handle, control_handle = self.worker, self.plan, self.handle, self.control_handle
        start = self.say_joined() if worker.joined else 0
        control_handle.advance_to(max(control_handle.time, self.control_until(start - 1)))
        for epoch in range(start, self.epochs):
            members = plan.members_at(epoch)
            if self.me not in members:
                self.leave(epoch, linger)
                return False
            handle.send_batch(share(self.me, epoch, members))
            if plan.newcomers_at(epoch + 1):
                self.let_in(epoch + 1)
            handle.advance_to(epoch + 1)
            control_handle.advance_to(max(control_handle.time, self.control_until(epoch)))
            worker.step_while(lambda: self.probe.less_than(handle.time))
            if on_epoch is not None:
                on_epoch(epoch)
        handle.close()
        control_handle.close()
        worker.step_while(lambda: not self.probe.done())
        return True

    def say_joined(self) -> int:
        """A newcomer's start: the epoch it joins at, once the coordinator heard it bootstrapped."""
        # Its capabilities were minted strictly above ones its server held (seed 000 Fig. 4): records at
        # ``start``, control one later (the members sent the moves that hand it its bins at ``start``).
        start = self.plan.joins_at(self.me)
        self.handle.advance_to(start)
        if self.coordinator is not None:
            said = self.coordinator.joined(self.me)
            timeout = self.join_timeout
            _step_until(self.worker, said.done, timeout, lambda: _late_request(self.process, "joined", timeout))
        return start

    def leave(self, epoch: int, linger: float) -> None:
        """Give this worker's bins away at ``epoch``, wait for that epoch's newcomers, say so, linger and leave."""
        self.control_handle.send_batch(self.schedule.get(epoch, []))
        if self.plan.newcomers_at(epoch):
            _wait_for_newcomers(self.worker, self.plan, epoch, self.coordinator, self.join_timeout)
        if self.coordinator is not None and self.me % self.worker.workers_per_process == 0:
            notice = self.coordinator.leaving(self.process)
            timeout = self.leave_timeout
            _step_until(self.worker, notice.done, timeout, lambda: _late_request(self.process, "leaving", timeout))
        # Lingering lets the others run ahead, so the leaver holds the only capability at the frontier.
        time.sleep(linger)
        self.worker.leave(at=epoch, timeout=self.leave_timeout)

    def let_in(self, epoch: int) -> None:
        """Before ``epoch``, at which processes join: wait until they are members, then send them their bins."""
        # A newcomer's server mints its capabilities strictly above ones it holds (seed 000 Fig. 4): the
        # members hold this epoch's records while it joins, so it sends records from the next epoch on.
        # Control moves on first (the bins a process leaving now gives away can go); once the newcomer is
        # in, it carries the moves that give it its bins at the next epoch.
        self.control_handle.advance_to(epoch)
        _wait_for_members(self.worker, self.plan, epoch, self.coordinator, self.join_timeout, self.leave_timeout)
        self.worker.step()  # the dataflow applies the joins (and its server mints) before this epoch is given up
        if self.me == self.plan.coordinator_at(epoch):
            self.control_handle.send_batch(self.schedule.get(epoch, []))


def _late_request(process: int, op: str, timeout: float) -> JoinTimeoutError | LeaveTimeoutError:
    kind = JoinTimeoutError if op == "joined" else LeaveTimeoutError
    return kind(f"process {process} could not tell the launcher {op!r} within {timeout:g} s", process)


def _wait_for_members(
    worker: Worker,
    plan: RescalePlan,
    epoch: int,
    coordinator: Coordinator | None,
    join_timeout: float,
    leave_timeout: float,
) -> None:
    """Before ``epoch``: its coordinating worker makes sure earlier leaves were heard and asks for the newcomers;
    all wait."""
    joins: list[Join] = []
    if worker.index == plan.coordinator_at(epoch) and coordinator is not None:
        # Whoever starts a newcomer hands it the processes to dial: it must have heard of every earlier leave.
        staying = set(plan.processes_at(epoch)) | set(plan.leavers_at(epoch))
        gone = sorted(set(range(plan.processes)) - staying - set(plan.newcomers_at(epoch)))
        gone = [p for p in gone if p < min(plan.newcomers_at(epoch))]
        for process in gone:
            heard = coordinator.reached(process, ("leaving", "exited"))
            _step_until(
                worker, heard.done, leave_timeout,
                lambda p=process: LeaveTimeoutError(  # type: ignore[misc]
                    f"worker {worker.index}: the launcher did not hear within {leave_timeout:g} s that process {p} "
                    "leaves", p
                ),
            )
        joins = [coordinator.join() for _ in plan.newcomers_at(epoch)]
    _wait_for_newcomers(worker, plan, epoch, None, join_timeout, joins)


def _wait_for_newcomers(
    worker: Worker,
    plan: RescalePlan,
    epoch: int,
    coordinator: Coordinator | None,
    join_timeout: float,
    joins: list[Join] | None = None,
) -> None:
    """Step until the processes joining at ``epoch`` are members (and, with ``coordinator``, bootstrapped)."""
    per = plan.workers
    wanted = {p * per + i for p in plan.newcomers_at(epoch) for i in range(per)}

    def missing() -> list[int]:
        return sorted({m // per for m in wanted - set(worker.members)})

    def check() -> None:
        for join in joins or ():
            join.check()

    _step_until(
        worker, lambda: not missing(), join_timeout,
        lambda: JoinTimeoutError(
            f"worker {worker.index}: process(es) {', '.join(map(str, missing()))} did not join within "
            f"{join_timeout:g} s (they were to take part from epoch {epoch})",
            missing()[0],
        ),
        check,
    )
    if coordinator is not None:
        for process in plan.newcomers_at(epoch):
            ready = coordinator.reached(process, ("joined",))
            _step_until(
                worker, ready.done, join_timeout,
                lambda p=process: JoinTimeoutError(  # type: ignore[misc]
                    f"worker {worker.index}: process {p} did not bootstrap within {join_timeout:g} s", p
                ),
            )


# --- counting ------------------------------------------------------------------------------------------------------


def _count(key: Any, value: int, state: int | None) -> tuple[int, list[tuple[Any, int]]]:
    total = (state or 0) + value
    return total, [(key, total)]


def count_keys(keys: Stream[Any], control: Stream[Any]) -> Stream[tuple[Any, int]]:
    """Each key's running count, as ``(key, count)`` at every time the key occurs."""
    return keys.map(lambda k: (k, 1)).state_machine(_count, control=control)


def count_while_rescaling(
    worker: Worker,
    share: Share,
    epochs: int,
    plan: RescalePlan,
    *,
    coordinator: Coordinator | None = None,
    linger: float = 0.0,
    **options: Any,
) -> tuple[dict[Any, int], dict[int, int]] | None:
    """Count the keys ``share`` gives each member, following ``plan`` (see :func:`run_while_rescaling`).

    The gathering worker (:meth:`RescalePlan.gatherer`) returns each key's count and how many counts each worker
    emitted; the others return ``None``.
    ``options`` go to :func:`run_while_rescaling` (the deadlines).
    """
    emitted = run_while_rescaling(
        worker, count_keys, share, epochs, plan, coordinator=coordinator, linger=linger, **options
    )
    if emitted is None:
        return None
    counts: dict[Any, int] = {}
    emitters: dict[int, int] = {}
    for _, batch in emitted:
        for (key, total), emitter in batch:
            counts[key] = max(counts.get(key, 0), total)
            emitters[emitter] = emitters.get(emitter, 0) + 1
    return counts, emitters


# --- components ------------------------------------------------------------------------------------------------------

_NO_ROWS = np.empty((0, 2), dtype=np.int64)

Partition = tuple[Any, Any]
"""Sorted vertex ids and each one's label (the least vertex of its component), as two int64 arrays."""


def merge_edges(state: Partition | None, edges: Any) -> tuple[Partition, Any]:
    """Merge ``edges`` (an ``(n, 2)`` int64 array) into a partition: the new one and its ``(vertex, label)`` changes.

    The partition's ``vertex -- label`` pairs stand for all edges merged before, so one vectorised pass over
    them and the new edges gives the components of everything merged so far.
    """
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    verts, labels = state if state is not None else (_NO_ROWS[:, 0], _NO_ROWS[:, 0])
    nodes = np.union1d(verts, edges.ravel())
    a = np.concatenate([np.searchsorted(nodes, verts), np.searchsorted(nodes, edges[:, 0])])
    b = np.concatenate([np.searchsorted(nodes, labels), np.searchsorted(nodes, edges[:, 1])])
    # Rows are sorted by vertex id, so a component's least row is its least vertex.
    new_labels = nodes[_components(len(nodes), a, b)]
    old = np.full(len(nodes), -1, dtype=np.int64)
    old[np.searchsorted(nodes, verts)] = labels
    changed = np.flatnonzero(old != new_labels)
    return (nodes, new_labels), np.column_stack([nodes[changed], new_labels[changed]])


def _merge(_key: Any, edges: Any, state: Partition | None) -> tuple[Partition, list[tuple[int, Any]]]:
    partition, changes = merge_edges(state, edges)
    return partition, [(0, changes)] if len(changes) else []


def _shards(count: int) -> Callable[[Any], list[tuple[int, Any]]]:
    def split(edges: Any) -> list[tuple[int, Any]]:
        edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        if not len(edges):
            return []
        shard = edges[:, 0] % count
        order = np.argsort(shard, kind="stable")
        edges, shard = edges[order], shard[order]
        cuts = np.flatnonzero(np.diff(shard)) + 1
        return [(int(part[0, 0] % count), part) for part in np.split(edges, cuts)]

    return split


def union_components(edges: Stream[Any], control: Stream[Any], shards: int = 64) -> Stream[Any]:
    """Weakly connected components of all edges so far: ``(n, 2)`` arrays of ``(vertex, label)`` changes.

    ``edges`` carries batches that are ``(n, 2)`` int64 arrays; at every time, each vertex whose label (the
    least vertex of its component) is new or changed appears once, in one of the emitted arrays.
    """
    # One record per key and time reaches each fold, so a vertex changes at most once per time.
    sharded = edges.map_batch(_shards(shards), name="shard").reduce_by(_first, _concat, name="edges", control=control)
    per_shard = sharded.state_machine(_merge, control=control, name="shards")
    union = per_shard.reduce_by(_first, _concat, name="changes", control=control)
    return union.state_machine(_merge, control=control, name="union").map(_second, name="labels")


def _first(record: tuple[Any, Any]) -> Any:
    return record[0]


def _second(record: tuple[Any, Any]) -> Any:
    return record[1]


def _concat(_key: Any, records: list[tuple[Any, Any]]) -> Any:
    return np.concatenate([r[1] for r in records]) if len(records) > 1 else records[0][1]


def components_while_rescaling(
    worker: Worker,
    share: Share,
    epochs: int,
    plan: RescalePlan,
    *,
    coordinator: Coordinator | None = None,
    linger: float = 0.0,
    **options: Any,
) -> list[list[tuple[int, int]]] | None:
    """The components of the edges (``(n, 2)`` arrays) ``share`` gives each member, following ``plan``.

    The gathering worker returns, per epoch, the ``(vertex, label)`` changes at that epoch; the others return
    ``None``.
    """
    emitted = run_while_rescaling(
        worker, union_components, share, epochs, plan, coordinator=coordinator, linger=linger, **options
    )
    if emitted is None:
        return None
    changes: list[list[tuple[int, int]]] = [[] for _ in range(epochs)]
    for t, batch in emitted:
        for rows, _ in batch:
            changes[t].extend(map(tuple, rows.tolist()))
    return changes

"""The runtime's half of recovery: snapshots at epoch boundaries, restored state, commits.

Every worker runs a :class:`WorkerRecovery` (``execute(..., recovery=...)`` sets it up) and, for each dataflow
it builds, a :class:`DataflowRecovery`:

**Restore, before the first step.** When a dataflow is built, the operators that declared state
(:mod:`pytimely.dataflow.state`) are checked against the layout the store recorded, then given what the
snapshot holds for them on this worker: bin ``b`` of a keyed state on worker ``b % peers``, the values and logs
of old workers ``w`` on worker ``w % peers``, source partition ``p`` on worker ``p % peers``; so a run restarts
on any number of workers. Source operators then drop what they send at epochs the snapshot holds (the job's
loop may run from the start: what it sends again of committed epochs goes nowhere), and a replayable source
reads on from its restored position.

**Snapshots, at epoch boundaries.** Every operator that declared state has a *fence*: the next epoch ``e`` the
policy snapshots. While it stands, the operator is handed no message of a later epoch (they wait in its queues),
and an operator that changes its state when a frontier moves does so at later epochs only once it may
(``OperatorInfo.may_change``). Once its input frontiers hold no epoch ``<= e`` (the worker's view of them is
conservative, so nothing at such an epoch can still reach it), it is scheduled, and right after it has run its
declared state holds exactly the records of epochs ``<= e``: the worker takes what changed of it (bins, values,
log entries, positions), pickles it (here, so later changes cannot reach it), and moves its fence on. Once every
operator of the dataflow is past ``e``, the epoch's pieces go to a writer thread as one file. Nothing waits for
the file: a fence stands only until the state is taken.

**Commit.** Once a worker's file is written (under a name of its own, fsynced), its report of where each piece
lives (a :class:`~pytimely.recovery.parts.Part`) goes to worker 0 on a small dataflow of the runtime's own, at
the snapshot's epoch. When that dataflow's frontier passes the epoch, every worker's report is in: worker 0 folds
them into the manifest before (:func:`~pytimely.recovery.parts.merge`) and has it written, which commits the
snapshot; then snapshots beyond the policy's ``keep`` and files no kept manifest names are removed. A worker
that found nothing changed sends nothing; its last report stands. Once every dataflow has finished, worker 0
commits the final snapshot: a run started again from it computes nothing and restores every output.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.channels import Direct
from pytimely.dataflow.state import PiecewiseState, Tracked
from pytimely.dataflow.subgraph import Subgraph, epoch_of
from pytimely.errors import RecoveryError, SnapshotCorruptError, StoreWriteError
from pytimely.recovery.manifest import FINAL, Layout, Manifest
from pytimely.recovery.parts import Part, Where, merge
from pytimely.recovery.snapshots import Retained

if TYPE_CHECKING:
    from pytimely.dataflow.operator import OperatorCore
    from pytimely.dataflow.ports import InputPort
    from pytimely.dataflow.state import BinnedState, Declared
    from pytimely.recovery.policy import SnapshotPolicy
    from pytimely.recovery.session import Session
    from pytimely.worker import Worker

__all__ = ["DataflowRecovery", "WorkerRecovery", "binned_changes", "owner_on_restore", "passed_fences", "state_keys"]

_OUTSTANDING = 4
"""Snapshots a worker may have in the writer's queue before it waits for the oldest (bounds memory)."""


def passed_fences(
    fence: int,
    lows: list[int],
    policy: SnapshotPolicy,
    stop: int | None = None,
    *,
    held: list[int] | None = None,
    next_change: int | None = None,
) -> tuple[list[tuple[int, bool]], int | None]:
    """The snapshot an operator takes now and its next fence.

    ``lows``: the epochs of what can still reach the operator; ``held``: the epochs of the capabilities it holds
    (what it may still emit, once nothing can reach it any more); ``next_change``: the first epoch at which its
    state may change without input, if it can tell (a window's end).

    A fence ``f`` is passed once everything that can still reach the operator is at an epoch after ``f``: the
    snapshot is of ``f`` and the next fence is the next epoch the policy snapshots (never one further: a state
    whose changes come with its frontiers, windows closing, differs at each epoch even when no record comes).
    Once nothing can reach it, it steps on while it still holds capabilities (to ``next_change`` at once when it
    can tell); once it holds none its state changes no more, and this snapshot is its last (``final``): every
    later snapshot, the final one included, holds it as it is. A worker leaving at ``stop`` takes none at or
    after it.
    """
    if lows:
        if min(lows) <= fence:
            return [], fence
        after = policy.first_at_or_after(fence + 1)
    elif not held:
        return [(fence, True)], None
    else:
        after = policy.first_at_or_after(max(fence + 1, next_change if next_change is not None else fence + 1))
    return [(fence, False)], None if stop is not None and after >= stop else after


def binned_changes(state: BinnedState, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
    """What a snapshot writes of a keyed state, as ``(bins, value)`` pieces: the bins that changed (``None``:
    emptied) and, in turn, one ``rewrite_every``-th of the bins that did not (so no file is needed by more than
    ``rewrite_every`` snapshots). A :class:`~pytimely.dataflow.state.PiecewiseState` says so itself."""
    if isinstance(state, PiecewiseState):
        return state.capture(turn, rewrite_every)
    dirty = set(state.changed())
    rewrite = {b for b in state.held() if b % rewrite_every == turn} - dirty
    values = state.snapshot(dirty | rewrite) if dirty or rewrite else {}
    return [((b,), v) for b, v in sorted(values.items())]


def owner_on_restore(slot: int, peers: int) -> int:
    """The worker that restores bin (or old worker, or source partition) ``slot`` in a run of ``peers`` workers:
    where a keyed operator routes the bin by default (``exchange_by_bin``, ``BinTable.default``)."""
    return slot % peers


def state_keys(ordinal: int, operators: list[OperatorCore]) -> list[tuple[str, OperatorCore, Declared]]:
    """Every declared state of a dataflow with its key ``dataflow/operator#n/state`` (``n`` counts operators
    of that name that declared state, so keys do not move when stateless operators come and go)."""
    seen: dict[str, int] = {}
    out = []
    for op in operators:
        if not op.states:
            continue
        n = seen.get(op.name, 0)
        seen[op.name] = n + 1
        for declared in op.states:
            out.append((f"{ordinal}/{op.name}#{n}/{declared.name}", op, declared))
    return out


@dataclass(slots=True)
class _Capture:
    """A snapshot taken and on its way: the part to report, once its file (if any) is written."""

    epoch: int
    part: Part
    write: Future[tuple[str, int, str]] | None
    taken: Callable[[], None] | None = None
    """Tells the worker the write's result was taken (it counted as work under way until then)."""


class WorkerRecovery:
    """One worker's recovery runtime: the hook :class:`~pytimely.worker.Worker` calls (module doc)."""

    def __init__(self, session: Session, worker: Worker) -> None:
        self.session = session
        self.worker = worker
        self.dataflows: list[DataflowRecovery] = []
        self._coordinating = False
        self._coordination: Subgraph | None = None
        self._handle: Any = None
        self._port: InputPort[Any, Any] | None = None
        self._outbox: list[_Capture] = []
        self._collected: dict[int, list[Part]] = {}
        opened = session.opened
        self._committed: Manifest | None = opened.manifest if opened is not None else None
        self._commits: list[tuple[Future[None], Callable[[], None]]] = []
        self._retained = Retained(self._committed) if worker.index == 0 else None
        self._final_committed = False
        self.durable_epoch = -1 if self._committed is None else self._committed.epoch
        """Worker 0: the epoch of the newest manifest whose commit is durable (written and synced)."""
        self._closed = False
        self._finishing = False
        self.leave_at: Any = None

    # -- the worker's hooks -----------------------------------------------------------------------

    @property
    def resume_epoch(self) -> int:
        """The first epoch this run computes (:data:`FINAL` when the run had finished)."""
        return self.session.resume

    def attach(self, subgraph: Subgraph) -> None:
        """Restore a dataflow just built and set its fence; the first one also builds the commit dataflow."""
        if self._coordinating:
            self._coordination = subgraph
            return
        if self._handle is None and not self.session.complete:
            self._build_coordination()
        df = DataflowRecovery(self, subgraph, len(self.dataflows))
        self.dataflows.append(df)
        df.start()
        self._advance()

    def after_step(self) -> bool:
        """Hand on written snapshots in epoch order, commit what every worker reported (worker 0); whether it
        did anything (what it sends goes out at the next step)."""
        if self._handle is None:
            return False
        worked = self._send_written()
        if self.worker.index == 0:
            worked = self._commit_reported() or worked
        for done in [c for c in self._commits if c[0].done()]:
            self._commits.remove(done)
            self._result(done[0])
            done[1]()
        if not self.worker.running:
            self._drain()
        return worked

    def busy(self) -> bool:
        """Whether files or commits are still being written."""
        return bool(self._outbox or self._commits)

    def finishing(self) -> None:
        """The job closed its inputs: once every dataflow's last snapshot is reported, close the commit input."""
        self._finishing = True
        self._advance()

    def leaving(self, at: Any) -> None:
        """This worker leaves at ``at``: it takes the snapshots of earlier epochs only."""
        self.leave_at = epoch_of(at) if at is not None else 0
        for df in self.dataflows:
            df.stop_at(self.leave_at)
        self._advance()

    # -- reporting ----------------------------------------------------------------------------

    def _build_coordination(self) -> None:
        """The runtime's own dataflow: parts go to worker 0 at their snapshot's epoch; its frontier says when
        every worker's parts of an epoch are in."""
        collected = self._collected
        me = self.worker.index

        def build(scope: Any) -> tuple[Any, Any]:
            handle, stream = scope.new_input(name="snapshot parts")
            # The runtime closes it once its last snapshot is reported, not the job's end or a leave; a newcomer's
            # copy still follows the capability its bootstrap minted for it.
            scope.subgraph.inputs.remove(handle)
            scope.subgraph.on_rejoin(handle._rejoined)
            op = scope.add_operator("snapshot commits", [(stream, Direct(_to_first))], 0)
            op.notify = True
            port = op.inputs[0]

            def logic() -> None:
                for _, batch in port.batches():
                    if me == 0:
                        for part in batch:
                            collected.setdefault(part.epoch, []).append(part)

            op.logic = logic
            return handle, port

        self._coordinating = True
        try:
            self._handle, self._port = self.worker.dataflow(build, name="recovery commits")
        finally:
            self._coordinating = False

    def capture_taken(self, capture: _Capture) -> None:
        """A dataflow took a snapshot (with something in it): queue it, waiting if too many are in flight."""
        if capture.write is not None:
            capture.taken = self.worker.await_other_thread(capture.write)
        self._outbox.append(capture)
        self._outbox.sort(key=lambda c: c.epoch)
        pending = [c for c in self._outbox if c.write is not None and not c.write.done()]
        if len(pending) > _OUTSTANDING:
            self._wait(pending[0].write)

    def _send_written(self) -> bool:
        handle = self._handle
        outbox = self._outbox
        sent = bool(outbox) and (outbox[0].write is None or outbox[0].write.done())
        while outbox and (outbox[0].write is None or outbox[0].write.done()):
            capture = outbox.pop(0)
            if capture.write is not None:
                capture.part.files.append(self._result(capture.write))
            if capture.taken is not None:
                capture.taken()
            if handle.time < capture.epoch:
                handle.advance_to(capture.epoch)
            handle.send_batch([capture.part])
        if sent:
            self._advance()
        return sent

    def _advance(self) -> None:
        """Move the commit input to the earliest epoch this worker may still report, or close it."""
        handle = self._handle
        if handle is None or self._closed:
            return
        lows = [c.epoch for c in self._outbox]
        lows += [df.fence for df in self.dataflows if df.fence is not None]
        if not lows:
            if self._finishing:
                handle.close()
                self._closed = True
            return
        low = min(lows)
        if handle.time < low:
            handle.advance_to(low)

    # -- committing (worker 0) -------------------------------------------------------------------

    def _commit_reported(self) -> bool:
        port = self._port
        assert port is not None
        frontier = port.frontier
        session = self.session
        committed = False
        for epoch in sorted(self._collected):
            if frontier.less_equal(epoch):
                break
            parts = self._collected.pop(epoch)
            manifest = merge(self._committed, epoch, parts, session.identity, self.worker.peers)
            self._commit(manifest)
            committed = True
        if (
            not self._final_committed
            and frontier.is_empty()
            and not self._collected
            and self.dataflows
            and all(df.finished for df in self.dataflows)
            and self.leave_at is None
            and (self._committed is None or self._committed.epoch != FINAL)
        ):
            self._final_committed = True
            self._commit(merge(self._committed, FINAL, [], session.identity, self.worker.peers))
            committed = True
        return committed

    def _commit(self, manifest: Manifest) -> None:
        self._committed = manifest
        snapshots, keep = self.session.snapshots, self.session.policy.keep
        # A commit still waiting for the writer is made useless by this one (a manifest holds everything): it
        # is dropped, so a writer that falls behind catches up instead of writing every manifest.
        for waiting, taken in list(self._commits):
            if waiting.cancel():
                self._commits.remove((waiting, taken))
                taken()
        commit = self.session.committer.submit(snapshots.commit, manifest, keep, self._retained)
        commit.add_done_callback(partial(self._durable, manifest.epoch))
        self._commits.append((commit, self.worker.await_other_thread(commit)))

    def holds(self, epoch: int) -> bool:
        """Worker 0: whether the store's durable snapshots hold every epoch up to ``epoch``.

        An epoch that changed no declared state has no manifest of its own: the one before it stands for it, once
        every worker is past the epoch (the commit dataflow's frontier) and what was reported of it is committed.
        """
        port = self._port
        if port is None or port.frontier.less_equal(epoch) or any(e <= epoch for e in self._collected):
            return False
        submitted = -1 if self._committed is None else self._committed.epoch
        return self.durable_epoch >= min(submitted, epoch)

    def _durable(self, epoch: int, commit: Future[None]) -> None:
        """The committer's callback: a manifest written without error is durable (cancelled ones are not)."""
        if not commit.cancelled() and commit.exception() is None:
            self.durable_epoch = max(self.durable_epoch, epoch)

    # -- waiting for the writer ------------------------------------------------------------------

    def _result(self, future: Future[Any]) -> Any:
        try:
            return future.result(timeout=self.session.recovery.write_timeout)
        except TimeoutError:
            raise StoreWriteError(
                f"recovery store {self.session.snapshots.where}: a write took longer than "
                f"{self.session.recovery.write_timeout:g} s", self.session.snapshots.where,
            ) from None

    def _wait(self, future: Future[Any] | None) -> None:
        if future is not None:
            self._result(future)

    def _drain(self) -> None:
        """No dataflow runs any more: wait for every write and commit (raising what failed)."""
        for capture in list(self._outbox):
            self._wait(capture.write)
        for commit, taken in self._commits:
            self._result(commit)
            taken()
        self._commits.clear()


def _to_first() -> int:
    return 0


@dataclass(slots=True)
class _Stateful:
    """One operator that declared state: its states with their keys, and its fence."""

    op: OperatorCore
    states: list[tuple[str, Declared]]
    fence: int | None = None
    finished: bool = False
    taken: int = 0
    """Snapshots taken of this operator: its turn in the rewriting of unchanged bins."""


@dataclass(slots=True)
class _Assembling:
    """The part of one epoch while the operators of a dataflow take their snapshots of it, one by one."""

    part: Part
    buffer: bytearray


class DataflowRecovery:
    """One dataflow's snapshots on one worker: restore, fences, capture (see the module doc).

    Each operator that declared state has its own fence and is snapshotted at an epoch ``e`` once nothing at an
    epoch ``<= e`` can still reach it and it holds no capability at one (its work of ``e`` is done): an operator
    waiting for input of an early epoch another part of the dataflow still holds back does not stop the others.
    The operators' snapshots of one epoch make one part, sent once every operator is past that epoch.
    """

    def __init__(self, owner: WorkerRecovery, subgraph: Subgraph, ordinal: int) -> None:
        self.owner = owner
        self.subgraph = subgraph
        self.ordinal = ordinal
        self.session = owner.session
        self.stateful: list[_Stateful] = []
        self._by_index: dict[int, _Stateful] = {}
        self._stop: int | None = None
        self._assembling: dict[int, _Assembling] = {}
        self._logs: dict[str, list[Where]] = {}
        self._values: dict[str, bytes] = {}
        self._absorbed: dict[str, list[int]] = {}

    @property
    def fence(self) -> int | None:
        """The earliest epoch this worker may still report for this dataflow (``None``: none)."""
        lows = [s.fence for s in self.stateful if s.fence is not None]
        lows += list(self._assembling)
        return min(lows) if lows else None

    @property
    def finished(self) -> bool:
        """Whether every operator that declared state has finished (or none did)."""
        return all(s.finished for s in self.stateful)

    @property
    def states(self) -> list[tuple[str, OperatorCore, Declared]]:
        """Every declared state with its key and operator."""
        return [(key, s.op, d) for s in self.stateful for key, d in s.states]

    # -- start ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Check the layout, restore, drop replayed source output, and set the first fences."""
        subgraph = self.subgraph
        session = self.session
        for op in subgraph.operators:
            if op.undeclared_state is not None:
                raise RecoveryError(
                    f"operator {op.name!r} of dataflow {subgraph.name!r} keeps {op.undeclared_state} across "
                    "epochs, which snapshots do not hold: a resumed run would lose it, so this job cannot use "
                    "recovery"
                )
        stateful = subgraph.declare_stateful()
        keyed = state_keys(self.ordinal, stateful)
        for key, op, declared in keyed:
            entry = self._by_index.get(op.index)
            if entry is None:
                entry = self._by_index[op.index] = _Stateful(op, [])
                self.stateful.append(entry)
            entry.states.append((key, declared))
            if isinstance(declared.state, Tracked):
                declared.state.track()
        if session.resume:
            subgraph.resume_epoch = session.resume
        if not self.stateful:
            return
        for op in stateful:
            if not _nested_in_ints(op):
                raise RecoveryError(
                    f"dataflow {subgraph.name!r}: operator {op.name!r} declares state, and snapshots are taken at "
                    f"epoch boundaries, which needs integer timestamps (its scope starts at {op.scope.minimum!r})"
                )
        layout = Layout({key: (d.kind, d.layout, int(getattr(d.state, "bins", 0))) for key, _, d in keyed})
        first = self.owner.worker.index == 0 and not session.joining
        session.snapshots.check_layout(
            self.ordinal, subgraph.name, layout, write=first, check=session.opened is not None
        )
        if session.opened is not None:
            self._restore()
        if session.complete:
            for entry in self.stateful:
                entry.finished = True
            return
        start = session.resume
        handle = self.owner._handle
        if handle is not None:
            start = max(start, handle.time)
        fence = session.policy.first_at_or_after(start)
        for entry in self.stateful:
            entry.fence = fence
            subgraph.set_fence(entry.op.index, fence)
        subgraph.snapshot_hook = self.check
        subgraph.stateful_ran = self.ran

    def stop_at(self, epoch: int) -> None:
        """Take no snapshot of an epoch at or after ``epoch`` (the worker leaves then)."""
        self._stop = epoch
        for entry in self.stateful:
            if entry.fence is not None and entry.fence >= epoch:
                self._set_fence(entry, None)
        self._flush()

    def _restore(self) -> None:
        opened = self.session.opened
        assert opened is not None
        manifest = opened.manifest
        worker = self.owner.worker
        peers, me = worker.peers, worker.index

        def load(piece: tuple[int, int, int], key: str) -> Any:
            try:
                return pickle.loads(opened.piece(piece))
            except Exception as exc:  # a piece that passed its file's checksum but does not unpickle
                name = manifest.files[piece[0]][0]
                raise SnapshotCorruptError(
                    f"recovery store {self.session.snapshots.where}: {name}: state {key!r} does not load: "
                    f"{type(exc).__name__}: {exc}", name,
                ) from None

        names = manifest.files
        for key, _op, declared in self.states:
            state = declared.state
            kind = declared.kind
            if kind == "binned":
                by_piece: dict[tuple[int, int, int], list[int]] = {}
                for b, piece in manifest.binned.get(key, {}).items():
                    if owner_on_restore(b, peers) == me:
                        by_piece.setdefault(piece, []).append(b)
                for piece, bins in by_piece.items():
                    value = load(piece, key)
                    if isinstance(state, PiecewiseState):
                        state.restore_piece(bins, value)
                    else:
                        for b in bins:
                            state.restore(b, value)
            elif kind == "worker":
                slots = sorted(s for s in manifest.worker.get(key, {}) if owner_on_restore(s, peers) == me)
                if slots:
                    state.restore([load(manifest.worker[key][s], key) for s in slots])
                self._absorbed[key] = [s for s in slots if s != me]
            elif kind == "log":
                slots = sorted(s for s in manifest.logs.get(key, {}) if owner_on_restore(s, peers) == me)
                entries: list[Any] = []
                pieces: list[Where] = []
                for s in slots:
                    for piece in manifest.logs[key][s]:
                        entries.extend(load(piece, key))
                        pieces.append((names[piece[0]][0], piece[1], piece[2]))
                if entries:
                    state.restore(entries)  # restored entries count as written: appended() leaves them out
                self._logs[key] = pieces
                self._absorbed[key] = [s for s in slots if s != me]
            else:
                positions = manifest.positions.get(key, {})
                state.restore({p: v for p, v in positions.items() if owner_on_restore(p, peers) == me})

    # -- snapshots ------------------------------------------------------------------------------

    def _lows(self, entry: _Stateful) -> list[int]:
        """The epochs of what can still reach the operator: its input frontiers (a source: what it may send)."""
        op = entry.op
        if op.inputs:
            return [epoch_of(t) for port in op.inputs for t in port.frontier.frontier_elements()]
        return self._held(entry)

    def _held(self, entry: _Stateful) -> list[int]:
        """The epochs of the capabilities on the operator's outputs."""
        tracker = self.subgraph.tracker
        assert tracker is not None
        return [epoch_of(t) for out in entry.op.outputs for t in tracker.pointstamps(out.source)]

    def check(self) -> None:
        """After progress arrived: schedule every operator whose frontiers passed its fence (it is snapshotted
        right after it has run, when it has done what those frontiers let it do)."""
        for entry in self.stateful:
            fence = entry.fence
            if fence is not None and all(low > fence for low in self._lows(entry)):
                self.subgraph.activate(entry.op.index)

    def ran(self, op: OperatorCore) -> None:
        """An operator with a fence ran: snapshot it if its frontiers have passed the fence."""
        entry = self._by_index.get(op.index)
        if entry is None or entry.fence is None:
            return
        fence = entry.fence
        lows = self._lows(entry)
        if lows and min(lows) <= fence:
            return  # the common case, checked cheaply: the fence is not passed
        held: list[int] = []
        next_change = None
        if not lows:
            held = self._held(entry)
            changes = [getattr(d.state, "next_change", _unknown)() for _, d in entry.states]
            next_change = None if not changes or None in changes else min(c for c in changes if c is not None)
        policy, stop = self.session.policy, self._stop
        captures, after = passed_fences(fence, lows, policy, stop, held=held, next_change=next_change)
        for epoch, final in captures:
            self._capture(entry, epoch)
            entry.finished = final
        self._set_fence(entry, after)
        self._flush()

    def _set_fence(self, entry: _Stateful, fence: int | None) -> None:
        entry.fence = fence
        self.subgraph.set_fence(entry.op.index, fence)

    def _flush(self) -> None:
        """Queue the parts of the epochs every operator is past: one payload file each."""
        lows = [s.fence for s in self.stateful if s.fence is not None]
        low = min(lows) if lows else None
        for epoch in sorted(self._assembling):
            if low is not None and epoch >= low:
                break
            assembling = self._assembling.pop(epoch)
            part = assembling.part
            name = part.files.pop()[0]
            if any(self._absorbed.values()):
                part.absorbed = {k: v for k, v in self._absorbed.items() if v}
                self._absorbed = {}
            if not (part.binned or part.values or part.logs or part.positions or part.absorbed):
                continue
            write = None
            if assembling.buffer:
                write = self.session.writer.submit(self.session.snapshots.put_payload, name, bytes(assembling.buffer))
            self.owner.capture_taken(_Capture(epoch, part, write))
        self.owner._advance()

    def _capture(self, entry: _Stateful, epoch: int) -> None:
        """Take this worker's snapshot of one operator's declared states at ``epoch`` (what changed)."""
        policy = self.session.policy
        me = self.owner.worker.index
        assembling = self._assembling.get(epoch)
        if assembling is None:
            name = self.session.snapshots.payload_name(epoch, me, self.ordinal)
            # The file's name waits in ``files`` until the part is complete and the file is written.
            assembling = self._assembling[epoch] = _Assembling(Part(me, self.ordinal, epoch, files=[(name, 0, "")]),
                                                               bytearray())  # fmt: skip
        part, buffer = assembling.part, assembling.buffer
        name = part.files[0][0]
        # The turn is the operator's own: a count shared by a dataflow's operators advanced once per operator
        # and epoch, so with two stateful operators each saw every other turn and half its bins were never
        # written again (each pinning an old payload file: the store grew with the history).
        turn = entry.taken % policy.rewrite_every
        entry.taken += 1
        op = entry.op

        def piece(value: Any, key: str) -> Where:
            try:
                data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise RecoveryError(
                    f"operator {op.name!r}: its state {key.rsplit('/', 1)[-1]!r} cannot be pickled for a snapshot "
                    f"at epoch {epoch}: {type(exc).__name__}: {exc}"
                ) from None
            where = (name, len(buffer), len(data))
            buffer.extend(data)
            return where

        for key, declared in entry.states:
            state = declared.state
            kind = declared.kind
            if kind == "binned":
                written = binned_changes(state, turn, policy.rewrite_every)
                if written:
                    places = part.binned[key] = {}
                    for bins, v in written:
                        where = None if v is None else piece(v, key)
                        for b in bins:
                            places[b] = where
            elif kind == "worker":
                data = pickle.dumps(state.snapshot(), protocol=pickle.HIGHEST_PROTOCOL)
                if self._values.get(key) != data or self._absorbed.get(key):
                    self._values[key] = data
                    part.values[key] = (name, len(buffer), len(data))
                    buffer.extend(data)
            elif kind == "log":
                new = state.appended()
                pieces = self._logs.setdefault(key, [])
                if new or self._absorbed.get(key):
                    if len(pieces) >= policy.rewrite_every:
                        pieces[:] = [piece(state.entries(), key)]
                    elif new:
                        pieces.append(piece(new, key))
                    part.logs[key] = list(pieces)  # the list goes on growing here
            else:
                changed = state.changed()
                if changed:
                    part.positions[key] = changed


def _unknown() -> None:
    """What a state that cannot tell when it changes next says (step epoch by epoch)."""
    return None


def _nested_in_ints(op: OperatorCore) -> bool:
    """Whether an operator's times are products whose outermost coordinate is an int (a loop inside epochs)."""
    time: Any = op.scope.minimum
    while hasattr(time, "outer"):
        time = time.outer
    return type(time) is int


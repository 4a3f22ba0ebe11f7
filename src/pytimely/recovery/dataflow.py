"""One dataflow's recovery on one worker: restore before the first step, fences, snapshots as fences pass.

See :mod:`pytimely.recovery.runtime` for the whole: this module holds :class:`DataflowRecovery`, which
:class:`~pytimely.recovery.runtime.WorkerRecovery` makes for each dataflow a worker builds.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.state import Tracked
from pytimely.dataflow.subgraph import Subgraph, epoch_of
from pytimely.errors import RecoveryError
from pytimely.recovery.capture import Assembling, Capture, History, capture_states
from pytimely.recovery.fences import passed_fences
from pytimely.recovery.manifest import Layout
from pytimely.recovery.parts import Part
from pytimely.recovery.restore import restore_states
from pytimely.recovery.segments import SegmentLog, record_name

if TYPE_CHECKING:
    from pytimely.dataflow.operator import OperatorCore
    from pytimely.dataflow.state import Declared
    from pytimely.recovery.runtime import WorkerRecovery

__all__ = ["DataflowRecovery", "state_keys"]


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
class _Stateful:
    """One operator that declared state: its states with their keys, and its fence."""

    op: OperatorCore
    states: list[tuple[str, Declared]]
    fence: int | None = None
    finished: bool = False
    taken: int = 0
    """Snapshots taken of this operator: its turn in the rewriting of unchanged bins."""


class DataflowRecovery:
    """One dataflow's snapshots on one worker: restore, fences, capture (see :mod:`pytimely.recovery.runtime`).

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
        self._assembling: dict[int, Assembling] = {}
        self._history = History()
        self._log: SegmentLog | None = None
        if self.session.snapshots.appends:
            policy = self.session.policy
            self._log = SegmentLog(
                owner.worker.index, ordinal, self.session.snapshots.token, policy.rewrite_every * policy.every_epochs
            )

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
        reporting = self.owner.reporting_from
        if reporting is not None:
            start = max(start, reporting)
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
        worker = self.owner.worker
        states = [(key, d) for key, _op, d in self.states]
        restore_states(opened, self.session.snapshots.where, states, worker.peers, worker.index, self._history)

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
            history = self._history
            if any(history.absorbed.values()):
                part.absorbed = {k: v for k, v in history.absorbed.items() if v}
                history.absorbed = {}
            if not (part.binned or part.deltas or part.values or part.logs or part.positions or part.absorbed):
                continue
            write = self._write(assembling) if assembling.buffer else None
            self.owner.capture_taken(Capture(epoch, part, write))
        self.owner.advance()

    def _write(self, assembling: Assembling) -> Future[tuple[str, int, str]]:
        """Hand an epoch's payload to this worker's writer: a record appended to this dataflow's segment (its
        pieces renamed to where the record goes), or a file of its own in a store that cannot append."""
        session = self.session
        writer = session.writer_for(self.owner.worker.index)
        data = bytes(assembling.buffer)
        if self._log is None:
            return writer.submit(session.snapshots.put_payload, assembling.name, data)
        segment, offset, finished = self._log.place(assembling.part.epoch, len(data))
        _rename(assembling.part, self._history, assembling.name, record_name(segment, offset))
        return writer.submit(session.snapshots.append_record, segment, offset, data, finished)

    def _capture(self, entry: _Stateful, epoch: int) -> None:
        """Take this worker's snapshot of one operator's declared states at ``epoch`` (what changed)."""
        policy = self.session.policy
        assembling = self._assembling.get(epoch)
        if assembling is None:
            me = self.owner.worker.index
            name = self.session.snapshots.payload_name(epoch, me, self.ordinal)
            assembling = self._assembling[epoch] = Assembling(Part(me, self.ordinal, epoch), name)
        # The turn is the operator's own: a count shared by a dataflow's operators advanced once per operator
        # and epoch, so with two stateful operators each saw every other turn and half its bins were never
        # written again (each pinning an old payload file: the store grew with the history).
        turn = entry.taken % policy.rewrite_every
        entry.taken += 1
        capture_states(assembling, entry.op.name, entry.states, self._history, turn, policy.rewrite_every)


def _rename(part: Part, history: History, old: str, new: str) -> None:
    """Name the pieces of ``part`` (and the log pieces ``history`` keeps) that lie in ``old`` by ``new``."""
    for places in part.binned.values():
        for b, where in places.items():
            if where is not None and where[0] == old:
                places[b] = (new, where[1], where[2])
    for chain in part.deltas.values():
        for i, (where, bins) in enumerate(chain):
            if where[0] == old:
                chain[i] = ((new, where[1], where[2]), bins)
    for key, where in part.values.items():
        if where[0] == old:
            part.values[key] = (new, where[1], where[2])
    for pieces in (*part.logs.values(), *history.logs.values()):
        for i, where in enumerate(pieces):
            if where[0] == old:
                pieces[i] = (new, where[1], where[2])


def _unknown() -> None:
    """What a state that cannot tell when it changes next says (step epoch by epoch)."""
    return None


def _nested_in_ints(op: OperatorCore) -> bool:
    """Whether an operator's times are products whose outermost coordinate is an int (a loop inside epochs)."""
    time: Any = op.scope.minimum
    while hasattr(time, "outer"):
        time = time.outer
    return type(time) is int

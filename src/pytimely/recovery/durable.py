"""One worker's part in durable epochs: declared keyed state, snapshots at epoch boundaries, committed outputs.

A job run with ``execute(..., recovery=Recovery(...))`` finds a :class:`Durable` as ``worker.recovery``::

    durable = worker.recovery
    counts = durable.keyed("counts")          # a dict, already holding this worker's bins of the last snapshot
    ... build dataflows; keep `counts` as the state of a keyed operator (state_machine(states=counts)) ...
    start = durable.begin()                   # checks the store is this job's; the epoch to resume from
    for epoch in range(start, epochs):
        ... feed epoch, step until the probe passes it ...
        durable.commit(epoch, output=rows)    # snapshot if the policy says so; outputs committed with it

``commit`` writes this worker's payload (its bins' states as of ``epoch``) and its output part, then sends
their references on a small dataflow to every worker; once that dataflow's frontier passes ``epoch`` every
worker has written, and worker 0 commits the manifest (noticed at a later ``commit`` without waiting, so the
snapshot costs no extra round between workers; the final one waits). Keyed state is routed by bins
(:func:`fixed_bins` gives the control stream that makes a keyed operator do so), and bin ``b`` belongs to
worker ``b % peers``: a run restarted with another number of workers takes each bin's keys from whichever
payload holds it.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.bins import DEFAULT_BINS, binner
from pytimely.errors import InvalidArgument, RecoveryError
from pytimely.recovery.manifest import FileRef, Identity, Manifest, digest
from pytimely.recovery.policy import SnapshotPolicy
from pytimely.recovery.snapshots import Snapshots
from pytimely.recovery.store import SnapshotStore, open_store

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream
    from pytimely.worker import Worker

__all__ = ["Durable", "Recovery", "fixed_bins"]


@dataclass(slots=True)
class Recovery:
    """Where and how often a job snapshots: ``execute(..., recovery=Recovery("DIR"))``.

    ``store``: a folder, an fsspec URL (``s3://bucket/prefix``) or a :class:`SnapshotStore`. ``job`` names
    the job (a store of another job is refused). ``announce`` (a text stream or ``None``) gets the line
    ``resumed at epoch N`` when a run resumes; the command line passes ``sys.stderr``.
    """

    store: str | os.PathLike[str] | SnapshotStore
    policy: SnapshotPolicy = field(default_factory=SnapshotPolicy)
    job: str = "job"
    bins: int = DEFAULT_BINS
    announce: Any = None
    _opened: tuple[Snapshots, Manifest | None] | None = None

    def open(self) -> tuple[Snapshots, Manifest | None]:
        """Check the store can be written and find its last complete snapshot (once per process).

        Raises :class:`~pytimely.errors.StoreNotWritableError` at once when the store cannot be written.
        """
        if self._opened is None:
            store = open_store(self.store)
            store.check_writable()
            snapshots = Snapshots(store)
            self._opened = (snapshots, snapshots.latest())
        return self._opened


class Durable:
    """A worker's access to durable epochs (see the module doc)."""

    def __init__(self, worker: Worker, recovery: Recovery, snapshots: Snapshots, latest: Manifest | None) -> None:
        self.worker = worker
        self.recovery = recovery
        self.snapshots = snapshots
        self.latest = latest
        self.resume_epoch = 0 if latest is None else latest.epoch + 1
        """The first epoch this run computes (0 on a fresh store)."""
        same_size = latest is not None and latest.peers == worker.peers
        self.position: Any = latest.positions.get(str(worker.index)) if latest is not None and same_size else None
        """What this worker gave ``commit(position=...)`` at the last snapshot (None on a fresh start or rescale)."""
        self._states: dict[str, dict[Any, Any]] = {}
        self._pending_output: list[Any] = []
        self._find = binner(recovery.bins)
        self._begun = False
        self._handle: Any = None
        self._probe: Any = None
        self._seen: dict[int, list[tuple[int, Any, Any, Any, bool]]] = {}
        self._last_epoch = self.resume_epoch - 1
        self._last_time = time.monotonic()
        self._due_next = False
        self._unconfirmed: list[int] = []
        self._identity_hash = ""
        self._restored: dict[str, dict[Any, Any]] | None = None
        self._replays: list[Callable[[int], None]] = []

    # -- declaring state ---------------------------------------------------------------------

    def keyed(self, name: str) -> dict[Any, Any]:
        """The keyed state ``name``: a dict of this worker's keys, holding what the last snapshot had for them.

        Declare every state before :meth:`begin`, in the same order on every worker; the operator keeping
        the state must route its keys by bins (:func:`fixed_bins`), so a worker holds the keys of bins
        ``b % peers == index`` only.
        """
        if self._begun:
            raise InvalidArgument(f"state {name!r} declared after begin(); declare every state before it")
        if name in self._states:
            raise InvalidArgument(f"state {name!r} is declared twice")
        state: dict[Any, Any] = {}
        if self.latest is not None:
            if self._restored is None:
                self._restored = self._load()
            state.update(self._restored.get(name, {}))
        self._states[name] = state
        return state

    def _load(self) -> dict[str, dict[Any, Any]]:
        """This worker's keys of every state, from the payloads holding its bins.

        A payload holds its writer's keys, all in the bins it names: a payload whose bins are all this
        worker's is taken whole; one that also holds other workers' bins (the run had another size) is
        filtered key by key.
        """
        assert self.latest is not None
        peers, index, find = self.worker.peers, self.worker.index, self._find
        mine = {b for b in range(self.recovery.bins) if b % peers == index}
        restored: dict[str, dict[Any, Any]] = {}
        for ref in self.latest.payloads:
            if not mine.intersection(ref.bins):
                continue
            by_state: dict[str, dict[Any, Any]] = pickle.loads(self.snapshots.read(ref))
            whole = mine.issuperset(ref.bins)
            for name, items in by_state.items():
                target = restored.setdefault(name, {})
                if whole:
                    target.update(items)
                else:
                    target.update((k, v) for k, v in items.items() if find(k) in mine)
        return restored

    def new_input(self, scope: Scope[Any], name: str = "input", *, replay: Callable[[int], None] | None = None) -> Any:
        """``scope.new_input(name)`` advanced to the resume epoch; ``replay(epoch)`` is told that epoch at begin()."""
        handle, stream = scope.new_input(name=name)
        if self.resume_epoch > 0:
            handle.advance_to(self.resume_epoch)
        if replay is not None:
            self._replays.append(replay)
        return handle, stream

    # -- running -------------------------------------------------------------------------------

    def begin(self) -> int:
        """Check the store is this job's (after every dataflow is built); the epoch to resume from."""
        if self._begun:
            return self.resume_epoch
        graphs = self.worker.graph()
        for graph in graphs:
            for op in graph.operators:
                if op.undeclared_state is not None:
                    raise RecoveryError(
                        f"operator {op.name!r} of dataflow {graph.name!r} keeps {op.undeclared_state} across "
                        "epochs, which snapshots do not hold: a resumed run would lose them, so this job cannot "
                        "use recovery"
                    )
        identity = Identity(
            job=self.recovery.job,
            dataflows=tuple((g.name, tuple((op.index, op.name) for op in g.operators)) for g in graphs),
            states=tuple(self._states),
            bins=self.recovery.bins,
        )
        self._identity_hash = digest(repr(identity.to_json()).encode())
        self.snapshots.check_identity(identity, write=self.worker.index == 0)
        if self.worker.index == 0:
            # What a run that died left after the last complete snapshot goes, now that the store is known to
            # be this job's. No other worker writes before worker 0 sends its first record, after this.
            self.snapshots.clean(None if self.latest is None else self.latest.epoch)
        if self.latest is not None and self.latest.identity != self._identity_hash:
            raise RecoveryError(
                f"recovery store {self.snapshots.store.location}: its last snapshot was taken by another "
                f"dataflow than its identity.json names (nothing was changed)", self.snapshots.store.location
            )
        self._begun = True

        def build(scope: Scope[Any]) -> tuple[Any, Any]:
            handle, stream = self.new_input(scope, name="snapshot references")
            probe = stream.broadcast(name="snapshot barrier").inspect_batch(self._seen_batch).probe()
            return handle, probe

        self._handle, self._probe = self.worker.dataflow(build, name="recovery")
        if self.resume_epoch > 0 and self.worker.index == 0 and self.recovery.announce is not None:
            print(f"resumed at epoch {self.resume_epoch}", file=self.recovery.announce, flush=True)
        for replay in self._replays:
            replay(self.resume_epoch)
        return self.resume_epoch

    def _seen_batch(self, t: Any, batch: Any) -> None:
        self._seen.setdefault(t, []).extend(batch)

    def output(self, rows: Any) -> None:
        """Add ``rows`` to this worker's output; it is committed with the next snapshot (exactly once)."""
        self._pending_output.append(rows)

    def commit(self, epoch: int, *, output: Any = None, position: Any = None, final: bool = False) -> bool:
        """Epoch ``epoch`` is complete on this worker: snapshot it if due (``final``: always); whether it was.

        Call it once per epoch in order, on every worker, after the stateful operators' frontier passed
        ``epoch`` and before any record of a later epoch is sent. ``output`` is added as by :meth:`output`;
        ``position`` (JSON) is kept in the manifest and given back as :attr:`position` on resume.

        The snapshot is committed (its manifest written by worker 0) once every worker has written its part:
        found at this worker's later calls, without waiting, or waited for when ``final``.
        """
        if not self._begun:
            self.begin()
        if epoch <= self._last_epoch:
            raise InvalidArgument(f"commit({epoch}) after commit({self._last_epoch}): epochs go forward")
        if output is not None:
            self._pending_output.append(output)
        policy = self.recovery.policy
        timed = policy.every_seconds is not None
        due = final or self._due_next or (
            policy.every_epochs is not None and epoch - self._last_epoch >= policy.every_epochs
        )
        if due or timed:
            payload = refs = None
            if due:
                payload = self._write_payload(epoch)
                refs = self._write_output(epoch)
            decision = False
            if timed and self.worker.index == 0:
                # Worker 0's clock decides for all, so every worker snapshots the same epochs.
                decision = time.monotonic() - self._last_time >= (policy.every_seconds or 0.0)
            self._handle.send((self.worker.index, payload, refs, position, decision))
        self._handle.advance_to(epoch + 1)
        if timed or final:
            # The decision for the next epoch must be known before it ends; the last snapshot before returning.
            self.worker.step_while(lambda: self._probe.less_than(epoch + 1))
            self._due_next = any(d for _, _, _, _, d in self._seen.get(epoch, []))
        if due:
            self._unconfirmed.append(epoch)
            self._last_epoch = epoch
            self._last_time = time.monotonic()
            if len(self._unconfirmed) > 1:
                # At most one snapshot waits for its commit, so the store stays bounded even in a job that
                # does not step between commits; in one that does, the older one is through already.
                older = self._unconfirmed[-2]
                self.worker.step_while(lambda: self._probe.less_than(older + 1))
        self._confirm()
        return due

    def _confirm(self) -> None:
        """Commit (on worker 0) each snapshot every worker's references of have arrived for, in epoch order."""
        probe = self._probe
        while self._unconfirmed and not probe.less_than(self._unconfirmed[0] + 1):
            epoch = self._unconfirmed.pop(0)
            passed = [t for t in self._seen if t <= epoch]
            seen = [item for t in passed for item in self._seen.pop(t) if t == epoch]
            if self.worker.index != 0:
                continue
            payloads = tuple(sorted((p for _, p, _, _, _ in seen if p is not None), key=lambda r: r.worker))
            outputs = tuple(sorted((o for _, _, o, _, _ in seen if o is not None), key=lambda r: r.worker))
            positions = {str(w): pos for w, _, _, pos, _ in seen if pos is not None}
            self.snapshots.commit(
                Manifest(epoch, self._identity_hash, self.worker.peers, payloads, outputs, positions),
                self.recovery.policy.keep,
            )

    def _write_payload(self, epoch: int) -> FileRef:
        # The states are pickled as they are (no per-key work): their keys are all in this worker's bins.
        peers, index = self.worker.peers, self.worker.index
        bins = tuple(b for b in range(self.recovery.bins) if b % peers == index)
        data = pickle.dumps(self._states, protocol=pickle.HIGHEST_PROTOCOL)
        return self.snapshots.put_payload(epoch, index, data, bins)

    def _write_output(self, epoch: int) -> FileRef | None:
        if not self._pending_output:
            return None
        data = pickle.dumps(self._pending_output, protocol=pickle.HIGHEST_PROTOCOL)
        self._pending_output = []
        return self.snapshots.put_output(epoch, self.worker.index, data)

    def committed_output(self) -> list[Any]:
        """Every worker's committed output, in epoch order (then worker): what ``output``/``commit`` were given."""
        latest = self.snapshots.latest()
        names = self.snapshots.committed_outputs(None if latest is None else latest.epoch)
        parts: list[Any] = []
        for name in names:
            data = self.snapshots.store.get(name)
            if data is None:
                raise RecoveryError(f"recovery store {self.snapshots.store.location}: {name} vanished", name)
            parts.extend(pickle.loads(data))
        return parts


def fixed_bins(scope: Scope[Any]) -> Stream[Any]:
    """A control stream that never moves a bin: a keyed operator given it routes by bins (bin b on b % peers)."""
    handle, stream = scope.new_input(name="fixed bins")
    handle.close()
    return stream


def announce_to_stderr() -> Any:
    """``sys.stderr``, for :attr:`Recovery.announce` at the command line."""
    return sys.stderr

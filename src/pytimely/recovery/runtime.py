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
log entries, positions), encodes it (here, so later changes cannot reach it: :mod:`~pytimely.recovery.codec`),
and moves its fence on. Once every operator of the dataflow is past ``e``, the epoch's pieces go to a writer
thread as one file. Nothing waits for the file: a fence stands only until the state is taken.

The modules: :mod:`~pytimely.recovery.fences` (when a fence is passed), :mod:`~pytimely.recovery.capture`
(what a snapshot takes), :mod:`~pytimely.recovery.codec` (pieces as bytes), :mod:`~pytimely.recovery.restore`
(who restores what), :mod:`~pytimely.recovery.dataflow` (one dataflow's restore, fences and snapshots) and this
one (one worker's: reporting and committing).

**Commit.** Once a worker's file is written (under a name of its own, fsynced), its report of where each piece
lives (a :class:`~pytimely.recovery.parts.Part`) goes to worker 0 on a small dataflow of the runtime's own, at
the snapshot's epoch. When that dataflow's frontier passes the epoch, every worker's report is in: worker 0 folds
them into the manifest before (:func:`~pytimely.recovery.parts.merge`) and has it written, which commits the
snapshot; then snapshots beyond the policy's ``keep`` and files no kept manifest names are removed. A worker
that found nothing changed sends nothing; its last report stands. Once every dataflow has finished, worker 0
commits the final snapshot: a run started again from it computes nothing and restores every output.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.channels import Direct
from pytimely.dataflow.subgraph import Subgraph, epoch_of
from pytimely.errors import StoreWriteError
from pytimely.recovery.capture import Capture, binned_changes
from pytimely.recovery.dataflow import DataflowRecovery, state_keys
from pytimely.recovery.fences import passed_fences
from pytimely.recovery.manifest import FINAL, Manifest
from pytimely.recovery.parts import Part, merge
from pytimely.recovery.restore import owner_on_restore
from pytimely.recovery.snapshots import Retained

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort
    from pytimely.recovery.session import Session
    from pytimely.worker import Worker

__all__ = ["DataflowRecovery", "WorkerRecovery", "binned_changes", "owner_on_restore", "passed_fences", "state_keys"]

_OUTSTANDING = 4
"""Snapshots a worker may have in the writer's queue before it waits for the oldest (bounds memory)."""


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
        self._outbox: list[Capture] = []
        self._collected: dict[int, list[Part]] = {}
        opened = session.opened
        self._committed: Manifest | None = opened.manifest if opened is not None else None
        self._commits: list[tuple[Future[None], Callable[[], None]]] = []
        self._retained = Retained(self._committed, session.kept) if worker.index == 0 else None
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
        self.advance()

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

    @property
    def reporting_from(self) -> int | None:
        """The epoch the commit input stands at (``None`` before it is built): a dataflow built later takes no
        snapshot before it."""
        return None if self._handle is None else int(self._handle.time)

    def busy(self) -> bool:
        """Whether files or commits are still being written."""
        return bool(self._outbox or self._commits)

    def finishing(self) -> None:
        """The job closed its inputs: once every dataflow's last snapshot is reported, close the commit input."""
        self._finishing = True
        self.advance()

    def leaving(self, at: Any) -> None:
        """This worker leaves at ``at``: it takes the snapshots of earlier epochs only."""
        self.leave_at = epoch_of(at) if at is not None else 0
        for df in self.dataflows:
            df.stop_at(self.leave_at)
        self.advance()

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

    def capture_taken(self, capture: Capture) -> None:
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
            self.advance()
        return sent

    def advance(self) -> None:
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
        commit = self.session.committer.submit(
            snapshots.commit, manifest, keep, self._retained, self.session.recovery.protect
        )
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

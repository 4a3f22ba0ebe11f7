"""A pytimely dataflow that lives across Spark micro-batches: fed one epoch at a time, its state kept.

``EpochHost(build, workers)`` builds ``build(stream)`` on ``workers`` workers of this process and keeps them
between calls. ``feed(table, time=t)`` sends an Arrow table's rows at epoch ``t`` (or at the epochs in a
column) and steps the workers until the output can hold nothing more before the next epoch; it returns the
output batches that appeared meanwhile, ``(time, batch)`` in time order. The workers are stepped in turn by
the calling thread: no thread is left behind, and the same inputs give the same outputs.

With ``recovery`` (a :class:`~pytimely.recovery.Recovery`) the dataflow's declared state is snapshotted at every
epoch and restored when the host is made (``resume_at``: the newest snapshot at or before that epoch);
:meth:`EpochHost.await_snapshot` waits until an epoch's snapshot is durable, so a caller can commit its output
only then. The output is handed out by a sink, not a capture, so nothing of it is kept in the snapshots.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytimely.communication.local import LocalAllocator
from pytimely.errors import BuildResultError, InputFormatError, InvalidArgument, StalledError, StepTimeoutError
from pytimely.worker import Worker

if TYPE_CHECKING:
    import pyarrow as pa

    from pytimely.dataflow.operators.probe import ProbeHandle
    from pytimely.dataflow.stream import Stream
    from pytimely.recovery import Recovery
    from pytimely.recovery.runtime import WorkerRecovery

__all__ = ["EpochHost", "epoch_dataflow", "late_rows"]

Build = Callable[["Stream[Any]"], "Stream[Any]"]


class EpochHost:
    """``build`` on ``workers`` in-process workers, fed epoch by epoch and stepped by the caller."""

    def __init__(
        self,
        build: Build,
        workers: int = 1,
        *,
        step_timeout: float = 600.0,
        recovery: Recovery | None = None,
        resume_at: int | None = None,
        delay: int = 0,
    ) -> None:
        if type(workers) is not int or workers < 1:
            raise InvalidArgument(f"workers must be a positive int, got {workers!r}")
        if type(delay) is not int or delay < 0:
            raise InvalidArgument(f"delay must be a whole number of epochs >= 0, got {delay!r}")
        self.delay = delay
        """With ``feed(epoch=...)``: how many epochs below the largest seen stay open (a watermark's delay)."""
        self._held: list[tuple[int, pa.RecordBatch]] = []
        self._workers = [Worker(a) for a in LocalAllocator.group(workers)]
        self._step_timeout = step_timeout
        self._session = None if recovery is None else recovery.open(at_most=resume_at)
        self._recoveries: list[WorkerRecovery] = []
        if self._session is not None:
            for worker in self._workers:
                hook = self._session.worker(worker)
                worker.recover_with(hook)
                self._recoveries.append(hook)
        self._handles: list[Any] = []
        self._probes: list[ProbeHandle[Any]] = []
        self._captured: list[list[tuple[Any, list[Any]]]] = []
        self._read = [0] * workers
        self._pending: list[tuple[int, Any]] = []
        self.frontier = 0 if self._session is None else self._session.resume
        """Every epoch before this one is complete: its output has been handed out (or is in the snapshot
        restored from)."""
        for worker in self._workers:
            handle, probe, captured = worker.dataflow(lambda scope: epoch_dataflow(scope, build))
            self._handles.append(handle)
            self._probes.append(probe)
            self._captured.append(captured)

    @property
    def resumed(self) -> int:
        """The first epoch this host computes: 0, or the one after the snapshot it was restored from."""
        return 0 if self._session is None else self._session.resume

    def await_snapshot(self, epoch: int) -> None:
        """Step the workers until the snapshot of ``epoch`` is durable in the recovery store."""
        if not self._recoveries:
            raise InvalidArgument("await_snapshot: this host keeps no snapshots (made without recovery=)")
        if not self.keeps_state:
            return
        deadline = _time.monotonic() + self._step_timeout
        first = self._recoveries[0]
        while not first.holds(epoch):
            worked = False
            for worker in self._workers:
                worker.step()
                worked = worker.last_step_worked or worked
            if not worked:
                _time.sleep(0.0005)  # the commit is a file write on the committer's thread
            if _time.monotonic() > deadline:
                raise StepTimeoutError(f"the snapshot of epoch {epoch} was not durable within {self._step_timeout} s")

    @property
    def keeps_state(self) -> bool:
        """Whether the dataflow declares state that is snapshotted (a stateless one has nothing to restore)."""
        return any(df.stateful for hook in self._recoveries for df in hook.dataflows)

    @property
    def workers(self) -> int:
        """How many workers run the dataflow."""
        return len(self._workers)

    def feed(self, table: pa.Table, *, time: int | None = None, epoch: str | None = None) -> list[tuple[int, Any]]:
        """Send ``table`` at epoch ``time`` (or each row at its ``epoch`` column); the output of completed epochs.

        With ``time``, epoch ``time`` completes. With ``epoch``, the epochs before the largest one seen minus
        ``delay`` complete (later tables may still add to the others); a row older than the frontier is
        refused with :class:`~pytimely.errors.InputFormatError` before anything is sent. Rows of epochs above
        the new frontier are held here and sent when the frontier reaches them: the input's time only grows.
        """
        if (time is None) == (epoch is None):
            raise InvalidArgument("feed: give exactly one of time= and epoch=")
        pieces = _pieces(table, time, epoch, self.frontier)
        if not pieces:
            return []
        if time is None:
            target = max(self.frontier, pieces[-1][0] - self.delay)
            waiting = sorted([*self._held, *pieces], key=lambda item: item[0])
            pieces = [item for item in waiting if item[0] <= target]
            self._held = waiting[len(pieces) :]
        else:
            target = time + 1
        self._send(pieces)
        self._advance(target)
        self._run_until(target)
        self.frontier = target
        return self._take()

    def _send(self, pieces: list[tuple[int, pa.RecordBatch]]) -> None:
        """Each piece at its epoch (in epoch order), shared out evenly among the workers."""
        for t, piece in pieces:
            self._advance(t)
            step = -(-piece.num_rows // self.workers)
            for k, handle in enumerate(self._handles):
                part = piece.slice(k * step, step)
                if part.num_rows:
                    handle.send_batch(part)

    def _advance(self, time: int) -> None:
        for handle in self._handles:
            if time > handle.time:
                handle.advance_to(time)

    def _run_until(self, target: int) -> None:
        """Step every worker in turn until no output before ``target`` can still appear."""
        deadline = _time.monotonic() + self._step_timeout
        idle = 0
        while any(p.less_than(target) for p in self._probes):
            worked = False
            for worker in self._workers:
                worker.step()
                worked = worker.last_step_worked or worked
            idle = 0 if worked else idle + 1
            if idle > 2:
                # A whole round in which no worker did anything, twice over: nothing will move again.
                raise StalledError(
                    f"the streaming dataflow cannot complete epoch {target - 1}: "
                    f"{self._workers[0].stall_report() or 'nothing is running'}"
                )
            if _time.monotonic() > deadline:
                raise StepTimeoutError(
                    f"the streaming dataflow did not complete epoch {target - 1} within {self._step_timeout} s"
                )

    def _take(self) -> list[tuple[int, Any]]:
        """The output batches of complete epochs captured since the last call, in time order.

        Output at the epoch still open (with ``epoch=``) waits for it to complete, so each epoch's output
        is handed out with the micro-batch that completed it.
        """
        for k, captured in enumerate(self._captured):
            self._pending.extend(captured[self._read[k] :])
            self._read[k] = len(captured)
        self._pending.sort(key=lambda item: item[0])
        ready = [item for item in self._pending if item[0] < self.frontier]
        self._pending = self._pending[len(ready) :]
        return ready

    def close(self) -> None:
        """Close the inputs and run the dataflow to its end (the last open epoch's output is dropped)."""
        try:
            for handle in self._handles:
                if not handle.closed:
                    handle.close()
            self._run_until_done()
        finally:
            self.release()

    def release(self) -> None:
        """Stop the recovery store's writer threads (what they write finishes first); the state stays as it is."""
        if self._session is not None:
            self._session.close()

    def _run_until_done(self) -> None:
        deadline = _time.monotonic() + self._step_timeout
        while any([w.step() for w in self._workers]):
            if _time.monotonic() > deadline:
                raise StepTimeoutError(f"the streaming dataflow did not finish within {self._step_timeout} s")


def epoch_dataflow(scope: Any, build: Build) -> tuple[Any, Any, list[tuple[Any, Any]]]:
    """The micro-batch input, the user's dataflow built on it, its probe and the list its output is sunk into."""
    handle, stream = scope.new_input(name="micro-batches")
    out = build(stream)
    if out is None or not hasattr(out, "capture"):
        raise BuildResultError(f"build must return the output Stream, returned {type(out).__name__}")
    # A sink, not a capture: a capture's list is declared state, and snapshots would keep every epoch's output.
    captured: list[tuple[Any, Any]] = []
    out.sink(lambda time, batch: captured.append((time, batch)), name="epoch-output")
    return handle, out.probe(name="epoch-probe"), captured


def late_rows(table: pa.Table, epoch: str, frontier: int) -> int:
    """How many rows of ``table`` have an ``epoch`` value below ``frontier`` (already complete)."""
    import pyarrow.compute as pc

    return int(pc.sum(pc.less(table.column(epoch), frontier)).as_py() or 0)


def _pieces(table: pa.Table, time: int | None, epoch: str | None, frontier: int) -> list[tuple[int, pa.RecordBatch]]:
    """``table`` as ``(epoch, record batch)`` pieces in epoch order; empty when the table has no rows."""
    import numpy as np
    import pyarrow as pa

    if time is not None:
        if time < frontier:
            raise InputFormatError(f"epoch {time} is before the frontier {frontier}: its epoch is complete")
        return [(time, _one_batch(table))]
    assert epoch is not None
    if table.num_rows == 0:
        return []
    if epoch not in table.column_names:
        raise InputFormatError(f"epoch column {epoch!r} is not among the columns {table.column_names}")
    column = table.column(epoch)
    if not pa.types.is_integer(column.type):
        raise InputFormatError(f"epoch column {epoch!r} must hold integers, holds {column.type}")
    if column.null_count:
        raise InputFormatError(f"epoch column {epoch!r} has {column.null_count} empty values")
    late = late_rows(table, epoch, frontier)
    if late:
        raise InputFormatError(
            f"{late} row(s) have an {epoch!r} before {frontier}, an epoch already complete (late data; "
            "a watermark, run_stream(..., watermark=Watermark(...)), drops them or sends them aside)"
        )
    whole = _one_batch(table.sort_by(epoch))
    values = whole.column(epoch).to_numpy()
    cuts = (np.flatnonzero(np.diff(values)) + 1).tolist()
    return [(int(values[s]), whole.slice(s, e - s)) for s, e in zip([0, *cuts], [*cuts, len(values)], strict=True)]


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as a single record batch (its columns' chunks joined)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], schema=table.schema)

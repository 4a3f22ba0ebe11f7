"""What every task of a ``run_dataflow`` barrier stage runs: meet the other tasks, run this process's workers
over its share of the partition, hand back the output rows (:class:`BarrierTask`)."""

from __future__ import annotations

import json
import socket
import time as _time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from pytimely.config import Config
from pytimely.errors import BuildResultError
from pytimely.execute import execute, run_process
from pytimely.spark.record_batches import _shares, to_record_batch
from pytimely.spark.rendezvous import Ticket, meet

if TYPE_CHECKING:
    import pyarrow as pa

    from pytimely.dataflow.stream import Stream
    from pytimely.worker import Worker

__all__ = ["BarrierTask", "Build"]

Build = Callable[["Stream[Any]"], "Stream[Any]"]
"""What the user gives: the output stream built from the input stream of record batches."""


class BarrierTask:
    """What every barrier task runs: meet the others, run this process's workers, hand back the rows."""

    def __init__(
        self,
        *,
        build: Build,
        processes: int,
        workers: int,
        epoch: str | None,
        schema: pa.Schema,
        secret: bytes,
        ticket: Ticket | None,
        local: bool,
        heartbeat: float,
        timeout: float,
        figures: Any = None,
        recovery: str | None = None,
        snapshot_every: int = 1,
    ) -> None:
        self.build = build
        self.recovery = recovery
        self.snapshot_every = snapshot_every
        self.figures = figures
        self.processes = processes
        self.workers = workers
        self.epoch = epoch
        self.schema = schema
        self.secret = secret
        self.ticket = ticket
        self.local = local
        self.heartbeat = heartbeat
        self.timeout = timeout

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        process = context.partitionId()
        clock = _time.perf_counter
        started = clock()
        # The whole partition is read before the computation starts: the workers take their shares of it.
        inputs = [b for b in batches if b.num_rows]
        shares = _shares(inputs, self.workers, self.epoch)
        read = clock()
        met = read
        epochs = self._epochs(context, shares) if self.recovery is not None else []
        if self.processes == 1:
            results = execute(self._job(shares, 0, epochs), self.workers, recovery=self._recovery())
        else:
            config, listener = self._meet(context, process)
            met = clock()
            job = self._job(shares, config.first_worker, epochs)
            results = run_process(job, config, listener=listener, recovery=self._recovery())
        ran = clock()
        converting = 0.0
        records_out = 0
        for captured in results:
            for time, batch in captured:
                mark = clock()
                converted = to_record_batch(batch, self.schema, time=time, epoch=self.epoch)
                converting += clock() - mark
                if converted.num_rows:
                    records_out += converted.num_rows
                    yield converted
        if self.figures is not None:
            self.figures.add({
                process: {
                    "records_in": float(sum(b.num_rows for b in inputs)),
                    "records_out": float(records_out),
                    "read_s": read - started,
                    "meet_s": met - read,
                    "run_s": ran - met,
                    "convert_s": converting,
                }
            })

    def _epochs(self, context: Any, shares: list[list[tuple[int, Any]]]) -> list[int]:
        """The epochs every worker commits: those of any partition (gathered from all the tasks)."""
        here = sorted({t for share in shares for t, _ in share})
        if self.processes == 1:
            return here
        everyone = context.allGather(json.dumps(here))
        return sorted({t for text in everyone for t in json.loads(text)})

    def _meet(self, context: Any, process: int) -> tuple[Config, socket.socket]:
        """Bind this process's listener and learn every process's address: its cluster configuration."""
        host = "127.0.0.1" if self.local else context.getTaskInfos()[process].address.rsplit(":", 1)[0]
        listener = socket.create_server((host, 0), backlog=max(16, self.processes))
        try:
            address = f"{host}:{listener.getsockname()[1]}"
            if self.ticket is None:
                addresses = context.allGather(address)
            else:
                stage = f"{context.stageId()}.{context.attemptNumber()}"
                addresses = meet(self.ticket, stage, process, self.processes, address, attempt=context.taskAttemptId())
            hosts = tuple((a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in addresses)
            config = Config(
                workers=self.workers,
                processes=self.processes,
                process=process,
                hosts=hosts,
                bind=host,
                secret=self.secret,
                heartbeat=self.heartbeat,
                timeout=self.timeout,
            )
        except BaseException:
            listener.close()
            raise
        return config, listener

    def _recovery(self) -> Any:
        """This run's :class:`~pytimely.recovery.Recovery`, or ``None``."""
        if self.recovery is None:
            return None
        from pytimely.recovery import Recovery, SnapshotPolicy

        name = getattr(self.build, "__qualname__", None) or type(self.build).__name__
        return Recovery(self.recovery, job=f"spark {name}", policy=SnapshotPolicy(every_epochs=self.snapshot_every))

    def _job(
        self, shares: list[list[tuple[int, Any]]], first: int, epochs: list[int]
    ) -> Callable[[Worker], list[Any]]:
        if self.recovery is not None:
            return partial(_durable_job, self.build, shares, first, epochs)
        build = self.build

        def job(worker: Worker) -> list[Any]:
            def dataflow(scope: Any) -> tuple[Any, Any]:
                handle, stream = scope.new_input(name="spark")
                out = build(stream)
                if out is None or not hasattr(out, "capture"):
                    raise BuildResultError(f"build must return the output Stream, returned {type(out).__name__}")
                return handle, out.capture()

            handle, captured = worker.dataflow(dataflow)
            for time, batch in shares[worker.index - first]:
                if time > handle.time:
                    handle.advance_to(time)
                handle.send_batch(batch)
            handle.close()
            return captured  # type: ignore[no-any-return]

        return job


def _durable_job(
    build: Callable[..., Any], shares: list[list[tuple[int, Any]]], first: int, epochs: list[int], worker: Worker
) -> list[Any]:
    """Feed this worker's share epoch by epoch; the runtime snapshots the declared state and the capture.

    In a retried stage the state and the captured output of the committed epochs come back before the first
    step, and what the worker sends again of those epochs is dropped: it returns every batch once.
    """

    def dataflow(scope: Any) -> tuple[Any, Any, Any]:
        handle, stream = scope.new_input(name="spark")
        out = build(stream)
        if out is None or not hasattr(out, "capture"):
            raise BuildResultError(f"build must return the output Stream, returned {type(out).__name__}")
        return handle, out.probe(), out.capture()

    handle, probe, captured = worker.dataflow(dataflow)
    mine: dict[int, list[Any]] = {}
    for t, batch in shares[worker.index - first]:
        mine.setdefault(t, []).append(batch)
    for epoch in epochs:
        if epoch > handle.time:
            handle.advance_to(epoch)
        for batch in mine.get(epoch, ()):
            handle.send_batch(batch)
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    worker.step_while(lambda: not probe.done())
    return captured  # type: ignore[no-any-return]



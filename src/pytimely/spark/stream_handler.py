"""The driver-hosted path of a streaming run: the ``foreachBatch`` function (:class:`StreamHandler`) that
stages, computes, writes and commits each micro-batch once, on a dataflow kept in this process (or, on Spark
Connect, in the server's Python process: :class:`ServerSide`), and how its state is restored.
"""

from __future__ import annotations

import contextlib
import threading
import time as _time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pytimely.errors import (
    InvalidArgument,
    PytimelyError,
    StreamError,
    StreamInputError,
    StreamSchemaError,
)
from pytimely.spark.epoch_host import Build, EpochHost
from pytimely.spark.hosting import to_record_batch
from pytimely.spark.stream_checkpoint import is_new_batch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.spark.stream_checkpoint import StreamCheckpoint
    from pytimely.spark.stream_sinks import Sink
    from pytimely.spark.watermark import Watermark

__all__ = ["BatchTiming", "MicroBatchFunction", "ReplayRestore", "ServerSide", "StateRestore", "StreamHandler"]


class StateRestore(Protocol):
    """Brings a fresh dataflow to the state after the committed micro-batches (replay now, snapshots later)."""

    def restore(self, host: EpochHost, committed: Sequence[int]) -> None:
        """Put ``host`` in the state it had after the micro-batches ``committed`` (in order)."""


@dataclass(frozen=True, slots=True)
class BatchTiming:
    """Where one micro-batch's time went on the driver, in seconds."""

    batch_id: int
    rows_in: int
    rows_out: int
    collect_s: float
    stage_s: float
    compute_s: float
    sink_s: float
    late: int = 0
    """Rows of an epoch already complete, dropped or sent aside by the query's watermark."""

    @property
    def total_s(self) -> float:
        """The micro-batch's time inside ``foreachBatch``."""
        return self.collect_s + self.stage_s + self.compute_s + self.sink_s


class ReplayRestore:
    """Rebuild the state by feeding the committed micro-batches' staged inputs again, their output dropped."""

    def __init__(self, checkpoint: StreamCheckpoint, epoch: str | None = None) -> None:
        self.checkpoint = checkpoint
        self.epoch = epoch

    def restore(self, host: EpochHost, committed: Sequence[int]) -> None:
        """Feed every committed batch's input in order (the dataflow is deterministic given its inputs)."""
        for batch_id in committed:
            table = self.checkpoint.staged(batch_id)
            if self.epoch is None:
                host.feed(table, time=batch_id)
            else:
                host.feed(table, epoch=self.epoch)


Check = Callable[["pa.Table", int], "pa.Table"]


class MicroBatchFunction:
    """A ``foreachBatch`` function: one micro-batch at a time (``_process``); its first failure, typed, is kept and
    raised again for every later micro-batch, so the query stops with it."""

    def __init__(self) -> None:
        self.failure: PytimelyError | None = None
        self._lock = threading.Lock()

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Process micro-batch ``batch_id`` of the query (Spark calls this from ``foreachBatch``)."""
        with self._lock:
            if self.failure is not None:
                raise self.failure
            try:
                self._process(frame, batch_id)
            except PytimelyError as exc:
                self.failure = exc
                raise
            except Exception as exc:
                self.failure = StreamError(f"micro-batch {batch_id}: {type(exc).__name__}: {exc}")
                raise self.failure from exc

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        raise NotImplementedError


class StreamHandler(MicroBatchFunction):
    """The ``foreachBatch`` function: stage, compute, write and commit each micro-batch once."""

    def __init__(
        self,
        build: Build,
        schema: Any,
        sink: Sink,
        checkpoint: StreamCheckpoint,
        identity: dict[str, Any],
        *,
        workers: int = 1,
        epoch: str | None = None,
        check: Check | None = None,
        restore: StateRestore | None = None,
        step_timeout: float = 600.0,
        watermark: Watermark | None = None,
    ) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        super().__init__()
        if isinstance(schema, str):
            schema = StructType.fromDDL(schema)
        if not isinstance(schema, StructType):
            raise InvalidArgument(f"schema must be a DDL string or a StructType, got {type(schema).__name__}")
        self.schema = to_arrow_schema(schema)
        self.sink = sink
        self.checkpoint = checkpoint
        self.epoch = epoch
        self.check = check
        self.watermark = watermark
        self.input_schema: str = identity["input"]
        self.describe = f"pytimely dataflow {identity['build']} (query {identity['query']})"
        self.committed = checkpoint.open(identity)
        self.snapshots = restore is None and epoch is None
        """State from snapshots in the checkpoint (batch ids as epochs); else rebuilt by ``restore`` from staged
        inputs (an event-time ``epoch`` column: a micro-batch's rows of an epoch still open are in no snapshot)."""
        started = _time.perf_counter()
        if self.snapshots:
            last = self.committed[-1] if self.committed else -1
            recovery = checkpoint.recovery(identity)
            self.host = EpochHost(build, workers, step_timeout=step_timeout, recovery=recovery, resume_at=last)
        else:
            delay = 0 if watermark is None else watermark.delay
            self.host = EpochHost(build, workers, step_timeout=step_timeout, delay=delay)
            restorer = restore if restore is not None else ReplayRestore(checkpoint, epoch)
            restorer.restore(self.host, self.committed)
        self.restore_s = _time.perf_counter() - started
        self.timings: list[BatchTiming] = []
        self.skipped = 0

    @property
    def last_committed(self) -> int:
        """The last batch id whose output is committed (-1 before the first)."""
        return self.committed[-1] if self.committed else -1

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        clock = _time.perf_counter
        started = clock()
        if not is_new_batch(batch_id, self.last_committed, self.input_schema, frame.schema.simpleString()):
            self.skipped += 1
            return  # re-delivered after a restart: its output is already in the sink
        with _job_description(frame, f"{self.describe}: epoch {batch_id}"):
            table = _collect(frame, batch_id)
        if self.check is not None:
            table = self.check(table, batch_id)
        late = 0
        if self.watermark is not None and self.epoch is not None:
            table, late = self.watermark.admit(table, self.epoch, self.host.frontier, batch_id)
        collected = clock()
        if not self.snapshots:
            self.checkpoint.stage(batch_id, table)
        staged = clock()
        output = self.host.feed(table, time=batch_id) if self.epoch is None else self.host.feed(table, epoch=self.epoch)
        result = self._table(output)
        if self.snapshots:
            # The state after this batch is durable before its output is: a restart after the sink's commit
            # resumes from this snapshot, one before it from the snapshot before (Spark delivers the batch again).
            self.host.await_snapshot(batch_id)
        computed = clock()
        self.sink.commit(batch_id, result)
        self.checkpoint.commit(batch_id)
        self.committed.append(batch_id)
        done = clock()
        self.timings.append(
            BatchTiming(batch_id, table.num_rows, result.num_rows, collected - started, staged - collected,
                        computed - staged, done - computed, late)
        )

    def _table(self, output: list[tuple[int, Any]]) -> pa.Table:
        import pyarrow as pa

        name = self.epoch if self.epoch is not None else "epoch"
        batches = [to_record_batch(batch, self.schema, time=t, epoch=name) for t, batch in output]
        return pa.Table.from_batches(batches, schema=self.schema)


@contextlib.contextmanager
def _job_description(frame: DataFrame, text: str) -> Iterator[None]:
    """Name this thread's Spark jobs ``text`` in the Spark UI while inside (a Connect session has no context)."""
    from pytimely.spark.session import is_connect

    session = frame.sparkSession
    if is_connect(session):
        yield
        return
    context = session.sparkContext
    earlier = context.getLocalProperty("spark.job.description")
    context.setJobDescription(text)
    try:
        yield
    finally:
        context.setJobDescription(earlier)  # type: ignore[arg-type]


def _collect(frame: DataFrame, batch_id: int) -> pa.Table:
    """The micro-batch's rows as an Arrow table on the driver; a file that does not parse is a typed error."""
    try:
        return frame.toArrow()
    except Exception as exc:
        text = str(exc)
        if "cannot be converted" in text or "DATA_TYPE_MISMATCH" in text or "SCHEMA_MISMATCH" in text:
            raise StreamSchemaError(f"micro-batch {batch_id}: a file's columns do not fit: {_cause(text)}") from exc
        if "MALFORMED" in text.upper() or "Malformed" in text or "NumberFormat" in text or "parse" in text.lower():
            raise StreamInputError(f"micro-batch {batch_id}: a file does not parse: {_cause(text)}") from exc
        raise StreamError(f"micro-batch {batch_id}: reading it failed: {_cause(text)}") from exc


def _cause(text: str) -> str:
    """The most telling lines of a Spark error: the malformed record and the file, without the JVM stack."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    telling = [line for line in lines if "MALFORMED" in line.upper() or "file" in line.lower()]
    chosen = (telling or lines)[:3]
    return " | ".join(line[:400] for line in chosen)


class ServerSide:
    """The ``foreachBatch`` function on Spark Connect: ``make(session)`` makes the query's handler at the first
    micro-batch, in the server's Python process, which keeps it for the query's life."""

    def __init__(self, make: Callable[[Any], Callable[[DataFrame, int], None]]) -> None:
        self.make = make
        self.handler: Callable[[DataFrame, int], None] | None = None

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Process micro-batch ``batch_id``."""
        if self.handler is None:
            self.handler = self.make(frame.sparkSession)
        self.handler(frame, batch_id)

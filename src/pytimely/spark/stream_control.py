"""The control side of a streaming query whose dataflow is hosted on the executors.

:class:`HostedDataflow` starts the hosting job (one barrier job of ``processes`` tasks, run by a background
thread for the query's life, see :mod:`pytimely.spark.stream_host`), finds the processes' feed ports under the
checkpoint, and for each micro-batch runs one Spark job whose tasks send their Arrow partitions straight to the
processes (:class:`Sender`; only counts come back to the caller), then closes the epoch on every process and
collects the names of their output parts. A failure of the hosting job, a lost connection or a silent process
is a typed error within the deadlines; :class:`HostedHandler` then starts a new generation, restored from the
snapshot of the last committed micro-batch, and sends the micro-batch again (a bounded number of times).
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import threading
import time as _time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.atomic import write_atomic
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.errors import (
    CheckpointMismatchError,
    InvalidArgument,
    PytimelyError,
    SparkSlotsError,
    StreamFeedError,
    StreamHostError,
    StreamInputError,
    StreamSchemaError,
)
from pytimely.spark.record_batches import _one_batch, split_by_owner
from pytimely.spark.stream_checkpoint import is_new_batch, write_arrow_file
from pytimely.spark.stream_feed import FeedLink, Kind, arrow_bytes, dial
from pytimely.spark.stream_handler import MicroBatchFunction, ServerSide
from pytimely.spark.stream_host import HostPlan, HostTask, await_exits, parts_folder, read_hosts

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.spark.epoch_output import EpochOutput
    from pytimely.spark.stream_checkpoint import StreamCheckpoint
    from pytimely.spark.stream_query import StreamRun
    from pytimely.spark.stream_sinks import Sink
    from pytimely.spark.watermark import Watermark

__all__ = ["HostedDataflow", "HostedHandler", "Sender", "check_layout", "run_hosted"]

log = logging.getLogger("pytimely.spark.streaming")

_COUNTS = "process int, sender long, frames long, rows long, late long, top long, task_s double"


@functools.cache
def _counts_schema() -> Any:
    """:data:`_COUNTS` as a Spark schema, made once (a DDL string is parsed by the JVM at every feed job)."""
    from pyspark.sql.types import StructType

    return StructType.fromDDL(_COUNTS)


_FRAME_ROWS = 1 << 16
"""Rows per DATA message at most: Spark's Arrow batches (10,000 rows by default) are joined up to this."""


class Sender:
    """A task of a micro-batch's feed job: its partition's rows to the hosted processes, counts back."""

    def __init__(
        self,
        feeds: list[str],
        secret: bytes,
        generation: int,
        epoch: int,
        check: Callable[..., Any] | None = None,
        event: EventTime | None = None,
        *,
        key: str | None = None,
        workers: int = 1,
        bins: int = DEFAULT_BINS,
    ) -> None:
        self.feeds = feeds
        self.secret = secret
        self.generation = generation
        self.epoch = epoch
        self.check = check
        self.event = event
        self.key = key
        """The input column rows are routed by (to the process owning the key's bin), or ``None``: spread evenly."""
        self.workers = workers
        self.bins = bins

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        began = _time.perf_counter()
        context = TaskContext.get()
        sender = 0 if context is None else context.partitionId()
        links: dict[int, FeedLink] = {}
        counts = {p: [0, 0] for p in range(len(self.feeds))}
        turn = sender
        processes = len(self.feeds)
        failed = True
        late: list[pa.Table] = []
        top = -(1 << 62)
        try:
            for group in _groups(batches, _FRAME_ROWS):
                table = pa.Table.from_batches(group)
                if self.check is not None:
                    table = self.check(table, self.epoch)
                if self.event is not None:
                    table, top = self.event.admit(table, self.epoch, late, top)
                if table.num_rows == 0:
                    continue
                parts: list[list[pa.RecordBatch]] = [[] for _ in range(processes)]
                if self.key is None:
                    parts[turn % processes] = table.to_batches()
                    turn += 1  # spread evenly, each sender starting elsewhere
                else:
                    peers = processes * self.workers
                    cut = split_by_owner(_one_batch(table), self.key, peers, self.bins, parts=processes,
                                         per=self.workers)  # fmt: skip
                    parts = [[part] for part in cut]
                for process, part in enumerate(parts):
                    rows = sum(b.num_rows for b in part)
                    if rows == 0:
                        continue
                    if process not in links:
                        links[process] = _pooled(self.feeds[process], self.secret, process, self.generation)
                    header = {"generation": self.generation, "epoch": self.epoch, "sender": sender,
                              "seq": counts[process][0]}  # fmt: skip
                    links[process].send(Kind.DATA, header, arrow_bytes(part, table.schema))
                    counts[process][0] += 1
                    counts[process][1] += rows
            failed = False
        finally:
            if failed:  # a link in an unknown state is not used again
                for process, link in links.items():
                    _LINKS.pop((self.feeds[process], process, self.generation), None)
                    link.close()
        used = [p for p, (frames, _) in counts.items() if frames] or [-1]  # -1: nothing sent, late rows counted
        lates = sum(t.num_rows for t in late)
        if self.event is not None:
            self.event.keep_late(late, self.epoch, sender)
        yield pa.RecordBatch.from_pydict({
            "process": pa.array(used, pa.int32()),
            "sender": pa.array([sender] * len(used), pa.int64()),
            "frames": pa.array([counts[p][0] if p >= 0 else 0 for p in used], pa.int64()),
            "rows": pa.array([counts[p][1] if p >= 0 else 0 for p in used], pa.int64()),
            "late": pa.array([lates] * len(used), pa.int64()),
            "top": pa.array([top] * len(used), pa.int64()),
            "task_s": pa.array([_time.perf_counter() - began] * len(used), pa.float64()),
        })


_LINKS: dict[tuple[str, int, int], FeedLink] = {}
"""Feed connections kept open across the tasks of this Python process, by (address, process, generation): Spark
reuses its Python workers from task to task, so a micro-batch's sender neither connects nor authenticates again."""
_MOST_LINKS = 64


def _pooled(address: str, secret: bytes, process: int, generation: int) -> FeedLink:
    """The kept connection to hosted process ``process`` of ``generation`` (made, and kept, when there is none)."""
    key = (address, process, generation)
    link = _LINKS.get(key)
    if link is not None and not link.open():
        del _LINKS[key]
        link.close()
        link = None
    if link is None:
        # Connections of stopped generations were closed by their processes: let them go, and all past a bound.
        for stale in [k for k, kept in _LINKS.items() if len(_LINKS) >= _MOST_LINKS or not kept.open()]:
            _LINKS.pop(stale).close()
        link = _LINKS[key] = dial(address, secret, process)
    return link


@dataclass(frozen=True)
class EventTime:
    """Event-time epochs on the executors: the column, the frontier the micro-batch found, the watermark."""

    column: str
    frontier: int
    delay: int = 0
    late: str | None = None
    """``None``: a late row stops the query; ``"drop"``; ``"side"`` (its rows kept under ``late_folder``)."""
    own: str = ""

    def admit(self, table: pa.Table, batch: int, late: list[pa.Table], top: int) -> tuple[pa.Table, int]:
        """The on-time rows of ``table`` (the late ones appended to ``late``) and the largest epoch seen so far."""
        import pyarrow.compute as pc

        from pytimely.spark.watermark import split_late

        on_time, behind = split_late(table, self.column, self.frontier)
        if behind.num_rows:
            if self.late is None:
                raise StreamInputError(
                    f"micro-batch {batch}: {behind.num_rows} row(s) have an {self.column!r} before {self.frontier}, "
                    "an epoch already complete (late data; a watermark, run_stream(..., watermark=Watermark(...)), "
                    "drops them or sends them aside)"
                )
            late.append(behind)
        if on_time.num_rows:
            top = max(top, int(pc.max(on_time.column(self.column)).as_py()))
        return on_time, top

    def keep_late(self, late: list[pa.Table], batch: int, sender: int) -> None:
        """Write a sender's late rows where the control side gathers them for the side output."""
        import pyarrow as pa

        if self.late != "side" or not late:
            return
        write_arrow_file(late_folder(self.own, batch) / f"s{sender:05d}.arrow", pa.concat_tables(late))

    def target(self, top: int) -> int:
        """The new frontier: the largest epoch seen less the delay, never moving back."""
        return max(self.frontier, top - self.delay)


def late_folder(own: str | Path, batch: int) -> Path:
    """Where the feed tasks keep micro-batch ``batch``'s late rows for the side output."""
    return Path(own) / "late" / f"batch-{batch:012d}"


def _groups(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """Consecutive batches joined into groups of about ``rows`` rows."""
    group: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        group.append(batch)
        size += batch.num_rows
        if size >= rows:
            yield group
            group, size = [], 0
    if group:
        yield group


class HostedDataflow:
    """The hosted processes of one generation, seen from the control side: start, feed an epoch, stop."""

    def __init__(
        self,
        spark: Any,
        build: Callable[..., Any],
        own: Path,
        *,
        processes: int,
        workers: int,
        schema: pa.Schema,
        job: str,
        parameters: dict[str, Any],
        describe: str,
        start_timeout: float = 120.0,
        close_timeout: float = 600.0,
        failure_wait: float = 60.0,
        output: EpochOutput | None = None,
        secret: bytes | None = None,
        key: str | None = None,
        idle_timeout: float | None = 600.0,
        column: str | None = None,
    ) -> None:
        self.spark = spark
        self.key = key
        """The input column the dataflow's first exchange is keyed by: each row is sent to the process owning its
        key's bin (``None``: rows are spread evenly)."""
        self.column = column
        """The event-time column (``None``: batch ids are the epochs)."""
        self.idle_timeout = idle_timeout
        """Seconds without a message from this side after which the processes stop by themselves."""
        self.output = output
        self.run_secret = secret
        """The run's secret for every generation (made by the client, so it can stop the processes on Spark
        Connect); ``None``: a fresh one per generation."""
        self.failure_wait = failure_wait
        """Seconds a lost connection waits for the hosting job to fail (Spark's own deadline to notice)."""
        self.build = build
        self.own = own
        self.processes = processes
        self.workers = workers
        self.schema = schema
        self.job = job
        self.parameters = parameters
        self.describe = describe
        self.start_timeout = start_timeout
        self.close_timeout = close_timeout
        self.generation = 0
        self.owner: str | None = None
        """The run that owns the checkpoint (its processes stop once another run does)."""
        self.feeds: list[str] = []
        self._control: list[FeedLink] = []
        """This side's connection to each process of the generation (for closing epochs), made at the first close."""
        self._secret = b""
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._group = ""
        self.exchanged = 0
        """Data bytes the processes' workers sent to each other so far in this generation (the cluster's counters,
        as of the last epoch's close): with rows routed to their owners, the first exchange adds nothing."""
        self.timing: dict[str, Any] = {}
        """Where the last epoch's time went: the feed job, the close, and each process's wait, compute, write."""
        self.received = 0
        """Bytes of results and answers this side received for the last epoch (counts and part names only)."""
        self.late = 0
        """Late rows of the last micro-batch (event time)."""
        self.frontier: int | None = None
        """The frontier the last micro-batch moved to (event time)."""

    def start(self, generation: int, resume_at: int, held_from: int = -1) -> None:
        """Start generation ``generation`` of the hosted processes, restored at ``resume_at``; wait for their ports."""
        from pytimely.spark.session import is_connect, slots_of, wait_for_slots

        slots = wait_for_slots(self.spark, self.processes, 30.0)
        if self.processes + 1 > slots:
            raise SparkSlotsError(f"{self.processes} hosted processes need {self.processes + 1} task slots at once "
                                  f"(one for the micro-batches' feed jobs); the session has {slots}")  # fmt: skip
        self._drop_control()
        self.generation = generation
        log.info("%s: starting generation %d of the hosted processes (owner %s), resuming after micro-batch %d",
                 self.describe, generation, self.owner, resume_at)  # fmt: skip
        self._secret = self.run_secret or secrets.token_bytes(32)
        self._failure = None
        plan = HostPlan(
            build=self.build, processes=self.processes, workers=self.workers, generation=generation,
            secret=self._secret, own=str(self.own), schema=self.schema, job=self.job, parameters=self.parameters,
            resume_at=resume_at, local=slots_of(self.spark) is not None or is_connect(self.spark),
            close_timeout=self.close_timeout, output=self.output, owner=self.owner, key=self.key,
            idle_timeout=self.idle_timeout, column=self.column, held_from=held_from,
        )  # fmt: skip
        self._group = f"pytimely-hosted-{secrets.token_hex(4)}-g{generation}"
        self._thread = threading.Thread(target=self._host, args=(HostTask(plan),), daemon=True,
                                        name=f"pytimely-hosting-g{generation}")  # fmt: skip
        self._thread.start()
        deadline = _time.monotonic() + self.start_timeout
        while True:
            feeds = read_hosts(self.own, generation, self._secret)
            if feeds is not None:
                self.feeds = feeds
                return
            self._raise_if_failed()
            if _time.monotonic() > deadline:
                self.cancel()
                raise StreamHostError(f"the hosted processes of generation {generation} did not start within "
                                      f"{self.start_timeout:g} s")  # fmt: skip
            _time.sleep(0.05)

    def _host(self, task: HostTask) -> None:
        """The background thread: run the hosting job until the processes stop (or fail)."""
        from pytimely.spark.session import is_connect

        try:
            if is_connect(self.spark):
                self.spark.addTag(self._group)
            else:
                context = self.spark.sparkContext
                context.setJobGroup(self._group, f"{self.describe}: hosted processes, generation {self.generation}",
                                    interruptOnCancel=True)  # fmt: skip
            frame = self.spark.range(0, self.processes, 1, self.processes)
            frame.mapInArrow(task, "process int", barrier=True).collect()
        except BaseException as exc:
            self._failure = exc

    @property
    def running(self) -> bool:
        """Whether the hosting job still runs (its processes stop by themselves after ``idle_timeout``)."""
        return self._thread is not None and self._thread.is_alive()

    def _raise_if_failed(self) -> None:
        if self._thread is not None and not self._thread.is_alive() and self._failure is not None:
            raise StreamHostError(f"the hosted processes of generation {self.generation} failed: "
                                  f"{_short(self._failure)}") from None  # fmt: skip

    def epoch(
        self, frame: DataFrame, epoch: int, check: Callable[..., Any] | None = None, event: EventTime | None = None
    ) -> list[str]:
        """Send micro-batch ``frame`` as ``epoch`` to the processes, complete it there; the output parts' paths.

        With ``event`` the rows enter at their event-time epochs; :attr:`late` and :attr:`frontier` then tell how
        many were late and the frontier the micro-batch moved to."""
        from pytimely.spark.stream_handler import _job_description

        self._raise_if_failed()
        sender = Sender(self.feeds, self._secret, self.generation, epoch, check, event, key=self.key,
                        workers=self.workers)  # fmt: skip
        started = _time.perf_counter()
        with _job_description(frame, f"{self.describe}: feed epoch {epoch} (generation {self.generation})"):
            try:
                job = frame.mapInArrow(sender, _counts_schema())
                planned = _time.perf_counter()
                counts = job.toArrow()
            except Exception as exc:
                self._raise_if_failed()
                raise _feed_failure(exc, epoch) from None
        self.received = counts.nbytes
        expected: list[dict[str, list[int]]] = [{} for _ in self.feeds]
        per_sender: dict[int, tuple[int, int]] = {}
        task_s = 0.0
        for row in counts.to_pylist():
            task_s = max(task_s, row["task_s"])
            per_sender[row["sender"]] = (row["late"], row["top"])
            if row["process"] >= 0:
                expected[row["process"]][str(row["sender"])] = [row["frames"], row["rows"]]
        self.late = sum(late for late, _ in per_sender.values())
        top = max((t for _, t in per_sender.values()), default=-(1 << 62))
        self.frontier = None if event is None else event.target(top)
        fed = _time.perf_counter()
        parts = self._close(epoch, expected, self.frontier)
        # feed_s: the feed job, of which plan_s building it on this side and task_s the slowest sender's own time
        # (the rest is Spark's: planning, scheduling, launching the task, reading the input, the counts back).
        self.timing = {"feed_s": round(fed - started, 4), "plan_s": round(planned - started, 4),
                       "task_s": round(task_s, 4), "close_s": round(_time.perf_counter() - fed, 4),
                       "senders": len(per_sender), **self.timing}  # fmt: skip
        log.info("%s: epoch %d: %s", self.describe, epoch, self.timing)
        return parts

    def _close(self, epoch: int, expected: list[dict[str, list[int]]], frontier: int | None = None) -> list[str]:
        # One connection per process for the generation's life: an epoch's close does not authenticate again.
        if not self._control:
            self._control = [dial(address, self._secret, p) for p, address in enumerate(self.feeds)]
        links = self._control
        try:
            for p, link in enumerate(links):
                header = {"generation": self.generation, "epoch": epoch, "expected": expected[p]}
                if frontier is not None:
                    header["frontier"] = frontier
                link.send(Kind.CLOSE, header)
            parts = []
            self.timing = {}
            self.exchanged = 0
            for p, link in enumerate(links):
                answer = self._answer(link, self.close_timeout)
                self.received += len(json.dumps(answer.header)) + len(answer.body)
                if answer.kind != Kind.DONE:
                    raise StreamFeedError(f"epoch {epoch}: {link.peer}: {answer.header.get('error')}")
                parts.append(str(answer.header["part"]))
                self.timing[f"p{p}"] = answer.header.get("timing")
                self.exchanged += int(answer.header.get("exchanged", 0))
            return parts
        except BaseException:
            self._drop_control()
            raise

    def _drop_control(self) -> None:
        for link in self._control:
            link.close()
        self._control = []

    def _answer(self, link: FeedLink, timeout: float) -> Any:
        """The process's answer; a lost connection waits (bounded) for the hosting job's failure to name it."""
        try:
            return link.receive(timeout)
        except StreamFeedError as lost:
            # A process that died takes its connection with it; Spark fails the barrier job a moment later.
            if self._thread is not None:
                self._thread.join(self.failure_wait)
            self._raise_if_failed()
            raise lost from None

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the processes (their dataflow ends cleanly) and wait for the hosting job."""
        self._drop_control()
        if self._thread is None:
            return
        try:
            for p, address in enumerate(self.feeds):
                link = dial(address, self._secret, p, timeout=10.0)
                try:
                    link.send(Kind.STOP, {"generation": self.generation})
                    link.receive(timeout)
                finally:
                    link.close()
            self._thread.join(timeout)
        except PytimelyError:
            pass  # a process already gone: the job is cancelled below
        finally:
            if self._thread.is_alive():
                self.cancel()
            self._thread = None

    def cancel(self) -> None:
        """Cancel the hosting job (its tasks are killed) and wait a while for the thread."""
        from pytimely.spark.session import is_connect

        self._drop_control()
        if is_connect(self.spark):
            self.spark.interruptTag(self._group)
        else:
            self.spark.sparkContext.cancelJobGroup(self._group)
        if self._thread is not None:
            self._thread.join(30.0)


def _short(exc: BaseException) -> str:
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    telling = [line for line in lines if "Error" in line or "error" in line]
    return " | ".join((telling or lines or [type(exc).__name__])[:3])[:600]


def _feed_failure(exc: BaseException, epoch: int) -> PytimelyError:
    """A feed job's failure as a typed error (the error a sender task raised, where it names one)."""
    from pytimely.spark.stream_query import _typed

    found = _typed(str(exc))
    if isinstance(found, StreamFeedError | StreamSchemaError | StreamInputError):
        return found
    return StreamFeedError(f"the feed job of epoch {epoch} failed: {_short(exc)}")


class HostedHandler(MicroBatchFunction):
    """The ``foreachBatch`` function of a hosted query: feed, complete, commit each micro-batch once."""

    def __init__(
        self,
        hosted: HostedDataflow,
        sink: Sink,
        checkpoint: StreamCheckpoint,
        identity: dict[str, Any],
        *,
        check: Callable[..., Any] | None = None,
        retries: int = 2,
        owner: str | None = None,
        takeover_wait: float = 0.0,
        event: EventTime | None = None,
        watermark: Watermark | None = None,
    ) -> None:
        super().__init__()
        self.event = event
        """Event-time epochs (its frontier is the one the last committed micro-batch moved to)."""
        self.watermark = watermark
        self.late: dict[int, int] = {}
        """Late rows per micro-batch (event time)."""
        self.hosted = hosted
        self.sink = sink
        self.checkpoint = checkpoint
        self.input_schema: str = identity["input"]
        self.check = check
        self.retries = retries
        self.committed = checkpoint.open(identity)
        self.owner = checkpoint.take_ownership() if owner is None else owner
        hosted.owner = self.owner
        if takeover_wait:
            # An orphaned query's processes (a killed Connect client's) stop once they see the new owner; the
            # recovery store must not have two writers.
            await_exits(checkpoint.own, takeover_wait)
        if hosted.output is not None:
            self._take_over(hosted.output)
        if self.event is not None:
            self.event = replace(self.event, frontier=checkpoint.frontier(), own=str(checkpoint.own))
            self._clear_held(keep=self.last_committed)
        self.generation = checkpoint.next_generation()
        self.skipped = 0
        self.restarts = 0
        self.processed: list[int] = []
        self.driver_bytes: dict[int, int] = {}
        """Bytes this side received per micro-batch (Spark's results of the feed job and the processes' answers)."""
        self.hosted.start(self.generation, self.resume_at, self.last_committed)

    @property
    def resume_at(self) -> int:
        """The epoch whose snapshot the processes resume from: the last committed micro-batch, or with event time
        the last epoch before the frontier."""
        return self.last_committed if self.event is None else self.event.frontier - 1

    def _clear_held(self, keep: int) -> None:
        """Remove held and late rows of every micro-batch but ``keep`` (uncommitted attempts, or superseded)."""
        import shutil

        for kind in ("held", "late"):
            folder = self.checkpoint.own / kind
            for old in folder.iterdir() if folder.is_dir() else []:
                if old.name != f"batch-{keep:012d}" or kind == "late":
                    shutil.rmtree(old, ignore_errors=True)

    @property
    def last_committed(self) -> int:
        """The last batch id whose output is committed (-1 before the first)."""
        return self.committed[-1] if self.committed else -1

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        if not is_new_batch(batch_id, self.last_committed, self.input_schema, frame.schema.simpleString()):
            self.skipped += 1
            return
        if not self.hosted.running:
            # Idle past their deadline (or failed while nothing was asked of them): start the next generation.
            log.info("%s: the hosted processes of generation %d have stopped (idle_timeout %s s); starting the next "
                     "generation", self.hosted.describe, self.generation, self.hosted.idle_timeout)  # fmt: skip
            self.restart()
        attempt = 0
        while True:
            try:
                if self.event is not None:
                    self._clear_held(keep=self.last_committed)
                    self._pending(batch_id, None)
                parts = self.hosted.epoch(frame, batch_id, self.check, self.event)
                break
            except (StreamFeedError, StreamHostError):
                self.checkpoint.check_owner(self.owner, batch_id)  # processes that stopped for a new owner
                if attempt >= self.retries:
                    raise
                attempt += 1
                self.restart()
        self.driver_bytes[batch_id] = self.hosted.received
        if self.event is not None:
            self._pending(batch_id, self.hosted.frontier)
            self._side_output(frame, batch_id)
        self._commit(batch_id, parts)

    def _pending(self, batch_id: int, frontier: int | None) -> None:
        """Record the frontier micro-batch ``batch_id`` moves to before its output can be committed (a run that
        finds the output committed and its commit record missing takes the frontier from here)."""
        write_atomic(self.checkpoint.own / "pending.json", json.dumps({"batch": batch_id, "frontier": frontier}))

    def _side_output(self, frame: DataFrame, batch_id: int) -> None:
        """The micro-batch's late rows counted and logged, and committed to the watermark's side output."""
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        late = self.hosted.late
        self.late[batch_id] = late
        if late:
            where = "written to the side output" if self.event is not None and self.event.late == "side" else "dropped"
            log.warning("micro-batch %d: %d late row(s) with %r before %d (epochs already complete) %s", batch_id,
                        late, self.event.column if self.event else "", self.event.frontier if self.event else 0,
                        where)  # fmt: skip
        if self.watermark is None or self.watermark.side is None:
            return
        tables = []
        for path in sorted(late_folder(self.checkpoint.own, batch_id).glob("s*.arrow")):
            with pa.memory_map(str(path)) as source:
                tables.append(pa.ipc.open_file(source).read_all())
        table = pa.concat_tables(tables) if tables else to_arrow_schema(frame.schema).empty_table()
        self.watermark.side.commit(batch_id, table)

    def restart(self) -> None:
        """Cancel this generation and start the next one, restored at the last committed micro-batch."""
        self.hosted.cancel()
        self.restarts += 1
        self.generation = self.checkpoint.next_generation()
        self.hosted.start(self.generation, self.resume_at, self.last_committed)

    def _take_over(self, output: EpochOutput) -> None:
        """Line the checkpoint up with the output: a manifest is the commit (a run killed before it wrote its commit
        record left it; the epoch's snapshot was durable before its parts), and uncommitted parts are removed."""
        output.prepare()
        ahead = output.last_committed()
        if ahead > self.last_committed:
            frontier = None
            if self.event is not None:
                try:
                    pending = json.loads((self.checkpoint.own / "pending.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    pending = {}
                if pending.get("batch") != ahead or not isinstance(pending.get("frontier"), int):
                    raise CheckpointMismatchError(
                        f"{self.checkpoint.root}: micro-batch {ahead}'s output is committed but the frontier it moved "
                        f"to is not recorded ({self.checkpoint.own / 'pending.json'}: {pending})"
                    )
                frontier = pending["frontier"]
            self.checkpoint.commit(ahead, frontier=frontier)
            self.committed = list(range(ahead + 1))
        output.discard_uncommitted()

    def _commit(self, batch_id: int, parts: list[str]) -> None:
        """The parts as the output of ``batch_id`` (its manifest, or the sink's commit), then the commit record."""
        output = self.hosted.output
        with self.checkpoint.fenced_commit(self.owner, batch_id):
            if output is not None:
                from pytimely.spark.epoch_output import Part

                output.commit(batch_id, [Part.from_json(text) for text in parts])
            else:
                self._commit_through_driver(batch_id, parts)
            self.checkpoint.commit(batch_id, frontier=None if self.event is None else self.hosted.frontier)
        self.committed.append(batch_id)
        self.processed.append(batch_id)
        if self.event is not None and self.hosted.frontier is not None:
            self.event = replace(self.event, frontier=self.hosted.frontier)
            self._clear_held(keep=batch_id)

    def _commit_through_driver(self, batch_id: int, parts: list[str]) -> None:
        """A sink that is not an :class:`EpochOutput` gets the parts joined here; they are removed after."""
        import shutil

        import pyarrow as pa

        tables = []
        for path in parts:
            with pa.memory_map(path) as source:
                tables.append(pa.ipc.open_file(source).read_all())
        self.sink.commit(batch_id, pa.concat_tables(tables))
        shutil.rmtree(parts_folder(self.hosted.own, batch_id), ignore_errors=True)

    def close(self) -> None:
        """Stop the hosted processes."""
        self.hosted.stop()


def run_hosted(
    build: Callable[..., Any],
    source: DataFrame,
    schema: Any,
    sink: Sink,
    checkpoint: StreamCheckpoint,
    identity: dict[str, Any],
    *,
    processes: int,
    workers: int,
    check: Callable[..., Any] | None,
    key: str | None = None,
    available_now: bool,
    processing_time: str | None,
    timeout: float | None,
    idle_timeout: float | None = 600.0,
    epoch: str | None = None,
    watermark: Watermark | None = None,
) -> StreamRun:
    """``run_stream`` with the dataflow hosted on the executors, once the checkpoint is held."""
    from pytimely.spark.hosting import check_executors, ship_by_value
    from pytimely.spark.session import is_connect
    from pytimely.spark.stream_query import _await_query, _start_query

    spark = source.sparkSession
    check_executors(spark)
    ship_by_value(build)
    if check is not None:
        ship_by_value(check)
    secret = secrets.token_bytes(32)
    make_hosted = _hosted_maker(build, spark, schema, sink, checkpoint, identity, processes, workers, secret, key=key,
                                idle_timeout=idle_timeout, column=epoch)  # fmt: skip
    event = None
    if epoch is not None:
        event = EventTime(epoch, 0, 0 if watermark is None else watermark.delay,
                          None if watermark is None else watermark.late)  # fmt: skip
    handler: HostedHandler | None = None
    function: Callable[[DataFrame, int], None]
    if is_connect(spark):
        # foreachBatch runs in a Python process of the server: the handler is made there, at the first
        # micro-batch; this client checks the checkpoint and takes it over first (fencing an orphaned query).
        restored = len(checkpoint.open(identity))
        owner = checkpoint.take_ownership()
        make = partial(HostedHandler, sink=sink, checkpoint=checkpoint, identity=identity, check=check, owner=owner,
                       takeover_wait=60.0, event=event, watermark=watermark)  # fmt: skip
        function = ServerSide(partial(_hosted_handler, make, make_hosted))
    else:
        handler = HostedHandler(make_hosted(spark), sink, checkpoint, identity, check=check, event=event,
                                watermark=watermark)  # fmt: skip
        restored = len(handler.committed)
        function = handler
    try:
        if watermark is not None:
            watermark.prepare()
        sink.prepare()
        running = _start_query(source, function, checkpoint, identity["query"], available_now, processing_time)
        try:
            _await_query(running, identity["query"], timeout, None if handler is None else lambda: handler.failure)
        finally:
            if running.isActive:
                running.stop()
    finally:
        if handler is not None:
            handler.close()
        else:
            stop_published(checkpoint.own, secret)
    return _hosted_outcome(handler, running, restored)


def _hosted_maker(
    build: Callable[..., Any],
    spark: Any,
    schema: Any,
    sink: Sink,
    checkpoint: StreamCheckpoint,
    identity: dict[str, Any],
    processes: int,
    workers: int,
    secret: bytes,
    *,
    key: str | None = None,
    idle_timeout: float | None = 600.0,
    column: str | None = None,
) -> Callable[..., HostedDataflow]:
    """What starts the hosted processes (given the session): a :class:`HostedDataflow` of this query."""
    from pyspark.sql.types import StructType

    from pytimely.spark.epoch_output import EpochOutput
    from pytimely.spark.record_batches import _arrow_schema

    struct = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    arrow = _arrow_schema(struct, spark.conf.get("spark.sql.session.timeZone") or "UTC")
    return partial(
        HostedDataflow, build=build, own=checkpoint.own, processes=processes, workers=workers, schema=arrow,
        job=identity["query"], parameters={"input": identity["input"], "output": identity["output"]},
        describe=f"pytimely dataflow {identity['build']} (query {identity['query']})",
        output=sink if isinstance(sink, EpochOutput) else None, secret=secret, key=key, idle_timeout=idle_timeout,
        column=column,
    )  # fmt: skip


def _hosted_handler(
    make: Callable[..., HostedHandler], make_hosted: Callable[..., HostedDataflow], session: Any
) -> HostedHandler:
    """A hosted query's handler, its processes started from ``session`` (the server's, on Spark Connect)."""
    return make(make_hosted(session))


def _hosted_outcome(handler: HostedHandler | None, running: Any, restored: int) -> StreamRun:
    """What the ended query did; the handler's failure raised (on Spark Connect its counts stay on the server)."""
    from pytimely.spark.stream_query import StreamRun, trigger_times

    triggers = trigger_times(running)
    if handler is None:
        return StreamRun(sorted(triggers), 0, 0.0, restored, [], triggers)
    if handler.failure is not None:
        raise handler.failure
    from pytimely.spark.stream_handler import BatchTiming

    # Only the late rows are known per micro-batch here (the times are Spark's, in trigger_ms).
    timings = [BatchTiming(b, 0, 0, 0.0, 0.0, 0.0, 0.0, late) for b, late in sorted(handler.late.items())]
    return StreamRun(list(handler.processed), handler.skipped, 0.0, restored, timings, triggers, handler.restarts,
                     dict(handler.driver_bytes))  # fmt: skip


def stop_published(own: Path, secret: bytes, timeout: float = 30.0) -> None:
    """Stop the hosted processes of the checkpoint's newest generation (a Connect client, once its query ended)."""
    try:
        generation = int(json.loads((own / "generation.json").read_text(encoding="utf-8"))["generation"])
        feeds = read_hosts(own, generation, secret)
    except (OSError, ValueError, KeyError, PytimelyError):
        return
    for process, address in enumerate(feeds or []):
        try:
            link = dial(address, secret, process, timeout=timeout)
            try:
                link.send(Kind.STOP, {"generation": generation})
                link.receive(timeout)
            finally:
                link.close()
        except PytimelyError:
            continue  # gone already


def check_layout(processes: int | None, workers: int) -> None:
    """Refuse a layout that cannot run, before anything starts."""
    if processes is not None and (type(processes) is not int or processes < 1):
        raise InvalidArgument(f"processes must be a positive int, got {processes!r}")
    if type(workers) is not int or workers < 1:
        raise InvalidArgument(f"workers must be a positive int, got {workers!r}")

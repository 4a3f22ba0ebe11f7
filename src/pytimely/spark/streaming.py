"""Structured Streaming micro-batches as the epochs of a stateful pytimely dataflow, exactly once.

``run_stream(build, source, schema, sink=..., checkpoint=CK)`` starts a streaming query on the streaming
DataFrame ``source`` whose ``foreachBatch`` hands every micro-batch to one long-lived dataflow
(:class:`~pytimely.spark.epoch_host.EpochHost`, on the driver): micro-batch ``b`` is epoch ``b`` (or its rows
enter at the epochs of a column the user names), the dataflow's state carries from one micro-batch to the
next, and each micro-batch's output goes to ``sink`` committed under its batch id.

Exactly once across a restart from ``CK``:

* Spark keeps its own checkpoint (source offsets) in ``CK/spark``; pytimely keeps ``CK/pytimely``: the
  query's identity (``query.json``), every micro-batch's input as Arrow (``inputs/``) and a commit per batch
  id (``commits/``), each written under a temporary name and renamed.
* A micro-batch is staged, computed, written to the sink (idempotently: a batch id's output is one file,
  renamed into place), then committed. Spark re-delivers a micro-batch that it did not mark done; a batch id
  already committed is skipped, so nothing is written twice.
* After a restart the dataflow's state must be that after the last committed micro-batch. A
  :class:`StateRestore` rebuilds it; the default, :class:`ReplayRestore`, feeds the staged inputs of the
  committed batches again and drops their output. Durable snapshots can take its place without changing the
  rest (the seam is that Protocol).

The parts live in modules of their own: :mod:`pytimely.spark.stream_checkpoint` (the checkpoint),
:mod:`pytimely.spark.stream_sinks` (the sinks), :mod:`pytimely.spark.stream_handler` (the driver-hosted
``foreachBatch`` function), :mod:`pytimely.spark.stream_query` (the query, its failures and record) and
:mod:`pytimely.spark.stream_hosted_run` (the executor-hosted path: its processes in
:mod:`~pytimely.spark.stream_hosted`, its ``foreachBatch`` function in :mod:`~pytimely.spark.stream_hosted_handler`,
its feed job in :mod:`~pytimely.spark.stream_control`); every public name is also importable from here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pytimely.errors import InvalidArgument
from pytimely.spark.epoch_host import Build
from pytimely.spark.hosting import ship_by_value
from pytimely.spark.stream_checkpoint import StreamCheckpoint, _identity, _jvm_pid
from pytimely.spark.stream_handler import (
    BatchTiming,
    Check,
    ReplayRestore,
    ServerSide,
    StateRestore,
    StreamHandler,
)
from pytimely.spark.stream_query import StreamRun, _await_query, _start_query, trigger_times
from pytimely.spark.stream_query import _typed as _typed  # where a failed query's typed error is read back
from pytimely.spark.stream_sinks import CsvDirectorySink, Sink, SparkTableSink, local_folder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pytimely.spark.watermark import Watermark

__all__ = [
    "BatchTiming",
    "CsvDirectorySink",
    "ReplayRestore",
    "Sink",
    "SparkTableSink",
    "StateRestore",
    "StreamCheckpoint",
    "StreamHandler",
    "StreamRun",
    "local_folder",
    "run_stream",
]


def run_stream(
    build: Build,
    source: DataFrame,
    schema: Any,
    *,
    sink: Sink,
    checkpoint: str | os.PathLike[str] | StreamCheckpoint,
    query: str = "pytimely",
    workers: int = 1,
    epoch: str | None = None,
    check: Check | None = None,
    restore: StateRestore | None = None,
    available_now: bool = False,
    processing_time: str | None = None,
    timeout: float | None = None,
    step_timeout: float = 600.0,
    watermark: Watermark | None = None,
    processes: int | None = None,
    host: str | None = None,
    key: str | None = None,
    recovery_mode: str = "resume",
    idle_timeout: float | None = 600.0,
) -> StreamRun:
    """Run ``build`` over the streaming DataFrame ``source``, one epoch per micro-batch, output to ``sink``.

    ``schema`` is the output's schema (DDL or ``StructType``); a column named ``epoch`` (or like ``epoch=``) is
    filled with the batch's epoch when the output lacks it. ``query`` names the query: a checkpoint made by another
    name, output schema, epoch setting or input schema is refused. ``check(table, batch_id)`` may refuse a
    micro-batch before anything of it is kept (raising a typed error); it returns the rows to keep. With
    ``available_now`` the query processes what the source holds and stops; otherwise it runs (every
    ``processing_time``, e.g. ``"1 second"``) until ``timeout`` seconds pass. With ``epoch=``, ``watermark``
    (:class:`~pytimely.spark.watermark.Watermark`) drops late rows or sends them aside instead of stopping the
    query. A failure stops the query and raises its typed error; committed micro-batches stay committed.

    ``processes=N`` hosts the dataflow on the executors (``host="executors"``, the default once ``processes`` is
    given): N processes of ``workers`` workers, the tasks of one background barrier job, fed by one Spark job per
    micro-batch (:mod:`pytimely.spark.stream_hosted_run`); ``host="driver"`` (or no ``processes``) keeps it here.
    ``key`` names the input column the dataflow's first exchange is keyed by (a keyed operator keeping its state
    in bins): the feed sends each row to the process owning its key's bin, so that exchange moves nothing (the
    results are the same either way; not with ``epoch=`` on the executors, whose held rows go to any process).
    Hosted processes that hear nothing from the control side for ``idle_timeout`` seconds stop by themselves; the
    next micro-batch starts them again from the snapshot.

    A restart resumes the state from the last committed micro-batch's snapshot; without a usable one a stateful
    query is refused (:class:`~pytimely.errors.StreamStateLostError`) unless ``recovery_mode="fresh"`` (empty state).
    """
    hosted = _checked_arguments(source, processes, host, workers, epoch, restore, key, watermark, recovery_mode,
                                idle_timeout)  # fmt: skip
    name = getattr(build, "__qualname__", None) or type(build).__name__
    if not isinstance(checkpoint, StreamCheckpoint):
        checkpoint = StreamCheckpoint(checkpoint)
    with checkpoint.locked(_jvm_pid(source.sparkSession)):
        return _run_locked(
            build, source, schema, sink, checkpoint, query, name, workers=workers, epoch=epoch, check=check,
            restore=restore, step_timeout=step_timeout, available_now=available_now,
            processing_time=processing_time, timeout=timeout, watermark=watermark,
            processes=processes if hosted else None, key=key, recovery_mode=recovery_mode,
            idle_timeout=idle_timeout,
        )


def _checked_arguments(
    source: DataFrame,
    processes: int | None,
    host: str | None,
    workers: int,
    epoch: str | None,
    restore: Any,
    key: str | None,
    watermark: Watermark | None,
    recovery_mode: str,
    idle_timeout: float | None,
) -> bool:
    """Whether the dataflow runs on the executors; a setting that does not fit is refused here, before anything."""
    hosted = _hosting(processes, host, workers, restore)
    if idle_timeout is not None and not (isinstance(idle_timeout, int | float) and idle_timeout > 0):
        raise InvalidArgument(f"idle_timeout must be seconds > 0 or None, got {idle_timeout!r}")
    if recovery_mode not in ("resume", "fresh"):
        raise InvalidArgument(f"recovery_mode must be 'resume' or 'fresh', got {recovery_mode!r}")
    if recovery_mode == "fresh" and not hosted and (epoch is not None or restore is not None):
        raise InvalidArgument("recovery_mode='fresh' starts over a state kept in snapshots; with epoch= or restore= "
                              "the state is rebuilt from the staged inputs")  # fmt: skip
    if not source.isStreaming:
        raise InvalidArgument("run_stream needs a streaming DataFrame (spark.readStream...)")
    if key is not None and key not in source.columns:
        raise InvalidArgument(f"key column {key!r} is not among the source's columns {source.columns}")
    if key is not None and epoch is not None and hosted:
        raise InvalidArgument(f"key={key!r} with epoch={epoch!r} on the executors: rows held for a later event-time "
                              "epoch would not stay with the process owning their key across a restart; drop key= "
                              "(the results are the same without it) or use host='driver'")  # fmt: skip
    if epoch is not None and epoch not in source.columns:
        raise InvalidArgument(f"epoch column {epoch!r} is not among the source's columns {source.columns}")
    if watermark is not None and epoch is None:
        raise InvalidArgument("a watermark needs an event-time column: run_stream(..., epoch=COLUMN, watermark=...)")
    return hosted


def _hosting(processes: int | None, host: str | None, workers: int, restore: Any) -> bool:
    """Whether the dataflow runs on the executors; a setting that does not fit is refused here."""
    from pytimely.spark.stream_hosted_run import check_layout

    check_layout(processes, workers)
    if host not in (None, "executors", "driver"):
        raise InvalidArgument(f"host must be 'executors' or 'driver', got {host!r}")
    if host == "executors" and processes is None:
        raise InvalidArgument("host='executors' needs processes=N")
    hosted = processes is not None and host != "driver"
    if hosted and restore is not None:
        raise InvalidArgument("a dataflow hosted on the executors restores from snapshots: restore= needs "
                              "host='driver'")  # fmt: skip
    return hosted


def _run_locked(
    build: Build,
    source: DataFrame,
    schema: Any,
    sink: Sink,
    checkpoint: StreamCheckpoint,
    query: str,
    name: str,
    *,
    workers: int,
    epoch: str | None,
    check: Check | None,
    restore: StateRestore | None,
    step_timeout: float,
    available_now: bool,
    processing_time: str | None,
    timeout: float | None,
    watermark: Watermark | None = None,
    processes: int | None = None,
    key: str | None = None,
    recovery_mode: str = "resume",
    idle_timeout: float | None = 600.0,
) -> StreamRun:
    """``run_stream`` once the checkpoint is held."""
    from pytimely.spark.session import is_connect

    connect = is_connect(source.sparkSession)
    if connect and isinstance(schema, str):
        schema = source.sparkSession.createDataFrame([], schema).schema  # the server parses DDL for the client
    identity = _identity(query, source, schema, epoch, name)
    if watermark is not None:
        identity["epoch"] = f"{epoch}; {watermark.describe()}"
    if processes is not None or (epoch is None and restore is None):
        # The state comes from snapshots: refuse to resume without it (or empty it, asked), before anything runs.
        checkpoint.open(identity)
        checkpoint.check_state(identity, recovery_mode)
    if processes is not None:
        from pytimely.spark.stream_hosted_run import run_hosted

        return run_hosted(
            build, source, schema, sink, checkpoint, identity, processes=processes, workers=workers, check=check,
            key=key, available_now=available_now, processing_time=processing_time, timeout=timeout,
            idle_timeout=idle_timeout, epoch=epoch, watermark=watermark,
        )  # fmt: skip
    make = partial(StreamHandler, build, schema, sink, checkpoint, identity, workers=workers, epoch=epoch,
                   check=check, restore=restore, step_timeout=step_timeout, watermark=watermark)  # fmt: skip
    handler, function, restored = _handler(make, build, checkpoint, identity, connect)
    if watermark is not None:
        watermark.prepare()
    sink.prepare()  # after the checkpoint is found to be this query's, before Spark writes anything of it
    running = _start_query(source, function, checkpoint, query, available_now, processing_time)
    try:
        _await_query(running, query, timeout, None if handler is None else lambda: handler.failure)
    finally:
        if running.isActive:
            running.stop()
        if handler is not None:
            handler.host.release()
    return _outcome(handler, running, restored)


def _handler(
    make: Callable[[], StreamHandler],
    build: Build,
    checkpoint: StreamCheckpoint,
    identity: dict[str, Any],
    connect: bool,
) -> tuple[StreamHandler | None, Callable[[DataFrame, int], None], int]:
    """The ``foreachBatch`` function of a driver-hosted run, its handler here (``None`` on Spark Connect) and the
    number of committed micro-batches it resumes after."""
    if connect:
        # Spark Connect calls foreachBatch in one Python process of the server for the query's life: the
        # dataflow is made there at the first micro-batch and carries the state from batch to batch. The
        # checkpoint is checked here first, so a mismatch stops the run before the query starts.
        ship_by_value(build)
        restored = len(checkpoint.open(identity))
        return None, ServerSide(partial(_without_session, make)), restored
    handler = make()
    return handler, handler, len(handler.committed)


def _without_session(make: Callable[[], StreamHandler], _session: Any) -> StreamHandler:
    """``make()``: a driver-hosted handler needs nothing of the server's session."""
    return make()


def _outcome(handler: StreamHandler | None, running: Any, restored: int) -> StreamRun:
    """What the ended query did; the handler's failure raised."""
    triggers = trigger_times(running)
    if handler is None:
        # The handler lived in the server's Python process: its timings stay there.
        return StreamRun(sorted(triggers), 0, 0.0, restored, [], triggers)
    if handler.failure is not None:
        raise handler.failure
    processed = [t.batch_id for t in handler.timings]
    return StreamRun(processed, handler.skipped, handler.restore_s, restored, list(handler.timings), triggers)

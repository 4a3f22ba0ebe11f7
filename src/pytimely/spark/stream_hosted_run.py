"""``run_stream`` with the dataflow hosted on the executors: the query started, awaited and accounted for."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from pytimely.errors import InvalidArgument
from pytimely.spark.stream_handler import ServerSide
from pytimely.spark.stream_hosted import HostedDataflow, stop_published
from pytimely.spark.stream_hosted_handler import HostedHandler
from pytimely.spark.watermark import EventTime

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pytimely.spark.stream_checkpoint import StreamCheckpoint
    from pytimely.spark.stream_query import StreamRun
    from pytimely.spark.stream_sinks import Sink
    from pytimely.spark.watermark import Watermark

__all__ = ["check_layout", "run_hosted"]


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
    from pytimely.spark.stream_query import _await_query, _start_query

    spark = source.sparkSession
    check_executors(spark)
    ship_by_value(build)
    if check is not None:
        ship_by_value(check)
    secret = secrets.token_bytes(32)
    make_hosted = _hosted_maker(build, spark, schema, sink, checkpoint, identity, processes, workers, secret, key=key,
                                idle_timeout=idle_timeout, column=epoch)  # fmt: skip
    event = None if epoch is None else EventTime.declared(epoch, watermark)
    handler, function, restored = _batch_function(spark, make_hosted, sink, checkpoint, identity, check, event,
                                                  watermark)  # fmt: skip
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
        column=column, files_key=checkpoint.key(),
    )  # fmt: skip


def _batch_function(
    spark: Any,
    make_hosted: Callable[..., HostedDataflow],
    sink: Sink,
    checkpoint: StreamCheckpoint,
    identity: dict[str, Any],
    check: Callable[..., Any] | None,
    event: EventTime | None,
    watermark: Watermark | None,
) -> tuple[HostedHandler | None, Callable[[DataFrame, int], None], int]:
    """The query's ``foreachBatch`` function, its handler here (``None`` on Spark Connect) and the number of
    committed micro-batches it resumes after."""
    from pytimely.spark.session import is_connect

    if is_connect(spark):
        # foreachBatch runs in a Python process of the server: the handler is made there, at the first
        # micro-batch; this client checks the checkpoint and takes it over first (fencing an orphaned query).
        restored = len(checkpoint.open(identity))
        owner = checkpoint.take_ownership()
        make = partial(HostedHandler, sink=sink, checkpoint=checkpoint, identity=identity, check=check, owner=owner,
                       takeover_wait=60.0, event=event, watermark=watermark)  # fmt: skip
        return None, ServerSide(partial(_hosted_handler, make, make_hosted)), restored
    handler = HostedHandler(make_hosted(spark), sink, checkpoint, identity, check=check, event=event,
                            watermark=watermark)  # fmt: skip
    return handler, handler, len(handler.committed)


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


def check_layout(processes: int | None, workers: int) -> None:
    """Refuse a layout that cannot run, before anything starts."""
    if processes is not None and (type(processes) is not int or processes < 1):
        raise InvalidArgument(f"processes must be a positive int, got {processes!r}")
    if type(workers) is not int or workers < 1:
        raise InvalidArgument(f"workers must be a positive int, got {workers!r}")

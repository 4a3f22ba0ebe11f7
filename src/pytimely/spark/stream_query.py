"""The Structured Streaming query a streaming run drives, and what it did: starting it with the
``foreachBatch`` function, waiting for it, its failure as the typed pytimely error it carries
(:func:`_typed`), Spark's time per micro-batch, and the run's record (:class:`StreamRun`). Both the
driver-hosted and the executor-hosted paths use it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytimely.errors import PytimelyError, StreamError
from pytimely.spark.stream_handler import BatchTiming, _cause

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pytimely.spark.stream_checkpoint import StreamCheckpoint

__all__ = ["StreamRun", "trigger_times"]


@dataclass
class StreamRun:
    """What a streaming run did: the micro-batches it processed, their timings, the time to restore state."""

    processed: list[int]
    skipped: int
    restore_s: float
    restored_batches: int
    timings: list[BatchTiming] = field(default_factory=list)
    trigger_ms: dict[int, float] = field(default_factory=dict)
    """Spark's own time for each micro-batch that had rows (``durationMs.triggerExecution``), by batch id."""
    restarts: int = 0
    """How many times the hosted processes were started again after a failure (executor-hosted runs)."""
    driver_bytes: dict[int, int] = field(default_factory=dict)
    """Executor-hosted runs: bytes the control side received per micro-batch (counts and answers, no rows)."""

    @property
    def late(self) -> int:
        """Late rows the watermark dropped or sent aside over the micro-batches processed."""
        return sum(t.late for t in self.timings)



def _start_query(
    source: DataFrame,
    function: Callable[[DataFrame, int], None],
    checkpoint: StreamCheckpoint,
    query: str,
    available_now: bool,
    processing_time: str | None,
) -> Any:
    """Start the streaming query that calls ``function`` for each micro-batch; a failure to start is typed."""
    writer = source.writeStream.foreachBatch(function).option("checkpointLocation", str(checkpoint.spark))
    writer = writer.queryName(f"{query}-{os.getpid()}")
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time is not None:
        writer = writer.trigger(processingTime=processing_time)
    try:
        return writer.start()
    except Exception as exc:
        raise _typed(str(exc)) or StreamError(
            f"the streaming query {query!r} did not start (checkpoint {checkpoint.root}): {_cause(str(exc))}"
        ) from None


def _await_query(
    running: Any, query: str, timeout: float | None, failure: Callable[[], PytimelyError | None] | None
) -> None:
    """Wait for the query to end (or ``timeout``); its failure as the handler's typed error where it has one."""
    try:
        if timeout is not None:
            running.awaitTermination(max(1, round(timeout)))
        else:
            running.awaitTermination()
    except Exception as exc:
        known = None if failure is None else failure()
        if known is not None:
            raise known from None
        raise _typed(str(exc)) or StreamError(f"the streaming query {query!r} failed: {_cause(str(exc))}") from exc


_TYPED = re.compile(r"pytimely\.errors\.(?:\w+\.)?(\w+): (.*)")
"""A traceback's last line: ``pytimely.errors.X: ...`` (the name every error carries), or with the module it is
defined in (``pytimely.errors.spark.X``), as an error pickled or printed by other means may show it."""


def _typed(text: str) -> PytimelyError | None:
    """The pytimely error a query failed with on the server (its traceback's last ``pytimely.errors.X: ...``)."""
    import pytimely.errors as errors

    found = None
    for line in text.splitlines():
        match = _TYPED.search(line)
        if match is not None:
            found = match
    if found is None:
        return None
    kind = getattr(errors, found.group(1), None)
    if not (isinstance(kind, type) and issubclass(kind, PytimelyError)):
        return None
    try:
        return kind(found.group(2))
    except TypeError:  # an error class that takes more than a message
        return StreamError(f"{found.group(1)}: {found.group(2)}")


def trigger_times(query: Any) -> dict[int, float]:
    """Spark's time for each recent micro-batch of ``query`` that had rows, in milliseconds, by batch id."""
    times: dict[int, float] = {}
    for progress in query.recentProgress:
        if progress.numInputRows:
            times[int(progress.batchId)] = float(progress.durationMs.get("triggerExecution", 0.0))
    return times

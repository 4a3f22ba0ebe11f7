"""The feed job of a streaming query hosted on the executors: one Spark job per micro-batch.

Each task (:class:`Sender`) sends its partition's Arrow rows straight to the hosted processes (routed to the
process owning each row's key bin when the dataflow's first exchange is keyed, else spread evenly), over
connections kept open across the tasks of a Python worker; only counts come back to the caller. The control
side that runs it is :class:`~pytimely.spark.stream_hosted.HostedDataflow`.
"""

from __future__ import annotations

import functools
import time as _time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.spark.record_batches import _one_batch, split_by_owner
from pytimely.spark.stream_feed import FeedLink, Kind, arrow_bytes, dial

if TYPE_CHECKING:
    import pyarrow as pa

    from pytimely.spark.watermark import EventTime

__all__ = ["COUNTS", "Sender", "counts_schema"]

COUNTS = "process int, sender long, frames long, rows long, late long, top long, task_s double"
"""What each task of the feed job gives back, as a DDL string: :func:`counts_schema` is the schema made of it."""


@functools.cache
def counts_schema() -> Any:
    """:data:`COUNTS` as a Spark schema, made once (a DDL string is parsed by the JVM at every feed job)."""
    from pyspark.sql.types import StructType

    return StructType.fromDDL(COUNTS)


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

"""The ``foreachBatch`` function of a streaming query hosted on the executors.

:class:`HostedHandler` feeds each new micro-batch to the hosted processes
(:class:`~pytimely.spark.stream_hosted.HostedDataflow`), commits its output once (fenced by the checkpoint's
owner) and, when the processes fail, starts a new generation restored from the snapshot of the last committed
micro-batch and sends the micro-batch again (a bounded number of times).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.atomic import write_atomic
from pytimely.errors import CheckpointMismatchError, StreamFeedError, StreamHostError
from pytimely.spark.signed_files import read_signed_arrow
from pytimely.spark.stream_checkpoint import is_new_batch
from pytimely.spark.stream_handler import MicroBatchFunction
from pytimely.spark.stream_held import clear_held
from pytimely.spark.stream_host import await_exits, parts_folder
from pytimely.spark.watermark import late_folder

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pytimely.spark.epoch_output import EpochOutput
    from pytimely.spark.stream_checkpoint import StreamCheckpoint
    from pytimely.spark.stream_hosted import HostedDataflow
    from pytimely.spark.stream_sinks import Sink
    from pytimely.spark.watermark import EventTime, Watermark

__all__ = ["HostedHandler"]

log = logging.getLogger("pytimely.spark.streaming")


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
            self.event = replace(self.event, frontier=checkpoint.frontier(), own=str(checkpoint.own),
                                 key=checkpoint.key())  # fmt: skip
            self._clear_held()
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

    def _clear_held(self) -> None:
        """Remove the held rows no run can need (of uncommitted attempts, or all past the committed frontier) and
        every micro-batch's late rows (taken up by the commit of their micro-batch, or sent again)."""
        import shutil

        assert self.event is not None
        clear_held(self.checkpoint.own, self.last_committed, self.event.frontier, owner=self.owner)
        shutil.rmtree(self.checkpoint.own / "late", ignore_errors=True)

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
                    self._clear_held()
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
        key = self.event.key if self.event is not None else b""
        for path in sorted(late_folder(self.checkpoint.own, batch_id).glob("s*.arrow")):
            tables.append(read_signed_arrow(path, key))
        table = pa.concat_tables(tables) if tables else to_arrow_schema(frame.schema).empty_table()
        self.watermark.side.commit(batch_id, table)

    def restart(self) -> None:
        """Cancel this generation and start the next one, restored at the last committed micro-batch (unless it
        failed on a checkpoint file: the next one would read the same file)."""
        self.hosted.cancel()
        self.hosted.raise_if_fatal()
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
            self._clear_held()

    def _commit_through_driver(self, batch_id: int, parts: list[str]) -> None:
        """A sink that is not an :class:`EpochOutput` gets the parts joined here; they are removed after."""
        import shutil

        import pyarrow as pa

        tables = []
        for path in parts:
            tables.append(read_signed_arrow(Path(path), self.hosted.files_key))
        self.sink.commit(batch_id, pa.concat_tables(tables))
        shutil.rmtree(parts_folder(self.hosted.own, batch_id), ignore_errors=True)

    def close(self) -> None:
        """Stop the hosted processes."""
        self.hosted.stop()

"""Late event-time rows: what a streaming query does with a row whose epoch is already complete.

With an event-time column (``run_stream(..., epoch=COLUMN)``) a micro-batch completes the epochs before the
largest it holds. A later row of a complete epoch is *late*: its epoch's output has been handed out. Without a
watermark such a row stops the query (:class:`~pytimely.errors.InputFormatError`, today's behaviour, so nothing
changes silently). With ``watermark=Watermark(...)`` the query goes on:

* ``delay=D`` keeps the ``D`` epochs below the largest one seen open: the frontier (every epoch before it is
  complete) is the largest epoch seen minus ``D``, never moving back, so a row up to ``D`` epochs behind the
  newest is still on time and its epoch's output waits ``D`` epochs longer;
* a row older than the frontier the micro-batch found is late: counted (in the micro-batch's
  :class:`~pytimely.spark.streaming.BatchTiming` and in the ``pytimely.spark.streaming`` log) and dropped
  (``late="drop"``) or written to a side output (``late="side"``, ``side=`` a
  :class:`~pytimely.spark.streaming.Sink`, committed under the micro-batch's id).

:func:`split_late` is the vectorised split both the driver and a task sending its partition use.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytimely.errors import InputFormatError, InvalidArgument, StreamInputError
from pytimely.spark.signed_files import write_signed_arrow

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EventTime", "Watermark", "late_folder", "split_late"]

log = logging.getLogger("pytimely.spark.streaming")

Late = Literal["drop", "side"]


@dataclass(frozen=True, slots=True)
class Watermark:
    """A declared watermark: epochs ``delay`` below the largest seen stay open; older rows are dropped or sent aside."""

    delay: int = 0
    late: Late = "drop"
    side: Any = None
    """With ``late="side"``: the sink late rows go to (``prepare()``, ``commit(batch_id, table)``)."""

    def __post_init__(self) -> None:
        if type(self.delay) is not int or self.delay < 0:
            raise InvalidArgument(f"Watermark: delay must be a whole number of epochs >= 0, got {self.delay!r}")
        if self.late not in ("drop", "side"):
            raise InvalidArgument(f"Watermark: late must be 'drop' or 'side', got {self.late!r}")
        if self.late == "side":
            if self.side is None:
                raise InvalidArgument("Watermark: late='side' needs side=, the sink late rows are written to")
            missing = [m for m in ("prepare", "commit") if not callable(getattr(self.side, m, None))]
            if missing:
                raise InvalidArgument(
                    f"Watermark: side= must be a sink with prepare() and commit(batch_id, table); "
                    f"{type(self.side).__name__} has no {' or '.join(missing)}()"
                )
        elif self.side is not None:
            raise InvalidArgument("Watermark: side= is only used with late='side' (late rows are dropped)")

    def describe(self) -> str:
        """How the checkpoint records this watermark (another delay or policy is another query)."""
        return f"watermark delay {self.delay}, late rows {'to a side output' if self.late == 'side' else 'dropped'}"

    def prepare(self) -> None:
        """Check that the side output can be written, before the first micro-batch."""
        if self.side is not None:
            self.side.prepare()

    def admit(self, table: pa.Table, column: str, frontier: int, batch_id: int) -> tuple[pa.Table, int]:
        """The on-time rows of micro-batch ``batch_id`` and how many were late (logged, sent aside or dropped)."""
        on_time, late = split_late(table, column, frontier)
        if late.num_rows:
            where = "written to the side output" if self.side is not None else "dropped"
            log.warning(
                "micro-batch %d: %d late row(s) with %r before %d (epochs already complete) %s",
                batch_id, late.num_rows, column, frontier, where,
            )
        if self.side is not None:
            # Committed for every micro-batch (empty too), so the side output's batch ids follow the query's.
            self.side.commit(batch_id, late)
        return on_time, late.num_rows


def split_late(table: pa.Table, column: str, frontier: int) -> tuple[pa.Table, pa.Table]:
    """``table``'s rows whose ``column`` is at least ``frontier`` (on time) and the others (late), order kept.

    The epoch column must hold integers without empty values (else :class:`~pytimely.errors.InputFormatError`,
    naming the column); one comparison and two filters over the whole table, no per-row Python.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if column not in table.column_names:
        raise InputFormatError(f"epoch column {column!r} is not among the columns {table.column_names}")
    values = table.column(column)
    if not pa.types.is_integer(values.type):
        raise InputFormatError(f"epoch column {column!r} must hold integers, holds {values.type}")
    if values.null_count:
        raise InputFormatError(f"epoch column {column!r} has {values.null_count} empty values")
    keep = pc.greater_equal(values, frontier)
    if pc.all(keep).as_py() is not False:
        return table, table.slice(0, 0)
    return table.filter(keep), table.filter(pc.invert(keep))


@dataclass(frozen=True)
class EventTime:
    """Event-time epochs on the executors: the column, the frontier the micro-batch found, the watermark."""

    column: str
    frontier: int
    delay: int = 0
    late: str | None = None
    """``None``: a late row stops the query; ``"drop"``; ``"side"`` (its rows kept under ``late_folder``)."""
    own: str = ""
    key: bytes = field(default=b"", repr=False)
    """The checkpoint's key, which signs the late rows' files."""

    @classmethod
    def declared(cls, column: str, watermark: Watermark | None) -> EventTime:
        """Event time by ``column`` under ``watermark`` (``None``: a late row stops the query), before any frontier."""
        if watermark is None:
            return cls(column, 0)
        return cls(column, 0, watermark.delay, watermark.late)

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
        write_signed_arrow(late_folder(self.own, batch) / f"s{sender:05d}.arrow", pa.concat_tables(late), self.key)

    def target(self, top: int) -> int:
        """The new frontier: the largest epoch seen less the delay, never moving back."""
        return max(self.frontier, top - self.delay)


def late_folder(own: str | Path, batch: int) -> Path:
    """Where the feed tasks keep micro-batch ``batch``'s late rows for the side output."""
    return Path(own) / "late" / f"batch-{batch:012d}"

"""Payload segments: a worker's snapshots of one dataflow appended to one file per window of epochs.

A snapshot of an epoch writes, per worker and dataflow, one *record*: the encoded pieces of what changed. In a
store that can append (:class:`~pytimely.recovery.store.AppendingStore`, a local folder) a worker's records of
one dataflow go one after the other into a *segment* file covering a window of epochs,
``snapshots/<first epoch>-<last epoch>-<worker>-<dataflow>-<token>``: a snapshot costs one write and one
``fdatasync`` of a file already open, where a file of its own cost a create, a write, an fsync and an fsync of
its folder (and its removal later). The first record of a segment creates it and fsyncs the folder once.

A manifest names a record ``<segment>@<offset>`` with its size and SHA-256, as it names any payload file, so a
record is verified on its own before anything in it is read, and a torn record at the end of a segment (a run
killed mid-write) is one no manifest names. A segment is removed once no kept manifest names a record in it and
its window is over (no worker appends to it any more): its last epoch is committed, or it belongs to another
run. Each record of a window is needed by at most ``rewrite_every`` snapshots after it, as a separate file was,
so a store holds about two segments per worker and dataflow besides the one being written.
"""

from __future__ import annotations

from pytimely.recovery.manifest import epoch_name

__all__ = ["SegmentLog", "container", "record_name", "segment_last", "split_record"]


def record_name(segment: str, offset: int) -> str:
    """The name a manifest gives the record at ``offset`` of ``segment``."""
    return f"{segment}@{offset}"


def split_record(name: str) -> tuple[str, int] | None:
    """``(segment, offset)`` of a record's name; ``None`` for the name of a whole payload file."""
    segment, at, offset = name.rpartition("@")
    if not at or not offset.isdigit():
        return None
    return segment, int(offset)


def container(name: str) -> str:
    """The file a payload name lives in: a record's segment, or the payload file itself."""
    split = split_record(name)
    return name if split is None else split[0]


def segment_last(name: str) -> int | None:
    """The last epoch of a segment's window (``None`` for a name that is not a segment's)."""
    parts = name.rsplit("/", 1)[-1].split("-")
    if len(parts) != 5 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    return int(parts[1])


def segment_token(name: str) -> str | None:
    """The token of the run that wrote a segment (``None`` for a name that is not a segment's)."""
    parts = name.rsplit("/", 1)[-1].split("-")
    return parts[4] if len(parts) == 5 and parts[0].isdigit() and parts[1].isdigit() else None


class SegmentLog:
    """Where one worker's records of one dataflow go: the segment of their epoch's window, one after another.

    Placing happens on the worker's thread, in epoch order, so a record's offset is known before its bytes are
    written; the writes themselves go to the worker's writer thread in the same order.
    """

    def __init__(self, worker: int, dataflow: int, token: str, span: int) -> None:
        self.worker = worker
        self.dataflow = dataflow
        self.token = token
        self.span = span
        """Epochs per window (at least 1)."""
        self.segment: str | None = None
        self._last = -1
        self._offset = 0

    def place(self, epoch: int, size: int) -> tuple[str, int, str | None]:
        """``(segment, offset, finished)`` for a record of ``size`` bytes of ``epoch``: ``finished`` names the
        segment this record's window replaces (it will be written no more), if any."""
        finished = None
        if self.segment is None or epoch > self._last:
            finished = self.segment
            first = epoch - epoch % self.span
            self._last = first + self.span - 1
            self.segment = (
                f"snapshots/{epoch_name(first)}-{epoch_name(self._last)}-{self.worker:05d}-{self.dataflow:03d}-"
                f"{self.token}"
            )
            self._offset = 0
        offset = self._offset
        self._offset += size
        return self.segment, offset, finished

"""Files in and out: a list of files, a directory whose new files become epochs, and a sink writing a file.

* :func:`file_source` reads files (lines, CSV or Parquet, by suffix or ``format``): worker ``j`` of ``n`` reads
  files ``j, j+n, ...``, all at the scope's first time, or file ``k`` at epoch ``k`` (``epoch_per_file``).
* :func:`directory_source` watches a directory: files are taken in name order and file ``k`` becomes epoch
  ``k``, so every worker numbers them alike; it ends when the ``end_marker`` file appears (or after
  ``max_files``). Write each file under another name and rename it into place: a name starting with ``.`` or
  ending in ``.partial`` or ``.tmp`` is not read. A file whose name sorts before one already taken would get
  an epoch already passed, and raises :class:`~pytimely.errors.InputError`.
* :func:`file_sink` writes a stream to one file from worker 0, each time's records once the time is complete,
  in time order; the file appears under its name only when the stream has ended (nothing half-written).
"""

from __future__ import annotations

import csv
import fnmatch
import os
import time as _time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.atomic import atomic_output
from pytimely.connectors.formats import Format, format_of, read_batches
from pytimely.connectors.source import Action, Advance, End, Send, polled_source
from pytimely.dataflow.channels import Exchange
from pytimely.errors import InputError, InvalidArgument, SourceTimeoutError
from pytimely.order import sort_key

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["directory_source", "file_sink", "file_source", "ordered_sink"]

_BATCHES_PER_STEP = 4
_SKIPPED_SUFFIXES = (".partial", ".tmp")


def file_source(
    scope: Scope[Any],
    paths: Sequence[str | os.PathLike[str]],
    *,
    format: Format | None = None,
    epoch_per_file: bool = False,
    records: str = "tuple",
    name: str = "file_source",
    **options: Any,
) -> Stream[Any]:
    """The batches of ``paths`` (each worker its share); see the module doc. ``options`` go to the reader.

    ``records="dict"`` makes the records of CSV and Parquet batches dicts by column name instead of tuples.
    """
    files = [Path(p) for p in paths]
    if epoch_per_file and type(scope.minimum) is not int:
        raise InvalidArgument(f"{name}: epoch_per_file numbers files as int epochs; this scope's times are not ints")
    as_dicts = _dict_records(records, name)
    index, peers = scope.index, scope.peers

    def make_poll(minimum: Any) -> Callable[[], list[Action]]:
        todo = deque((k, f) for k, f in enumerate(files) if k % peers == index)
        current: list[tuple[Any, Iterator[Any]]] = []

        def poll() -> list[Action]:
            actions: list[Action] = []
            for _ in range(_BATCHES_PER_STEP):
                if not current:
                    if not todo:
                        actions.append(End())
                        return actions
                    k, path = todo.popleft()
                    epoch = minimum + k if epoch_per_file else minimum
                    if epoch_per_file:
                        actions.append(Advance(epoch))
                    current.append((epoch, read_batches(path, format, **options)))
                epoch, batches = current[0]
                batch = next(batches, None)
                if batch is None:
                    current.clear()
                else:
                    if as_dicts and container.kind_of(batch).name == "arrow":
                        batch = container.with_dict_records(batch)
                    actions.append(Send(epoch, batch))
            return actions

        return poll

    return polled_source(scope, make_poll, name=name, idle=0)


def _dict_records(records: str, name: str) -> bool:
    """Whether a source's Arrow batches are to give dict records (``records="dict"``)."""
    if records not in ("tuple", "dict"):
        raise InvalidArgument(f"{name}: records must be 'tuple' or 'dict', got {records!r}")
    return records == "dict"


def _listable(entry: str, pattern: str, end_marker: str | None) -> bool:
    return (
        not entry.startswith(".")
        and not entry.endswith(_SKIPPED_SUFFIXES)
        and entry != end_marker
        and fnmatch.fnmatch(entry, pattern)
    )


@dataclass(frozen=True, slots=True)
class _Watch:
    """What ``directory_source`` watches and how: the folder, which names count, when it ends, how files read."""

    name: str
    folder: Path
    pattern: str
    end_marker: str | None
    max_files: int | None
    poll_interval: float
    timeout: float | None
    format: Format | None
    as_dicts: bool
    options: dict[str, Any]
    index: int
    peers: int


class _DirectoryReader:
    """One worker's side of ``directory_source``: lists the folder, numbers new files, and reads its own share."""

    def __init__(self, watch: _Watch, minimum: int) -> None:
        self.watch = watch
        self.minimum = minimum
        self.seen: set[str] = set()
        self.last: str | None = None
        """The latest name taken: a later file must sort after it."""
        self.mine: deque[tuple[int, Path]] = deque()
        self.current: tuple[int, Iterator[Any]] | None = None
        self.taken = 0
        self.ended = False
        self.listed = 0.0
        self.heard = _time.monotonic()

    def poll(self) -> list[Action]:
        """List the folder when idle, read up to ``_BATCHES_PER_STEP`` batches, and say how far the epochs are."""
        w = self.watch
        now = _time.monotonic()
        if self.current is None and not self.mine and not self.ended and now - self.listed >= w.poll_interval:
            self.listed = now
            self._list()
            if w.timeout is not None and not self.mine and not self.ended and now - self.heard > w.timeout:
                raise SourceTimeoutError(f"{w.name}: no new file in {w.folder} for {w.timeout:g} s")
        actions = self._read()
        if self.current is None and not self.mine:
            if self.ended:
                actions.append(End())
            else:
                # Every file this worker will read from now on is at epoch ``taken`` or later.
                actions.append(Advance(self.minimum + self.taken))
        return actions

    def _list(self) -> None:
        """Number the new files in name order, keeping this worker's; mark the end once the marker or cap is met."""
        w = self.watch
        entries = sorted(e for e in os.listdir(w.folder) if _listable(e, w.pattern, w.end_marker))
        ended = w.end_marker is not None and (w.folder / w.end_marker).exists()
        if ended:  # everything written before the marker is in a listing taken after it
            entries = sorted(e for e in os.listdir(w.folder) if _listable(e, w.pattern, w.end_marker))
        for entry in entries:
            if entry in self.seen:
                continue
            if self.last is not None and entry < self.last:
                raise InputError(
                    f"{w.name}: {w.folder / entry} arrived after {self.last}, whose epoch is already taken; "
                    "new files must sort after the ones before them"
                )
            if w.max_files is not None and self.taken >= w.max_files:
                break
            self.seen.add(entry)
            self.last = entry
            if self.taken % w.peers == w.index:
                self.mine.append((self.minimum + self.taken, w.folder / entry))
            self.taken += 1
            self.heard = _time.monotonic()
        if ended or (w.max_files is not None and self.taken >= w.max_files):
            self.ended = True

    def _read(self) -> list[Action]:
        """Up to ``_BATCHES_PER_STEP`` batches of this worker's files, each file's opened at its epoch."""
        w = self.watch
        actions: list[Action] = []
        for _ in range(_BATCHES_PER_STEP):
            if self.current is None:
                if not self.mine:
                    break
                epoch, path = self.mine.popleft()
                actions.append(Advance(epoch))
                self.current = (epoch, read_batches(path, w.format, **w.options))
            epoch, batches = self.current
            batch = next(batches, None)
            if batch is None:
                self.current = None
            else:
                if w.as_dicts and container.kind_of(batch).name == "arrow":
                    batch = container.with_dict_records(batch)
                actions.append(Send(epoch, batch))
        return actions


def directory_source(
    scope: Scope[Any],
    directory: str | os.PathLike[str],
    *,
    format: Format | None = None,
    pattern: str = "*",
    end_marker: str | None = "_DONE",
    max_files: int | None = None,
    poll_interval: float = 0.05,
    timeout: float | None = None,
    records: str = "tuple",
    name: str = "directory_source",
    **options: Any,
) -> Stream[Any]:
    """File ``k`` of ``directory`` (in name order) at epoch ``k``, as files arrive; see the module doc.

    ``timeout`` (seconds): with no new file and no end marker for that long, raise
    :class:`~pytimely.errors.SourceTimeoutError`. ``records``: as for :func:`file_source`.
    """
    as_dicts = _dict_records(records, name)
    folder = Path(directory)
    if not folder.is_dir():
        raise InvalidArgument(f"{name}: {folder} is not a directory")
    if type(scope.minimum) is not int:
        raise InvalidArgument(f"{name}: files become int epochs; this scope's times are not ints")
    if end_marker is None and max_files is None:
        raise InvalidArgument(f"{name}: give an end_marker or max_files, or the source never ends")
    watch = _Watch(
        name,
        folder,
        pattern,
        end_marker,
        max_files,
        poll_interval,
        timeout,
        format,
        as_dicts,
        options,
        scope.index,
        scope.peers,
    )

    def make_poll(minimum: int) -> Callable[[], list[Action]]:
        return _DirectoryReader(watch, minimum).poll

    return polled_source(scope, make_poll, name=name)


# -- out ------------------------------------------------------------------------------------------------------


def _to_zero(batch: Any) -> Any:
    import numpy as np

    return np.zeros(len(batch), dtype=np.int64)


def ordered_sink(
    stream: Stream[Any],
    write: Callable[[Any, list[Any]], None],
    finish: Callable[[], None],
    name: str,
) -> None:
    """Gather ``stream`` on worker 0 and call ``write(time, batches)`` per complete time, in time order, then
    ``finish()`` once the stream has ended (on worker 0 only)."""
    scope = stream.scope
    op = scope.add_operator(name, [(stream, Exchange(_to_zero, vectorized=True))], 0)
    op.notify = True
    port = op.inputs[0]
    pending: dict[Any, list[Any]] = {}
    done = [scope.index != 0]

    def logic() -> None:
        for time, batch in port.batches():
            pending.setdefault(time, []).append(batch)
        frontier = port.frontier
        # A sink holds no capability: a time is complete once the input frontier has passed it.
        for t in sorted((t for t in pending if not frontier.less_equal(t)), key=sort_key):
            write(t, pending.pop(t))
        if not done[0] and frontier.is_empty():
            done[0] = True
            finish()

    op.logic = logic


def rows_of(batch: Any) -> list[Any]:
    """A batch's records as Python values (rows of numpy and Arrow batches as tuples)."""
    return list(container.records(batch))


def write_rows(out: IO[str], kind: Format, batches: list[Any], format_line: Callable[[Any], str] = str) -> None:
    """Write ``batches`` as text lines or CSV rows."""
    if kind == "lines":
        out.writelines(format_line(r) + "\n" for b in batches for r in rows_of(b))
        return
    writer = csv.writer(out, lineterminator="\n")
    for b in batches:
        writer.writerows(r if isinstance(r, (tuple, list)) else (r,) for r in rows_of(b))


def file_sink(
    stream: Stream[Any],
    path: str | os.PathLike[str],
    *,
    format: Format | None = None,
    columns: Sequence[str] | None = None,
    name: str = "file_sink",
) -> None:
    """Write ``stream`` to ``path`` (lines, CSV with header ``columns``, or Parquet); see the module doc."""
    kind = format_of(path) if format is None else format
    if kind not in ("lines", "csv", "parquet"):
        raise InvalidArgument(f"{name}: format must be 'lines', 'csv' or 'parquet', got {format!r}")
    if kind == "parquet" and columns is None:
        columns_known: list[str] | None = None
    else:
        columns_known = None if columns is None else list(columns)
    stack = ExitStack()
    state: dict[str, Any] = {}

    def out() -> IO[Any]:
        handle = state.get("out")
        if handle is None:
            handle = state["out"] = stack.enter_context(atomic_output(path, "wb" if kind == "parquet" else "w"))
            if kind == "csv" and columns_known is not None:
                csv.writer(handle, lineterminator="\n").writerow(columns_known)
        return handle

    def write(time: Any, batches: list[Any]) -> None:
        if kind != "parquet":
            write_rows(out(), kind, batches)
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        for b in batches:
            table = b if container.kind_of(b).name == "arrow" else _table(rows_of(b), columns_known, name)
            writer = state.get("parquet")
            if writer is None:
                writer = state["parquet"] = pq.ParquetWriter(out(), table.schema)
            writer.write(table if isinstance(table, pa.Table) else pa.Table.from_batches([table]))

    def finish() -> None:
        with stack:
            out()
            writer = state.get("parquet")
            if writer is not None:
                writer.close()
            elif kind == "parquet":
                import pyarrow.parquet as pq

                pq.write_table(_table([], columns_known or [], name), state["out"])

    ordered_sink(stream, write, finish, name)


def _table(rows: list[Any], columns: list[str] | None, name: str) -> Any:
    import pyarrow as pa

    if columns is None:
        raise InvalidArgument(f"{name}: records that are not Arrow batches need columns= to be written as Parquet")
    if not rows:
        return pa.table({c: pa.array([], pa.int64()) for c in columns})
    data = [r if isinstance(r, (tuple, list)) else (r,) for r in rows]
    return pa.table({c: [row[i] for row in data] for i, c in enumerate(columns)})

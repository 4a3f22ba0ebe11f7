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
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.atomic import atomic_output
from pytimely.connectors.formats import Format, format_of, read_batches
from pytimely.connectors.source import Action, Advance, End, Send, polled_source
from pytimely.dataflow.channels import Exchange
from pytimely.errors import InputError, InvalidArgument
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
    from pytimely.errors import SourceTimeoutError

    folder = Path(directory)
    if not folder.is_dir():
        raise InvalidArgument(f"{name}: {folder} is not a directory")
    if type(scope.minimum) is not int:
        raise InvalidArgument(f"{name}: files become int epochs; this scope's times are not ints")
    if end_marker is None and max_files is None:
        raise InvalidArgument(f"{name}: give an end_marker or max_files, or the source never ends")
    index, peers = scope.index, scope.peers

    def make_poll(minimum: int) -> Callable[[], list[Action]]:
        seen: set[str] = set()
        last: list[str] = []
        mine: deque[tuple[int, Path]] = deque()
        current: list[tuple[int, Iterator[Any]]] = []
        state = {"taken": 0, "ended": False, "listed": 0.0, "heard": _time.monotonic()}

        def listing() -> None:
            entries = sorted(e for e in os.listdir(folder) if _listable(e, pattern, end_marker))
            ended = end_marker is not None and (folder / end_marker).exists()
            if ended:  # everything written before the marker is in a listing taken after it
                entries = sorted(e for e in os.listdir(folder) if _listable(e, pattern, end_marker))
            for entry in entries:
                if entry in seen:
                    continue
                if last and entry < last[0]:
                    raise InputError(
                        f"{name}: {folder / entry} arrived after {last[0]}, whose epoch is already taken; "
                        "new files must sort after the ones before them"
                    )
                if max_files is not None and state["taken"] >= max_files:
                    break
                seen.add(entry)
                last[:] = [entry]
                k = int(state["taken"])
                if k % peers == index:
                    mine.append((minimum + k, folder / entry))
                state["taken"] = k + 1
                state["heard"] = _time.monotonic()
            if ended or (max_files is not None and state["taken"] >= max_files):
                state["ended"] = True

        def poll() -> list[Action]:
            actions: list[Action] = []
            now = _time.monotonic()
            if not current and not mine and not state["ended"] and now - state["listed"] >= poll_interval:
                state["listed"] = now
                listing()
                if timeout is not None and not mine and not state["ended"] and now - state["heard"] > timeout:
                    raise SourceTimeoutError(f"{name}: no new file in {folder} for {timeout:g} s")
            for _ in range(_BATCHES_PER_STEP):
                if not current:
                    if not mine:
                        break
                    epoch, path = mine.popleft()
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
            if not current and not mine:
                if state["ended"]:
                    actions.append(End())
                else:
                    # Every file this worker will read from now on is at epoch ``taken`` or later.
                    actions.append(Advance(minimum + int(state["taken"])))
            return actions

        return poll

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

"""Reading the example jobs' inputs and writing their outputs: errors name the file and line, outputs are atomic."""

from __future__ import annotations

import io
import os
import re
import stat
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pytimely.atomic import atomic_output, check_output
from pytimely.errors import InputFormatError, InvalidArgument

__all__ = ["EpochLines", "atomic_output", "check_output", "read_edges", "read_words", "write_table"]

_HEADERS = {("src", "dst"), ("src", "dst", "epoch")}


def read_edges(path: str | os.PathLike[str], *, epochs: bool = False, part: int = 0, parts: int = 1) -> Any:
    """Integer edges from CSV lines ``src,dst`` (or ``src,dst,epoch``) as an ``(n, 2|3)`` int64 array.

    Blank lines and a ``src,dst[,epoch]`` header are skipped. With ``parts > 1``
    only every ``parts``-th data line starting at ``part`` is returned, so each
    worker can read its own share. A malformed line (a field that is not an
    integer, a value outside the 64-bit range, a negative epoch, bytes that are
    not UTF-8) raises :class:`~pytimely.errors.InputFormatError` naming the file
    and line.
    """
    _check_share(part, parts)
    width = 3 if epochs else 2
    name = os.fspath(path)
    if name.lower().endswith(".parquet"):
        array = _read_parquet_edges(name, width, part, parts)
        if epochs and array.size and array[:, 2].min() < 0:
            k = int(np.flatnonzero(array[:, 2] < 0)[0])
            raise InputFormatError(
                f"{name}, row {k * parts + part + 1}: an epoch must be a non-negative integer, got {array[k, 2]}",
                path=name,
            )
        return array
    lines = _read_text(name).splitlines()
    start = 0
    if lines and tuple(c.strip() for c in lines[0].split(",")) in _HEADERS:
        start = 1
    numbers = [i for i in range(start, len(lines)) if lines[i].strip()]
    mine = numbers[part::parts] if parts > 1 else numbers
    array = _parse_quickly(lines, mine, width)
    if array is None:
        array = _parse_slowly(name, lines, mine, width, epochs)
    if epochs and array.size:
        negative = np.flatnonzero(array[:, 2] < 0)
        if negative.size:
            i = mine[int(negative[0])]
            raise InputFormatError(
                f"{name}, line {i + 1}: an epoch must be a non-negative integer: {lines[i]!r}", path=name, line=i + 1
            )
    return array


def _check_share(part: int, parts: int) -> None:
    if type(parts) is not int or parts < 1:
        raise InvalidArgument(f"parts must be a positive int, got {parts!r}")
    if type(part) is not int or not 0 <= part < parts:
        raise InvalidArgument(f"part must be an int in 0..{parts - 1}, got {part!r}")


def _read_text(name: str) -> str:
    """The file's text; bytes that are not UTF-8 raise :class:`InputFormatError` naming the line."""
    with open(name, "rb") as handle:
        data = handle.read()
    return _decode(name, data)


def _decode(name: str, data: bytes, start: int = 0, lines_before: Callable[[], int] = lambda: 0) -> str:
    """``data`` (the bytes of file ``name`` from ``start`` on, after ``lines_before()`` newlines) as UTF-8 text, or
    an error naming the line."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = lines_before() + data.count(b"\n", 0, exc.start) + 1
        raise InputFormatError(
            f"{name}, line {line}: not UTF-8 text ({exc.reason} at byte {start + exc.start})", path=name, line=line
        ) from None


_INT64 = np.iinfo(np.int64)


def _parse_quickly(lines: list[str], mine: list[int], width: int) -> Any:
    """The lines ``mine`` parsed by numpy in one pass, or None when any line needs a closer look."""
    if not mine:
        return np.empty((0, width), dtype=np.int64)
    if not all(lines[i].count(",") == width - 1 for i in mine):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            flat = np.fromstring(",".join([lines[i] for i in mine]), dtype=np.int64, sep=",")
        except ValueError:
            return None
    if flat.size != len(mine) * width:
        return None
    # numpy clamps values outside the 64-bit range to its ends: a value there is checked line by line.
    if bool(((flat == _INT64.max) | (flat == _INT64.min)).any()):
        return None
    return flat.reshape(-1, width)


def _parse_slowly(name: str, lines: list[str], mine: list[int], width: int, epochs: bool) -> Any:
    """The lines ``mine`` parsed one by one; the first bad line raises :class:`InputFormatError` naming it."""
    rows = []
    for i in mine:
        fields = lines[i].split(",")
        problem = None
        if len(fields) != width:
            problem = f"expected {width} comma-separated integers, found {len(fields)} field(s)"
        else:
            try:
                row = [int(f) for f in fields]
            except ValueError:
                problem = "fields must be integers"
            else:
                if not all(_INT64.min <= v <= _INT64.max for v in row):
                    problem = "a value is outside the 64-bit integer range"
                elif epochs and row[2] < 0:
                    problem = "an epoch must be a non-negative integer"
        if problem is not None:
            raise InputFormatError(f"{name}, line {i + 1}: {problem}: {lines[i]!r}", path=name, line=i + 1)
        rows.append(row)
    return np.array(rows, dtype=np.int64).reshape(-1, width)


def _read_parquet_edges(name: str, width: int, part: int, parts: int) -> Any:
    """Columns ``src, dst[, epoch]`` of a Parquet file as an ``(n, width)`` int64 array (every ``parts``-th row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = ["src", "dst", "epoch"][:width]
    try:
        table = pq.read_table(name)
    except (pa.ArrowException, OSError) as exc:
        raise InputFormatError(f"{name}: not a readable Parquet file: {exc}", path=name, line=0) from exc
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InputFormatError(f"{name}: no column {', '.join(missing)} (has {table.column_names})", path=name, line=0)
    arrays = []
    for c in columns:
        column = table.column(c)
        if not pa.types.is_integer(column.type) or column.null_count:
            raise InputFormatError(f"{name}: column {c!r} must hold integers without gaps", path=name, line=0)
        arrays.append(column.to_numpy().astype(np.int64))
    array = np.column_stack(arrays) if arrays[0].size else np.empty((0, width), dtype=np.int64)
    return array[part::parts] if parts > 1 else array


def write_table(path: str | os.PathLike[str], names: list[str], rows: Any, *, sep: str = ",") -> None:
    """Write ``rows`` (an int array or a list of tuples) atomically: Parquet for ``*.parquet``, else text lines.

    Text lines join a row's fields with ``sep`` and carry no header; Parquet has the columns ``names``.
    """
    name = os.fspath(path)
    if name.lower().endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns: list[Any]
        if isinstance(rows, np.ndarray):
            columns = [rows[:, i] for i in range(len(names))] if rows.size else [np.empty(0, np.int64)] * len(names)
        else:
            columns = [[row[i] for row in rows] for i in range(len(names))]
        table = pa.table(dict(zip(names, columns, strict=True)))
        with atomic_output(name, "wb") as out:
            pq.write_table(table, out)
        return
    with atomic_output(name) as out:
        if isinstance(rows, np.ndarray):
            np.savetxt(out, rows, fmt="%d", delimiter=sep)
        else:
            out.writelines(sep.join(map(str, row)) + "\n" for row in rows)


def read_words(path: str | os.PathLike[str], *, part: int = 0, parts: int = 1) -> list[str]:
    """The whitespace-separated words of a UTF-8 text file; with ``parts > 1``, those of share ``part``.

    The shares are contiguous byte ranges of about ``size / parts`` bytes each, cut at whitespace, so every
    word is in exactly one share and a worker reads and decodes only its own: the workers of a job read in
    parallel, and each one's words lie together in memory (which counting them touches word by word).
    Undecodable bytes raise :class:`~pytimely.errors.InputFormatError` naming the line.
    """
    _check_share(part, parts)
    name = os.fspath(path)
    if parts == 1:
        return _read_text(name).split()
    with open(name, "rb") as handle:
        info = os.fstat(handle.fileno())
        source: Any = handle
        size = info.st_size
        if not stat.S_ISREG(info.st_mode):
            # A pipe or a device has no size to cut by: read it whole and cut it in memory.
            whole = handle.read()
            source, size = io.BytesIO(whole), len(whole)
        start = _word_boundary(source, size * part // parts, size)
        end = _word_boundary(source, size * (part + 1) // parts, size)
        source.seek(start)
        data = source.read(end - start)
        return _decode(name, data, start, lambda: _newlines_before(source, start)).split()


# What ``str.split()`` splits at among single bytes: a cut there never falls inside a word or a UTF-8 sequence.
_ASCII_SPACE = re.compile(rb"[ \t\n\r\x0b\x0c\x1c-\x1f]")


def _word_boundary(handle: Any, offset: int, size: int, chunk: int = 1 << 16) -> int:
    """The first position at or after ``offset`` that starts with ASCII whitespace (or the end): a share's edge."""
    if offset <= 0:
        return 0
    position = offset
    while position < size:
        handle.seek(position)
        block = handle.read(chunk)
        if not block:
            break
        found = _ASCII_SPACE.search(block)
        if found is not None:
            return position + found.start()
        position += len(block)
    return size


def _newlines_before(source: Any, upto: int) -> int:
    """How many newlines ``source`` (a binary file or buffer) has before byte ``upto`` (to name a line in an error)."""
    source.seek(0)
    return int(source.read(upto).count(b"\n"))


class EpochLines:
    """A text file's lines dealt into epochs of ``per_epoch`` lines, each epoch readable on its own (replayable).

    The file is scanned once for the byte offset where each epoch starts; :meth:`read` seeks there, so a run
    resumed at epoch ``e`` (``Worker.resume_epoch``) reads from ``e`` on without reading what came before,
    and :meth:`offset` is the position to record with a snapshot (:meth:`source` does both). Lines that are
    not UTF-8 raise :class:`~pytimely.errors.InputFormatError` naming the file and line.
    """

    def __init__(self, path: str | os.PathLike[str], per_epoch: int) -> None:
        if type(per_epoch) is not int or per_epoch < 1:
            raise InvalidArgument(f"per_epoch must be a positive int, got {per_epoch!r}")
        self.path = os.fspath(path)
        self.per_epoch = per_epoch
        self._offsets = [0]
        self.lines = 0
        """How many lines the file has."""
        position = 0
        with open(self.path, "rb") as handle:
            for line in handle:
                self.lines += 1
                position += len(line)
                if self.lines % per_epoch == 0:
                    self._offsets.append(position)
        if self.lines % per_epoch:
            self._offsets.append(position)  # the end: where an epoch after the last one starts

    @property
    def epochs(self) -> int:
        """How many epochs the file fills (the last may be short)."""
        return -(-self.lines // self.per_epoch)

    def offset(self, epoch: int) -> int:
        """The byte offset of epoch ``epoch``'s first line."""
        if type(epoch) is not int or not 0 <= epoch <= self.epochs:
            raise InvalidArgument(f"epoch must be an int in 0..{self.epochs}, got {epoch!r}")
        return self._offsets[epoch]

    def source(self, scope: Any, *, name: str = "lines") -> Any:
        """A source sending each worker's share of epoch ``e``'s lines at time ``e``, from the epoch the run
        resumes at (earlier epochs are not read at all); worker 0 records where it stands (the next epoch and
        its byte offset, as :class:`~pytimely.dataflow.state.Positions` of partition 0) in every snapshot."""
        from pytimely.dataflow.operators.builder import OperatorBuilder
        from pytimely.dataflow.state import Positions

        builder = OperatorBuilder(scope, name)
        position = builder.state("position", Positions())
        builder.new_output()
        subgraph = scope.subgraph
        lines = self

        def constructor(caps: list[Any], info: Any) -> Any:
            cap = caps[0]
            epoch = [-1]

            def logic(inputs: Any, outputs: Any) -> None:
                if not cap.valid:
                    return
                if epoch[0] < 0:
                    epoch[0] = min(max(subgraph.resume_epoch or 0, scope.minimum), lines.epochs)
                e = epoch[0]
                if e >= lines.epochs:
                    cap.drop()
                    return
                cap.downgrade(e)
                if not info.may_change(e):
                    return  # a snapshot of an earlier epoch is pending: the position must not run ahead of it
                share = lines.read(e, part=info.worker, parts=info.peers)
                if share:
                    outputs[0].give(cap, share)
                if info.worker == 0:
                    position.set(0, {"epoch": e + 1, "offset": lines.offset(e + 1), "path": lines.path})
                epoch[0] = e + 1
                info.activate()

            return logic

        (stream,) = builder.build(constructor)
        return stream

    def read(self, epoch: int, *, part: int = 0, parts: int = 1) -> list[str]:
        """The lines of ``epoch`` (every ``parts``-th from ``part``), without their line ends."""
        _check_share(part, parts)
        start = self.offset(epoch)
        with open(self.path, "rb") as handle:
            handle.seek(start)
            raw = [handle.readline() for _ in range(self.per_epoch)]
        first = epoch * self.per_epoch
        out = []
        for i, line in enumerate(raw):
            if not line:
                break
            if i % parts != part:
                continue
            try:
                out.append(line.decode("utf-8").rstrip("\r\n"))
            except UnicodeDecodeError as exc:
                raise InputFormatError(
                    f"{self.path}, line {first + i + 1}: not UTF-8 text ({exc.reason})", path=self.path,
                    line=first + i + 1,
                ) from None
        return out

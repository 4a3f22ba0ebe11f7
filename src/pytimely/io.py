"""Reading the example jobs' inputs and writing their outputs: errors name the file and line, outputs are atomic."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from pytimely.errors import InputFormatError

__all__ = ["atomic_output", "read_edges", "read_words", "write_table"]

_HEADERS = {("src", "dst"), ("src", "dst", "epoch")}


def read_edges(path: str | os.PathLike[str], *, epochs: bool = False, part: int = 0, parts: int = 1) -> Any:
    """Integer edges from CSV lines ``src,dst`` (or ``src,dst,epoch``) as an ``(n, 2|3)`` int64 array.

    Blank lines and a ``src,dst[,epoch]`` header are skipped. With ``parts > 1``
    only every ``parts``-th data line starting at ``part`` is returned, so each
    worker can read its own share. A malformed line raises
    :class:`~pytimely.errors.InputFormatError` naming the file and line.
    """
    width = 3 if epochs else 2
    name = os.fspath(path)
    if name.lower().endswith(".parquet"):
        return _read_parquet_edges(name, width, part, parts)
    with open(name, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = 0
    if lines and tuple(c.strip() for c in lines[0].split(",")) in _HEADERS:
        start = 1
    numbers = [i for i in range(start, len(lines)) if lines[i].strip()]
    mine = numbers[part::parts] if parts > 1 else numbers
    ok = all(lines[i].count(",") == width - 1 for i in mine)
    if ok:
        joined = ",".join([lines[i] for i in mine])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            try:
                flat = np.fromstring(joined, dtype=np.int64, sep=",") if mine else np.empty(0, dtype=np.int64)
            except ValueError:
                flat = np.empty(0, dtype=np.int64)
        ok = flat.size == len(mine) * width
        array = flat.reshape(-1, width)
    if not ok:
        for i in mine:
            fields = lines[i].split(",")
            problem = None
            if len(fields) != width:
                problem = f"expected {width} comma-separated integers, found {len(fields)} field(s)"
            else:
                try:
                    [int(f) for f in fields]
                except ValueError:
                    problem = "fields must be integers"
            if problem is not None:
                raise InputFormatError(
                    f"{name}, line {i + 1}: {problem}: {lines[i]!r}", path=name, line=i + 1
                ) from None
        raise InputFormatError(f"{name}: values out of the 64-bit integer range", path=name, line=0)
    return array


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
    """The whitespace-separated words of a UTF-8 text file (every ``parts``-th word from ``part``).

    Undecodable bytes raise :class:`~pytimely.errors.InputFormatError` naming the line.
    """
    name = os.fspath(path)
    with open(name, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputFormatError(f"{name}, line {line}: not valid UTF-8 ({exc.reason})", path=name, line=line) from None
    words = text.split()
    return words if parts == 1 else words[part::parts]


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Write ``path`` under a temporary name in the same directory, renamed to ``path`` only if the block succeeds.

    A failed run leaves no partial output that could pass for a complete one.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    encoding = None if "b" in mode else "utf-8"
    try:
        with open(tmp, mode, encoding=encoding) as out:
            yield out
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise

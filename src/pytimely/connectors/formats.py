"""Reading files as batches, a bounded amount at a time: text lines, CSV and Parquet.

Every reader is a generator of batches: lists of ``str`` for lines, Arrow record batches for CSV and Parquet
(columns typed, no Python object per value). A malformed input raises
:class:`~pytimely.errors.InputFormatError` naming the file and, where the format tells it, the line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pytimely.errors import InputFormatError, InvalidArgument

__all__ = ["MAX_LINE", "Format", "format_of", "read_batches", "read_csv", "read_lines", "read_parquet"]

Format = Literal["lines", "csv", "parquet"]

MAX_LINE = 1 << 20
"""Longest line accepted by the line readers (1 MiB)."""

_CHUNK = 1 << 20


def format_of(path: str | os.PathLike[str]) -> Format:
    """The format a file's suffix names: ``.csv``, ``.parquet``, anything else lines."""
    suffix = Path(path).suffix.lower()
    return "csv" if suffix == ".csv" else "parquet" if suffix == ".parquet" else "lines"


class LineSplitter:
    """Bytes in, complete lines out (without ``\\n`` or ``\\r\\n``): bounded in length, decoded as UTF-8."""

    def __init__(self, source: str, max_line: int = MAX_LINE) -> None:
        self.source = source
        self.max_line = max_line
        self.line = 0
        """How many lines have been given out."""
        self._rest = b""

    def feed(self, chunk: bytes) -> list[str]:
        """The lines ``chunk`` completes."""
        data = self._rest + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._rest = data
            self._check_rest()
            return []
        self._rest = data[cut + 1 :]
        self._check_rest()
        raw = data[:cut].split(b"\n")
        if any(len(r) > self.max_line for r in raw):
            long = next(i for i, r in enumerate(raw) if len(r) > self.max_line)
            raise self._error(self.line + long + 1, f"a line longer than the limit of {self.max_line} bytes")
        lines = self._decode(raw)
        self.line += len(lines)
        return lines

    def finish(self) -> list[str]:
        """The last line, if the input did not end with a newline."""
        if not self._rest:
            return []
        lines = self._decode([self._rest])
        self._rest = b""
        self.line += 1
        return lines

    def _check_rest(self) -> None:
        if len(self._rest) > self.max_line:
            raise self._error(self.line + 1, f"a line longer than the limit of {self.max_line} bytes")

    def _decode(self, raw: list[bytes]) -> list[str]:
        try:
            text = b"\n".join(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.line + b"\n".join(raw).count(b"\n", 0, exc.start) + 1
            raise self._error(line, f"not UTF-8 text ({exc.reason})") from None
        lines = text.split("\n")
        return [s[:-1] if s.endswith("\r") else s for s in lines]

    def _error(self, line: int, what: str) -> InputFormatError:
        return InputFormatError(f"{self.source}, line {line}: {what}", path=self.source, line=line)


def read_lines(path: str | os.PathLike[str], *, max_line: int = MAX_LINE, chunk: int = _CHUNK) -> Iterator[list[str]]:
    """The lines of a UTF-8 text file, a chunk's worth per batch."""
    name = os.fspath(path)
    splitter = LineSplitter(name, max_line)
    try:
        handle = open(name, "rb")  # noqa: SIM115 - closed below, also when the generator is dropped
    except OSError as exc:
        raise InputFormatError(f"{name}: cannot read: {exc.strerror or exc}", path=name) from None
    with handle:
        while True:
            data = handle.read(chunk)
            if not data:
                break
            lines = splitter.feed(data)
            if lines:
                yield lines
    last = splitter.finish()
    if last:
        yield last


def read_csv(
    path: str | os.PathLike[str],
    *,
    column_types: dict[str, Any] | None = None,
    block_size: int = _CHUNK,
) -> Iterator[Any]:
    """Arrow record batches of a CSV file with a header row; a row of the wrong width names its line."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    name = os.fspath(path)
    bad: list[Any] = []

    def invalid(row: Any) -> str:
        bad.append(row)
        return "error"

    try:
        reader = pcsv.open_csv(
            name,
            read_options=pcsv.ReadOptions(block_size=block_size, use_threads=False),
            parse_options=pcsv.ParseOptions(invalid_row_handler=invalid),
            convert_options=pcsv.ConvertOptions(column_types=column_types),
        )
        for batch in reader:
            if batch.num_rows:
                yield batch
    except (pa.ArrowInvalid, pa.ArrowException) as exc:
        if bad:
            row = bad[0]
            # Arrow numbers rows as lines of the file (the header is line 1).
            line = None if row.number is None else int(row.number)
            where = f", line {line}" if line is not None else ""
            raise InputFormatError(
                f"{name}{where}: expected {row.expected_columns} fields, found {row.actual_columns}: {row.text!r}",
                path=name,
                line=line,
            ) from None
        found = re.search(r"Row #(\d+)", str(exc))
        line = int(found.group(1)) if found else None
        where = f", line {line}" if line is not None else ""
        raise InputFormatError(f"{name}{where}: not readable as CSV: {exc}", path=name, line=line) from None
    except OSError as exc:
        raise InputFormatError(f"{name}: cannot read: {exc.strerror or exc}", path=name) from None


def read_parquet(path: str | os.PathLike[str], *, batch_rows: int = 65536) -> Iterator[Any]:
    """Arrow record batches of a Parquet file, ``batch_rows`` at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = os.fspath(path)
    try:
        for batch in pq.ParquetFile(name).iter_batches(batch_size=batch_rows):
            if batch.num_rows:
                yield batch
    except (pa.ArrowException, OSError) as exc:
        raise InputFormatError(f"{name}: not a readable Parquet file: {exc}", path=name) from None


def read_batches(path: str | os.PathLike[str], format: Format | None = None, **options: Any) -> Iterator[Any]:
    """The batches of ``path`` in ``format`` (default: by its suffix)."""
    kind = format_of(path) if format is None else format
    if kind == "lines":
        return read_lines(path, **options)
    if kind == "csv":
        return read_csv(path, **options)
    if kind == "parquet":
        return read_parquet(path, **options)
    raise InvalidArgument(f"format must be 'lines', 'csv' or 'parquet', got {format!r}")

"""Where a streaming run's micro-batches go: the :class:`Sink` protocol, its CSV and Spark-table sinks, and the
local folders they (and the checkpoint) live in.

A sink's ``commit`` is atomic and idempotent per batch id: a micro-batch Spark delivers again after a restart
replaces (or keeps) the same output, so nothing is written twice.
"""

from __future__ import annotations

import csv
import io
import os
import re
import time as _time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytimely.atomic import write_atomic
from pytimely.errors import CheckpointLocationError, PytimelyError, StreamSinkError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CsvDirectorySink", "Sink", "SparkTableSink", "local_folder"]


class Sink(Protocol):
    """Where each micro-batch's output goes; ``commit`` must be atomic and idempotent per batch id."""

    def prepare(self) -> None:
        """Make sure the output can be written, before the first micro-batch (else :class:`StreamSinkError`)."""

    def commit(self, batch_id: int, table: pa.Table) -> None:
        """Make ``table`` the output of ``batch_id``, all of it or none, replacing an earlier attempt's."""


class CsvDirectorySink:
    """Each micro-batch's output as ``DIR/batch-<id>.csv`` (a header, then its rows), renamed into place."""

    def __init__(self, directory: str | os.PathLike[str], *, order_by: Sequence[str] = ()) -> None:
        self.directory = local_folder(directory, "sink", StreamSinkError)
        self.order_by = list(order_by)

    def prepare(self) -> None:
        """Make the folder and check that a file can be written in it."""
        _check_writable(self.directory, "sink")

    def path(self, batch_id: int) -> Path:
        """The file holding ``batch_id``'s output."""
        return self.directory / f"batch-{batch_id:012d}.csv"

    def commit(self, batch_id: int, table: pa.Table) -> None:
        """Write the batch's rows (sorted by ``order_by``) under a temporary name and rename it into place."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.order_by and table.num_rows:
            table = table.sort_by([(c, "ascending") for c in self.order_by])
        write_atomic(self.path(batch_id), _csv(table))


class SparkTableSink:
    """Each micro-batch's output written by Spark as ``DIR/batch_id=<id>/`` (Parquet by default), renamed into place.

    Spark reads ``DIR`` as one table with a ``batch_id`` partition column; hidden attempt directories are
    not part of it. A batch id whose directory exists already holds that batch's output (the dataflow is
    deterministic): it is not written again.
    """

    def __init__(self, spark: Any, directory: str | os.PathLike[str], *, format: str = "parquet") -> None:
        self.spark = spark
        self.directory = local_folder(directory, "sink", StreamSinkError)
        self.format = format

    def prepare(self) -> None:
        """Make the folder and check that a file can be written in it."""
        _check_writable(self.directory, "sink")

    def path(self, batch_id: int) -> Path:
        """The directory holding ``batch_id``'s output."""
        return self.directory / f"batch_id={batch_id}"

    def commit(self, batch_id: int, table: pa.Table) -> None:
        """Write with Spark into a hidden directory, then rename it to the batch's name (unless already there)."""
        import shutil

        final = self.path(batch_id)
        if final.exists():
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        attempt = self.directory / f".batch_id={batch_id}.{os.getpid()}.{_time.monotonic_ns()}.tmp"
        try:
            self.spark.createDataFrame(table).write.format(self.format).save(str(attempt))
            os.rename(attempt, final)
        finally:
            shutil.rmtree(attempt, ignore_errors=True)


def _csv(table: pa.Table) -> bytes:
    """``table`` as CSV with a bare header; text quoted only where it must be (Arrow quotes every string)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    header = ",".join(table.column_names) + "\n"
    if all(pa.types.is_integer(f.type) or pa.types.is_floating(f.type) for f in table.schema):
        buffer = io.BytesIO()
        buffer.write(header.encode("utf-8"))
        pcsv.write_csv(table, buffer, pcsv.WriteOptions(include_header=False))
        return buffer.getvalue()
    text = io.StringIO()
    text.write(header)
    csv.writer(text, lineterminator="\n").writerows(zip(*(c.to_pylist() for c in table.columns), strict=True))
    return text.getvalue().encode("utf-8")


_LOCAL_SCHEMES = ("file", "local")


def local_folder(
    location: str | os.PathLike[str], what: str, error: type[PytimelyError] = CheckpointLocationError
) -> Path:
    """``location`` (a path, ``file:///ABS`` or ``local:///ABS``) as a local folder; another scheme is refused.

    A streaming checkpoint is held with ``flock`` and written by rename, which object stores (``s3://``,
    ``gs://``, ...) do not offer, so such a URL is refused here, before anything is made, with ``error``.
    """
    text = os.fspath(location)
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if match is None:
        return Path(text)
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(text)
    if parts.scheme.lower() not in _LOCAL_SCHEMES:
        raise error(
            f"the {what} {text}: a {parts.scheme}:// location cannot hold it (it needs a local or mounted folder, "
            "with file locks and atomic renames); give a path or a file:// URL"
        )
    if parts.netloc not in ("", "localhost"):
        raise error(f"the {what} {text}: file:// URL of another host {parts.netloc!r}; give a local path")
    return Path(unquote(parts.path))


def _check_writable(folder: Path, what: str) -> None:
    """Make ``folder`` and write (then remove) a probe file in it; any failure is :class:`StreamSinkError`."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".pytimely-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StreamSinkError(f"the {what} {folder} cannot be written: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK):
        raise StreamSinkError(f"the {what} {folder} cannot be written: no permission")

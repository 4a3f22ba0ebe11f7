"""Reading inputs and writing results through Spark: by file extension, once, completely or not at all.

``save`` writes into a hidden sibling of the destination and renames it into
place only when the whole job succeeded, so a failed run leaves no partial
rows behind and a retried run never adds duplicates. With ``retries`` a failed
run is started again from the beginning (a barrier stage cannot resume); the
error that ends the last attempt is raised as ``SparkTaskError`` carrying the
failing task's own message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from pytimely.errors import (
    InputFormatError,
    InvalidArgument,
    SparkError,
    SparkInputError,
    SparkSlotsError,
    SparkTaskError,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["collect", "format_of", "read", "save", "spark_cause", "translate"]

log = logging.getLogger("pytimely.spark")

_FORMATS = {".parquet": "parquet", ".csv": "csv"}


def format_of(path: str) -> str:
    """``parquet`` or ``csv`` by the path's extension, ``text`` for anything else."""
    lowered = path.rstrip("/").lower()
    for ending, name in _FORMATS.items():
        if lowered.endswith(ending):
            return name
    return "text"


def read(spark: SparkSession, path: str, schema: Any = None, *, format: str | None = None) -> DataFrame:
    """``path`` as a DataFrame: Parquet or headerless CSV (with ``schema``) by extension, else lines of text.

    ``format`` (``parquet``, ``csv`` or ``text``) overrides the extension.
    A path Spark cannot find (or read the schema of) is ``SparkInputError`` naming it, not Spark's traceback.
    """
    try:
        return _read(spark, path, schema, format or format_of(path))
    except InputFormatError:
        raise
    except Exception as exc:
        cause = spark_cause(str(exc))
        if cause is None:
            raise
        raise SparkInputError(f"cannot read {path}: {cause}", path=path) from exc


def _read(spark: SparkSession, path: str, schema: Any, kind: str) -> DataFrame:
    """``read`` without the translation of Spark's errors."""
    if kind == "csv":
        if schema is None:
            raise InputFormatError(f"reading CSV {path} needs a schema (the files have no header)")
        return spark.read.csv(path, schema=schema, header=_has_header(path), mode="FAILFAST")
    if kind == "parquet":
        frame = spark.read.parquet(path)
        if schema is not None:
            from pyspark.sql.types import StructType

            struct: Any = StructType.fromDDL(schema) if isinstance(schema, str) else schema
            missing = [f.name for f in struct if f.name not in frame.columns]
            if missing:
                raise InputFormatError(f"{path} has no column {', '.join(missing)} (it has {frame.columns})")
            frame = frame.select(*[frame[f.name].cast(f.dataType).alias(f.name) for f in struct])
        return frame
    return spark.read.text(path)


def _has_header(path: str) -> bool:
    """Whether a local CSV file starts with a line of column names (as the in-process readers allow)."""
    local = path.removeprefix("file://")
    if "://" in local or not os.path.isfile(local):
        return False
    with open(local, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            if line.strip():
                return not any(ch.isdigit() for ch in line.split(",")[0])
    return False


def save(
    frame: DataFrame,
    path: str,
    *,
    format: str | None = None,
    order_by: list[str] | None = None,
    columns: list[Any] | None = None,
    single_file: bool = True,
    retries: int = 0,
    options: dict[str, str] | None = None,
) -> None:
    """Write ``frame`` to ``path`` once, completely or not at all, re-running it up to ``retries`` times.

    ``format`` defaults to the extension (``format_of``); ``single_file`` makes ``path`` one file rather
    than a directory of parts, in ``order_by`` order if given; ``columns`` (names or Column expressions)
    are what is written, taken after the ordering, so a text line can be built from the sorted fields.
    """
    if type(retries) is not int or retries < 0:
        raise InvalidArgument(f"retries must be a non-negative int, got {retries!r}")
    kind = format or format_of(path)
    width = len(columns) if columns is not None else len(frame.columns)
    if kind == "text" and width != 1:
        raise SparkError(f"text output needs exactly one string column, the result has {frame.columns}")
    files = _files_for(frame.sparkSession, path)
    for attempt in range(retries + 1):
        tmp = files.staging()
        kept: DataFrame | None = None
        try:
            result = frame
            # A barrier stage's output cannot be coalesced directly; a shuffle stands between it and the single
            # writing task. A global sort (orderBy) would run the whole computation twice, once to sample
            # the keys for its ranges: one partition sorted within itself needs no sample.
            if single_file:
                result = result.repartition(1)
                if order_by:
                    result = result.sortWithinPartitions(*order_by)
            elif order_by:
                # Several sorted files need ranges, hence a sample: it reads the kept rows, not a second run.
                kept = result = result.persist()
                result = result.orderBy(*order_by)
            if columns is not None:
                result = result.select(*columns)
            writer = result.write.format(kind).mode("error")
            for key, value in (options or {}).items():
                writer = writer.option(key, value)
            writer.save(tmp)
        except Exception as exc:
            if kept is not None:
                kept.unpersist()
            files.delete(tmp)
            error = translate(exc)
            if isinstance(error, SparkSlotsError | SparkInputError) or attempt == retries:
                raise error from exc
            log.warning("run %d of %d failed, running it again: %s", attempt + 1, retries + 1, error)
            continue
        if kept is not None:
            kept.unpersist()
        files.commit(tmp, single_file)
        return


def collect(frame: DataFrame, *, retries: int = 0) -> pa.Table:
    """``frame`` as one Arrow table, re-running it up to ``retries`` times if a task fails."""
    if type(retries) is not int or retries < 0:
        raise InvalidArgument(f"retries must be a non-negative int, got {retries!r}")
    for attempt in range(retries + 1):
        try:
            return frame.toArrow()
        except Exception as exc:
            error = translate(exc)
            if isinstance(error, SparkSlotsError | SparkInputError) or attempt == retries:
                raise error from exc
            log.warning("run %d of %d failed, running it again: %s", attempt + 1, retries + 1, error)
    raise AssertionError("unreachable")


def translate(exc: BaseException) -> SparkError:
    """The pytimely error for a failed Spark job: too few slots, or the failing task's own error message."""
    if isinstance(exc, SparkError):
        return exc
    text = str(exc)
    if "BarrierJobSlotsNumberCheckFailed" in text or "BARRIER_JOB_SLOTS" in text.upper():
        return SparkSlotsError(
            "the barrier stage asks for more tasks than Spark has slots to run at once; ask for fewer processes "
            "or give Spark more slots"
        )
    message = task_message(text)
    if not message.startswith(("pytimely.", "Traceback")) and _RAISED.match(message) is None:
        cause = spark_cause(text)
        if cause is not None:
            read_file = _READ_FILE.search(text)
            path = read_file.group(1) if read_file else None
            return SparkInputError(f"Spark could not read its input: {cause}", path=path)
    return SparkTaskError(f"a pytimely task failed: {message}")


_ERROR_CLASS = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)\] (.*)")
_READ_FILE = re.compile(r"Encountered error while reading file (\S+?)\.?(?:\s|$)")
_WRAPPERS = ("FAILED_READ_FILE", "TASK_WRITE_FAILED", "PYTHON_EXCEPTION")


def spark_cause(text: str) -> str | None:
    """The innermost Spark error class and message in ``text`` (``[MALFORMED_RECORD...] ...``), with its file.

    Spark wraps the cause in errors of its own ("An error occurred while calling o94.save", "Encountered
    error while reading file"); the error class of the innermost cause is what the user can act on.
    """
    found: list[tuple[str, str]] = []
    for line in text.splitlines():
        match = _ERROR_CLASS.search(line)
        if match is not None:
            found.append((match.group(1), match.group(2).split(" SQLSTATE:")[0].strip()))
    if not found:
        return None
    inner = [f for f in found if not f[0].startswith(_WRAPPERS)] or found
    name, message = inner[-1]
    read_file = _READ_FILE.search(text)
    where = f" (file {read_file.group(1)})" if read_file and read_file.group(1) not in message else ""
    return f"[{name}] {message}{where}"


_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): (.*)$")


def task_message(text: str) -> str:
    """The ``Type: message`` line a Python task raised, found in a Spark error's text (else its first line)."""
    lines = text.splitlines()
    found: str | None = None
    in_traceback = False
    for line in lines:
        if "Traceback (most recent call last)" in line:
            in_traceback = True
            continue
        if in_traceback and not line.startswith(" "):
            match = _RAISED.match(line.strip())
            if match and not match.group(1).startswith(("py4j", "org.apache")):
                found = line.strip()
                in_traceback = False
    if found:
        return found
    for line in lines:
        if "Python worker exited unexpectedly" in line or "crashed" in line:
            return line.strip()
    return lines[0].strip() if lines else type(text).__name__


class _Files(Protocol):
    """Where ``save`` stages a write and how it moves the finished one into place."""

    def staging(self) -> str:
        """A fresh hidden sibling of the destination for one attempt's write."""
        ...

    def delete(self, staged: str) -> None:
        """Remove an attempt's staging directory (no error if it is gone)."""
        ...

    def commit(self, staged: str, single_file: bool) -> None:
        """Move a finished write into place: its one part file (``single_file``) or the whole directory."""
        ...


def _files_for(spark: SparkSession, path: str) -> _Files:
    """The driver's Hadoop file system on a classic session; the client's fsspec one on Spark Connect."""
    from pytimely.spark.session import is_connect

    return _ClientFiles(path) if is_connect(spark) else _HadoopFiles(spark, path)


def _staging_name(name: str) -> str:
    return f".{name}.pytimely-{uuid.uuid4().hex}"


class _HadoopFiles:
    """The destination's Hadoop file system, through the driver's JVM (any file system Spark can write)."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        self.jvm_path = jvm.org.apache.hadoop.fs.Path
        hpath = self.jvm_path(path)
        self.fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
        self.dest = self.fs.makeQualified(hpath)

    def staging(self) -> str:
        """A hidden sibling of the destination."""
        return str(self.jvm_path(self.dest.getParent(), _staging_name(self.dest.getName())).toString())

    def delete(self, staged: str) -> None:
        """Remove ``staged`` and all under it."""
        self.fs.delete(self.jvm_path(staged), True)

    def commit(self, staged: str, single_file: bool) -> None:
        """Rename the part file or the directory over the destination."""
        tmp = self.jvm_path(staged)
        source = tmp
        if single_file:
            parts = [s.getPath() for s in self.fs.listStatus(tmp) if s.getPath().getName().startswith("part-")]
            if len(parts) != 1:
                raise SparkError(f"expected one part file in {staged}, found {len(parts)}")
            source = parts[0]
        if self.fs.exists(self.dest):
            self.fs.delete(self.dest, True)
        if not self.fs.rename(source, self.dest):
            raise SparkError(f"could not move the finished output {source.toString()} to {self.dest.toString()}")
        if single_file:
            self.fs.delete(tmp, True)
            # Hadoop's local file system moves a part file's checksum along with it; a lone file needs none.
            checksum = self.jvm_path(self.dest.getParent(), f".{self.dest.getName()}.crc")
            if self.fs.exists(checksum):
                self.fs.delete(checksum, False)


class _ClientFiles:
    """The destination as this client sees it (fsspec): a Connect client has no JVM. The server's executors
    write the staged directory; the client renames it, so both must see the same storage (a shared file
    system, or an object store such as ``s3://``)."""

    def __init__(self, path: str) -> None:
        import fsspec  # type: ignore[import-untyped]

        self.fs, self.dest = fsspec.core.url_to_fs(path)
        self.protocol = path.split("://", 1)[0] + "://" if "://" in path else ""

    def staging(self) -> str:
        """A hidden sibling of the destination, as a URL the server understands."""
        parent, _, name = self.dest.rstrip("/").rpartition("/")
        return f"{self.protocol}{parent}/{_staging_name(name)}"

    def _local(self, url: str) -> str:
        return url.removeprefix(self.protocol) if self.protocol else url

    def delete(self, staged: str) -> None:
        """Remove ``staged`` and all under it."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(self._local(staged), recursive=True)

    def commit(self, staged: str, single_file: bool) -> None:
        """Move the part file or the directory over the destination."""
        tmp = self._local(staged)
        if not self.fs.exists(tmp):
            raise SparkError(
                f"the Spark Connect server wrote {staged}, but this client does not see it: save to storage "
                "both share (a shared file system, or an object store such as s3://)"
            )
        source = tmp
        if single_file:
            parts = [p for p in self.fs.ls(tmp, detail=False) if p.rstrip("/").rpartition("/")[2].startswith("part-")]
            if len(parts) != 1:
                raise SparkError(f"expected one part file in {staged}, found {len(parts)}")
            source = parts[0]
        if self.fs.exists(self.dest):
            self.fs.rm(self.dest, recursive=True)
        self.fs.mv(source, self.dest, recursive=not single_file)
        if single_file:
            self.fs.rm(tmp, recursive=True)

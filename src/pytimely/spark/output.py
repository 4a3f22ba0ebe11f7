"""Reading inputs and writing results through Spark: by file extension, once, completely or not at all.

``save`` writes into a hidden sibling of the destination and renames it into
place only when the whole job succeeded, so a failed run leaves no partial
rows behind and a retried run never adds duplicates. With ``retries`` a failed
run is started again from the beginning (a barrier stage cannot resume); the
error that ends the last attempt is raised as ``SparkTaskError`` carrying the
failing task's own message.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from typing import TYPE_CHECKING, Any

from pytimely.errors import InputFormatError, SparkError, SparkInputError, SparkSlotsError, SparkTaskError

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
        raise ValueError(f"retries must be a non-negative int, got {retries!r}")
    kind = format or format_of(path)
    width = len(columns) if columns is not None else len(frame.columns)
    if kind == "text" and width != 1:
        raise SparkError(f"text output needs exactly one string column, the result has {frame.columns}")
    spark = frame.sparkSession
    fs, hpath = _filesystem(spark, path)
    jvm_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]
    for attempt in range(retries + 1):
        tmp = jvm_path(hpath.getParent(), f".{hpath.getName()}.pytimely-{uuid.uuid4().hex}")
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
            writer.save(tmp.toString())
        except Exception as exc:
            if kept is not None:
                kept.unpersist()
            fs.delete(tmp, True)
            error = translate(exc)
            if isinstance(error, SparkSlotsError | SparkInputError) or attempt == retries:
                raise error from exc
            log.warning("run %d of %d failed, running it again: %s", attempt + 1, retries + 1, error)
            continue
        if kept is not None:
            kept.unpersist()
        _commit(fs, jvm_path, tmp, hpath, single_file)
        return


def collect(frame: DataFrame, *, retries: int = 0) -> pa.Table:
    """``frame`` as one Arrow table, re-running it up to ``retries`` times if a task fails."""
    if type(retries) is not int or retries < 0:
        raise ValueError(f"retries must be a non-negative int, got {retries!r}")
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


def _filesystem(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """The Hadoop file system holding ``path`` and ``path`` as a qualified Hadoop path."""
    hpath = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return fs, fs.makeQualified(hpath)


def _commit(fs: Any, jvm_path: Any, tmp: Any, dest: Any, single_file: bool) -> None:
    """Move a finished write into place: its one part file (``single_file``) or the whole directory."""
    source = tmp
    if single_file:
        parts = [s.getPath() for s in fs.listStatus(tmp) if s.getPath().getName().startswith("part-")]
        if len(parts) != 1:
            raise SparkError(f"expected one part file in {tmp.toString()}, found {len(parts)}")
        source = parts[0]
    if fs.exists(dest):
        fs.delete(dest, True)
    if not fs.rename(source, dest):
        raise SparkError(f"could not move the finished output {source.toString()} to {dest.toString()}")
    if single_file:
        fs.delete(tmp, True)
        # Hadoop's local file system moves a part file's checksum along with it; a lone file needs none.
        checksum = jvm_path(dest.getParent(), f".{dest.getName()}.crc")
        if fs.exists(checksum):
            fs.delete(checksum, False)

"""Structured Streaming micro-batches as the epochs of a stateful pytimely dataflow, exactly once.

``run_stream(build, source, schema, sink=..., checkpoint=CK)`` starts a streaming query on the streaming
DataFrame ``source`` whose ``foreachBatch`` hands every micro-batch to one long-lived dataflow
(:class:`~pytimely.spark.epoch_host.EpochHost`, on the driver): micro-batch ``b`` is epoch ``b`` (or its rows
enter at the epochs of a column the user names), the dataflow's state carries from one micro-batch to the
next, and each micro-batch's output goes to ``sink`` committed under its batch id.

Exactly once across a restart from ``CK``:

* Spark keeps its own checkpoint (source offsets) in ``CK/spark``; pytimely keeps ``CK/pytimely``: the
  query's identity (``query.json``), every micro-batch's input as Arrow (``inputs/``) and a commit per batch
  id (``commits/``), each written under a temporary name and renamed.
* A micro-batch is staged, computed, written to the sink (idempotently: a batch id's output is one file,
  renamed into place), then committed. Spark re-delivers a micro-batch that it did not mark done; a batch id
  already committed is skipped, so nothing is written twice.
* After a restart the dataflow's state must be that after the last committed micro-batch. A
  :class:`StateRestore` rebuilds it; the default, :class:`ReplayRestore`, feeds the staged inputs of the
  committed batches again and drops their output. Durable snapshots can take its place without changing the
  rest (the seam is that Protocol).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import json
import os
import re
import threading
import time as _time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytimely.atomic import write_atomic
from pytimely.errors import (
    CheckpointInUseError,
    CheckpointLocationError,
    CheckpointMismatchError,
    InvalidArgument,
    PytimelyError,
    StreamError,
    StreamFencedError,
    StreamInputError,
    StreamSchemaError,
    StreamSinkError,
)
from pytimely.spark.epoch_host import Build, EpochHost
from pytimely.spark.hosting import ship_by_value, to_record_batch

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.recovery import Recovery
    from pytimely.spark.watermark import Watermark

__all__ = [
    "BatchTiming",
    "CsvDirectorySink",
    "ReplayRestore",
    "Sink",
    "SparkTableSink",
    "StateRestore",
    "StreamCheckpoint",
    "StreamHandler",
    "StreamRun",
    "local_folder",
    "run_stream",
]

_FORMAT = 2
_BATCH = re.compile(r"^batch-(\d{12})\.(arrow|done)$")


class Sink(Protocol):
    """Where each micro-batch's output goes; ``commit`` must be atomic and idempotent per batch id."""

    def prepare(self) -> None:
        """Make sure the output can be written, before the first micro-batch (else :class:`StreamSinkError`)."""

    def commit(self, batch_id: int, table: pa.Table) -> None:
        """Make ``table`` the output of ``batch_id``, all of it or none, replacing an earlier attempt's."""


class StateRestore(Protocol):
    """Brings a fresh dataflow to the state after the committed micro-batches (replay now, snapshots later)."""

    def restore(self, host: EpochHost, committed: Sequence[int]) -> None:
        """Put ``host`` in the state it had after the micro-batches ``committed`` (in order)."""


@dataclass(frozen=True, slots=True)
class BatchTiming:
    """Where one micro-batch's time went on the driver, in seconds."""

    batch_id: int
    rows_in: int
    rows_out: int
    collect_s: float
    stage_s: float
    compute_s: float
    sink_s: float
    late: int = 0
    """Rows of an epoch already complete, dropped or sent aside by the query's watermark."""

    @property
    def total_s(self) -> float:
        """The micro-batch's time inside ``foreachBatch``."""
        return self.collect_s + self.stage_s + self.compute_s + self.sink_s


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


def _recorded_jvm(text: str) -> int | None:
    """The JVM pid an earlier run wrote in the lock file, if it parses."""
    try:
        value = json.loads(text).get("jvm") if text.strip() else None
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _await_exit(pid: int, wait: float, root: Path) -> None:
    """Wait for an earlier run's JVM to exit; one still writing the checkpoint after ``wait`` s is refused."""
    deadline = _time.monotonic() + wait
    while _alive(pid):
        if _time.monotonic() > deadline:
            raise CheckpointInUseError(
                f"the checkpoint {root}: the Spark JVM (pid {pid}) of an earlier run still runs after {wait:g} s; "
                "stop it before running again"
            )
        _time.sleep(0.1)


def _jvm_pid(session: Any) -> int | None:
    """The pid of a classic session's JVM (``None`` where the client has no JVM, as with Spark Connect)."""
    try:
        return int(session._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:  # no gateway, or a JVM without ProcessHandle: nothing to wait for
        return None


class StreamCheckpoint:
    """pytimely's half of a streaming checkpoint: the query's identity, staged inputs and commits."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.root = local_folder(directory, "checkpoint")
        self.spark = self.root / "spark"
        self.own = self.root / "pytimely"
        self.inputs = self.own / "inputs"
        self.state = self.own / "state"
        self.committed = self.own / "committed.json"

    @contextlib.contextmanager
    def locked(self, jvm_pid: int | None = None, *, wait: float = 30.0) -> Iterator[None]:
        """Hold the checkpoint for one run: a second run on it fails at once with ``CheckpointInUseError``.

        The lock is ``flock`` on ``CK/pytimely.lock``, released by the kernel when its process dies. A killed
        run's Spark JVM outlives its Python for a moment and may still write Spark's half of the checkpoint, so
        the lock also records the JVM's pid, and the next run waits up to ``wait`` seconds for it to exit.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "pytimely.lock"
        with open(path, "a+", encoding="utf-8") as file:
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                file.seek(0)
                raise CheckpointInUseError(
                    f"the checkpoint {self.root} is in use by another run ({file.read().strip() or 'unknown'}); "
                    "stop it or give another checkpoint directory"
                ) from None
            file.seek(0)
            earlier = _recorded_jvm(file.read())
            if earlier is not None and earlier != jvm_pid:
                _await_exit(earlier, wait, self.root)
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"pid": os.getpid(), "jvm": jvm_pid}) + "\n")
            file.flush()
            try:
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)

    def open(self, identity: dict[str, Any]) -> list[int]:
        """Check (or record) that the checkpoint is this query's; return the committed batch ids in order.

        Staged inputs of batches that were never committed are removed: Spark delivers them again.
        """
        where = self.own / "query.json"
        if where.exists():
            try:
                recorded = json.loads(where.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CheckpointMismatchError(f"{where} is not a pytimely stream checkpoint: {exc}") from exc
            _check_identity(recorded, identity, where)
        elif self.spark.exists() and any(self.spark.iterdir()):
            raise CheckpointMismatchError(
                f"{self.root} holds a Spark checkpoint but no pytimely query record ({where}): it belongs to "
                "another query; give a new checkpoint directory"
            )
        else:
            self.own.mkdir(parents=True, exist_ok=True)
            write_atomic(where, json.dumps(identity, indent=1, sort_keys=True) + "\n")
        last = self.last_committed()
        if last >= 0 and not (self.spark / "offsets").exists():
            raise CheckpointMismatchError(
                f"{self.root} records {last + 1} committed micro-batch(es) but Spark's checkpoint "
                f"({self.spark}) is gone: the query would read its input again from the start"
            )
        committed = list(range(last + 1))
        for batch in self._ids(self.inputs, "arrow"):
            if batch not in set(committed):
                self.input_path(batch).unlink(missing_ok=True)
        return committed

    @staticmethod
    def _ids(directory: Path, kind: str) -> list[int]:
        if not directory.exists():
            return []
        found = (_BATCH.match(p.name) for p in directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m is not None and m.group(2) == kind)

    def last_committed(self) -> int:
        """The last micro-batch whose output is in the sink (-1 before the first)."""
        try:
            text = self.committed.read_text(encoding="utf-8")
        except FileNotFoundError:
            return -1
        except OSError as exc:
            raise CheckpointMismatchError(f"{self.committed} cannot be read: {exc.strerror or exc}") from None
        try:
            batch = json.loads(text)["batch"]
        except (ValueError, KeyError, TypeError):
            batch = None
        if type(batch) is not int or batch < 0:
            raise CheckpointMismatchError(f"{self.committed} is not a pytimely commit record: {text[:200]!r}")
        return batch

    def recovery(self, identity: dict[str, Any]) -> Recovery:
        """The recovery store of the query's state (``CK/pytimely/state``): a snapshot per micro-batch, two kept."""
        from pytimely.recovery import Recovery, SnapshotPolicy

        parameters = {"input": identity["input"], "output": identity["output"]}
        # Unchanged bins are written again every 4th snapshot: a payload file is needed by at most 4 snapshots,
        # so the checkpoint holds a few copies of the state at most, whatever the history.
        policy = SnapshotPolicy(every_epochs=1, keep=2, rewrite_every=4)
        return Recovery(self.state, job=identity["query"], policy=policy, parameters=parameters)

    def input_path(self, batch_id: int) -> Path:
        """Where ``batch_id``'s input is staged."""
        return self.inputs / f"batch-{batch_id:012d}.arrow"

    def stage(self, batch_id: int, table: pa.Table) -> None:
        """Keep ``batch_id``'s input (Arrow IPC), so a restart can rebuild the state from it."""
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        self.inputs.mkdir(parents=True, exist_ok=True)
        write_atomic(self.input_path(batch_id), sink.getvalue().to_pybytes())

    def staged(self, batch_id: int) -> pa.Table:
        """``batch_id``'s staged input."""
        import pyarrow as pa

        with pa.memory_map(str(self.input_path(batch_id))) as source:
            return pa.ipc.open_file(source).read_all()

    def commit(self, batch_id: int) -> None:
        """Record that ``batch_id``'s output is in the sink (one small file, replaced: it does not grow)."""
        write_atomic(self.committed, json.dumps({"batch": batch_id, "at": _time.time()}) + "\n")

    def take_ownership(self) -> str:
        """Make this run the checkpoint's owner (a fresh token in ``owner.json``); an earlier owner can no longer
        commit (:meth:`fenced_commit`). Called by a run that holds the checkpoint's lock."""
        import secrets

        token = secrets.token_hex(16)
        self.own.mkdir(parents=True, exist_ok=True)
        write_atomic(self.own / "owner.json", json.dumps({"owner": token, "pid": os.getpid()}) + "\n")
        return token

    def owner(self) -> str | None:
        """The token of the run that owns the checkpoint now (``None`` before any)."""
        try:
            return str(json.loads((self.own / "owner.json").read_text(encoding="utf-8"))["owner"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointMismatchError(f"{self.own / 'owner.json'} is not a pytimely owner record: {exc}") from None

    def check_owner(self, owner: str, batch_id: int) -> None:
        """Raise :class:`StreamFencedError` unless ``owner`` still owns the checkpoint."""
        now = self.owner()
        if now != owner:
            raise StreamFencedError(
                f"micro-batch {batch_id}: the checkpoint {self.root} was taken over by another run (owner "
                f"{now}, this run {owner}); this run stops without committing"
            )

    @contextlib.contextmanager
    def fenced_commit(self, owner: str, batch_id: int) -> Iterator[None]:
        """Hold the commit lock (``CK/pytimely/commit.lock``) while ``owner`` still owns the checkpoint, else raise
        :class:`StreamFencedError`: a run that was taken over (a killed client's query still running on a Spark
        Connect server, a second client) never commits."""
        self.own.mkdir(parents=True, exist_ok=True)
        with open(self.own / "commit.lock", "a+", encoding="utf-8") as file:
            fcntl.flock(file, fcntl.LOCK_EX)
            try:
                self.check_owner(owner, batch_id)
                yield
            finally:
                fcntl.flock(file, fcntl.LOCK_UN)

    def next_generation(self) -> int:
        """A new host generation of this checkpoint (one more than any before; the caller holds the lock)."""
        path = self.own / "generation.json"
        try:
            last = int(json.loads(path.read_text(encoding="utf-8"))["generation"])
        except FileNotFoundError:
            last = 0
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointMismatchError(f"{path} is not a pytimely generation record: {exc}") from None
        self.own.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"generation": last + 1}) + "\n")
        hosts = self.own / "hosts"
        if hosts.exists():
            for old in hosts.iterdir():
                old.unlink(missing_ok=True)  # earlier generations' addresses: their processes are gone
        return last + 1


def _check_identity(recorded: dict[str, Any], identity: dict[str, Any], where: Path) -> None:
    """Refuse a checkpoint recorded by another query, naming what differs (the input's schema most plainly)."""
    if recorded.get("format") != identity["format"]:
        raise CheckpointMismatchError(f"{where} has format {recorded.get('format')!r}, expected {identity['format']}")
    if recorded.get("input") != identity["input"]:
        raise StreamSchemaError(
            f"the source's schema changed: the checkpoint {where} was made for rows {recorded.get('input')}, "
            f"the source now gives {identity['input']}"
        )
    for key in ("query", "output", "epoch"):
        if recorded.get(key) != identity[key]:
            raise CheckpointMismatchError(
                f"the checkpoint {where} belongs to another query: its {key} is {recorded.get(key)!r}, "
                f"this query's is {identity[key]!r}"
            )


class ReplayRestore:
    """Rebuild the state by feeding the committed micro-batches' staged inputs again, their output dropped."""

    def __init__(self, checkpoint: StreamCheckpoint, epoch: str | None = None) -> None:
        self.checkpoint = checkpoint
        self.epoch = epoch

    def restore(self, host: EpochHost, committed: Sequence[int]) -> None:
        """Feed every committed batch's input in order (the dataflow is deterministic given its inputs)."""
        for batch_id in committed:
            table = self.checkpoint.staged(batch_id)
            if self.epoch is None:
                host.feed(table, time=batch_id)
            else:
                host.feed(table, epoch=self.epoch)


Check = Callable[["pa.Table", int], "pa.Table"]


class StreamHandler:
    """The ``foreachBatch`` function: stage, compute, write and commit each micro-batch once."""

    def __init__(
        self,
        build: Build,
        schema: Any,
        sink: Sink,
        checkpoint: StreamCheckpoint,
        identity: dict[str, Any],
        *,
        workers: int = 1,
        epoch: str | None = None,
        check: Check | None = None,
        restore: StateRestore | None = None,
        step_timeout: float = 600.0,
        watermark: Watermark | None = None,
    ) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType

        if isinstance(schema, str):
            schema = StructType.fromDDL(schema)
        if not isinstance(schema, StructType):
            raise InvalidArgument(f"schema must be a DDL string or a StructType, got {type(schema).__name__}")
        self.schema = to_arrow_schema(schema)
        self.sink = sink
        self.checkpoint = checkpoint
        self.epoch = epoch
        self.check = check
        self.watermark = watermark
        self.input_schema: str = identity["input"]
        self.describe = f"pytimely dataflow {identity['build']} (query {identity['query']})"
        self.committed = checkpoint.open(identity)
        self.snapshots = restore is None and epoch is None
        """State from snapshots in the checkpoint (batch ids as epochs); else rebuilt by ``restore`` from staged
        inputs (an event-time ``epoch`` column: a micro-batch's rows of an epoch still open are in no snapshot)."""
        started = _time.perf_counter()
        if self.snapshots:
            last = self.committed[-1] if self.committed else -1
            recovery = checkpoint.recovery(identity)
            self.host = EpochHost(build, workers, step_timeout=step_timeout, recovery=recovery, resume_at=last)
        else:
            delay = 0 if watermark is None else watermark.delay
            self.host = EpochHost(build, workers, step_timeout=step_timeout, delay=delay)
            restorer = restore if restore is not None else ReplayRestore(checkpoint, epoch)
            restorer.restore(self.host, self.committed)
        self.restore_s = _time.perf_counter() - started
        self.timings: list[BatchTiming] = []
        self.failure: PytimelyError | None = None
        self.skipped = 0
        self._lock = threading.Lock()

    @property
    def last_committed(self) -> int:
        """The last batch id whose output is committed (-1 before the first)."""
        return self.committed[-1] if self.committed else -1

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Process micro-batch ``batch_id`` of the query (Spark calls this from ``foreachBatch``)."""
        with self._lock:
            if self.failure is not None:
                raise self.failure
            try:
                self._process(frame, batch_id)
            except PytimelyError as exc:
                self.failure = exc
                raise
            except Exception as exc:
                self.failure = StreamError(f"micro-batch {batch_id}: {type(exc).__name__}: {exc}")
                raise self.failure from exc

    def _process(self, frame: DataFrame, batch_id: int) -> None:
        if batch_id <= self.last_committed:
            self.skipped += 1
            return  # re-delivered after a restart: its output is already in the sink
        if batch_id != self.last_committed + 1:
            raise CheckpointMismatchError(
                f"micro-batch {batch_id} arrived after {self.last_committed}: the commits of the batches between "
                "are missing from the checkpoint"
            )
        clock = _time.perf_counter
        started = clock()
        if frame.schema.simpleString() != self.input_schema:
            raise StreamSchemaError(
                f"micro-batch {batch_id}: the source's schema changed from {self.input_schema} to "
                f"{frame.schema.simpleString()}"
            )
        with _job_description(frame, f"{self.describe}: epoch {batch_id}"):
            table = _collect(frame, batch_id)
        if self.check is not None:
            table = self.check(table, batch_id)
        late = 0
        if self.watermark is not None and self.epoch is not None:
            table, late = self.watermark.admit(table, self.epoch, self.host.frontier, batch_id)
        collected = clock()
        if not self.snapshots:
            self.checkpoint.stage(batch_id, table)
        staged = clock()
        output = self.host.feed(table, time=batch_id) if self.epoch is None else self.host.feed(table, epoch=self.epoch)
        result = self._table(output)
        if self.snapshots:
            # The state after this batch is durable before its output is: a restart after the sink's commit
            # resumes from this snapshot, one before it from the snapshot before (Spark delivers the batch again).
            self.host.await_snapshot(batch_id)
        computed = clock()
        self.sink.commit(batch_id, result)
        self.checkpoint.commit(batch_id)
        self.committed.append(batch_id)
        done = clock()
        self.timings.append(
            BatchTiming(batch_id, table.num_rows, result.num_rows, collected - started, staged - collected,
                        computed - staged, done - computed, late)
        )

    def _table(self, output: list[tuple[int, Any]]) -> pa.Table:
        import pyarrow as pa

        name = self.epoch if self.epoch is not None else "epoch"
        batches = [to_record_batch(batch, self.schema, time=t, epoch=name) for t, batch in output]
        return pa.Table.from_batches(batches, schema=self.schema)


@contextlib.contextmanager
def _job_description(frame: DataFrame, text: str) -> Iterator[None]:
    """Name this thread's Spark jobs ``text`` in the Spark UI while inside (a Connect session has no context)."""
    from pytimely.spark.session import is_connect

    session = frame.sparkSession
    if is_connect(session):
        yield
        return
    context = session.sparkContext
    earlier = context.getLocalProperty("spark.job.description")
    context.setJobDescription(text)
    try:
        yield
    finally:
        context.setJobDescription(earlier)  # type: ignore[arg-type]


def _collect(frame: DataFrame, batch_id: int) -> pa.Table:
    """The micro-batch's rows as an Arrow table on the driver; a file that does not parse is a typed error."""
    try:
        return frame.toArrow()
    except Exception as exc:
        text = str(exc)
        if "cannot be converted" in text or "DATA_TYPE_MISMATCH" in text or "SCHEMA_MISMATCH" in text:
            raise StreamSchemaError(f"micro-batch {batch_id}: a file's columns do not fit: {_cause(text)}") from exc
        if "MALFORMED" in text.upper() or "Malformed" in text or "NumberFormat" in text or "parse" in text.lower():
            raise StreamInputError(f"micro-batch {batch_id}: a file does not parse: {_cause(text)}") from exc
        raise StreamError(f"micro-batch {batch_id}: reading it failed: {_cause(text)}") from exc


def _cause(text: str) -> str:
    """The most telling lines of a Spark error: the malformed record and the file, without the JVM stack."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    telling = [line for line in lines if "MALFORMED" in line.upper() or "file" in line.lower()]
    chosen = (telling or lines)[:3]
    return " | ".join(line[:400] for line in chosen)


@dataclass
class StreamRun:
    """What a streaming run did: the micro-batches it processed, their timings, the time to restore state."""

    processed: list[int]
    skipped: int
    restore_s: float
    restored_batches: int
    timings: list[BatchTiming] = field(default_factory=list)
    trigger_ms: dict[int, float] = field(default_factory=dict)
    """Spark's own time for each micro-batch that had rows (``durationMs.triggerExecution``), by batch id."""
    restarts: int = 0
    """How many times the hosted processes were started again after a failure (executor-hosted runs)."""
    driver_bytes: dict[int, int] = field(default_factory=dict)
    """Executor-hosted runs: bytes the control side received per micro-batch (counts and answers, no rows)."""

    @property
    def late(self) -> int:
        """Late rows the watermark dropped or sent aside over the micro-batches processed."""
        return sum(t.late for t in self.timings)


def run_stream(
    build: Build,
    source: DataFrame,
    schema: Any,
    *,
    sink: Sink,
    checkpoint: str | os.PathLike[str] | StreamCheckpoint,
    query: str = "pytimely",
    workers: int = 1,
    epoch: str | None = None,
    check: Check | None = None,
    restore: StateRestore | None = None,
    available_now: bool = False,
    processing_time: str | None = None,
    timeout: float | None = None,
    step_timeout: float = 600.0,
    watermark: Watermark | None = None,
    processes: int | None = None,
    host: str | None = None,
) -> StreamRun:
    """Run ``build`` over the streaming DataFrame ``source``, one epoch per micro-batch, output to ``sink``.

    ``schema`` is the output's schema (DDL or ``StructType``); a column named ``epoch`` (or like ``epoch=``)
    is filled with the batch's epoch when the output lacks it. ``query`` names the query: a checkpoint made
    by another name, output schema, epoch setting or input schema is refused. ``check(table, batch_id)``
    may refuse a micro-batch before anything of it is kept (raising a typed error); it returns the rows to
    keep. With ``available_now`` the query processes what
    the source holds and stops; otherwise it runs (every ``processing_time``, e.g. ``"1 second"``) until
    ``timeout`` seconds pass. With ``epoch=``, ``watermark`` (:class:`~pytimely.spark.watermark.Watermark`)
    drops late rows or sends them aside instead of stopping the query. A failure stops the query and raises
    its typed error; committed micro-batches stay committed and the next run continues after them.

    ``processes=N`` hosts the dataflow on the executors (``host="executors"``, the default once ``processes`` is
    given): N pytimely processes of ``workers`` workers each, the tasks of one background barrier job, fed by one
    Spark job per micro-batch (:mod:`pytimely.spark.stream_control`). ``host="driver"`` (or no ``processes``)
    keeps the dataflow in this process.
    """
    hosted = _hosting(processes, host, workers, epoch, restore)
    if not source.isStreaming:
        raise InvalidArgument("run_stream needs a streaming DataFrame (spark.readStream...)")
    if epoch is not None and epoch not in source.columns:
        raise InvalidArgument(f"epoch column {epoch!r} is not among the source's columns {source.columns}")
    if watermark is not None and epoch is None:
        raise InvalidArgument("a watermark needs an event-time column: run_stream(..., epoch=COLUMN, watermark=...)")
    name = getattr(build, "__qualname__", None) or type(build).__name__
    if not isinstance(checkpoint, StreamCheckpoint):
        checkpoint = StreamCheckpoint(checkpoint)
    with checkpoint.locked(_jvm_pid(source.sparkSession)):
        return _run_locked(
            build, source, schema, sink, checkpoint, query, name, workers=workers, epoch=epoch, check=check,
            restore=restore, step_timeout=step_timeout, available_now=available_now,
            processing_time=processing_time, timeout=timeout, watermark=watermark,
            processes=processes if hosted else None,
        )


def _hosting(processes: int | None, host: str | None, workers: int, epoch: str | None, restore: Any) -> bool:
    """Whether the dataflow runs on the executors; a setting that does not fit is refused here."""
    from pytimely.spark.stream_control import check_layout

    check_layout(processes, workers)
    if host not in (None, "executors", "driver"):
        raise InvalidArgument(f"host must be 'executors' or 'driver', got {host!r}")
    if host == "executors" and processes is None:
        raise InvalidArgument("host='executors' needs processes=N")
    hosted = processes is not None and host != "driver"
    if hosted and (epoch is not None or restore is not None):
        raise InvalidArgument("a dataflow hosted on the executors takes batch ids as epochs and restores from "
                              "snapshots: epoch= and restore= need host='driver'")  # fmt: skip
    return hosted


def _run_locked(
    build: Build,
    source: DataFrame,
    schema: Any,
    sink: Sink,
    checkpoint: StreamCheckpoint,
    query: str,
    name: str,
    *,
    workers: int,
    epoch: str | None,
    check: Check | None,
    restore: StateRestore | None,
    step_timeout: float,
    available_now: bool,
    processing_time: str | None,
    timeout: float | None,
    watermark: Watermark | None = None,
    processes: int | None = None,
) -> StreamRun:
    """``run_stream`` once the checkpoint is held."""
    from pytimely.spark.session import is_connect

    connect = is_connect(source.sparkSession)
    if connect and isinstance(schema, str):
        schema = source.sparkSession.createDataFrame([], schema).schema  # the server parses DDL for the client
    identity = _identity(query, source, schema, epoch, name)
    if watermark is not None:
        identity["epoch"] = f"{epoch}; {watermark.describe()}"
    if processes is not None:
        from pytimely.spark.stream_control import run_hosted

        return run_hosted(
            build, source, schema, sink, checkpoint, identity, processes=processes, workers=workers, check=check,
            available_now=available_now, processing_time=processing_time, timeout=timeout,
        )  # fmt: skip
    make = partial(StreamHandler, build, schema, sink, checkpoint, identity, workers=workers, epoch=epoch,
                   check=check, restore=restore, step_timeout=step_timeout, watermark=watermark)  # fmt: skip
    function: Callable[[DataFrame, int], None]
    if connect:
        # Spark Connect calls foreachBatch in one Python process of the server for the query's life: the
        # dataflow is made there at the first micro-batch and carries the state from batch to batch. The
        # checkpoint is checked here first, so a mismatch stops the run before the query starts.
        ship_by_value(build)
        restored = len(checkpoint.open(identity))
        handler = None
        function = ServerSideHandler(make)
    else:
        handler = make()
        restored = len(handler.committed)
        function = handler
    if watermark is not None:
        watermark.prepare()
    sink.prepare()  # after the checkpoint is found to be this query's, before Spark writes anything of it
    running = _start_query(source, function, checkpoint, query, available_now, processing_time)
    try:
        _await_query(running, query, timeout, None if handler is None else lambda: handler.failure)
    finally:
        if running.isActive:
            running.stop()
        if handler is not None:
            handler.host.release()
    triggers = trigger_times(running)
    if handler is None:
        # The handler lived in the server's Python process: its timings stay there.
        return StreamRun(sorted(triggers), 0, 0.0, restored, [], triggers)
    if handler.failure is not None:
        raise handler.failure
    processed = [t.batch_id for t in handler.timings]
    return StreamRun(processed, handler.skipped, handler.restore_s, restored, list(handler.timings), triggers)


def _start_query(
    source: DataFrame,
    function: Callable[[DataFrame, int], None],
    checkpoint: StreamCheckpoint,
    query: str,
    available_now: bool,
    processing_time: str | None,
) -> Any:
    """Start the streaming query that calls ``function`` for each micro-batch; a failure to start is typed."""
    writer = source.writeStream.foreachBatch(function).option("checkpointLocation", str(checkpoint.spark))
    writer = writer.queryName(f"{query}-{os.getpid()}")
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif processing_time is not None:
        writer = writer.trigger(processingTime=processing_time)
    try:
        return writer.start()
    except Exception as exc:
        raise _typed(str(exc)) or StreamError(
            f"the streaming query {query!r} did not start (checkpoint {checkpoint.root}): {_cause(str(exc))}"
        ) from None


def _await_query(
    running: Any, query: str, timeout: float | None, failure: Callable[[], PytimelyError | None] | None
) -> None:
    """Wait for the query to end (or ``timeout``); its failure as the handler's typed error where it has one."""
    try:
        if timeout is not None:
            running.awaitTermination(max(1, round(timeout)))
        else:
            running.awaitTermination()
    except Exception as exc:
        known = None if failure is None else failure()
        if known is not None:
            raise known from None
        raise _typed(str(exc)) or StreamError(f"the streaming query {query!r} failed: {_cause(str(exc))}") from exc


class ServerSideHandler:
    """The ``foreachBatch`` function on Spark Connect: makes its :class:`StreamHandler` at the first micro-batch,
    in the server's Python process, and keeps it there for the query's life."""

    def __init__(self, make: Callable[[], StreamHandler]) -> None:
        self.make = make
        self.handler: StreamHandler | None = None

    def __call__(self, frame: DataFrame, batch_id: int) -> None:
        """Process micro-batch ``batch_id``."""
        if self.handler is None:
            self.handler = self.make()
        self.handler(frame, batch_id)


_TYPED = re.compile(r"pytimely\.errors\.(\w+): (.*)")


def _typed(text: str) -> PytimelyError | None:
    """The pytimely error a query failed with on the server (its traceback's last ``pytimely.errors.X: ...``)."""
    import pytimely.errors as errors

    found = None
    for line in text.splitlines():
        match = _TYPED.search(line)
        if match is not None:
            found = match
    if found is None:
        return None
    kind = getattr(errors, found.group(1), None)
    if not (isinstance(kind, type) and issubclass(kind, PytimelyError)):
        return None
    try:
        return kind(found.group(2))
    except TypeError:  # an error class that takes more than a message
        return StreamError(f"{found.group(1)}: {found.group(2)}")


def trigger_times(query: Any) -> dict[int, float]:
    """Spark's time for each recent micro-batch of ``query`` that had rows, in milliseconds, by batch id."""
    times: dict[int, float] = {}
    for progress in query.recentProgress:
        if progress.numInputRows:
            times[int(progress.batchId)] = float(progress.durationMs.get("triggerExecution", 0.0))
    return times


def _identity(query: str, source: DataFrame, schema: Any, epoch: str | None, build: str) -> dict[str, Any]:
    """What makes a checkpoint this query's: its name, its rows in and out, how epochs are assigned."""
    from pyspark.sql.types import StructType

    out = StructType.fromDDL(schema) if isinstance(schema, str) else schema
    return {
        "format": _FORMAT,
        "query": query,
        "input": source.schema.simpleString(),
        "output": out.simpleString(),
        "epoch": epoch if epoch is not None else "batch id",
        "build": build,
    }

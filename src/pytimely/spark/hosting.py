"""A pytimely dataflow inside one Spark barrier stage: DataFrame in, DataFrame out.

``run_dataflow(build, data, schema)`` turns ``data`` into ``processes``
partitions and runs them as one barrier stage (``mapInArrow(...,
barrier=True)``). Each task is one pytimely process with ``workers`` workers.
The tasks meet once: each binds a listening socket and announces its address
to a small registry on the driver (:mod:`pytimely.spark.rendezvous`), which
answers every task with all the addresses as soon as the last one arrived
(``meeting="gather"`` uses Spark's ``BarrierTaskContext.allGather`` instead,
for clusters whose executors cannot reach the driver on a port of its own;
it costs about a second). From then on they talk over pytimely's own
authenticated TCP layer. The cluster secret is made on the driver, fresh for
every run, and travels to the executors inside the task closure, that is over
Spark's own RPC: in local mode that is loopback inside one machine; on a
cluster it crosses the network, protected only as well as Spark protects its
RPC (``spark.authenticate`` with ``spark.network.crypto.enabled``; without
them anyone who can read the traffic between driver and executors can read
the secret, and with it join or forge this run's frames).

Every worker builds ``build(stream)`` on a stream of the partition's Arrow
record batches (its share of them); the returned stream's batches become the
output rows, converted to ``schema``. With ``epoch=COLUMN`` the rows enter at
the timestamp in that column (non-negative integers, any order within a
partition), and an output schema with that column gets each batch's timestamp
in it when the batch does not carry it.

With ``recovery=DIR`` (and ``epoch=``) every process snapshots its workers' declared state and output
at epoch boundaries into ``DIR/<run id>`` (:mod:`pytimely.recovery`), and the barrier stage is followed by
a shuffle, so that Spark can retry it: a retried stage resumes from the last epoch every worker committed,
and the rows of the epochs before it come from the snapshots, exactly once (see ``docs/spark.md``).

With ``figures=`` (:class:`~pytimely.spark.figures.Figures`) every process reports its records and the
time of each phase back to the driver; the stage's job carries a readable description in Spark's UI.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import time as _time
import weakref
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.config import Config
from pytimely.errors import (
    BatchKindError,
    InputFormatError,
    InvalidArgument,
    SparkConnectError,
    SparkError,
    SparkExecutorSetupError,
    SparkSlotsError,
    StoreNotWritableError,
)
from pytimely.execute import execute, run_process
from pytimely.spark.rendezvous import Ticket, meet, registry
from pytimely.spark.session import concurrent_slots, is_connect, master_of, slots_of, wait_for_slots

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.dataflow.stream import Stream
    from pytimely.spark.figures import Figures
    from pytimely.worker import Worker

__all__ = ["check_executors", "run_dataflow", "ship_by_value", "to_record_batch"]

Build = Callable[["Stream[Any]"], "Stream[Any]"]


def run_dataflow(
    build: Build,
    data: DataFrame,
    schema: Any,
    *,
    processes: int | None = None,
    workers: int = 1,
    epoch: str | None = None,
    heartbeat: float = 0.5,
    timeout: float = 10.0,
    meeting: str | None = None,
    meeting_timeout: float = 120.0,
    slot_wait: float = 30.0,
    figures: Figures | None = None,
    description: str | None = None,
    recovery: str | os.PathLike[str] | None = None,
    snapshot_every: int = 1,
) -> DataFrame:
    """The rows ``build`` produces from ``data``, run as one barrier stage of ``processes`` x ``workers``.

    ``schema`` is the output's Spark schema (DDL string or ``StructType``). ``processes`` defaults to the
    session's task slots (local mode) or its default parallelism. The tasks find each other through the
    driver's registry (``meeting="driver"``, the default on a classic session, waiting at most
    ``meeting_timeout`` seconds for the last one) or through Spark's ``allGather`` (``meeting="gather"``, the
    only way on a Spark Connect session, whose client executors cannot reach). The result is lazy, like any
    DataFrame.

    Before anything runs, the session must offer ``processes`` task slots at once (waiting up to
    ``slot_wait`` seconds for a cluster's executors to register), else ``SparkSlotsError``; and pytimely must
    be importable on the executors, else ``SparkExecutorSetupError`` saying how to install it there.

    ``figures`` gathers each process's records and phase times on the driver (see
    :mod:`pytimely.spark.figures`). ``description`` (by default one naming ``build`` and the layout) becomes
    the job description of this thread's next Spark jobs (``setJobDescription``), so the barrier stage is
    named in Spark's UI when an action runs it.

    ``recovery`` (a folder every executor can reach, or an fsspec URL such as ``s3://bucket/prefix``; needs
    ``epoch``) makes a retried stage resume instead of starting over: the state the operators ``build``
    makes declare (``state_machine``, windows, ...) and the output so far are snapshotted every
    ``snapshot_every`` epochs under ``recovery/<run id>`` (a fresh run id per call; acting on the returned
    DataFrame again reads the committed rows instead of computing them). The store is checked writable here,
    before anything runs.
    """
    from pyspark.sql.types import StructType

    spark = data.sparkSession
    if isinstance(schema, str):
        # A Connect client has no JVM to parse DDL with: the server parses it.
        schema = spark.createDataFrame([], schema).schema if is_connect(spark) else StructType.fromDDL(schema)
    if not isinstance(schema, StructType):
        raise TypeError(f"schema must be a DDL string or a StructType, got {type(schema).__name__}")
    if epoch is not None and epoch not in data.columns:
        raise InputFormatError(f"epoch column {epoch!r} is not among the input columns {data.columns}")
    if processes is not None and (type(processes) is not int or processes < 1):
        raise InvalidArgument(f"processes must be a positive int, got {processes!r}")
    if type(workers) is not int or workers < 1:
        raise InvalidArgument(f"workers must be a positive int, got {workers!r}")
    connect = is_connect(spark)
    if meeting is None:
        meeting = "gather" if connect else "driver"
    if meeting not in ("driver", "gather"):
        raise InvalidArgument(f"meeting must be 'driver' or 'gather', got {meeting!r}")
    if connect and meeting == "driver":
        raise InvalidArgument(
            "meeting='driver' needs a classic session: on Spark Connect the tasks meet through allGather"
        )
    if connect and figures is not None:
        raise SparkConnectError("figures= needs a classic session (Spark Connect has no accumulators)")
    run_store = None
    if recovery is not None:
        if epoch is None:
            raise InvalidArgument("recovery needs epoch=COLUMN: snapshots are taken at epoch boundaries")
        if type(snapshot_every) is not int or snapshot_every < 1:
            raise InvalidArgument(f"snapshot_every must be a positive int, got {snapshot_every!r}")
        run_store = _run_store(recovery)
    arrow_schema = _arrow_schema(schema, spark.conf.get("spark.sql.session.timeZone") or "UTC")
    local = slots_of(spark) is not None
    # Up front, on any master: a barrier stage larger than the slots would otherwise wait for Spark's own
    # check (minutes by default) before failing.
    slots = wait_for_slots(spark, processes, slot_wait)
    if processes is None:
        processes = slots
    if processes > slots:
        raise SparkSlotsError(
            f"{processes} pytimely processes need {processes} Spark task slots at once, but the session "
            f"({master_of(spark)}) has {slots}"
            + ("" if local else f" (after waiting {slot_wait:g} s for executors)")
            + f"; ask for fewer processes or give Spark more slots (local[{processes}], or more executor cores)"
        )
    check_executors(spark)
    ship_by_value(build)
    secret = secrets.token_bytes(32)
    ticket: Ticket | None = None
    if meeting == "driver" and processes > 1:
        host = "127.0.0.1" if local else spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")
        ticket = registry(host).ticket(secret, meeting_timeout)
    task = _Task(
        build=build,
        processes=processes,
        workers=workers,
        epoch=epoch,
        schema=arrow_schema,
        secret=secret,
        ticket=ticket,
        local=local,
        heartbeat=heartbeat,
        timeout=timeout,
        figures=None if figures is None else figures.accumulator,
        recovery=run_store,
        snapshot_every=snapshot_every,
    )
    name = getattr(build, "__qualname__", None) or type(build).__name__
    if not connect:
        spark.sparkContext.setJobDescription(
            description
            if description is not None
            else f"pytimely dataflow {name}: {processes} process(es) x {workers} worker(s), one barrier stage"
        )
    # A Connect client cannot ask a DataFrame for its partitions (no RDD): it always repartitions.
    if connect or data.rdd.getNumPartitions() != processes:
        data = data.repartition(processes)
    if epoch is not None:
        data = data.sortWithinPartitions(epoch)
    result = data.mapInArrow(task, schema, barrier=True)
    if run_store is not None:
        # Spark retries a failed barrier stage only when its output is shuffled (a ResultStage is not
        # recoverable): the shuffle is what lets a retry resume from the snapshots.
        result = result.repartition(processes)
    if ticket is not None:
        # The registry accepts this run's announcements for as long as its DataFrame can be acted on.
        weakref.finalize(result, registry(ticket.host).forget, ticket.run)
    return result


def _run_store(recovery: str | os.PathLike[str]) -> str:
    """This call's own store under ``recovery`` (``<recovery>/run-<token>``), checked writable now."""
    from pytimely.recovery.store import open_store

    base = os.fspath(recovery).rstrip("/")
    if "://" not in base or base.startswith("file://"):
        folder = base.removeprefix("file://")
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise StoreNotWritableError(f"recovery store {base}: cannot make it: {exc.strerror or exc}", base) from None
    location = f"{base}/run-{secrets.token_hex(8)}"
    open_store(location).check_writable()
    return location


def _arrow_schema(schema: Any, timezone: str) -> pa.Schema:
    """The Arrow schema of Spark ``schema``, timestamps in the session's time zone; a type Arrow lacks is named."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for field in schema:
        try:
            kind = to_arrow_type(field.dataType, timezone=timezone)
        except Exception as exc:
            raise InvalidArgument(
                f"output column {field.name!r} of type {field.dataType.simpleString()} cannot be carried by "
                f"Arrow ({type(exc).__name__}: {exc})"
            ) from exc
        fields.append(pa.field(field.name, kind, nullable=field.nullable))
    return pa.schema(fields)


_CHECKED: dict[str, str] = {}
"""Spark applications whose executors were found to import pytimely, and the interpreter they use."""


def check_executors(spark: Any, module: str = "pytimely") -> None:
    """Fail at once, saying how to fix it, when the executors' Python cannot import ``module``.

    Otherwise the barrier stage's tasks would fail one by one, retried, before the cause surfaced. Checked
    once per Spark application with a small ordinary job, one task per slot.
    """
    connect = is_connect(spark)
    application = spark.conf.get("spark.app.id", "") if connect else spark.sparkContext.applicationId
    key = f"{application}:{module}"
    if key in _CHECKED:
        return
    tasks = max(1, concurrent_slots(spark))

    def probe(_: Any) -> Iterator[str]:
        # Defined here, so it travels by value: unpickling it needs no pytimely on the executor.
        import importlib
        import sys

        try:
            importlib.import_module(module)
        except ImportError as exc:
            yield f"missing\t{sys.executable}\t{type(exc).__name__}: {exc}"
            return
        yield f"ok\t{sys.executable}\t"

    if connect:
        answers = _probe_by_frame(spark, tasks, probe)
    else:
        context = spark.sparkContext
        context.setJobDescription(f"pytimely: can the executors import {module}?")
        try:
            answers = context.parallelize(range(tasks), tasks).mapPartitions(probe).collect()
        finally:
            context.setJobDescription(None)
    missing = [a.split("\t") for a in answers if a.startswith("missing")]
    if missing:
        _, python, error = missing[0]
        raise SparkExecutorSetupError(
            f"the Spark executors' Python ({python}) cannot import {module} ({error}): install it there "
            f"(`{python} -m pip install pytimely`), point PYSPARK_PYTHON (or spark.pyspark.python) at an "
            f"interpreter that has it, or ship it with spark.submit.pyFiles"
        )
    _CHECKED[key] = answers[0].split("\t")[1] if answers else ""


def _probe_by_frame(spark: Any, tasks: int, probe: Callable[[Any], Iterator[str]]) -> list[str]:
    """Run ``probe`` in ``tasks`` tasks through the DataFrame API (a Connect client has no RDDs)."""

    def answer(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"answer": list(probe(None))})

    rows = spark.range(0, tasks, 1, tasks).mapInArrow(answer, "answer string").toArrow()
    return [str(a) for a in rows.column("answer").to_pylist()]


def ship_by_value(build: Build) -> None:
    """Send the module that defines ``build`` with the task, so executors need not be able to import it.

    Jobs are scripts and test modules that Spark's Python workers cannot import by name; libraries
    (pytimely itself, and what it builds on) are installed there and travel by reference.
    """
    name = getattr(build, "__module__", None) or type(build).__module__
    module = sys.modules.get(name)
    if module is None or name == "__main__" or name.split(".")[0] in _INSTALLED:
        return
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]


_INSTALLED = frozenset({"pytimely", "pyspark", "numpy", "pyarrow", "pandas", "builtins", "functools"})


class _Task:
    """What every barrier task runs: meet the others, run this process's workers, hand back the rows."""

    def __init__(
        self,
        *,
        build: Build,
        processes: int,
        workers: int,
        epoch: str | None,
        schema: pa.Schema,
        secret: bytes,
        ticket: Ticket | None,
        local: bool,
        heartbeat: float,
        timeout: float,
        figures: Any = None,
        recovery: str | None = None,
        snapshot_every: int = 1,
    ) -> None:
        self.build = build
        self.recovery = recovery
        self.snapshot_every = snapshot_every
        self.figures = figures
        self.processes = processes
        self.workers = workers
        self.epoch = epoch
        self.schema = schema
        self.secret = secret
        self.ticket = ticket
        self.local = local
        self.heartbeat = heartbeat
        self.timeout = timeout

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import BarrierTaskContext

        context = BarrierTaskContext.get()
        process = context.partitionId()
        clock = _time.perf_counter
        started = clock()
        # The whole partition is read before the computation starts: the workers take their shares of it.
        inputs = [b for b in batches if b.num_rows]
        shares = _shares(inputs, self.workers, self.epoch)
        read = clock()
        met = read
        epochs: list[int] = []
        if self.recovery is not None:
            # Every worker commits the same epochs: those of any partition.
            here = sorted({t for share in shares for t, _ in share})
            if self.processes == 1:
                epochs = here
            else:
                everyone = context.allGather(json.dumps(here))
                epochs = sorted({t for text in everyone for t in json.loads(text)})
        if self.processes == 1:
            results = execute(self._job(shares, 0, epochs), self.workers, recovery=self._recovery())
        else:
            host = "127.0.0.1" if self.local else context.getTaskInfos()[process].address.rsplit(":", 1)[0]
            listener = socket.create_server((host, 0), backlog=max(16, self.processes))
            try:
                address = f"{host}:{listener.getsockname()[1]}"
                if self.ticket is None:
                    addresses = context.allGather(address)
                else:
                    stage = f"{context.stageId()}.{context.attemptNumber()}"
                    addresses = meet(
                        self.ticket, stage, process, self.processes, address, attempt=context.taskAttemptId()
                    )
                hosts = tuple((a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in addresses)
                config = Config(
                    workers=self.workers,
                    processes=self.processes,
                    process=process,
                    hosts=hosts,
                    bind=host,
                    secret=self.secret,
                    heartbeat=self.heartbeat,
                    timeout=self.timeout,
                )
            except BaseException:
                listener.close()
                raise
            met = clock()
            job = self._job(shares, config.first_worker, epochs)
            results = run_process(job, config, listener=listener, recovery=self._recovery())
        ran = clock()
        converting = 0.0
        records_out = 0
        for captured in results:
            for time, batch in captured:
                mark = clock()
                converted = to_record_batch(batch, self.schema, time=time, epoch=self.epoch)
                converting += clock() - mark
                if converted.num_rows:
                    records_out += converted.num_rows
                    yield converted
        if self.figures is not None:
            self.figures.add({
                process: {
                    "records_in": float(sum(b.num_rows for b in inputs)),
                    "records_out": float(records_out),
                    "read_s": read - started,
                    "meet_s": met - read,
                    "run_s": ran - met,
                    "convert_s": converting,
                }
            })

    def _recovery(self) -> Any:
        """This run's :class:`~pytimely.recovery.Recovery`, or ``None``."""
        if self.recovery is None:
            return None
        from pytimely.recovery import Recovery, SnapshotPolicy

        name = getattr(self.build, "__qualname__", None) or type(self.build).__name__
        return Recovery(self.recovery, job=f"spark {name}", policy=SnapshotPolicy(every_epochs=self.snapshot_every))

    def _job(
        self, shares: list[list[tuple[int, Any]]], first: int, epochs: list[int]
    ) -> Callable[[Worker], list[Any]]:
        if self.recovery is not None:
            return partial(_durable_job, self.build, shares, first, epochs)
        build = self.build

        def job(worker: Worker) -> list[Any]:
            def dataflow(scope: Any) -> tuple[Any, Any]:
                handle, stream = scope.new_input(name="spark")
                out = build(stream)
                if out is None or not hasattr(out, "capture"):
                    raise TypeError(f"build must return the output Stream, returned {type(out).__name__}")
                return handle, out.capture()

            handle, captured = worker.dataflow(dataflow)
            for time, batch in shares[worker.index - first]:
                if time > handle.time:
                    handle.advance_to(time)
                handle.send_batch(batch)
            handle.close()
            return captured  # type: ignore[no-any-return]

        return job


def _durable_job(
    build: Callable[..., Any], shares: list[list[tuple[int, Any]]], first: int, epochs: list[int], worker: Worker
) -> list[Any]:
    """Feed this worker's share epoch by epoch; the runtime snapshots the declared state and the capture.

    In a retried stage the state and the captured output of the committed epochs come back before the first
    step, and what the worker sends again of those epochs is dropped: it returns every batch once.
    """

    def dataflow(scope: Any) -> tuple[Any, Any, Any]:
        handle, stream = scope.new_input(name="spark")
        out = build(stream)
        if out is None or not hasattr(out, "capture"):
            raise TypeError(f"build must return the output Stream, returned {type(out).__name__}")
        return handle, out.probe(), out.capture()

    handle, probe, captured = worker.dataflow(dataflow)
    mine: dict[int, list[Any]] = {}
    for t, batch in shares[worker.index - first]:
        mine.setdefault(t, []).append(batch)
    for epoch in epochs:
        if epoch > handle.time:
            handle.advance_to(epoch)
        for batch in mine.get(epoch, ()):
            handle.send_batch(batch)
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    worker.step_while(lambda: not probe.done())
    return captured  # type: ignore[no-any-return]


def _shares(batches: list[pa.RecordBatch], workers: int, epoch: str | None) -> list[list[tuple[int, Any]]]:
    """Each local worker's ``(time, record batch)`` list: an even slice of every batch (per epoch if given)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    pieces: list[tuple[int, pa.RecordBatch]] = []
    if epoch is None:
        # Spark hands over small batches (10,000 rows by default); one batch per worker saves a pass through
        # the dataflow per batch.
        if len(batches) > 1:
            batches = [_one_batch(pa.Table.from_batches(batches))]
        pieces = [(0, b) for b in batches]
    elif batches:
        table = pa.Table.from_batches(batches).combine_chunks()
        column = table.column(epoch)
        if not pa.types.is_integer(column.type):
            raise InputFormatError(f"epoch column {epoch!r} must hold integers, holds {column.type}")
        if column.null_count:
            raise InputFormatError(f"epoch column {epoch!r} has {column.null_count} empty values")
        if len(column) and pc.min(column).as_py() < 0:
            raise InputFormatError(f"epoch column {epoch!r} has negative values (timestamps start at 0)")
        table = table.sort_by(epoch).combine_chunks()
        whole = _one_batch(table)
        values = whole.column(epoch).to_numpy()
        # Rows are sorted by epoch: cut where the value changes, one piece per epoch.
        cuts = (np.flatnonzero(np.diff(values)) + 1).tolist()
        pieces = [
            (int(values[s]), whole.slice(s, e - s)) for s, e in zip([0, *cuts], [*cuts, len(values)], strict=True)
        ]
    shares: list[list[tuple[int, Any]]] = [[] for _ in range(workers)]
    for time, batch in pieces:
        step = -(-batch.num_rows // workers)
        for k in range(workers):
            part = batch.slice(k * step, step)
            if part.num_rows:
                shares[k].append((time, part))
    return shares


def _one_batch(table: pa.Table) -> pa.RecordBatch:
    """``table`` as a single record batch (its columns' chunks joined)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([c.combine_chunks() for c in table.columns], schema=table.schema)


def to_record_batch(batch: Any, schema: pa.Schema, *, time: Any = None, epoch: str | None = None) -> pa.RecordBatch:
    """``batch`` (Arrow batch or table, numpy array, list of tuples or dicts) as a record batch of ``schema``.

    Columns are matched by name for Arrow batches and dicts, by position otherwise; a column named
    ``epoch`` that the batch lacks is filled with ``time``.
    """
    import pyarrow as pa

    names = schema.names
    fill = epoch if epoch is not None and epoch in names else None
    columns: dict[str, Any]
    try:
        kind = container.kind_of(batch).name
    except BatchKindError as exc:
        raise SparkError(f"cannot turn an output batch of type {type(batch).__name__} into rows of {names}") from exc
    if kind not in ("arrow", "numpy", "list"):  # a kind added by the user: its records as a list
        batch, kind = list(container.records(batch)), "list"
    if kind == "arrow":
        columns = {n: batch.column(n) for n in batch.schema.names}
    elif kind == "numpy":
        array = batch.reshape(-1, 1) if batch.ndim == 1 else batch
        positional = [n for n in names if n != fill or array.shape[1] == len(names)]
        if array.shape[1] != len(positional):
            raise SparkError(
                f"an output batch of {array.shape[1]} columns does not fit the schema {names} "
                f"({len(positional)} columns expected)"
            )
        columns = {n: array[:, i] for i, n in enumerate(positional)}
    else:
        if batch and isinstance(batch[0], dict):
            columns = {n: [row.get(n) for row in batch] for n in names if n != fill or fill in batch[0]}
        else:
            width = len(batch[0]) if batch else len(names)
            positional = [n for n in names if n != fill or width == len(names)]
            if any(len(row) != len(positional) for row in batch):
                raise SparkError(f"an output row does not have the {len(positional)} fields of the schema {names}")
            columns = {n: [row[i] for row in batch] for i, n in enumerate(positional)}
    length = len(next(iter(columns.values()))) if columns else 0
    arrays = []
    for field in schema:
        if field.name in columns:
            values = columns[field.name]
        elif field.name == fill:
            values = [time] * length
        else:
            raise SparkError(f"output column {field.name!r} is missing from a batch with columns {list(columns)}")
        try:
            if isinstance(values, pa.Array | pa.ChunkedArray):
                arrays.append(values.cast(field.type))
            else:
                arrays.append(pa.array(values, type=field.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise SparkError(f"output column {field.name!r} cannot be {field.type}: {exc}") from exc
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)

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

import os
import secrets
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from pytimely.errors import (
    InputFormatError,
    InvalidArgument,
    SparkConnectError,
    SparkExecutorSetupError,
    SparkSlotsError,
    StoreNotWritableError,
)
from pytimely.spark.barrier_task import BarrierTask, Build
from pytimely.spark.record_batches import _arrow_schema, to_record_batch
from pytimely.spark.rendezvous import Ticket, registry
from pytimely.spark.session import concurrent_slots, is_connect, master_of, slots_of, wait_for_slots

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from pytimely.spark.figures import Figures

__all__ = ["check_executors", "run_dataflow", "ship_by_value", "to_record_batch"]

def run_dataflow(
    build: Build, data: DataFrame, schema: Any, *, processes: int | None = None, workers: int = 1,
    epoch: str | None = None, heartbeat: float = 0.5, timeout: float = 10.0, meeting: str | None = None,
    meeting_timeout: float = 120.0, slot_wait: float = 30.0, figures: Figures | None = None,
    description: str | None = None, recovery: str | os.PathLike[str] | None = None, snapshot_every: int = 1,
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
    spark = data.sparkSession
    connect = is_connect(spark)
    schema = _spark_schema(spark, schema)
    _check_layout(data, epoch, processes, workers)
    meeting = _meeting(meeting, connect, figures)
    run_store = None if recovery is None else _checked_store(recovery, epoch, snapshot_every)
    arrow_schema = _arrow_schema(schema, spark.conf.get("spark.sql.session.timeZone") or "UTC")
    local = slots_of(spark) is not None
    processes = _processes(spark, processes, slot_wait, local)
    check_executors(spark)
    ship_by_value(build)
    secret = secrets.token_bytes(32)
    ticket = _ticket(spark, secret, meeting_timeout, local) if meeting == "driver" and processes > 1 else None
    task = BarrierTask(
        build=build, processes=processes, workers=workers, epoch=epoch, schema=arrow_schema, secret=secret,
        ticket=ticket, local=local, heartbeat=heartbeat, timeout=timeout,
        figures=None if figures is None else figures.accumulator, recovery=run_store, snapshot_every=snapshot_every,
    )  # fmt: skip
    if not connect:
        name = getattr(build, "__qualname__", None) or type(build).__name__
        layout = f"{name}: {processes} process(es) x {workers} worker(s), one barrier stage"
        spark.sparkContext.setJobDescription(description if description is not None else f"pytimely dataflow {layout}")
    result = _barrier_stage(data, task, schema, processes, epoch, connect, durable=run_store is not None)
    if ticket is not None:
        # The registry accepts this run's announcements for as long as its DataFrame can be acted on.
        weakref.finalize(result, registry(ticket.host).forget, ticket.run)
    return result


def _ticket(spark: Any, secret: bytes, meeting_timeout: float, local: bool) -> Ticket:
    """This run's ticket at the driver's registry, where the tasks announce their addresses to each other."""
    host = "127.0.0.1" if local else spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1")
    return registry(host).ticket(secret, meeting_timeout)


def _spark_schema(spark: Any, schema: Any) -> Any:
    """The output's ``StructType`` from a DDL string or a ``StructType``; anything else is a ``TypeError``."""
    from pyspark.sql.types import StructType

    if isinstance(schema, str):
        # A Connect client has no JVM to parse DDL with: the server parses it.
        schema = spark.createDataFrame([], schema).schema if is_connect(spark) else StructType.fromDDL(schema)
    if not isinstance(schema, StructType):
        raise InvalidArgument(f"schema must be a DDL string or a StructType, got {type(schema).__name__}")
    return schema


def _check_layout(data: DataFrame, epoch: str | None, processes: int | None, workers: int) -> None:
    """Refuse an epoch column the input lacks, or a layout that is not positive ints."""
    if epoch is not None and epoch not in data.columns:
        raise InputFormatError(f"epoch column {epoch!r} is not among the input columns {data.columns}")
    if processes is not None and (type(processes) is not int or processes < 1):
        raise InvalidArgument(f"processes must be a positive int, got {processes!r}")
    if type(workers) is not int or workers < 1:
        raise InvalidArgument(f"workers must be a positive int, got {workers!r}")


def _meeting(meeting: str | None, connect: bool, figures: Figures | None) -> str:
    """How the tasks meet (``"driver"`` on a classic session by default, ``"gather"`` on Spark Connect)."""
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
    return meeting


def _checked_store(recovery: str | os.PathLike[str], epoch: str | None, snapshot_every: int) -> str:
    """The run's recovery store, once ``epoch`` and ``snapshot_every`` are found to allow one."""
    if epoch is None:
        raise InvalidArgument("recovery needs epoch=COLUMN: snapshots are taken at epoch boundaries")
    if type(snapshot_every) is not int or snapshot_every < 1:
        raise InvalidArgument(f"snapshot_every must be a positive int, got {snapshot_every!r}")
    return _run_store(recovery)


def _processes(spark: Any, processes: int | None, slot_wait: float, local: bool) -> int:
    """How many processes run (the slots by default); more than the session's task slots is refused."""
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
    return processes


def _barrier_stage(
    data: DataFrame, task: BarrierTask, schema: Any, processes: int, epoch: str | None, connect: bool, *, durable: bool
) -> DataFrame:
    """``data`` in ``processes`` partitions (sorted by ``epoch``) through ``task`` as one barrier stage."""
    # A Connect client cannot ask a DataFrame for its partitions (no RDD): it always repartitions.
    if connect or data.rdd.getNumPartitions() != processes:
        data = data.repartition(processes)
    if epoch is not None:
        data = data.sortWithinPartitions(epoch)
    result = data.mapInArrow(task, schema, barrier=True)
    if durable:
        # Spark retries a failed barrier stage only when its output is shuffled (a ResultStage is not
        # recoverable): the shuffle is what lets a retry resume from the snapshots.
        result = result.repartition(processes)
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

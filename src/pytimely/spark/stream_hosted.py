"""The hosted processes of a streaming query, seen from the control side.

:class:`HostedDataflow` starts the hosting job (one barrier job of ``processes`` tasks, run by a background
thread for the query's life, see :mod:`pytimely.spark.stream_host`), finds the processes' feed ports under the
checkpoint, and for each micro-batch runs the feed job (:mod:`pytimely.spark.stream_control`), then closes the
epoch on every process and collects the names of their output parts. A failure of the hosting job, a lost
connection or a silent process is a typed error within the deadlines.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
import time as _time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.errors import (
    CheckpointFileError,
    CheckpointMismatchError,
    PytimelyError,
    SparkSlotsError,
    StreamFeedError,
    StreamHostError,
    StreamInputError,
    StreamSchemaError,
)
from pytimely.spark.stream_control import Sender, counts_schema
from pytimely.spark.stream_feed import FeedLink, Kind, dial
from pytimely.spark.stream_host import HostPlan, HostTask, read_hosts

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from pytimely.spark.epoch_output import EpochOutput
    from pytimely.spark.watermark import EventTime

__all__ = ["HostedDataflow", "checkpoint_failure", "stop_published"]

log = logging.getLogger("pytimely.spark.streaming")


class HostedDataflow:
    """The hosted processes of one generation, seen from the control side: start, feed an epoch, stop."""

    generation = 0
    owner: str | None = None
    """The run that owns the checkpoint (its processes stop once another run does)."""
    exchanged = 0
    """Data bytes the processes' workers sent to each other so far in this generation (the cluster's counters, as
    of the last epoch's close): with rows routed to their owners, the first exchange adds nothing."""
    received = 0
    """Bytes of results and answers this side received for the last epoch (counts and part names only)."""
    late = 0
    """Late rows of the last micro-batch (event time)."""
    frontier: int | None = None
    """The frontier the last micro-batch moved to (event time)."""

    def __init__(
        self,
        spark: Any,
        build: Callable[..., Any],
        own: Path,
        *,
        processes: int,
        workers: int,
        schema: pa.Schema,
        job: str,
        parameters: dict[str, Any],
        describe: str,
        start_timeout: float = 120.0,
        close_timeout: float = 600.0,
        failure_wait: float = 60.0,
        output: EpochOutput | None = None,
        secret: bytes | None = None,
        key: str | None = None,
        idle_timeout: float | None = 600.0,
        column: str | None = None,
        files_key: bytes | None = None,
    ) -> None:
        self.spark = spark
        self.key = key
        """The input column the dataflow's first exchange is keyed by: each row is sent to the process owning its
        key's bin (``None``: rows are spread evenly)."""
        self.column = column
        """The event-time column (``None``: batch ids are the epochs)."""
        self.files_key = files_key or secrets.token_bytes(32)
        """The checkpoint's key: the files the processes leave under it (held rows, parts) are signed with it
        (``None``: a key of this object's own, for files no later run reads)."""
        self.idle_timeout = idle_timeout
        """Seconds without a message from this side after which the processes stop by themselves."""
        self.output = output
        self.run_secret = secret
        """The run's secret for every generation (made by the client, so it can stop the processes on Spark
        Connect); ``None``: a fresh one per generation."""
        self.failure_wait = failure_wait
        """Seconds a lost connection waits for the hosting job to fail (Spark's own deadline to notice)."""
        self.build = build
        self.own = own
        self.processes = processes
        self.workers = workers
        self.schema = schema
        self.job = job
        self.parameters = parameters
        self.describe = describe
        self.start_timeout = start_timeout
        self.close_timeout = close_timeout
        self.feeds: list[str] = []
        self._control: list[FeedLink] = []
        """This side's connection to each process of the generation (for closing epochs), made at the first close."""
        self._secret = b""
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self._group = ""
        self.timing: dict[str, Any] = {}
        """Where the last epoch's time went: the feed job, the close, and each process's wait, compute, write."""

    def start(self, generation: int, resume_at: int, held_from: int = -1) -> None:
        """Start generation ``generation`` of the hosted processes, restored at ``resume_at``; wait for their ports."""
        from pytimely.spark.session import is_connect, slots_of, wait_for_slots

        slots = wait_for_slots(self.spark, self.processes, 30.0)
        if self.processes + 1 > slots:
            raise SparkSlotsError(f"{self.processes} hosted processes need {self.processes + 1} task slots at once "
                                  f"(one for the micro-batches' feed jobs); the session has {slots}")  # fmt: skip
        self._drop_control()
        self.generation = generation
        log.info("%s: starting generation %d of the hosted processes (owner %s), resuming after micro-batch %d",
                 self.describe, generation, self.owner, resume_at)  # fmt: skip
        self._secret = self.run_secret or secrets.token_bytes(32)
        self._failure = None
        plan = HostPlan(
            build=self.build, processes=self.processes, workers=self.workers, generation=generation,
            secret=self._secret, own=str(self.own), schema=self.schema, job=self.job, parameters=self.parameters,
            resume_at=resume_at, local=slots_of(self.spark) is not None or is_connect(self.spark),
            close_timeout=self.close_timeout, output=self.output, owner=self.owner, key=self.key,
            idle_timeout=self.idle_timeout, column=self.column, held_from=held_from, files_key=self.files_key,
        )  # fmt: skip
        self._group = f"pytimely-hosted-{secrets.token_hex(4)}-g{generation}"
        self._thread = threading.Thread(target=self._host, args=(HostTask(plan),), daemon=True,
                                        name=f"pytimely-hosting-g{generation}")  # fmt: skip
        self._thread.start()
        deadline = _time.monotonic() + self.start_timeout
        while True:
            feeds = read_hosts(self.own, generation, self._secret)
            if feeds is not None:
                self.feeds = feeds
                return
            self._raise_if_failed()
            if _time.monotonic() > deadline:
                self.cancel()
                raise StreamHostError(f"the hosted processes of generation {generation} did not start within "
                                      f"{self.start_timeout:g} s")  # fmt: skip
            _time.sleep(0.05)

    def _host(self, task: HostTask) -> None:
        """The background thread: run the hosting job until the processes stop (or fail)."""
        from pytimely.spark.session import is_connect

        try:
            if is_connect(self.spark):
                self.spark.addTag(self._group)
            else:
                context = self.spark.sparkContext
                context.setJobGroup(self._group, f"{self.describe}: hosted processes, generation {self.generation}",
                                    interruptOnCancel=True)  # fmt: skip
            frame = self.spark.range(0, self.processes, 1, self.processes)
            frame.mapInArrow(task, "process int", barrier=True).collect()
        except BaseException as exc:
            self._failure = exc

    @property
    def running(self) -> bool:
        """Whether the hosting job still runs (its processes stop by themselves after ``idle_timeout``)."""
        return self._thread is not None and self._thread.is_alive()

    def _raise_if_failed(self) -> None:
        if self._thread is not None and not self._thread.is_alive() and self._failure is not None:
            self.raise_if_fatal()
            raise StreamHostError(f"the hosted processes of generation {self.generation} failed: "
                                  f"{_short(self._failure)}") from None  # fmt: skip

    def raise_if_fatal(self) -> None:
        """Raise the checkpoint file error the hosting job failed with, if it did (:func:`checkpoint_failure`):
        a new generation would read the same file, so no restart can get past it."""
        fatal = None if self._failure is None else checkpoint_failure(str(self._failure))
        if fatal is not None:
            raise fatal from None

    def epoch(
        self, frame: DataFrame, epoch: int, check: Callable[..., Any] | None = None, event: EventTime | None = None
    ) -> list[str]:
        """Send micro-batch ``frame`` as ``epoch`` to the processes, complete it there; the output parts' paths.

        With ``event`` the rows enter at their event-time epochs; :attr:`late` and :attr:`frontier` then tell how
        many were late and the frontier the micro-batch moved to."""
        from pytimely.spark.stream_handler import _job_description

        self._raise_if_failed()
        sender = Sender(self.feeds, self._secret, self.generation, epoch, check, event, key=self.key,
                        workers=self.workers)  # fmt: skip
        started = _time.perf_counter()
        with _job_description(frame, f"{self.describe}: feed epoch {epoch} (generation {self.generation})"):
            try:
                job = frame.mapInArrow(sender, counts_schema())
                planned = _time.perf_counter()
                counts = job.toArrow()
            except Exception as exc:
                self._raise_if_failed()
                raise _feed_failure(exc, epoch) from None
        self.received = counts.nbytes
        expected: list[dict[str, list[int]]] = [{} for _ in self.feeds]
        per_sender: dict[int, tuple[int, int]] = {}
        task_s = 0.0
        for row in counts.to_pylist():
            task_s = max(task_s, row["task_s"])
            per_sender[row["sender"]] = (row["late"], row["top"])
            if row["process"] >= 0:
                expected[row["process"]][str(row["sender"])] = [row["frames"], row["rows"]]
        self.late = sum(late for late, _ in per_sender.values())
        top = max((t for _, t in per_sender.values()), default=-(1 << 62))
        self.frontier = None if event is None else event.target(top)
        fed = _time.perf_counter()
        parts = self._close(epoch, expected, self.frontier)
        # feed_s: the feed job, of which plan_s building it on this side and task_s the slowest sender's own time
        # (the rest is Spark's: planning, scheduling, launching the task, reading the input, the counts back).
        self.timing = {"feed_s": round(fed - started, 4), "plan_s": round(planned - started, 4),
                       "task_s": round(task_s, 4), "close_s": round(_time.perf_counter() - fed, 4),
                       "senders": len(per_sender), **self.timing}  # fmt: skip
        log.info("%s: epoch %d: %s", self.describe, epoch, self.timing)
        return parts

    def _close(self, epoch: int, expected: list[dict[str, list[int]]], frontier: int | None = None) -> list[str]:
        # One connection per process for the generation's life: an epoch's close does not authenticate again.
        if not self._control:
            self._control = [dial(address, self._secret, p) for p, address in enumerate(self.feeds)]
        links = self._control
        try:
            for p, link in enumerate(links):
                header = {"generation": self.generation, "epoch": epoch, "expected": expected[p]}
                if frontier is not None:
                    header["frontier"] = frontier
                link.send(Kind.CLOSE, header)
            parts = []
            self.timing = {}
            self.exchanged = 0
            for p, link in enumerate(links):
                answer = self._answer(link, self.close_timeout)
                self.received += len(json.dumps(answer.header)) + len(answer.body)
                if answer.kind != Kind.DONE:
                    error = str(answer.header.get("error"))
                    fatal = checkpoint_failure(error, answer.header.get("type"))
                    if fatal is not None:
                        raise fatal
                    raise StreamFeedError(f"epoch {epoch}: {link.peer}: {error}")
                parts.append(str(answer.header["part"]))
                self.timing[f"p{p}"] = answer.header.get("timing")
                self.exchanged += int(answer.header.get("exchanged", 0))
            return parts
        except BaseException:
            self._drop_control()
            raise

    def _drop_control(self) -> None:
        for link in self._control:
            link.close()
        self._control = []

    def _answer(self, link: FeedLink, timeout: float) -> Any:
        """The process's answer; a lost connection waits (bounded) for the hosting job's failure to name it."""
        try:
            return link.receive(timeout)
        except StreamFeedError as lost:
            # A process that died takes its connection with it; Spark fails the barrier job a moment later.
            if self._thread is not None:
                self._thread.join(self.failure_wait)
            self._raise_if_failed()
            raise lost from None

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the processes (their dataflow ends cleanly) and wait for the hosting job."""
        self._drop_control()
        if self._thread is None:
            return
        try:
            for p, address in enumerate(self.feeds):
                link = dial(address, self._secret, p, timeout=10.0)
                try:
                    link.send(Kind.STOP, {"generation": self.generation})
                    link.receive(timeout)
                finally:
                    link.close()
            self._thread.join(timeout)
        except PytimelyError:
            pass  # a process already gone: the job is cancelled below
        finally:
            if self._thread.is_alive():
                self.cancel()
            self._thread = None

    def cancel(self) -> None:
        """Cancel the hosting job (its tasks are killed) and wait a while for the thread."""
        from pytimely.spark.session import is_connect

        self._drop_control()
        if is_connect(self.spark):
            self.spark.interruptTag(self._group)
        else:
            self.spark.sparkContext.cancelJobGroup(self._group)
        if self._thread is not None:
            self._thread.join(30.0)


def _short(exc: BaseException) -> str:
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("at ")]
    telling = [line for line in lines if "Error" in line or "error" in line]
    return " | ".join((telling or lines or [type(exc).__name__])[:3])[:600]


def _feed_failure(exc: BaseException, epoch: int) -> PytimelyError:
    """A feed job's failure as a typed error (the error a sender task raised, where it names one)."""
    from pytimely.spark.stream_query import _typed

    found = _typed(str(exc))
    if isinstance(found, (StreamFeedError, StreamSchemaError, StreamInputError, *_FATAL)):
        return found
    return StreamFeedError(f"the feed job of epoch {epoch} failed: {_short(exc)}")


_FATAL = (CheckpointFileError, CheckpointMismatchError)
_REPORTED = re.compile(r"(?:^|(?<=[\s.:]))(CheckpointFileError|CheckpointMismatchError): (.*)", re.MULTILINE)


def checkpoint_failure(text: str, kind: Any = None) -> CheckpointFileError | CheckpointMismatchError | None:
    """The checkpoint file error a hosted process failed with, from what reaches this side: its type's name
    ``kind`` and message (a ``FAILED`` answer), a worker's result (``process P, epoch E: Kind: message``), or a
    task's traceback (``pytimely.errors.Kind: message``); ``None`` for any other failure (a restart may help)."""
    from pytimely.spark.stream_query import _typed

    found = _typed(text)
    if isinstance(found, _FATAL):
        return found
    if kind == "CheckpointFileError":
        return CheckpointFileError(text)
    if kind == "CheckpointMismatchError":
        return CheckpointMismatchError(text)
    matches = list(_REPORTED.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    # What the same line says before the error's name (``process P, epoch E: ``) stays: it names the process.
    message = text[text.rfind("\n", 0, last.start()) + 1 : last.start()] + last.group(2).strip()
    return CheckpointFileError(message) if last.group(1) == "CheckpointFileError" else CheckpointMismatchError(message)


def stop_published(own: Path, secret: bytes, timeout: float = 30.0) -> None:
    """Stop the hosted processes of the checkpoint's newest generation (a Connect client, once its query ended)."""
    try:
        generation = int(json.loads((own / "generation.json").read_text(encoding="utf-8"))["generation"])
        feeds = read_hosts(own, generation, secret)
    except (OSError, ValueError, KeyError, PytimelyError):
        return
    for process, address in enumerate(feeds or []):
        try:
            link = dial(address, secret, process, timeout=timeout)
            try:
                link.send(Kind.STOP, {"generation": generation})
                link.receive(timeout)
            finally:
                link.close()
        except PytimelyError:
            continue  # gone already

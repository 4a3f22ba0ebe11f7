"""What every hosted process of a streaming query is told (:class:`HostPlan`), and the recovery store it resumes
from (:class:`ResumeAt`).

The plan travels in the hosting job's closure to each task (:mod:`pytimely.spark.stream_host`), which starts the
process's feed port (:mod:`pytimely.spark.stream_feeder`) with it: both read it from here, as the task imports the
feeder and the feeder cannot import the task back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytimely.communication.platform import REAL_THREADS, Threads
from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.recovery import Recovery, SnapshotPolicy
from pytimely.spark.stream_checkpoint import committed_bound

if TYPE_CHECKING:
    import pyarrow as pa

    from pytimely.recovery.session import Session
    from pytimely.spark.epoch_output import EpochOutput

__all__ = ["HostPlan", "ResumeAt"]


@dataclass
class ResumeAt(Recovery):
    """A :class:`~pytimely.recovery.Recovery` that resumes from the newest snapshot at or before ``at_most``."""

    at_most: int | None = None

    def open(
        self, *, process: int = 0, joining: bool = False, at_most: int | None = None, threads: Threads = REAL_THREADS
    ) -> Session:
        """Open the store as :meth:`Recovery.open` does, never past ``self.at_most``."""
        limit = self.at_most if at_most is None else at_most
        return super().open(process=process, joining=joining, at_most=limit, threads=threads)


@dataclass(frozen=True)
class HostPlan:
    """What every hosted process is told (it travels in the hosting job's closure)."""

    build: Callable[..., Any]
    processes: int
    workers: int
    generation: int
    secret: bytes = field(repr=False)
    own: str
    """The checkpoint's pytimely folder (``CK/pytimely``): hosts, parts and state live under it."""
    schema: pa.Schema
    job: str
    parameters: dict[str, Any]
    resume_at: int
    local: bool
    heartbeat: float = 0.5
    timeout: float = 10.0
    close_timeout: float = 600.0
    output: EpochOutput | None = None
    """Where the processes write their parts themselves (else under ``CK/pytimely/parts``, for the driver)."""
    owner: str | None = None
    """The run that started the processes: once another run owns the checkpoint they stop by themselves (an
    orphaned query's processes, left by a killed Spark Connect client, give their task slots back)."""
    key: str | None = None
    """The input column the dataflow's first exchange is keyed by: rows arrive at the process owning their key's
    bin and go to the worker owning it (else each frame is shared out evenly among the process's workers)."""
    bins: int = DEFAULT_BINS
    idle_timeout: float | None = 600.0
    """Seconds without a message from the control side after which the processes stop by themselves (a control
    side that died or cannot reach them leaves nothing running for long); ``None``: never."""
    column: str | None = None
    """The event-time column (``run_stream(epoch=...)``): rows enter at its epochs; those at or above the frontier
    wait in the process (and under ``CK/pytimely/held``) until it reaches them. ``None``: batch ids are epochs."""
    held_from: int = -1
    """With ``column``: the last committed micro-batch; the rows held after it are taken (:mod:`.stream_held`)."""
    files_key: bytes = field(default=b"", repr=False)
    """The checkpoint's key, which signs the held rows' files."""

    def recovery(self) -> ResumeAt:
        """The query's recovery store, opened at the last committed micro-batch (three snapshots kept)."""
        # Stopped processes close their input, so the store's last manifest is the final one; before it may be a
        # snapshot of an epoch whose output was never committed (a run taken over, or stopped, between the two).
        # Keeping three leaves the last committed epoch's snapshot for the next run to resume from; with event time
        # one micro-batch may complete more epochs than that before its commit, so that snapshot is protected.
        policy = SnapshotPolicy(every_epochs=1, keep=3, rewrite_every=4)
        return ResumeAt(
            str(Path(self.own) / "state"), job=self.job, policy=policy, parameters=self.parameters,
            at_most=self.resume_at, protect=partial(committed_bound, self.own),
        )  # fmt: skip

"""How a job asks for recovery (:class:`Recovery`), and one process's open store (:class:`Session`).

``execute(job, recovery=Recovery("DIR", job="wordcount", parameters={"epochs": 20}, inputs={"text":
Path(p)}))``: the store is opened once per process before any worker runs. Opening checks it can be written,
refuses a store of another job, parameter, input, format version or key with a typed error naming what differs
(``mode="fresh"`` empties it and starts over instead), finds the newest usable snapshot (falling back to an
older one with a warning when the newest is damaged), and, on the first process, removes what a run that died
left behind. Each worker then gets a :class:`~pytimely.recovery.runtime.WorkerRecovery` from
:meth:`Session.worker`.

**Trust.** A store's files are pickles. A store written with a ``key`` (bytes: the cluster secret when it is
the same from run to run, or a key of its own) has every manifest, layout and its identity sealed with an
HMAC, and the manifest records the SHA-256 of every payload file: a run with the key checks both before it
unpickles anything, so a payload nobody holding the key wrote is refused. A store without a key is trusted like
the program's own files: whoever can write to it can run code in the job.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pytimely.communication.platform import REAL_THREADS, Threads
from pytimely.errors import InvalidArgument, RecoveryError
from pytimely.recovery.manifest import FINAL, Identity, Seal, fingerprint
from pytimely.recovery.policy import SnapshotPolicy
from pytimely.recovery.snapshots import Opened, Snapshots
from pytimely.recovery.store import SnapshotStore, open_store

if TYPE_CHECKING:
    from pytimely.config import RecoverySettings
    from pytimely.recovery.runtime import WorkerRecovery
    from pytimely.worker import Worker

__all__ = ["Recovery", "Session"]

Mode = Literal["resume", "fresh"]

WRITERS = 4
"""Threads a process writes payload files with, in a store that cannot append (each its own file)."""


@dataclass(frozen=True, slots=True)
class Committed:
    """Where a store stands (:meth:`Recovery.committed`)."""

    resume_epoch: int
    """The first epoch a run from this store computes (0: nothing committed; :data:`FINAL`: the run finished)."""
    positions: dict[str, dict[int, Any]]
    """Per declared source (``dataflow/operator#n/state``): partition -> position, as the source recorded it."""


@dataclass(slots=True)
class Recovery:
    """Where and how a job snapshots its declared state: ``execute(job, recovery=Recovery("DIR", ...))``.

    ``store``: a folder, an fsspec URL (``s3://bucket/prefix``) or a :class:`SnapshotStore`. ``job`` names the
    job; ``parameters`` are the run's settings its output depends on (``{"epochs": 20}``); ``inputs`` name its
    inputs: a path (``pathlib.Path``) is fingerprinted by content, a string is taken as the input's own identity
    (a table version, a topic and offsets). A store written by a run that differs in any of them is refused,
    naming what differs. ``key`` seals the store (see the module doc). ``mode="fresh"`` starts over, emptying
    the store first. ``announce`` (a text stream, ``None`` for none) gets ``resumed at epoch N`` and the
    warnings about snapshots passed over. ``write_timeout`` bounds how long a worker waits for a write.
    ``protect``, asked at each commit, names an epoch whose snapshot (the newest at or before it) is kept besides
    the policy's newest ``keep``: a control plane's last committed epoch, which a restart resumes from however
    many later snapshots the run takes before its next commit.
    """

    store: str | os.PathLike[str] | SnapshotStore
    job: str = "job"
    policy: SnapshotPolicy = field(default_factory=SnapshotPolicy)
    parameters: Mapping[str, Any] = field(default_factory=dict)
    inputs: Mapping[str, str | os.PathLike[str]] = field(default_factory=dict)
    key: bytes | None = field(default=None, repr=False)
    mode: Mode = "resume"
    announce: Any = None
    write_timeout: float = 600.0
    protect: Callable[[], int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.job, str) or not self.job:
            raise InvalidArgument(f"Recovery: job must be a non-empty name, got {self.job!r}")
        if self.mode not in ("resume", "fresh"):
            raise InvalidArgument(f"Recovery: mode must be 'resume' or 'fresh', got {self.mode!r}")
        if self.key is not None and (not isinstance(self.key, bytes) or len(self.key) < 16):
            raise InvalidArgument("Recovery: key must be bytes, at least 16 of them")
        if not isinstance(self.policy, SnapshotPolicy):
            raise InvalidArgument(f"Recovery: policy must be a SnapshotPolicy, got {self.policy!r}")

    def identity(self, key_id: str) -> Identity:
        """The job's identity, its file inputs fingerprinted now."""
        inputs: dict[str, str] = {}
        for name, value in self.inputs.items():
            if isinstance(value, str):
                inputs[name] = value
            else:
                try:
                    inputs[name] = fingerprint(value)
                except OSError as exc:
                    raise RecoveryError(
                        f"input {name!r}: cannot read {os.fspath(value)} to fingerprint it: {exc.strerror or exc}",
                        os.fspath(value),
                    ) from None
        return Identity(self.job, dict(self.parameters), inputs, key_id)

    @classmethod
    def from_settings(
        cls,
        settings: RecoverySettings,
        job: str,
        *,
        parameters: Mapping[str, Any] | None = None,
        inputs: Mapping[str, str | os.PathLike[str]] | None = None,
        announce: Any = None,
    ) -> Recovery:
        """The recovery a run's :class:`~pytimely.config.RecoverySettings` (``--recovery`` and its flags) ask for."""
        return cls(
            settings.store,
            job=job,
            policy=SnapshotPolicy(every_epochs=settings.snapshot_every),
            parameters=dict(parameters or {}),
            inputs=dict(inputs or {}),
            key=settings.key(),
            mode=settings.mode,
            announce=announce,
        )

    def committed(self) -> Committed:
        """Where the store stands, as a run would resume from it, read without running anything: the epoch a run
        would start at and the positions of the replayable sources (JSON, from the manifest: nothing is
        unpickled). The store is refused as :meth:`open` refuses it (another job, input, key); nothing is
        written. What a control plane asks before it hands out input (which micro-batches to deliver again)."""
        store = open_store(self.store)
        seal = Seal(self.key)
        snapshots = Snapshots(store, seal)
        if store.get("identity.json") is None and not store.list("manifests"):
            return Committed(0, {})
        identity = snapshots.check_identity(self.identity(seal.key_id), write=False)
        opened = snapshots.latest(identity, self.announce)
        if opened is None:
            return Committed(0, {})
        manifest = opened.manifest
        return Committed(manifest.resume_epoch, {k: dict(v) for k, v in manifest.positions.items()})

    def open(
        self, *, process: int = 0, joining: bool = False, at_most: int | None = None, threads: Threads = REAL_THREADS
    ) -> Session:
        """Open the store for this process (see the module doc); the first process (``process == 0``) cleans it.

        ``joining``: this process joins a computation already running; it restores nothing and learns the epoch
        the run resumed at from the store. ``at_most``: resume from the newest snapshot of an epoch at or before
        it (a streaming query's last committed micro-batch); the first process removes the later ones, and the
        older ones too (the one restored from is verified; the committer's memory of what it keeps starts from
        it, so an older snapshot left now would never be removed: a store restarted often would grow).
        ``threads`` start the threads that write (a simulator's, simulated).
        """
        store = open_store(self.store)
        store.check_writable()
        seal = Seal(self.key)
        snapshots = Snapshots(store, seal)
        first = process == 0 and not joining
        if self.mode == "fresh" and first:
            snapshots.wipe()
        identity = snapshots.check_identity(self.identity(seal.key_id), write=first)
        if joining:
            resume = snapshots.get_run()
            return Session(self, snapshots, identity, None, resume or 0, process, True, threads)
        opened = snapshots.latest(identity, self.announce if first else None, at_most=at_most)
        kept: list[tuple[str, set[str]]] = []
        if first:
            kept = snapshots.clean(None if opened is None else opened.manifest)
            if at_most is not None and opened is not None:
                snapshots.prune(1, opened.manifest.epoch)
        resume = 0 if opened is None else opened.manifest.resume_epoch
        if first:
            snapshots.put_run(resume, identity)
            if resume and self.announce is not None:
                said = "the end: the run had finished, nothing is left to compute" if resume == FINAL else (
                    f"epoch {resume}"
                )
                print(f"resumed at {said}", file=self.announce, flush=True)
        session = Session(self, snapshots, identity, opened, resume, process, False, threads)
        session.kept = kept
        return session


class Session:
    """One process's open store: the snapshot to restore, the resume epoch, and the thread that writes files."""

    def __init__(
        self,
        recovery: Recovery,
        snapshots: Snapshots,
        identity: str,
        opened: Opened | None,
        resume: int,
        process: int,
        joining: bool,
        threads: Threads = REAL_THREADS,
    ) -> None:
        self.recovery = recovery
        self.snapshots = snapshots
        self.identity = identity
        """SHA-256 of the job's identity: every manifest of this job records it."""
        self.opened = opened
        """The snapshot restored from (``None``: a fresh start, or a process joining a running computation)."""
        self.resume = resume
        """The first epoch this run computes (0 on a fresh start; :data:`FINAL` when the run had finished)."""
        self.process = process
        self.joining = joining
        self.policy = recovery.policy
        self._threads = threads
        self._writers: dict[int, Executor] = {}
        self.writer = None if snapshots.appends else threads.executor(WRITERS, "pytimely-snapshots")
        """Writes payload files off the workers' threads (file system calls release the GIL); several at once, so
        their fsyncs share the file system's journal commits. ``None`` in a store that appends: each worker has
        a writer of its own (:meth:`writer_for`)."""
        self.kept: list[tuple[str, set[str]]] = []
        """The manifests the store kept at the start, oldest first, with the files each reads (first process)."""
        self.committer = threads.executor(1, "pytimely-commits")
        """Writes manifests, one after another (each after the payload files it names)."""

    @property
    def complete(self) -> bool:
        """Whether the run had finished: nothing is computed and nothing written."""
        return self.resume == FINAL

    def worker(self, worker: Worker) -> WorkerRecovery:
        """The recovery runtime of one of this process's workers."""
        from pytimely.recovery.runtime import WorkerRecovery

        return WorkerRecovery(self, worker)

    def writer_for(self, worker: int) -> Executor:
        """The thread that writes worker ``worker``'s payloads: its own in a store that appends, so its records
        reach their segments in order (the workers' writes, and their syncs, still run side by side)."""
        if self.writer is not None:
            return self.writer
        writer = self._writers.get(worker)
        if writer is None:
            writer = self._writers[worker] = self._threads.executor(1, f"pytimely-snapshots-{worker}")
        return writer

    def close(self) -> None:
        """Stop the writer threads (writes in flight finish first) and let go of the segments written."""
        if self.writer is not None:
            self.writer.shutdown(wait=True)
        for writer in list(self._writers.values()):
            writer.shutdown(wait=True)
        self.committer.shutdown(wait=True)
        self.snapshots.release()

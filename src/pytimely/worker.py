"""A worker: builds dataflows and steps them, exchanging data and progress with its peers."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pytimely.collector import burst
from pytimely.communication.allocator import Allocator, ElasticAllocator, Pull, elastic_view
from pytimely.communication.platform import REAL_CLOCK, REAL_THREADS, Clock, Threads
from pytimely.dataflow.activate import Doorbell
from pytimely.dataflow.scope import Scope
from pytimely.dataflow.subgraph import Subgraph
from pytimely.errors import (
    InvalidArgument,
    JoinTimeoutError,
    LeaveTimeoutError,
    MembershipError,
    PytimelyError,
    ScopeError,
    StalledError,
    StepTimeoutError,
)
from pytimely.observe.eventlog import EventLogger, Sink

if TYPE_CHECKING:
    from pytimely.dataflow.explain import Explanation
    from pytimely.dataflow.graph_view import DataflowGraph

__all__ = ["RecoveryHook", "Worker"]

_STATS_EVERY = 1.0
"""Seconds between ``stats`` events, when the event log is on."""

R = TypeVar("R")

_PARK = 0.1
"""Longest wait for a message between idle steps; arrivals and failures wake a worker at once."""

_BELL = 0.005
"""While another thread holds an activator: the longest wait on its bell before looking at the network again."""


class RecoveryHook(Protocol):
    """What a worker asks of the recovery runtime (:class:`pytimely.recovery.runtime.WorkerRecovery`)."""

    def attach(self, subgraph: Subgraph) -> None:
        """A dataflow was built (and, on a joining worker, bootstrapped): restore it before its first step."""
        ...

    def after_step(self) -> bool:
        """Once per step: hand on snapshots whose files are written, commit those every worker has written;
        whether it did anything."""
        ...

    def busy(self) -> bool:
        """Whether writes or commits are still under way (the worker keeps stepping until they are done)."""
        ...

    def leaving(self, at: Any) -> None:
        """The worker leaves the computation at ``at``: snapshots of later epochs are the others' to take."""
        ...

    def finishing(self) -> None:
        """The job closed its inputs: the last snapshots are reported once taken, then nothing more."""
        ...

    @property
    def resume_epoch(self) -> int:
        """The first epoch this run computes."""
        ...


class Worker:
    """One of the workers running a computation; every worker builds the same dataflows."""

    def __init__(
        self,
        allocator: Allocator,
        *,
        check_serialization: bool = False,
        log: Sink | None = None,
        join_timeout: float | None = None,
        clock: Clock = REAL_CLOCK,
        threads: Threads = REAL_THREADS,
    ) -> None:
        self._allocator = allocator
        self._recovery: RecoveryHook | None = None
        self._clock = clock
        """What every deadline of this worker is measured on (a simulator's clock in a simulated process)."""
        # Decided once: checking a runtime Protocol costs microseconds, and step_while is called per epoch.
        self._elastic: ElasticAllocator | None = elastic_view(allocator)
        self.join_timeout = join_timeout
        """Seconds a worker that joined a running computation waits for the progress state of each dataflow it
        builds from its server (``None``: as long as the computation moves)."""
        self.log = log
        """Where the event log of this worker's dataflows goes (:mod:`pytimely.observe.eventlog`); ``None``: nowhere."""
        self._logger = None if log is None else EventLogger(log, allocator.index, "")
        self._stats_due = 0.0
        self.check_serialization = check_serialization
        """Whether exchanges pickle their records even between workers of one process (see ``execute``)."""
        self._dataflows: list[Subgraph] = []
        self._doorbell = Doorbell(threads.event())
        self._dropped: list[Pull[Any]] = []
        """Receiving ends of dropped dataflows' channels, drained each step (peers may still send)."""
        self._count = 0
        self._building = False
        self._after_step: Callable[[], None] | None = None
        self._left = False
        self.last_step_worked = False
        """Whether the last :meth:`step` did anything (received, ran or sent something)."""
        self.waiting = False
        """Whether the worker is inside :meth:`step_while`: only its dataflows can end the wait."""

    def recover_with(self, hook: RecoveryHook) -> None:
        """Snapshot and restore this worker's declared state through ``hook`` (``execute(..., recovery=)`` does)."""
        if self._count:
            raise ScopeError("recovery must be set up before the worker builds its first dataflow")
        self._recovery = hook

    @property
    def resume_epoch(self) -> int:
        """The first epoch this run computes: 0, unless it resumed from a snapshot (``execute(..., recovery=)``).

        What the job sends at earlier epochs is dropped (their results are in the snapshot), so a job may run
        its loop from the start; a job that plans by epoch (who joins when) uses it to plan the rest.
        """
        return 0 if self._recovery is None else self._recovery.resume_epoch

    @property
    def recovery(self) -> RecoveryHook | None:
        """The hook this worker snapshots and restores its state through (:meth:`recover_with`); ``None``: none.

        A job that waits for its snapshots to be durable (a hosted stream holding back an epoch's output until its
        state is) asks it; setting it stays :meth:`recover_with`'s.
        """
        return self._recovery

    @property
    def index(self) -> int:
        """This worker's index, ``0 <= index < peers``."""
        return self._allocator.index

    @property
    def peers(self) -> int:
        """How many workers run the computation."""
        return self._allocator.peers

    def dataflow(self, build: Callable[[Scope[Any]], R], *, minimum: Any = 0, name: str | None = None) -> R:
        """Build a dataflow with ``build(scope)`` in a fresh root scope whose least time is ``minimum``.

        Returns what ``build`` returns (typically input and probe handles).
        """
        if self._building:
            raise ScopeError("dataflows cannot be built inside another dataflow's build function")
        ident = self._count
        self._count += 1
        label = name if name is not None else f"dataflow {ident}"
        subgraph = Subgraph(self._allocator, ident, label, self.log, self._doorbell)
        scope: Scope[Any] = Scope(subgraph, minimum, check_serialization=self.check_serialization)
        self._building = True
        try:
            result = build(scope)
        finally:
            self._building = False
        subgraph.build(scope._summaries)
        self._allocator.built(ident)
        self._dataflows.append(subgraph)
        if not subgraph.bootstrapped:
            # A worker that joins a running computation starts from its server's progress state.
            timeout = self.join_timeout
            self._step_until(
                lambda: not subgraph.bootstrapped,
                None if timeout is None else self._clock.monotonic() + timeout,
                lambda: JoinTimeoutError(
                    f"worker {self.index} joined the computation but had no progress state for dataflow {label!r} "
                    f"from its server within {timeout:g} s (PYTIMELY_CONNECT_TIMEOUT): the server's worker is not "
                    "stepping, or the server is gone",
                    self._process(),
                ),
            )
        if self._recovery is not None:
            self._recovery.attach(subgraph)
        return result

    def _step_until(self, busy: Callable[[], bool], deadline: float | None, late: Callable[[], Exception]) -> None:
        """Step while ``busy()``; raise ``late()`` once ``deadline`` (a time of the worker's clock) has passed."""

        try:
            self.step_while(busy, timeout=None if deadline is None else max(0.0, deadline - self._clock.monotonic()))
        except StepTimeoutError:
            raise late() from None

    def _process(self) -> int | None:
        """The index of this worker's process in an elastic cluster (``None`` elsewhere)."""
        elastic = self._elastic
        return None if elastic is None else self.index // max(1, elastic.workers_per_process)

    @property
    def next_dataflow_index(self) -> int:
        """The index the next :meth:`dataflow` will get (what :meth:`drop_dataflow` takes)."""
        return self._count

    def installed_dataflows(self) -> list[int]:
        """The indices of the dataflows this worker still runs."""
        return [s.ident for s in self._dataflows]

    def drop_dataflow(self, index: int) -> None:
        """Stop running dataflow ``index`` and release its operators, state and queued messages.

        Every worker must drop it (as in timely, where dropping is a collective decision of the program): a
        worker still running it may wait for progress from one that dropped it. Its input handles and probes
        raise :class:`~pytimely.errors.DroppedDataflowError` from then on.
        """
        for subgraph in self._dataflows:
            if subgraph.ident == index:
                break
        else:
            raise InvalidArgument(
                f"drop_dataflow: worker {self.index} runs no dataflow {index!r} (it runs {self.installed_dataflows()})"
            )
        self._dataflows.remove(subgraph)
        self._dropped.extend(subgraph.drop())

    def pinned(self) -> dict[str, tuple[int, ...]]:
        """The operators of this worker's dataflows that records reach by worker index, and the workers each one
        pins (a plain exchange: every worker the computation started with; a gather: the worker it gathers on).
        Those workers cannot leave while the dataflow runs; see :meth:`RescalePlan.check_pinned
        <pytimely.membership.RescalePlan.check_pinned>`."""
        pinned: dict[str, tuple[int, ...]] = {}
        for subgraph in self._dataflows:
            for name, workers in subgraph.pinned.items():
                pinned[name] = tuple(sorted({*pinned.get(name, ()), *workers}))
        return pinned

    @property
    def members(self) -> list[int]:
        """The ids of the workers taking part now (``range(peers)`` unless processes join and leave)."""
        elastic = self._elastic
        return list(elastic.members) if elastic is not None else list(range(self.peers))

    @property
    def workers_per_process(self) -> int:
        """How many workers each process runs (all of them, in a single process)."""
        elastic = self._elastic
        return elastic.workers_per_process if elastic is not None else self.peers

    @property
    def joined(self) -> bool:
        """Whether this worker's process joined the computation after it started."""
        elastic = self._elastic
        return elastic is not None and elastic.joining is not None

    @property
    def leave_requested(self) -> bool:
        """Whether this worker's process was asked to leave (it decides when, see :meth:`leave`)."""
        elastic = self._elastic
        return elastic is not None and elastic.leave_requested

    def leave(self, at: Any = None, *, timeout: float | None = None) -> None:
        """Leave the running computation: close inputs, step until this worker holds nothing, then disconnect.

        ``at`` is the time from which the worker's keyed state belongs to others (the time of the
        moves that took its bins away): it stays until nothing earlier can reach it. Raises
        :class:`MembershipError` when the cluster is not elastic or a dataflow pins records to it, and
        :class:`LeaveTimeoutError` (naming what the worker still holds or waits for) when it has not left
        ``timeout`` seconds after the call; with ``None`` it waits as long as the computation moves (a stall of
        the whole computation is still a :class:`StalledError`).
        """
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise InvalidArgument(f"leave: timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        allocator = self._elastic
        if allocator is None or not allocator.elastic:
            raise MembershipError("only a worker of an elastic cluster (PYTIMELY_ELASTIC=1) can leave it")
        for subgraph in self._dataflows:
            subgraph.check_leave()
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        if self._recovery is not None:
            self._recovery.leaving(at)

        def late(waiting_for: str) -> Callable[[], Exception]:
            return lambda: LeaveTimeoutError(
                f"worker {self.index} did not leave within {timeout} s: it was waiting for {waiting_for}; "
                f"its dataflows hold: {self.stall_report() or 'nothing'}",
                self._process(),
            )

        self.close_inputs()
        self._step_until(
            lambda: not all(s.may_leave(at) for s in self._dataflows),
            deadline,
            late(f"nothing before time {at!r} to reach it" if at is not None else "its work to drain"),
        )
        allocator.ready_to_leave()
        self._step_until(
            lambda: not allocator.left_by_all(), deadline, late("every other process to stop sending to it")
        )
        # Everything the others sent arrived before their DONE: take it in (a step decodes a budget of it), report it.
        self._step_until(
            lambda: any(s.receiving() for s in self._dataflows), deadline, late("the data its peers sent to arrive")
        )
        self.step()
        self.step()
        for subgraph in self._dataflows:
            if not subgraph.may_leave():
                raise MembershipError(
                    f"worker {self.index} was left holding work in dataflow {subgraph.name!r} after its peers "
                    f"stopped sending to it: {'; '.join(subgraph.held()) or 'messages it did not take'}"
                )
        self._dataflows = []
        self._left = True

    def step(self) -> bool:
        """Run one step of every dataflow; return whether any dataflow is still running."""
        allocator = self._allocator
        allocator.receive()
        worked = False
        # The batches a step decodes and hands on are mostly freed before a collection walks them (see
        # pytimely.collector).
        with burst():
            for subgraph in self._dataflows:
                worked = subgraph.step() or worked
            for pull in self._dropped:
                pull.drain()
        allocator.release()
        if any(s.complete for s in self._dataflows):
            self._dataflows = [s for s in self._dataflows if not s.complete]
        recovery = self._recovery
        if recovery is not None:
            worked = recovery.after_step() or worked
        self.last_step_worked = worked
        if self._logger is not None:
            self._log_stats(self._logger)
        if self._after_step is not None:
            self._after_step()
        return bool(self._dataflows) or (recovery is not None and recovery.busy())

    def step_while(self, condition: Callable[[], bool], *, timeout: float | None = None) -> None:
        """Step while ``condition()`` holds (between idle steps, wait for messages from other processes).

        With ``timeout`` (seconds), a condition still true after it raises :class:`StepTimeoutError`
        naming what the dataflows hold. A worker alone in its computation raises :class:`StalledError`
        as soon as it can prove nothing will move again (as :meth:`finish` does): ``condition`` is then
        taken to depend on the dataflows (a probe), not on other threads.
        """
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout >= 0):
            raise InvalidArgument(f"step_while: timeout must be a number of seconds >= 0 or None, got {timeout!r}")
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        idle = 0
        waiting, self.waiting = self.waiting, True
        cluster = self._elastic
        try:
            while condition():
                if deadline is not None and self._clock.monotonic() >= deadline:
                    raise self._explained(
                        StepTimeoutError(
                            f"worker {self.index}: step_while's condition still held after {timeout} s; the "
                            f"dataflows hold: {self.stall_report() or 'no running dataflow'}"
                        )
                    )
                self.step()
                idle = 0 if self.last_step_worked else idle + 1
                if self._stalled_for(idle, cluster):
                    raise self._stalled("step_while's condition can never become false")
                if idle:
                    wait = _PARK if deadline is None else max(0.0, min(_PARK, deadline - self._clock.monotonic()))
                    self._park(wait)
        finally:
            self.waiting = waiting
            if cluster is not None:
                cluster.quiet(False)

    def _park(self, wait: float) -> None:
        """Wait up to ``wait`` seconds for a message, or for another thread's activator when one is open."""
        if self._doorbell.open:
            self._doorbell.wait(min(wait, _BELL))
            self._allocator.park(0.0)
        else:
            self._allocator.park(wait)

    def _stalled_for(self, idle: int, cluster: ElasticAllocator | None) -> bool:
        """Whether ``idle`` steps in a row prove nothing can move.

        Alone, two idle steps prove it. In a cluster this worker says it is quiet, and the proof is every
        process quiet with nothing sent for the stall timeout (see :mod:`pytimely.communication.cluster.quiescence`).
        An open activator (:mod:`pytimely.dataflow.activate`) means another thread may still act: no stall.
        """
        if self._doorbell.open:
            idle = 0
        if cluster is not None:
            cluster.quiet(idle >= 2)
        if idle < 2:
            return False
        return self.peers == 1 or (cluster is not None and cluster.stalled())

    def await_other_thread(self, future: Future[Any]) -> Callable[[], None]:
        """Count ``future`` (work another thread does for this worker, such as writing a snapshot) as a reason to
        wait, not a stall, until the returned function is called (once its result is taken); its end wakes the
        worker."""
        bell = self._doorbell
        bell._opened()
        future.add_done_callback(lambda _: bell.ring())
        closed = False

        def taken() -> None:
            nonlocal closed
            if not closed:
                closed = True
                bell._closed()

        return taken

    @property
    def awaits_other_threads(self) -> bool:
        """Whether another thread holds an open activator of this worker's operators (then idle is no stall)."""
        return self._doorbell.open > 0

    @property
    def running(self) -> bool:
        """Whether some dataflow of this worker has not finished."""
        return bool(self._dataflows)

    def close_inputs(self) -> None:
        """Close every input handle still open (as happens when the worker's function returns)."""
        for subgraph in self._dataflows:
            for handle in subgraph.inputs:
                handle.close()
        if self._recovery is not None:
            self._recovery.finishing()

    def communication_stats(self) -> dict[str, Any]:
        """Counters of the communication layer (queue peaks, flow-control waits, frames sent), if it keeps any."""
        stats = getattr(self._allocator, "stats", None)
        return stats() if stats is not None else {}

    def _log_stats(self, logger: EventLogger) -> None:
        """At most once a second, log the communication counters (queue depths) as a ``stats`` event."""
        now = self._clock.monotonic()
        if now >= self._stats_due:
            self._stats_due = now + _STATS_EVERY
            logger.emit("stats", communication=self.communication_stats(), dataflows=len(self._dataflows))

    def progress_stats(self) -> dict[str, float]:
        """Progress-state sizes summed over this worker's dataflows (see ``Subgraph.progress_stats``)."""
        total: dict[str, float] = {}
        for subgraph in self._dataflows:
            for name, value in subgraph.progress_stats().items():
                total[name] = total.get(name, 0) + value
        return total

    def stall_report(self) -> str:
        """What keeps this worker's unfinished dataflows alive."""
        parts = []
        for subgraph in self._dataflows:
            held = subgraph.held()
            parts.append(f"{subgraph.name!r}: " + ("; ".join(held) if held else "nothing held"))
        return " | ".join(parts)

    def graph(self) -> list[DataflowGraph]:
        """A description of every running dataflow: operators, channels and their kinds, scopes, feedback."""
        from pytimely.dataflow.graph_view import describe

        return [describe(subgraph) for subgraph in self._dataflows]

    def explain(self, probe: Any = None) -> list[Explanation]:
        """What holds ``probe``'s frontier where it is; without a probe, what holds each running dataflow.

        Reads the progress tracker (every worker's counts, as far as this one has heard); see
        :mod:`pytimely.dataflow.explain`.
        """
        from pytimely.dataflow.explain import explain

        if probe is None:
            return [explain(s, workers_per_process=self.workers_per_process) for s in self._dataflows]
        port = getattr(probe, "_port", None)
        subgraph = getattr(probe, "_subgraph", None)
        if port is None or subgraph is None:
            raise InvalidArgument(f"explain: expected a ProbeHandle, got {type(probe).__name__}")
        if not subgraph.built:
            raise InvalidArgument("explain: the probe's dataflow is not built yet (call it after worker.dataflow)")
        return [explain(subgraph, port.location, workers_per_process=self.workers_per_process)]

    def _explained(self, error: Exception) -> Exception:
        """``error`` with a note saying what holds each dataflow (printed by ``pytimely explain``)."""
        try:
            notes = [str(e) for e in self.explain() if e.holders]
        except PytimelyError as exc:  # a diagnosis must not hide the error it explains
            notes = [f"(no explanation: {exc})"]
        if notes:
            error.add_note("what holds it:\n" + "\n".join(notes))
        return error

    def _stalled(self, what: str = "the computation cannot finish") -> StalledError:
        held = self.stall_report()
        if not held:
            return StalledError(f"worker {self.index}: {what}: no running dataflow is left to change it")
        error = StalledError(
            f"worker {self.index}: {what}, as no operator has work and no message is in flight, yet these "
            f"remain: {held}. An operator holds a capability it never drops."
        )
        self._explained(error)
        return error

    def finish(self) -> None:
        """Close inputs and step until every dataflow is done; a stall raises :class:`StalledError`."""
        if self._left:
            return
        self.close_inputs()
        idle = 0
        cluster = self._elastic
        while self.step():
            idle = 0 if self.last_step_worked else idle + 1
            if self._stalled_for(idle, cluster):
                raise self._stalled()
            if idle:
                self._park(_PARK)

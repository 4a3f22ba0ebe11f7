"""Running a computation: ``execute(func, workers=W)`` runs ``func(worker)`` on W workers in this process.

With ``config=`` a :class:`~pytimely.config.Config` of several processes, this
process joins a cluster over TCP (see :mod:`pytimely.communication.cluster`),
runs its ``config.workers`` workers on threads of their own, and returns their
results only; every process of the cluster calls ``execute`` with the same
function. A failure anywhere stops every process with an error.

With one worker, ``func`` runs on the calling thread. With several, each worker
runs on its own thread but only one runs at a time: a scheduler hands the turn
to one worker per step, round-robin, or in a seeded random order when ``seed``
is given, so a run is reproducible and tests can explore interleavings.

When ``func`` returns, the worker closes its open inputs and steps until its
dataflows finish. If any worker fails, every worker is stopped and the first
error is raised here.
"""

from __future__ import annotations

import random
import signal
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.communication.local import LocalAllocator
from pytimely.communication.platform import REAL, Platform, Task
from pytimely.config import Config
from pytimely.errors import InvalidArgument
from pytimely.observe.eventlog import Sink
from pytimely.worker import Worker

if TYPE_CHECKING:
    # Only a cluster process needs the TCP layer (and ``cryptography``), only a recoverable run the store.
    from pytimely.communication.cluster import Cluster
    from pytimely.recovery.session import Recovery, Session

__all__ = ["execute", "run_process", "run_workers"]

R = TypeVar("R")


class _Shutdown(BaseException):
    """Unwinds a worker thread when the computation is stopped."""


class _Turns:
    """Hands the single turn between worker threads and the scheduler."""

    def __init__(self, workers: int) -> None:
        self.go = [threading.Semaphore(0) for _ in range(workers)]
        self.back = threading.Semaphore(0)
        self.abort = False

    def wait(self, index: int) -> None:
        self.go[index].acquire()
        if self.abort:
            raise _Shutdown

    def pass_turn(self, index: int) -> None:
        self.back.release()
        self.wait(index)


def execute(
    func: Callable[[Worker], R],
    workers: int = 1,
    *,
    config: Config | None = None,
    seed: int | None = None,
    check_serialization: bool = False,
    on_leave: Callable[[int], None] | None = None,
    log: Sink | None = None,
    recovery: Recovery | None = None,
) -> list[R]:
    """Run ``func(worker)`` on ``workers`` workers (or as ``config`` lays out); return this process's results.

    With ``check_serialization``, every exchange pickles the records it carries even between workers of
    this process (one worker included) and delivers the copies, so a record that could not cross to
    another process fails here as it would there, with an
    :class:`~pytimely.errors.UnpicklableRecordError` naming the exchange and the operator that sent it.
    It costs a pickle round trip per batch: meant for tests. ``on_leave`` is as for :func:`run_process`.

    ``log``, a sink of :mod:`pytimely.observe.eventlog`, receives every worker's events (off by default).

    With ``recovery`` (:class:`pytimely.recovery.Recovery`) the store is opened before anything runs: a store
    that cannot be written, or that belongs to another job, input or parameter, fails here with a typed error.
    Every worker's declared state is then restored from the last snapshot before its dataflows' first step
    and snapshotted at epoch boundaries (see :mod:`pytimely.recovery.runtime`); the job itself does nothing
    for it.
    """
    if config is not None:
        if workers != 1 and workers != config.workers:
            raise InvalidArgument(f"workers={workers} contradicts config.workers={config.workers}; give one of them")
        if config.processes > 1 or config.elastic:
            if seed is not None:
                raise InvalidArgument(
                    "seed= orders in-process workers; a cluster of processes cannot be replayed by it"
                )
            return run_process(
                func, config, check_serialization=check_serialization, on_leave=on_leave, log=log,
                recovery=recovery,
            )
        workers = config.workers
    if type(workers) is not int or workers < 1:
        raise InvalidArgument(f"workers must be a positive int, got {workers!r}")
    session = None if recovery is None else recovery.open()
    try:
        allocators = LocalAllocator.group(workers)
        made = [Worker(a, check_serialization=check_serialization, log=log) for a in allocators]
        if session is not None:
            for worker in made:
                worker.recover_with(session.worker(worker))
        if workers == 1:
            result = func(made[0])
            made[0].finish()
            return [result]
        return run_workers(func, made, seed)
    finally:
        if session is not None:
            session.close()


class _WorkerThreads(Generic[R]):
    """What the threads of :func:`run_workers` report: each one's result or error, and whether it drains or ended."""

    def __init__(self, func: Callable[[Worker], R], workers: list[Worker], turns: _Turns) -> None:
        n = len(workers)
        self.func = func
        self.workers = workers
        self.turns = turns
        self.results: list[Any] = [None] * n
        self.errors: list[BaseException | None] = [None] * n
        self.done = [False] * n
        self.draining = [False] * n

    def body(self, i: int) -> None:
        """Worker ``i``'s thread: run ``func`` on it in turns, then step it until its dataflows end."""
        worker = self.workers[i]
        turns = self.turns
        try:
            turns.wait(i)
            worker._after_step = lambda: turns.pass_turn(i)
            self.results[i] = self.func(worker)
            self.draining[i] = True
            worker.close_inputs()
            while worker.step():
                pass
        except _Shutdown:
            pass
        except BaseException as exc:
            self.errors[i] = exc
        finally:
            self.done[i] = True
            turns.back.release()

    def stalled(self, i: int, live: list[int], idle: set[int]) -> BaseException | None:
        """After worker ``i``'s turn: the stall error once a full round of live workers did nothing, else ``None``."""
        workers = self.workers
        # Once every worker only drains or waits in step_while (where only its dataflows can end the wait), a full
        # round of steps in which nobody did anything means nothing ever will.
        if all(self.draining[j] or workers[j].waiting for j in live):
            if not workers[i].running and not workers[i].waiting:
                idle.discard(i)  # finished: its thread ends at its next turn
            elif workers[i].last_step_worked or workers[i].awaits_other_threads:
                idle.clear()
            else:
                idle.add(i)
                if idle >= set(live):
                    return workers[i]._stalled()
        else:
            idle.clear()
        return None


def run_workers(func: Callable[[Worker], R], workers: list[Worker], seed: int | None = None) -> list[R]:
    """Run ``func`` on each of ``workers`` (one process's, any allocator) in its own thread; results in order.

    With ``seed`` the threads take turns in an order the seed chooses, so a run is replayed by its seed.
    """
    n = len(workers)
    turns = _Turns(n)
    run = _WorkerThreads(func, workers, turns)
    threads = [threading.Thread(target=run.body, args=(i,), name=f"pytimely-worker-{i}", daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    rng = random.Random(seed) if seed is not None else None
    live = list(range(n))
    failure: BaseException | None = None
    idle: set[int] = set()
    turn = 0
    while live:
        i = rng.choice(live) if rng is not None else live[turn % len(live)]
        turn += 1
        turns.go[i].release()
        turns.back.acquire()
        if run.done[i]:
            live.remove(i)
            threads[i].join()
            if run.errors[i] is not None and failure is None:
                failure = run.errors[i]
                turns.abort = True
            idle.discard(i)
            continue
        if turns.abort:
            continue
        stalled = run.stalled(i, live, idle)
        if stalled is not None:
            failure = stalled
            turns.abort = True
    if failure is not None:
        raise failure
    return run.results


def run_process(
    func: Callable[[Worker], R],
    config: Config,
    *,
    listener: socket.socket | None = None,
    check_serialization: bool = False,
    on_leave: Callable[[int], None] | None = None,
    log: Sink | None = None,
    recovery: Recovery | None = None,
    platform: Platform = REAL,
) -> list[R]:
    """Run this process's part of a cluster: ``func`` on each of its workers; their results, in order.

    ``listener``, a socket already listening on this process's address, is for hosts that must announce
    the address before the cluster starts; it is closed once every peer has connected.
    ``check_serialization``, ``log`` and ``recovery`` are as for :func:`execute` (the store is opened before
    this process connects to the others; a process joining a running computation restores nothing). ``platform``
    is the clock, threads and transport the process runs on (:mod:`pytimely.communication.platform`; a
    simulator's in :mod:`pytimely.simulate`). In an
    elastic cluster, ``on_leave(process)`` is called when this process leaves (however its workers came to call
    :meth:`Worker.leave`), before any peer hears of it: ``pytimely run`` uses it to tell
    ``pytimely launch --elastic``'s control endpoint.
    """
    from pytimely.communication.cluster import Cluster

    session = None
    try:
        if recovery is not None:
            session = recovery.open(process=config.process, joining=config.join, threads=platform.threads)
        cluster = Cluster(config, listener=listener, on_leave=on_leave, platform=platform)
    except BaseException:
        if session is not None:
            session.close()
        if listener is not None:
            listener.close()
        raise
    previous: Any = None
    if config.elastic and platform is REAL and threading.current_thread() is threading.main_thread():
        # ``pytimely launch --elastic`` asks a process to leave with SIGUSR1; its job decides when. The
        # caller's handler is put back when the run ends.
        previous = signal.signal(signal.SIGUSR1, lambda *_: setattr(cluster, "leave_requested", True))
    try:
        return _run_cluster(cluster, func, config, listener, check_serialization, log, session)
    finally:
        if previous is not None:
            signal.signal(signal.SIGUSR1, previous)
        if session is not None:
            session.close()


def _run_cluster(
    cluster: Cluster,
    func: Callable[[Worker], R],
    config: Config,
    listener: socket.socket | None,
    check_serialization: bool,
    log: Sink | None,
    session: Session | None = None,
) -> list[R]:
    """Start ``cluster``, run ``func`` on this process's workers and return their results in order."""
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        if listener is not None:
            listener.close()
        raise
    try:
        platform = cluster.platform
        workers = [
            Worker(
                cluster.allocator(i),
                check_serialization=check_serialization,
                log=log,
                join_timeout=config.connect_timeout,  # a newcomer's bootstrap is part of its start-up
                clock=platform.clock,
                threads=platform.threads,
            )
            for i in range(config.workers)
        ]
        if session is not None:
            for worker in workers:
                worker.recover_with(session.worker(worker))
        results: list[Any] = [None] * config.workers
        errors: list[BaseException] = []

        def body(i: int) -> None:
            worker = workers[i]
            try:
                results[i] = func(worker)
                worker.finish()
                cluster.allocator(i).retire()
            except BaseException as exc:
                errors.append(exc)
                cluster.fail(exc)

        threads = [
            platform.threads.spawn(body, f"pytimely-worker-{config.first_worker + i}", i) for i in range(config.workers)
        ]
        _join(threads, cluster, config.heartbeat)
        if errors:
            raise errors[0]
        cluster.finish()
        return results
    finally:
        cluster.close()


def _join(threads: list[Task], cluster: Cluster, grace: float) -> None:
    """Wait for the worker threads; after a failure, wait only ``grace`` more (a thread may be stuck in user code)."""
    now = cluster.platform.clock.monotonic
    failed_at: float | None = None
    for thread in threads:
        while thread.is_alive():
            thread.join(0.05)
            if cluster.failure is not None:
                failed_at = failed_at if failed_at is not None else now()
                if now() - failed_at > grace:
                    raise cluster.failure

"""The simulator's kernel: simulated time, and threads that take turns, in an order a seed chooses.

Every thread of every simulated process is a real Python thread, but only one
runs at a time: the one the kernel handed the turn. A thread gives the turn
back whenever it would wait in the real world (a lock someone else holds, a
condition, an event, a sleep, a socket with nothing to read) and at the
*checkpoints* the runtime names (a worker's step, a link's batch), where the
kernel charges it simulated CPU time. When no thread can run, simulated time
jumps to the next timer (a timeout, a delivery of the simulated network, a
fault). Which runnable thread goes next is drawn from the seed, so the same
seed replays the same run; another seed interleaves the threads differently.

Time is simulated throughout: a 10-second timeout costs no wall time, only the
events up to it. A thread that blocks *outside* the kernel (a real lock, a
real socket, a thread of its own) would stop the simulation: the kernel notices
within :data:`WATCHDOG` seconds of wall time and names it
(:class:`~pytimely.errors.NotSimulableError`), as it names any thread it did not
start.

:class:`~pytimely.simulate.threads.SimThreads` and :class:`~pytimely.simulate.threads.SimClock`
(:mod:`pytimely.simulate.threads`) are the kernel seen as a process's
:class:`~pytimely.communication.platform.Threads` and :class:`~pytimely.communication.platform.Clock`.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import sys
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import NotSimulableError

__all__ = [
    "WATCHDOG",
    "Costs",
    "Kernel",
    "Killed",
    "SimProcess",
    "SimTask",
]

WATCHDOG = 60.0
"""Wall-clock seconds a simulated thread may run without giving the turn back before it is named as blocked
outside the simulator."""


class _Carrier:
    """A real thread that carries one simulated thread after another (starting a thread costs more than a turn)."""

    def __init__(self) -> None:
        self.job: Callable[[], None] | None = None
        self.ready = threading.Lock()
        self.ready.acquire()
        self.thread = threading.Thread(target=self._loop, name="sim-carrier", daemon=True)
        _CARRIERS.add(self.thread)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            self.ready.acquire()
            job, self.job = self.job, None
            assert job is not None
            job()
            _IDLE.append(self)

    def carry(self, job: Callable[[], None]) -> None:
        """Run ``job`` on this thread."""
        self.job = job
        self.ready.release()


_CARRIERS: set[threading.Thread] = set()
"""Every real thread that carries simulated ones."""
_IDLE: list[_Carrier] = []
"""Carriers waiting for a simulated thread to carry."""
_RUNNING: list[Kernel] = []
"""The kernel that runs now (any thread started meanwhile that is not a carrier is a stranger to it)."""


def _carrier() -> _Carrier:
    try:
        return _IDLE.pop()
    except IndexError:
        return _Carrier()


def _first_call(frame: Any, event: str, arg: Any) -> None:
    """The profile hook of a thread started while a kernel runs: a carrier goes on; any other is a stranger."""
    sys.setprofile(None)
    thread = threading.current_thread()
    if thread not in _CARRIERS and _RUNNING:
        _RUNNING[-1].stranger(thread)


class Killed(BaseException):
    """Unwinds a simulated thread whose process was killed (or every thread, when a simulation ends)."""


@dataclass(slots=True)
class Costs:
    """Simulated CPU seconds charged at each checkpoint, before a process's slowness multiplies them."""

    step: float = 50e-6
    link: float = 0.0
    """A link's batches cost nothing of their own (the link threads wait on their sockets anyway): its
    checkpoints are only where BUGGIFY may hold them."""
    other: float = 0.0

    def of(self, site: str) -> float:
        """The cost of passing ``site``."""
        if site == "worker-step":
            return self.step
        if site.startswith("link"):
            return self.link
        return self.other


@dataclass(eq=False, slots=True)
class SimProcess:
    """What the kernel knows of one simulated process: its threads' speed, pauses, and whether it was killed."""

    name: str
    slowness: float = 1.0
    """Multiplies the cost of every checkpoint of its threads (a slow process)."""
    paused_until: float = 0.0
    """Its threads do not run before this simulated time (a paused process)."""
    killed: bool = False
    tasks: list[SimTask] = field(default_factory=list)


class SimTask:
    """A simulated thread: a real thread that runs only while the kernel has handed it the turn."""

    __slots__ = (
        "_args",
        "_target",
        "finished",
        "go",
        "joiners",
        "kernel",
        "name",
        "process",
        "runnable",
        "thread",
        "timed_out",
        "token",
    )
    thread: threading.Thread | None

    def __init__(
        self, kernel: Kernel, name: str, process: SimProcess, target: Callable[..., object], args: tuple[Any, ...]
    ) -> None:
        self.kernel = kernel
        self.name = name
        self.process = process
        self._target = target
        self._args = args
        self.go = threading.Lock()
        self.go.acquire()
        self.finished = False
        self.runnable = False
        self.timed_out = False
        self.token = 0
        self.joiners: list[SimTask] = []
        self.thread = None
        """The real thread carrying it, while it runs."""

    def _main(self) -> None:
        kernel = self.kernel
        self.thread = threading.current_thread()
        self.go.acquire()
        try:
            if not self.process.killed and not kernel.stopping:
                self._target(*self._args)
        except Killed:
            pass
        except BaseException as exc:
            kernel.uncaught(self, exc)
        finally:
            self.finished = True
            kernel._ended(self)
            kernel._back.release()

    # -- the Task protocol -------------------------------------------------------------------------

    def is_alive(self) -> bool:
        """Whether it has not finished."""
        return not self.finished

    def is_current(self) -> bool:
        """Whether it is the one running."""
        return self.kernel.current is self

    def join(self, timeout: float | None = None) -> None:
        """Wait until it finishes, up to ``timeout`` simulated seconds."""
        if self.finished:
            return
        self.kernel.wait_on(self.joiners, timeout)

    def __repr__(self) -> str:
        return f"<SimTask {self.process.name}:{self.name}>"


class Kernel:
    """Simulated time, timers, and the one turn that simulated threads take."""

    def __init__(self, rng: random.Random, *, costs: Costs | None = None) -> None:
        self.rng = rng
        self.now = 0.0
        self.costs = costs or Costs()
        self.current: SimTask | None = None
        self.tasks: list[SimTask] = []
        self.switches = 0
        self.buggify: Callable[[SimTask, str], float] | None = None
        """Extra simulated seconds a thread is held at a checkpoint (BUGGIFY-style slowness), if set."""
        self.errors: list[tuple[SimTask, BaseException, str]] = []
        """Exceptions simulated threads died of (a real thread would print them and die silently)."""
        self.stopping = False
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._runnable: list[SimTask] = []
        self._back = threading.Lock()
        self._back.acquire()
        self._strangers: list[str] = []

    # -- threads ----------------------------------------------------------------------------------------------

    def spawn(self, process: SimProcess, name: str, target: Callable[..., object], *args: Any) -> SimTask:
        """A simulated thread of ``process`` running ``target(*args)``; it runs when the kernel hands it the turn."""
        task = SimTask(self, name, process, target, args)
        self.tasks.append(task)
        process.tasks.append(task)
        _carrier().carry(task._main)
        self.wake(task)
        return task

    def wake(self, task: SimTask) -> None:
        """Make ``task`` runnable (it will run when the kernel picks it); a killed process's threads stay put."""
        if not task.runnable and not task.finished and not task.process.killed:
            task.runnable = True
            self._runnable.append(task)

    def unwinding(self) -> bool:
        """Whether the running thread is being unwound (its process was killed, or the simulation ends)."""
        task = self.current
        return self.stopping or (task is not None and task.process.killed)

    def _ended(self, task: SimTask) -> None:
        for joiner in task.joiners:
            joiner.timed_out = False
            self.wake(joiner)
        task.joiners.clear()

    def uncaught(self, task: SimTask, exc: BaseException) -> None:
        """A simulated thread died of ``exc``."""
        text = "".join(traceback.format_exception(exc))
        self.errors.append((task, exc, text))

    def block(self) -> None:
        """The running thread gives the turn back and waits to be handed it again (:class:`Killed` if its process
        was killed meanwhile)."""
        task = self.current
        if task is None:
            raise NotSimulableError("a simulated primitive waited outside any simulated thread")
        self._back.release()
        task.go.acquire()
        if task.process.killed or self.stopping:
            raise Killed

    def wait_on(self, waiters: deque[SimTask] | list[SimTask], timeout: float | None) -> bool:
        """Wait in ``waiters`` until :meth:`notify` or ``timeout`` simulated seconds; whether notified."""
        task = self.current
        if task is None:
            raise NotSimulableError("a simulated primitive waited outside any simulated thread")
        task.token += 1
        token = task.token
        task.timed_out = False
        waiters.append(task)
        if timeout is not None:
            self.at(self._after(timeout), lambda: self._expire(task, token, waiters))
        self.block()
        return not task.timed_out

    def _expire(self, task: SimTask, token: int, waiters: deque[SimTask] | list[SimTask]) -> None:
        if task.token == token and task in waiters:
            waiters.remove(task)
            task.timed_out = True
            self.wake(task)

    def notify(self, waiters: deque[SimTask] | list[SimTask], n: int | None = None) -> None:
        """Wake up to ``n`` (default: all) threads waiting in ``waiters``."""
        count = len(waiters) if n is None else min(n, len(waiters))
        for _ in range(count):
            task = waiters.pop(0) if isinstance(waiters, list) else waiters.popleft()
            task.token += 1
            task.timed_out = False
            self.wake(task)

    def sleep(self, seconds: float) -> None:
        """The running thread waits ``seconds`` of simulated time (0: lets others run first)."""
        task = self.current
        if task is None:
            raise NotSimulableError("a simulated sleep outside any simulated thread")
        if seconds <= 0:
            self.wake(task)
        else:
            task.token += 1
            token = task.token
            self.at(self._after(seconds), lambda: self._alarm(task, token))
        self.block()

    def _after(self, seconds: float) -> float:
        """The time ``seconds`` from now; a wait of any length moves time on by at least one step of the float
        (a deadline a few ulps away would otherwise be reached without time moving, and the waiter spin)."""
        when = self.now + max(0.0, seconds)
        if seconds > 0 and when <= self.now:
            when = math.nextafter(self.now, math.inf)
        return when

    def _alarm(self, task: SimTask, token: int) -> None:
        if task.token == token:
            self.wake(task)

    def checkpoint(self, site: str) -> None:
        """The running thread passes ``site``: it is charged its simulated CPU time there (and BUGGIFY's)."""
        task = self.current
        if task is None:
            return
        cost = self.costs.of(site) * task.process.slowness
        if self.buggify is not None:
            cost += self.buggify(task, site)
        if cost > 0:
            self.sleep(cost)

    # -- timers ---------------------------------------------------------------------------------------------

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the kernel's thread) at simulated time ``when``."""
        heapq.heappush(self._timers, (when, next(self._seq), callback))

    # -- running --------------------------------------------------------------------------------------------

    def run(self, done: Callable[[], bool], *, until: float, max_switches: int) -> bool:
        """Run threads and timers until ``done()``, simulated time ``until`` or ``max_switches`` turns; whether
        ``done()`` held. A thread that something other than the kernel starts meanwhile is a
        :class:`~pytimely.errors.NotSimulableError`."""
        previous = threading.getprofile()
        threading.setprofile(_first_call)
        _RUNNING.append(self)
        try:
            return self._run(done, until, max_switches)
        finally:
            _RUNNING.pop()
            threading.setprofile(previous)

    def _run(self, done: Callable[[], bool], until: float, max_switches: int) -> bool:
        rng = self.rng
        runnable = self._runnable
        timers = self._timers
        while not done():
            if self.switches >= max_switches:
                return False
            if runnable:
                ready = [t for t in runnable if t.process.paused_until <= self.now]
                if not ready:
                    # Only threads of paused processes could run: let time pass to the next event or resumption.
                    resume = min(t.process.paused_until for t in runnable)
                    if timers and timers[0][0] < resume:
                        self._fire()
                    else:
                        self.now = max(self.now, resume)
                    continue
                task = ready[rng.randrange(len(ready))] if len(ready) > 1 else ready[0]
                runnable.remove(task)
                task.runnable = False
                self._switch(task)
                if self._strangers:
                    raise NotSimulableError(
                        f"{self._strangers[0]}: the simulator runs only threads it starts itself (a user operator "
                        "with threads of its own cannot be simulated; give it the platform's threads, or test it "
                        "on real processes)"
                    )
            elif timers:
                if timers[0][0] > until:
                    return False
                self._fire()
            else:
                return done()
        return True

    def advance(self, to: float) -> None:
        """Let simulated time pass until ``to`` with no thread running (timers due by then fire)."""
        timers = self._timers
        while timers and timers[0][0] <= to:
            self._fire()
        self.now = max(self.now, to)

    def _fire(self) -> None:
        when, _, callback = heapq.heappop(self._timers)
        if when > self.now:
            self.now = when
        callback()

    def _switch(self, task: SimTask) -> None:
        self.switches += 1
        self.current = task
        task.go.release()
        if not self._back.acquire(timeout=WATCHDOG):
            frame = sys._current_frames().get(task.thread.ident or -1) if task.thread is not None else None
            where = "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"
            raise NotSimulableError(
                f"simulated thread {task.process.name}:{task.name} ran {WATCHDOG:g} s of wall time without giving "
                f"the turn back: it waits on something outside the simulator (a real lock, socket or sleep, or a "
                f"thread of its own). It was at:\n{where}"
            )
        self.current = None

    def stranger(self, thread: threading.Thread) -> None:
        """``thread`` started while this kernel ran, and not by it."""
        target = getattr(thread, "_target", None)
        what = getattr(target, "__qualname__", repr(target))
        by = self.current
        started = ""
        if by is not None:
            started = f" by simulated thread {by.process.name}:{by.name}"
            frame = sys._current_frames().get(by.thread.ident or -1) if by.thread is not None else None
            calls = [f for f in traceback.extract_stack(frame) if not f.filename.endswith("threading.py")]
            if calls:
                started += f" in {calls[-1].name} ({calls[-1].filename.rsplit('/', 1)[-1]}:{calls[-1].lineno})"
        self._strangers.append(f"thread {thread.name!r} (running {what}) was started{started}")

    def strangers(self) -> list[str]:
        """Threads that started while the kernel ran, not by it (a workload's own)."""
        return list(self._strangers)

    def kill(self, process: SimProcess) -> None:
        """Stop every thread of ``process`` where it is: none runs again (each unwinds at the end, see
        :meth:`shutdown`)."""
        process.killed = True
        for task in process.tasks:
            if task.runnable:
                self._runnable.remove(task)
                task.runnable = False

    def shutdown(self) -> None:
        """Unwind every simulated thread still there (each gets :class:`Killed` where it waits) and join them."""
        self.stopping = True
        for _ in range(8):
            pending = [t for t in self.tasks if not t.finished]
            if not pending:
                break
            for task in pending:
                if task.finished:
                    continue
                self.current = task
                task.go.release()
                if not self._back.acquire(timeout=WATCHDOG):
                    raise NotSimulableError(f"simulated thread {task.process.name}:{task.name} did not unwind")
                self.current = None
        self._runnable.clear()
        self._timers.clear()


def running(tasks: Iterable[SimTask]) -> list[str]:
    """The names of the tasks that have not finished."""
    return [f"{t.process.name}:{t.name}" for t in tasks if not t.finished]

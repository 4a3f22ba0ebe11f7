"""What the runtime runs on: a clock, threads and a transport, real in production and simulated in tests.

Every deadline, sleep, heartbeat, socket and background thread of a cluster
process goes through one :class:`Platform`:

* :class:`Clock`: what time it is (``monotonic``) and waiting (``sleep``);
* :class:`Threads`: starting a background thread, and the locks, conditions and events threads share; a
  ``checkpoint`` names a place where another thread may run first (a worker's step, a link's batch);
* :class:`~pytimely.communication.transport.Transport`: listening, dialling and moving bytes.

:data:`REAL` is ``time``, ``threading`` and TCP, and costs what calling them directly costs: its clock's
``monotonic`` *is* ``time.monotonic``, its locks are ``threading``'s, its checkpoint does nothing. The
simulator (:mod:`pytimely.simulate`) hands in one clock, one scheduler and one network for every simulated
process, all driven by a seed, so a run of the real runtime is a function of that seed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from pytimely.communication.transport import TCP, Transport

__all__ = ["REAL", "REAL_CLOCK", "REAL_THREADS", "Clock", "Condition", "Event", "Lock", "Platform", "Task", "Threads"]


class Clock(Protocol):
    """Monotonic time in seconds, and waiting."""

    def monotonic(self) -> float:
        """Seconds since some fixed point; never goes back."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class Lock(Protocol):
    """A mutual-exclusion lock (what ``threading.Lock()`` gives)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool:
        """Take the lock; whether it was taken."""
        ...

    def release(self) -> None:
        """Give the lock back."""
        ...

    def locked(self) -> bool:
        """Whether someone holds it."""
        ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...


class Condition(Protocol):
    """A condition variable with its lock (what ``threading.Condition()`` gives)."""

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock, wait to be notified or for ``timeout`` seconds, take the lock again."""
        ...

    def notify(self, n: int = 1) -> None:
        """Wake up to ``n`` waiters."""
        ...

    def notify_all(self) -> None:
        """Wake every waiter."""
        ...

    def __enter__(self) -> bool: ...

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None, /
    ) -> None: ...


class Event(Protocol):
    """A flag threads wait on (what ``threading.Event()`` gives)."""

    def is_set(self) -> bool:
        """Whether the flag is set."""
        ...

    def set(self) -> None:
        """Set the flag and wake every waiter."""
        ...

    def clear(self) -> None:
        """Reset the flag."""
        ...

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the flag is set or ``timeout`` seconds passed; whether it is set."""
        ...


class Task(Protocol):
    """A background thread started through :meth:`Threads.spawn`."""

    @property
    def name(self) -> str:
        """The thread's name."""
        ...

    def is_alive(self) -> bool:
        """Whether it still runs."""
        ...

    def is_current(self) -> bool:
        """Whether it is the one calling."""
        ...

    def join(self, timeout: float | None = None) -> None:
        """Wait for it to end, up to ``timeout`` seconds."""
        ...


class Threads(Protocol):
    """Starting threads, and what they share."""

    def spawn(self, target: Callable[..., object], name: str, *args: Any) -> Task:
        """Start ``target(*args)`` on a background (daemon) thread called ``name``."""
        ...

    def lock(self) -> Lock:
        """A new lock."""
        ...

    def condition(self) -> Condition:
        """A new condition variable with a lock of its own."""
        ...

    def event(self) -> Event:
        """A new event."""
        ...

    def executor(self, workers: int, name: str) -> Executor:
        """A pool of ``workers`` threads running submitted calls, named after ``name`` (what recovery writes
        snapshots with)."""
        ...

    def checkpoint(self, site: str) -> None:
        """The calling thread is at ``site``, where another thread may run before it goes on (nothing happens in
        production; a simulator may switch threads there, or make this one slow)."""
        ...


@dataclass(frozen=True, slots=True)
class Platform:
    """A clock, threads and a transport, used together by every part of a process."""

    clock: Clock
    threads: Threads
    transport: Transport


class RealClock:
    """``time.monotonic`` and ``time.sleep``."""

    monotonic = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)


class _RealTask:
    """A ``threading.Thread``, started."""

    __slots__ = ("_thread",)

    def __init__(self, thread: threading.Thread) -> None:
        self._thread = thread

    @property
    def name(self) -> str:
        """The thread's name."""
        return self._thread.name

    def is_alive(self) -> bool:
        """``Thread.is_alive``."""
        return self._thread.is_alive()

    def is_current(self) -> bool:
        """Whether it is ``threading.current_thread()``."""
        return self._thread is threading.current_thread()

    def join(self, timeout: float | None = None) -> None:
        """``Thread.join``."""
        self._thread.join(timeout)


def _nothing(site: str) -> None:
    """The production checkpoint: nothing to do."""


class RealThreads:
    """``threading``: daemon threads, its locks, conditions and events."""

    lock = staticmethod(threading.Lock)
    condition = staticmethod(threading.Condition)
    event = staticmethod(threading.Event)
    checkpoint = staticmethod(_nothing)

    def spawn(self, target: Callable[..., object], name: str, *args: Any) -> Task:
        """A started daemon ``threading.Thread``."""
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return _RealTask(thread)

    def executor(self, workers: int, name: str) -> Executor:
        """A ``ThreadPoolExecutor``."""
        return ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)


REAL_CLOCK: Clock = RealClock()
REAL_THREADS: Threads = RealThreads()
REAL = Platform(REAL_CLOCK, REAL_THREADS, TCP)
"""What every process that is not simulated runs on."""

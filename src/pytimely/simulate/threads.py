"""The kernel seen as a process's :class:`~pytimely.communication.platform.Threads` and
:class:`~pytimely.communication.platform.Clock`: simulated time, and locks, conditions, events, futures and
executors whose waiters wait in the kernel (see :mod:`pytimely.simulate.kernel`)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from types import TracebackType
from typing import Any, TypeVar

from pytimely.communication.platform import Task
from pytimely.simulate.kernel import Kernel, Killed, SimProcess, SimTask

__all__ = ["SimClock", "SimCondition", "SimEvent", "SimExecutor", "SimFuture", "SimLock", "SimThreads"]

T = TypeVar("T")


class SimClock:
    """The kernel's simulated time, as a :class:`~pytimely.communication.platform.Clock`."""

    __slots__ = ("_kernel",)

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel

    def monotonic(self) -> float:
        """Simulated seconds since the simulation began."""
        return self._kernel.now

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time."""
        self._kernel.sleep(seconds)


class SimLock:
    """A lock whose waiters wait in the kernel."""

    __slots__ = ("_kernel", "_owner", "_waiters")

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._owner: object | None = None
        self._waiters: deque[SimTask] = deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock, waiting in the kernel while another thread holds it."""
        kernel = self._kernel
        me = kernel.current if kernel.current is not None else kernel
        if self._owner is None:
            self._owner = me
            return True
        if not blocking:
            return False
        # Notified: release() handed the lock to this thread.
        return kernel.wait_on(self._waiters, None if timeout < 0 else timeout)

    def release(self) -> None:
        """Give the lock back, to the first waiter if there is one."""
        if self._owner is None:
            if self._kernel.unwinding():
                return  # a thread unwinding from a wait it was killed in holds nothing
            raise RuntimeError("release of an unlocked simulated lock")
        waiters = self._waiters
        if waiters:
            task = waiters.popleft()
            self._owner = task
            task.token += 1
            task.timed_out = False
            self._kernel.wake(task)
        else:
            self._owner = None

    def locked(self) -> bool:
        """Whether someone holds it."""
        return self._owner is not None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None, /
    ) -> None:
        self.release()


class SimCondition:
    """A condition variable whose waiters wait in the kernel."""

    __slots__ = ("_kernel", "_lock", "_waiters")

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._lock = SimLock(kernel)
        self._waiters: deque[SimTask] = deque()

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock, wait to be notified or ``timeout`` simulated seconds, take the lock again."""
        self._lock.release()
        try:
            notified = self._kernel.wait_on(self._waiters, timeout)
        finally:
            if not self._kernel.unwinding():
                self._lock.acquire()
        return notified

    def notify(self, n: int = 1) -> None:
        """Wake up to ``n`` waiters."""
        self._kernel.notify(self._waiters, n)

    def notify_all(self) -> None:
        """Wake every waiter."""
        self._kernel.notify(self._waiters)

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None, /
    ) -> None:
        self._lock.release()


class SimEvent:
    """An event whose waiters wait in the kernel."""

    __slots__ = ("_flag", "_kernel", "_waiters")

    def __init__(self, kernel: Kernel) -> None:
        self._kernel = kernel
        self._flag = False
        self._waiters: list[SimTask] = []

    def is_set(self) -> bool:
        """Whether the flag is set."""
        return self._flag

    def set(self) -> None:
        """Set the flag; wake every waiter."""
        self._flag = True
        if self._waiters:
            self._kernel.notify(self._waiters)

    def clear(self) -> None:
        """Reset the flag."""
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the flag is set or ``timeout`` simulated seconds passed; whether it is set."""
        if self._flag:
            return True
        if timeout is not None and timeout <= 0:
            return False
        self._kernel.wait_on(self._waiters, timeout)
        return self._flag


class SimFuture(Future[T]):
    """A future whose ``result`` waits in the kernel (a ``concurrent.futures.Future`` otherwise)."""

    def __init__(self, kernel: Kernel) -> None:
        super().__init__()
        self._sim_kernel = kernel
        self._sim_waiters: list[SimTask] = []
        self.add_done_callback(lambda _: kernel.notify(self._sim_waiters))

    def _sim_wait(self, timeout: float | None) -> None:
        if not self.done():
            self._sim_kernel.wait_on(self._sim_waiters, timeout)

    def result(self, timeout: float | None = None) -> T:
        """The result, waiting up to ``timeout`` simulated seconds (``TimeoutError`` after)."""
        self._sim_wait(timeout)
        return super().result(timeout=0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception, waiting up to ``timeout`` simulated seconds."""
        self._sim_wait(timeout)
        return super().exception(timeout=0)


class SimExecutor(Executor):
    """A pool of simulated threads running submitted calls in order (what a ``ThreadPoolExecutor`` is)."""

    def __init__(self, threads: SimThreads, workers: int, name: str) -> None:
        self._threads = threads
        self._kernel = threads.kernel
        self._queue: deque[tuple[SimFuture[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = deque()
        self._idle: list[SimTask] = []
        self._closed = False
        self._running = [threads.spawn(self._work, f"{name}-{i}") for i in range(workers)]

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; a future of its result."""
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: SimFuture[T] = SimFuture(self._kernel)
        self._queue.append((future, fn, args, kwargs))
        self._kernel.notify(self._idle, 1)
        return future

    def _work(self) -> None:
        kernel = self._kernel
        while True:
            while not self._queue:
                if self._closed:
                    return
                kernel.wait_on(self._idle, None)
            future, fn, args, kwargs = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except Killed:
                raise
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Finish the queued calls (or cancel them), then stop the threads."""
        self._closed = True
        if cancel_futures:
            while self._queue:
                self._queue.popleft()[0].cancel()
        self._kernel.notify(self._idle)
        if wait:
            for task in self._running:
                task.join()


class SimThreads:
    """The kernel as one simulated process's :class:`~pytimely.communication.platform.Threads`."""

    def __init__(self, kernel: Kernel, process: SimProcess) -> None:
        self.kernel = kernel
        self.process = process

    def spawn(self, target: Callable[..., object], name: str, *args: Any) -> Task:
        """A simulated thread of this process."""
        return self.kernel.spawn(self.process, name, target, *args)

    def lock(self) -> SimLock:
        """A lock waited on in the kernel."""
        return SimLock(self.kernel)

    def condition(self) -> SimCondition:
        """A condition waited on in the kernel."""
        return SimCondition(self.kernel)

    def event(self) -> SimEvent:
        """An event waited on in the kernel."""
        return SimEvent(self.kernel)

    def checkpoint(self, site: str) -> None:
        """Charge the running thread its simulated CPU time at ``site``."""
        self.kernel.checkpoint(site)

    def executor(self, workers: int, name: str) -> Executor:
        """A pool of ``workers`` simulated threads."""
        return SimExecutor(self, workers, name)

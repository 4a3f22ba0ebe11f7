"""Module code in worker processes: the pool, the worker's side (started calls, a dead parent), and how a
call and its failure travel by pickle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import struct
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from pytimely.errors import ModuleRaisedError, UnpicklableCallError, UnpicklableOutputError, WorkerDiedError
from pytimely.workflow.executors.call import Call, invoke
from pytimely.workflow.executors.executor import ExecutorBase


class ProcessExecutor(ExecutorBase):
    """Runs module code in a pool of worker processes (started with ``spawn`` unless ``mp_context`` says otherwise).

    The function must be picklable by reference (a module-level function, or an object of a module-level class);
    the inputs and parameters are pickled once per call, and the result pickled back. A worker process that
    dies (``os._exit``, a signal) fails every call the pool was running or holding with
    :class:`WorkerDiedError` (the pool cannot tell whose process died), and a fresh pool takes the next calls.

    A cancelled ``run`` (a module's timeout, a failed run) stops its call: the process running it is killed
    (or, if the call has not started, it is killed as it starts). The other calls the pool was running or
    holding are sent again to a fresh pool; for them the kill is not a failure.
    """

    def __init__(self, max_workers: int | None = None, *, mp_context: str = "spawn") -> None:
        self._context = multiprocessing.get_context(mp_context)
        self._max_workers = max_workers
        self._lock = threading.Lock()
        self._shutdown_lock = threading.Lock()
        self._tokens = itertools.count()
        # Worker processes say which call they start and end here, so a cancelled call's process can be found.
        # A plain pipe, not a queue: a message is one write of under PIPE_BUF bytes, atomic without a lock, so a
        # process killed at any moment cannot leave a lock held for the others.
        self._events, self._event_writer = self._context.Pipe(duplex=False)
        self._running: dict[int, int] = {}  # call token -> pid of the process running it
        self._pool_of: dict[int, concurrent.futures.ProcessPoolExecutor] = {}  # call token -> its pool
        self._doomed: set[int] = set()  # cancelled calls that had left the pool's queue but not yet started
        self._killed: set[concurrent.futures.ProcessPoolExecutor] = set()  # pools we broke on purpose
        self._pool = self._new_pool()
        self._listener = threading.Thread(target=self._listen, name="pytimely-process-calls", daemon=True)
        self._listener.start()

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            self._max_workers, mp_context=self._context, initializer=_start_worker,
            initargs=(os.getpid(), self._event_writer),
        )  # fmt: skip

    def _listen(self) -> None:
        """Keep track of which process runs which call, and kill a doomed call's process as it starts."""
        while True:
            try:
                kind, token, pid = _CALL_EVENT.unpack(self._events.recv_bytes(_CALL_EVENT.size))
            except (EOFError, OSError, struct.error):
                return
            if kind == b"c":
                return
            with self._lock:
                if kind == b"e":
                    self._running.pop(token, None)
                    continue
                self._running[token] = pid
                if token in self._doomed:
                    self._doomed.discard(token)
                    self._kill(token, pid)
                    self._pool_of.pop(token, None)

    def _kill(self, token: int, pid: int) -> None:
        """Kill the process ``pid`` running call ``token`` (called with ``_lock`` held)."""
        pool = self._pool_of.get(token)
        if pool is not None:
            self._killed.add(pool)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    def _stop(self, token: int, future: concurrent.futures.Future[Any]) -> None:
        """Stop a cancelled call: drop it if it has not left the pool's queue, else kill its process."""
        with self._lock:
            pid = self._running.get(token)
            if pid is not None:
                self._kill(token, pid)
            elif not future.cancel() and not future.done():
                self._doomed.add(token)

    def terminate(self) -> None:
        """Stop now: kill the worker processes (running calls are lost) and close (Ctrl-C, a failed run)."""
        with self._lock:
            self._closed = True
            pool = self._pool
        # The pool has no public way to stop a running call: its processes are killed.
        for process in list((getattr(pool, "_processes", None) or {}).values()):
            with contextlib.suppress(OSError, ValueError):
                process.kill()
        self._shutdown(pool)
        self._close_listener()

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` in a worker process and return its out-port values."""
        self._check_open(call)
        payload = _pickle_call(call)
        while True:
            token = next(self._tokens)
            with self._lock:
                self._check_open(call)
                pool = self._pool
                try:
                    future = pool.submit(_run_pickled, token, payload)
                except BrokenProcessPool:
                    # Broken by an earlier call's death and not yet replaced: replace it here.
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = self._pool = self._new_pool()
                    future = pool.submit(_run_pickled, token, payload)
                self._pool_of[token] = pool
            try:
                outcome = await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                self._stop(token, future)
                with self._lock:
                    if token not in self._doomed:
                        self._pool_of.pop(token, None)
                raise
            except BrokenProcessPool as exc:
                await asyncio.to_thread(self._replace, pool)
                with self._lock:
                    killed = pool in self._killed
                    self._pool_of.pop(token, None)
                if killed:
                    continue  # the pool was broken to stop another call: this one is sent again
                raise WorkerDiedError(
                    f"a worker process died (killed, or exited without answering) while module {call.module!r} "
                    "was running or waiting in its pool",
                    call.module,
                ) from exc
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                # The pool could not pickle the result to send it back (user errors come back as _Raised).
                with self._lock:
                    self._pool_of.pop(token, None)
                raise UnpicklableOutputError(
                    f"module {call.module!r} returned a value that cannot be sent back from its worker process "
                    f"({type(exc).__name__}: {exc}); return plain data, or run it on the thread executor",
                    call.module,
                ) from exc
            with self._lock:
                self._pool_of.pop(token, None)
            break
        if isinstance(outcome, _Unloadable):
            raise UnpicklableCallError(
                f"module {call.module!r} cannot be loaded in a worker process: {outcome.message}", call.module
            )
        if isinstance(outcome, _Raised):
            raise ModuleRaisedError(
                outcome.message, call.module, file=outcome.file, line=outcome.line, stdout=outcome.stdout,
                stderr=outcome.stderr,
            ) from outcome.error  # fmt: skip
        return call.outputs_of(outcome)

    def _replace(self, broken: concurrent.futures.ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken and not self._closed:
                self._pool = self._new_pool()
        self._shutdown(broken)  # every call the dead worker failed comes here: joins what is left of it

    def close(self) -> None:
        """Wait for running calls and stop the worker processes."""
        with self._lock:
            self._closed = True
            pool = self._pool
        self._shutdown(pool)
        self._close_listener()

    def _shutdown(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        # One shutdown of a pool at a time (a Ctrl-C's terminate, a run's close, a dead worker's replacement can
        # meet): two at once close its pipes twice (EBADF).
        with self._shutdown_lock, contextlib.suppress(OSError):
            pool.shutdown(wait=True, cancel_futures=True)

    def _close_listener(self) -> None:
        if self._listener.is_alive():
            with contextlib.suppress(OSError, ValueError):
                self._event_writer.send_bytes(_CALL_EVENT.pack(b"c", -1, os.getpid()))
            self._listener.join(5.0)


PARENT_POLL_SECONDS = 0.2
"""How often a worker process checks that the process that started it is still alive."""


_CALL_EVENT = struct.Struct("<cqq")
"""A call event: ``s`` (started), ``e`` (ended) or ``c`` (the executor closed); the call's token; a pid."""

_CALL_EVENTS: multiprocessing.connection.Connection | None = None
"""In a worker process: where it says which call it starts and ends (see ``ProcessExecutor._listen``)."""


def _start_worker(parent: int, events: multiprocessing.connection.Connection) -> None:
    """In a worker: watch the parent and keep the pipe for the call events."""
    global _CALL_EVENTS
    _CALL_EVENTS = events
    _watch_parent(parent)


def _watch_parent(parent: int) -> None:
    """In a worker: exit as soon as ``parent`` is gone (killed with SIGKILL, say) instead of living on orphaned,
    holding the command's stderr. A thread polls the parent pid: the kernel's parent-death signal follows the
    thread that started the worker, which may end long before the pool does."""

    # Ctrl-C reaches the whole process group: the command decides what stops, not each worker on its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(PARENT_POLL_SECONDS)

    threading.Thread(target=watch, name="pytimely-parent-watch", daemon=True).start()


@dataclass(frozen=True, slots=True)
class _Raised:
    """User code in a worker process raised ``error`` (sent back as a value to tell it from pool failures), with
    the message naming where, and what the call printed."""

    error: BaseException
    message: str
    file: str | None
    line: int | None
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class _Unloadable:
    """The call could not be unpickled in the worker process."""

    message: str


def _pickle_call(call: Call) -> bytes:
    try:
        pickle.dumps(call.fn, protocol=5)
    except Exception as exc:
        raise UnpicklableCallError(
            f"module {call.module!r}: its function {call.fn!r} cannot be sent to a worker process; define it at "
            f"module level ({type(exc).__name__}: {exc})",
            call.module,
        ) from exc
    arguments = call.arguments()
    try:
        return pickle.dumps((call.module, call.fn, arguments, call.capture, call.watch), protocol=5)
    except Exception as exc:
        for name, value in arguments.items():
            try:
                pickle.dumps(value, protocol=5)
            except Exception:
                raise UnpicklableCallError(
                    f"module {call.module!r}: argument {name!r} (a {type(value).__name__}) cannot be sent to a "
                    f"worker process ({type(exc).__name__}: {exc})",
                    call.module,
                ) from exc
        raise UnpicklableCallError(f"module {call.module!r}: cannot pickle the call ({exc})", call.module) from exc


def _run_pickled(token: int, payload: bytes) -> Any:
    """In the worker process: say the call starts, run it, say it ended; user errors come back as ``_Raised``."""
    events = _CALL_EVENTS
    if events is not None:
        events.send_bytes(_CALL_EVENT.pack(b"s", token, os.getpid()))
    try:
        return _run_call(payload)
    finally:
        if events is not None:
            events.send_bytes(_CALL_EVENT.pack(b"e", token, os.getpid()))


def _run_call(payload: bytes) -> Any:
    """Unpickle the call and run it."""
    try:
        module, fn, arguments, capture, watch = pickle.loads(payload)
    except Exception as exc:
        return _Unloadable(f"{type(exc).__name__}: {exc}")
    try:
        return invoke(Call(module, fn, arguments, capture=capture, watch=watch))
    except ModuleRaisedError as failed:
        error: BaseException = failed.__cause__ or failed
        try:
            pickle.dumps(error)
        except Exception:
            # An exception that cannot travel back is described instead.
            error = RuntimeError(f"{type(error).__module__}.{type(error).__qualname__}: {error}")
        return _Raised(error, str(failed), failed.file, failed.line, failed.stdout, failed.stderr)

"""Executors: where a simple module's code runs.

An executor takes a :class:`Call` — the module's qualified name (for error messages), its function, the keyword
inputs and parameters, and the names of its out-ports — and runs ``fn(**inputs, **params)``. ``await
executor.run(call)`` returns a dict from out-port name to value:

* one out-port: the function's return value is that port's value;
* several: the function returns a mapping with exactly those names (or a tuple in their order);
* none: the return value is ignored and the dict is empty.

User code that raises becomes :class:`~pytimely.errors.ModuleRaisedError` (a
:class:`~pytimely.errors.ModuleFailedError`) naming the module and the file and line where it raised (the
innermost frame of the user's own code), with what it printed when output is captured and the original
exception as ``__cause__``; a return value that does not fit the out-ports is a
:class:`~pytimely.errors.ModuleOutputError`, and one that cannot travel back from a worker process an
:class:`~pytimely.errors.UnpicklableOutputError`.

The :class:`Executor` protocol is ``async run(call)`` plus ``close()``; every executor here is also an async
context manager (``async with ThreadExecutor() as executor: ...``) that closes on exit, leaving no threads or
processes behind. Implementations:

* :class:`ThreadExecutor` (the default): a ``concurrent.futures.ThreadPoolExecutor`` in this process;
* :class:`ProcessExecutor`: a process pool; the function travels by reference (a module-level function), the
  inputs and results by pickle; a worker process that dies gives :class:`~pytimely.errors.WorkerDiedError`;
* :class:`SparkExecutor`: runs in the Spark driver with the session passed to a parameter named ``spark``;
  DataFrames pass as they are;
* :func:`dataflow_step`: makes a pytimely dataflow a simple module's function.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import struct
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from pytimely.errors import (
    ExecutorClosedError,
    InvalidArgument,
    ModuleDefinitionError,
    ModuleOutputError,
    ModuleRaisedError,
    UnpicklableCallError,
    UnpicklableOutputError,
    WorkerDiedError,
)
from pytimely.workflow.fingerprint import is_user_file
from pytimely.workflow.logs import LOGS, Captured, capturing, texts
from pytimely.workflow.writes import WRITTEN, watching

__all__ = [
    "Call",
    "DataflowStep",
    "Executor",
    "ProcessExecutor",
    "SparkExecutor",
    "ThreadExecutor",
    "dataflow_step",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One run of a simple module: ``fn(**inputs, **params)``, reported under ``module``."""

    module: str
    fn: Callable[..., Any]
    inputs: Mapping[str, Any] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("out",)
    capture: bool = False
    """Collect what the function prints: the outputs then hold ``(stdout, stderr)`` under ``logs.LOGS``."""
    watch: bool = False
    """Watch the files the function opens for writing: the outputs then hold their paths under ``writes.WRITTEN``."""

    def __post_init__(self) -> None:
        both = set(self.inputs) & set(self.params)
        if both:
            raise ModuleDefinitionError(f"module {self.module!r}: {sorted(both)} given as inputs and as parameters")
        if len(set(self.outputs)) != len(self.outputs):
            raise ModuleDefinitionError(f"module {self.module!r}: out-port names repeat: {list(self.outputs)}")

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the function: inputs and parameters together."""
        return {**self.inputs, **self.params}

    def outputs_of(self, result: Any) -> dict[str, Any]:
        """The out-port values from the function's return value; ``ModuleOutputError`` when they do not fit."""
        if isinstance(result, Captured):
            outputs = self.outputs_of(result.value)
            if result.stdout is not None:
                outputs[LOGS] = (result.stdout, result.stderr or "")
            if result.written is not None:
                outputs[WRITTEN] = result.written
            return outputs
        names = self.outputs
        if not names:
            return {}
        if len(names) == 1:
            return {names[0]: result}
        if isinstance(result, Mapping):
            missing = [n for n in names if n not in result]
            extra = sorted(str(n) for n in result if n not in names)
            if missing or extra:
                raise ModuleOutputError(
                    f"module {self.module!r} returned outputs {sorted(map(str, result))}, expected {list(names)}"
                    + (f"; missing {missing}" if missing else "")
                    + (f"; unexpected {extra}" if extra else ""),
                    self.module,
                )
            return {n: result[n] for n in names}
        if isinstance(result, tuple) and len(result) == len(names):
            return dict(zip(names, result, strict=True))
        raise ModuleOutputError(
            f"module {self.module!r} has out-ports {list(names)}: its function must return a mapping with those "
            f"names or a tuple of {len(names)} values, got {type(result).__name__}",
            self.module,
        )


def invoke(call: Call, arguments: Mapping[str, Any] | None = None) -> Any:
    """Run the call's function on this thread; user errors become ``ModuleRaisedError`` naming the module."""
    arguments = call.arguments() if arguments is None else arguments
    if not call.capture and not call.watch:
        try:
            return call.fn(**arguments)
        except Exception as exc:
            raise raised(call.module, exc) from exc
    buffers = None
    with contextlib.ExitStack() as stack:
        buffers = stack.enter_context(capturing()) if call.capture else None
        written = stack.enter_context(watching()) if call.watch else None
        try:
            value = call.fn(**arguments)
        except Exception as exc:
            stack.close()  # the streams stop being collected before the error is built
            raise raised(call.module, exc, *texts(buffers)) from exc
    stdout, stderr = texts(buffers)
    return Captured(value, stdout, stderr, None if written is None else tuple(written))


def where(exc: BaseException) -> tuple[str | None, int | None, str | None]:
    """The file, line and function where ``exc`` was raised in the user's own code (else its innermost frame)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    chosen = None
    for frame in frames:
        if is_user_file(frame.filename):
            chosen = frame
    if chosen is None and frames:
        chosen = frames[-1]
    if chosen is None:
        return None, None, None
    name = chosen.filename
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(name)
        if not relative.startswith(".."):
            name = relative
    return name, chosen.lineno, chosen.name


def raised(
    module: str, exc: BaseException, stdout: str | None = None, stderr: str | None = None, *,
    place: tuple[str | None, int | None, str | None] | None = None,
) -> ModuleRaisedError:  # fmt: skip
    """The ``ModuleRaisedError`` for ``exc`` raised by module ``module``'s code (``place``: where, if known)."""
    file, line, function = where(exc) if place is None else place
    at = (f" at {file}:{line}" + (f" (in {function})" if function else "")) if file is not None else ""
    return ModuleRaisedError(
        f"module {module!r} failed{at}: {type(exc).__name__}: {exc}", module, file=file, line=line,
        stdout=stdout or "", stderr=stderr or "",
    )  # fmt: skip


@runtime_checkable
class Executor(Protocol):
    """Runs simple modules' code: ``await run(call)`` gives the out-port values; ``close()`` frees resources."""

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` and return its out-port values by name."""
        ...

    def close(self) -> None:
        """Wait for running calls and release threads or processes; later ``run`` calls fail."""
        ...


class _ExecutorBase:
    """The async context manager and closed-state shared by the executors."""

    _closed: bool = False

    def close(self) -> None:
        """Release resources (overridden)."""
        self._closed = True

    def _check_open(self, call: Call) -> None:
        if self._closed:
            name = type(self).__name__
            raise ExecutorClosedError(f"{name} is closed; cannot run module {call.module!r}", call.module)

    def _submit(
        self, call: Call, pool: concurrent.futures.Executor, fn: Callable[..., Any], *args: Any
    ) -> concurrent.futures.Future[Any]:
        try:
            return pool.submit(fn, *args)
        except RuntimeError as exc:  # closed by another thread after our check
            name = type(self).__name__
            raise ExecutorClosedError(f"{name} is closed; cannot run module {call.module!r}", call.module) from exc

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ThreadExecutor(_ExecutorBase):
    """Runs module code on a thread pool of this process (the default executor).

    A cancelled ``run`` stops waiting, but the call already running on its thread cannot be interrupted; it
    finishes and its result is dropped.
    """

    def __init__(self, max_workers: int | None = None, *, thread_name_prefix: str = "pytimely-module") -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix=thread_name_prefix)

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` on a pool thread and return its out-port values."""
        self._check_open(call)
        future = self._submit(call, self._pool, invoke, call)
        return call.outputs_of(await asyncio.wrap_future(future))

    def close(self) -> None:
        """Wait for running calls and stop the pool's threads."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)


class ProcessExecutor(_ExecutorBase):
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


class SparkExecutor(_ExecutorBase):
    """Runs module code in the Spark driver, giving the session to a parameter named ``spark``.

    Calls run on driver threads (several modules' Spark jobs can run at once); each call's jobs are described
    in the Spark UI by the module's name. DataFrame inputs and results pass as they are (lazily). A cancelled
    ``run`` (a module's timeout) cancels the call's Spark jobs (they carry a job tag of their own), so the
    call's next action fails at once; its Python code on the driver thread cannot be stopped otherwise.
    """

    def __init__(
        self, session: Any = None, max_workers: int | None = None, *, start: Callable[[], Any] | None = None
    ) -> None:
        if session is None and start is None:
            raise InvalidArgument("SparkExecutor needs a session, or start= to make one when a module first needs it")
        self._session = session
        self._start = start
        self._session_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix="pytimely-spark-module")

    @property
    def session(self) -> Any:
        """The session: the one given, or made by ``start()`` the first time a module needs it."""
        with self._session_lock:
            if self._session is None:
                assert self._start is not None
                self._session = self._start()
            return self._session

    @property
    def started(self) -> bool:
        """Whether the executor has a session (given, or started for a module)."""
        return self._session is not None

    async def run(self, call: Call) -> dict[str, Any]:
        """Run ``call`` on a driver thread with the session and return its out-port values."""
        self._check_open(call)
        arguments = call.arguments()
        if "spark" not in arguments and _accepts(call.fn, "spark"):
            arguments["spark"] = await asyncio.to_thread(lambda: self.session)
        tag = f"pytimely-module-{next(_SPARK_TAGS)}"
        future = self._submit(call, self._pool, self._invoke, call, arguments, tag)
        try:
            return call.outputs_of(await asyncio.wrap_future(future))
        except asyncio.CancelledError:
            if self.started and not future.cancel():
                await asyncio.shield(asyncio.to_thread(self.session.sparkContext.cancelJobsWithTag, tag))
            raise

    def _invoke(self, call: Call, arguments: dict[str, Any], tag: str) -> Any:
        if not self.started:
            return invoke(call, arguments)  # a module that needs no session does not start Spark
        context = self.session.sparkContext
        context.setJobDescription(f"pytimely module {call.module}")
        context.addJobTag(tag)
        context.setInterruptOnCancel(True)
        try:
            return invoke(call, arguments)
        finally:
            context.removeJobTag(tag)
            context.setJobDescription(None)

    def close(self) -> None:
        """Wait for running calls and stop the driver threads (the session stays up: it is the caller's)."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)


_SPARK_TAGS = itertools.count()
"""Numbers the Spark job tags of module calls (a tag per call, so one call's jobs can be cancelled)."""


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters and parameters[name].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


# -- a pytimely dataflow as a simple module ------------------------------------------------------------------------


class DataflowStep:
    """A simple module's function that runs a pytimely dataflow: ``step(**inputs)`` gives the collected output.

    ``build(scope, **streams)`` gets one stream per input (named like the inputs) and returns the stream to
    collect, or a mapping of name to stream (the step then returns a dict of name to output). Each input value
    — a list or tuple of records, a numpy array, or an Arrow table or batch — is split into contiguous shares,
    one per worker, sent in batches at time 0; the dataflow runs to completion on ``workers`` workers of this
    process (:func:`pytimely.execute`). An output is a list of records, or one numpy array / Arrow table when
    every batch is one; the order of records is not specified.

    Picklable when ``build`` is a module-level function, so a :class:`ProcessExecutor` can run it. Its code
    fingerprint is that of ``build`` (the number of workers does not change the result).
    """

    def __init__(
        self, build: Callable[..., Any], workers: int = 1, *, seed: int | None = None, batch_size: int = 1 << 16
    ) -> None:
        if type(workers) is not int or workers < 1:
            raise InvalidArgument(f"workers must be a positive int, got {workers!r}")
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be positive, got {batch_size!r}")
        self.build = build
        self.workers = workers
        self.seed = seed
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"DataflowStep({getattr(self.build, '__qualname__', self.build)!r}, workers={self.workers})"

    def __code_fingerprint__(self) -> str:
        """The code fingerprint of ``build`` (used by :func:`pytimely.workflow.fingerprint.code_fingerprint`)."""
        from pytimely.workflow.fingerprint import code_fingerprint

        return code_fingerprint(self.build)

    def __call__(self, **inputs: Any) -> Any:
        """Run the dataflow over ``inputs`` and return its output."""
        from pytimely import execute

        names = sorted(inputs)
        build = self.build
        batch_size = self.batch_size

        def job(worker: Any) -> Any:
            def dataflow(scope: Any) -> tuple[dict[str, Any], Any]:
                handles, streams = {}, {}
                for name in names:
                    handles[name], streams[name] = scope.new_input(name=name)
                out = build(scope, **streams)
                if isinstance(out, Mapping):
                    return handles, {key: stream.capture() for key, stream in out.items()}
                return handles, out.capture()

            handles, captured = worker.dataflow(dataflow)
            for name in names:
                for batch in _batches(_share(inputs[name], worker.index, worker.peers), batch_size):
                    handles[name].send_batch(batch)
            return captured

        parts = execute(job, self.workers, seed=self.seed)
        if parts and isinstance(parts[0], Mapping):
            return {key: _gather([part[key] for part in parts]) for key in parts[0]}
        return _gather(parts)


def dataflow_step(
    build: Callable[..., Any], workers: int = 1, *, seed: int | None = None, batch_size: int = 1 << 16
) -> DataflowStep:
    """A simple module's function running the dataflow ``build(scope, **streams)``; see :class:`DataflowStep`."""
    return DataflowStep(build, workers, seed=seed, batch_size=batch_size)


def _share(records: Any, index: int, peers: int) -> Any:
    """Worker ``index``'s contiguous share of ``records``."""
    kind = type(records)
    if kind.__module__.startswith("pyarrow") and kind.__name__ in ("Table", "RecordBatch"):
        n = records.num_rows
        lo, hi = n * index // peers, n * (index + 1) // peers
        return records.slice(lo, hi - lo)
    if not isinstance(records, Sequence) and not hasattr(records, "__array__"):
        records = list(records)
    n = len(records)
    return records[n * index // peers : n * (index + 1) // peers]


def _batches(records: Any, size: int) -> list[Any]:
    kind = type(records)
    if kind.__module__.startswith("pyarrow") and kind.__name__ == "Table":
        return [b for b in records.to_batches(max_chunksize=size) if b.num_rows]
    return [records[start : start + size] for start in range(0, len(records), size)]


def _gather(parts: list[list[tuple[Any, Any]]]) -> Any:
    batches = [batch for captured in parts for _, batch in captured]
    if batches and all(type(b).__module__ == "numpy" for b in batches):
        import numpy as np

        return np.concatenate(batches)
    if batches and all(type(b).__name__ == "RecordBatch" and type(b).__module__.startswith("pyarrow") for b in batches):
        import pyarrow as pa

        return pa.Table.from_batches(batches)
    records: list[Any] = []
    for batch in batches:
        records.extend(batch)
    return records

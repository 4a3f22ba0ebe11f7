"""The run's state: where ports' values live (:class:`Origin`), module instances (:class:`Instance`), the messages
and events interpreters exchange and report (:class:`Lost`, :class:`Event`), what a run did (:class:`Trace`), and
what every interpreter of one run shares (:class:`Runtime`: staging, executors, values held in memory, failures).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytimely.errors import (
    ExecutorError,
    FingerprintError,
    ModulesFailedError,
    RunStoppedError,
    StagingUnavailableError,
    UnpicklableOutputError,
    UnpicklableValueError,
    WorkflowInputError,
)
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.executors import Executor
from pytimely.workflow.fingerprint import code_fingerprint, derive, value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.model import Kind, Module, PortRef
from pytimely.workflow.resume import ResumeState
from pytimely.workflow.staging import MemoryStaging, StagingArea, unavailable
from pytimely.workflow.structure import simple_fingerprint, structure_fingerprint
from pytimely.workflow.writes import paths_in

__all__ = ["Event", "Instance", "Invocation", "Lost", "Message", "Origin", "Runtime", "Trace"]


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a port's value lives: a staging ``key`` (or an in-memory key starting with ``:``) and its fingerprint."""

    key: str
    fingerprint: str | None

    @property
    def in_memory(self) -> bool:
        """Whether the value is held by the run (workflow inputs, constants) rather than staged."""
        return self.key.startswith(":")


@dataclass(eq=False)
class Instance:
    """One module instance: its staging path and the origins of its in-ports, out-ports and children's ports."""

    module: Module
    path: str
    inputs: dict[str, Origin | None]
    outputs: dict[str, Origin | None] = field(default_factory=dict)
    child_inputs: dict[PortRef, Origin | None] = field(default_factory=dict)
    children: dict[str, Instance] = field(default_factory=dict)
    contents: dict[str, str] = field(default_factory=dict)
    """A simple module's inputs' content fingerprints, once it has read them."""
    files: tuple[str, ...] = ()
    """A simple module's declared files, as absolute paths."""

    def origin_of(self, vertex: Vertex) -> Origin | None:
        """The origin of a port vertex of this (parent) instance's dependency graph."""
        if vertex.kind == "in":
            assert vertex.port is not None
            return self.inputs.get(vertex.port)
        if vertex.kind == "out":
            assert vertex.port is not None
            return self.outputs.get(vertex.port)
        if vertex.kind == "child-in":
            assert vertex.module is not None and vertex.port is not None
            return self.child_inputs.get(PortRef(vertex.module, vertex.port))
        return None

    def walk(self) -> Iterable[Instance]:
        """This instance and every one derived below it (loop iterations are derived only when they run)."""
        yield self
        for child in self.children.values():
            yield from child.walk()


@dataclass(frozen=True, slots=True)
class Lost:
    """The message that an in-port will never get a value in this run: what was to compute it failed or did not run."""

    port: str


Message = str | Lost
"""What an interpreter's inbox carries: an in-port that has its value, or one that never will."""


@dataclass(frozen=True, slots=True)
class Event:
    """A progress event: a module ``started``, ``finished``, ``failed`` (the error in ``message``) or ``cancelled``
    (with seconds), ``skipped`` (not run: ``message`` says why), ``cut-off`` (early cutoff), a ``retry``
    (attempt number in ``iteration``, the failure and the wait in ``message``), or a loop ``resumed`` at iteration
    k."""

    kind: Literal["started", "finished", "failed", "cancelled", "resumed", "cut-off", "retry", "skipped"]
    path: str
    seconds: float = 0.0
    iteration: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class Invocation:
    """One interpreter invocation: the module instance and the ``I*``/``O*`` it was started with."""

    path: str
    kind: Kind
    recomputed: frozenset[str]
    requested: frozenset[str]


@dataclass
class Trace:
    """What a run did, for progress summaries and tests: invocations, resume states, forwards, modules run."""

    invocations: list[Invocation] = field(default_factory=list)
    states: dict[str, ResumeState] = field(default_factory=dict)
    forwarded: list[tuple[str, Vertex]] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    cut_off: list[str] = field(default_factory=list)
    """Modules that had to be recomputed but were not run: their inputs came out as before (early cutoff)."""
    reused: set[str] = field(default_factory=set)
    loop_starts: dict[str, int] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    """Modules that failed (after their retries)."""
    skipped: list[str] = field(default_factory=list)
    """Modules that did not run: an input was lost to a failure, or the run was failing or stopping."""
    stopped: list[str] = field(default_factory=list)
    """Modules stopped while running because the run was asked to stop."""


class Runtime:
    """What every interpreter of one run shares: staging, executor, in-memory values, failures and the trace."""

    def __init__(
        self,
        staging: StagingArea,
        executor: Executor | None,
        *,
        reuse: bool = True,
        progress: Callable[[Event], None] | None = None,
        trace: Trace | None = None,
        capture_logs: bool = False,
        executors: Mapping[str, Executor] | None = None,
        keep_going: bool = False,
        stop: asyncio.Event | None = None,
        rerun: Mapping[str, str] | None = None,
        guard: Callable[[], None] | None = None,
        base: str | os.PathLike[str] | None = None,
        cache: FingerprintCache | None = None,
        watch_writes: bool = True,
    ) -> None:
        self.staging = staging
        self.capture_logs = capture_logs
        self.executors = dict(executors or {})
        self.executor = executor
        self.reuse = reuse
        self.progress = progress
        self.trace = trace if trace is not None else Trace()
        self.keep_going = keep_going
        self.stop = stop
        self.rerun: dict[str, str] = dict(rerun or {})
        """Module paths (as in ``Module.path``) to run again whatever is staged, with why (shown by ``plan``)."""
        self.guard = guard
        self.base = os.fspath(base) if base is not None else os.getcwd()
        self.cache = cache if cache is not None else FingerprintCache()
        self.watch_writes = watch_writes
        self.memory: dict[str, Any] = {}
        self.produced: dict[str, Any] = {}
        """Values kept for this run's readers: only where staging keeps them in memory anyway."""
        self.made: set[str] = set()
        """Keys whose values this run staged (computed, or retagged by early cutoff)."""
        # A memory area holds the objects themselves: reading them back costs nothing, and keeps identity.
        self.keep_values = isinstance(staging, MemoryStaging)
        self.contents: dict[str, str] = {}
        """Content fingerprints of staged values known in this run, by key."""
        self._structure: dict[int, tuple[Module, str]] = {}
        self._code: dict[int, tuple[Any, str]] = {}
        self.iterations: dict[str, tuple[str, int]] = {}
        """Iteration paths of loops not yet known to resume, to their loop's path and iteration number."""
        self.tainted: dict[str, str] = {}
        """Keys whose staged values do not count, to the forced module they derive from."""
        self.dirty: dict[str, str] = {}
        """Instance paths of modules whose declared files changed since they wrote them, with what changed."""
        self.files_of: dict[str, tuple[str, ...]] = {}
        """Out-port keys of modules that declare files, to those files."""
        self.failures: list[ExecutorError] = []
        self.halted = False
        """A module failed and the run does not keep going: nothing new starts."""
        self.run_id = secrets.token_hex(4)
        self.began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())

    # -- derivation ----------------------------------------------------------------------------------------------

    def structure(self, module: Module) -> str:
        """``structure_fingerprint(module)``, computed once per module object in this run."""
        known = self._structure.get(id(module))
        if known is None:
            if module.kind is Kind.SIMPLE:
                fp = simple_fingerprint(self.code(module.function), module.params)
            else:
                fp = structure_fingerprint(module, self.structure)
            # The module is kept with its fingerprint so that its id cannot be reused meanwhile.
            known = self._structure[id(module)] = (module, fp)
        return known[1]

    def code(self, fn: Any) -> str:
        """``code_fingerprint(fn)``, computed once per function object in this run (many modules share one)."""
        known = self._code.get(id(fn))
        if known is None:
            known = self._code[id(fn)] = (fn, code_fingerprint(fn))
        return known[1]

    def remember(self, key: str, value: Any) -> None:
        """Hold an in-memory value (a workflow input or a constant module's output)."""
        self.memory[key] = value

    def forced(self, module: Module, path: str) -> str | None:
        """Why the module instance at ``path`` must run whatever is staged (``rerun``, changed files), or ``None``."""
        return self.rerun.get(module.path) or self.dirty.get(path)

    # -- the run's state ---------------------------------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        """Whether the run was asked to stop (its ``stop`` event is set)."""
        return self.stop is not None and self.stop.is_set()

    def stopping(self) -> bool:
        """Whether nothing new may start: the run was asked to stop, or a module failed and it does not keep going."""
        return self.halted or self.stop_requested

    def why_stopping(self) -> str:
        """Why nothing new starts, in words."""
        return "the run was asked to stop" if self.stop_requested else "another module failed"

    def outcome(self, complete: bool) -> None:
        """Raise what ended the run, if anything did: a stop before every requested out-port had its value
        (``complete``), one module's failure, or several."""
        if self.stop_requested and not complete:
            raise RunStoppedError(
                f"the run stopped as asked; {len(self.trace.stopped)} module(s) were stopped while running, "
                f"{len(self.trace.skipped)} did not start",
                list(self.trace.stopped),
            )
        if len(self.failures) == 1:
            raise self.failures[0]
        if self.failures:
            listed = "; ".join(str(exc) for exc in self.failures)
            raise ModulesFailedError(f"{len(self.failures)} modules failed: {listed}", list(self.failures))

    # -- values ----------------------------------------------------------------------------------------------------

    def check(self) -> None:
        """Before any write: the run must still hold its staging area (its ``guard`` raises if it lost it)."""
        if self.guard is not None:
            self.guard()

    async def has(self, origin: Origin | None) -> bool:
        """Whether ``origin`` holds a value computed for its fingerprint (the ``v ∈ H`` test)."""
        if origin is None or origin.fingerprint is None:
            return False
        if origin.in_memory:
            return origin.key in self.memory
        if origin.key in self.made:
            return True
        if not self.reuse or origin.key in self.tainted:
            return False
        return await asyncio.to_thread(self.staging.has, origin.key, origin.fingerprint)

    async def load(self, origin: Origin) -> Any:
        """The value at ``origin``: held in memory, or read from staging when needed (not kept: a run holds only
        the values the modules running at the moment read and return)."""
        if origin.in_memory:
            return self.memory[origin.key]
        if origin.key in self.produced:
            return self.produced[origin.key]
        value = await asyncio.to_thread(self.staging.get, origin.key, origin.fingerprint)
        if origin.key not in self.made:
            self.trace.reused.add(origin.key)
        if self.keep_values:
            self.produced[origin.key] = value
        return value

    async def store(self, origin: Origin, value: Any, module: str = "", port: str = "") -> None:
        """Stage ``value`` at ``origin`` (atomically, with its fingerprint); readers load it from there. ``module``
        and ``port`` say whose value it is, for errors."""
        assert origin.fingerprint is not None
        try:
            await self.put(origin.key, value, origin.fingerprint)
        except UnpicklableValueError as exc:
            if not module:
                raise
            raise UnpicklableOutputError(
                f"module {module!r} returned a {type(value).__module__}.{type(value).__qualname__} on out-port "
                f"{port!r}, which cannot be pickled to stage it under {origin.key!r} in {self.staging!r}",
                module,
                port,
            ) from exc
        self.made.add(origin.key)
        if self.keep_values:
            self.produced[origin.key] = value

    async def put(self, key: str, value: Any, fingerprint: str) -> None:
        """Write to staging, once the run is known to still hold it."""
        self.check()
        try:
            await asyncio.to_thread(self.staging.put, key, value, fingerprint)
        except OSError as exc:
            # The staging area's fault (a folder that cannot be written, a bucket that is gone), not the module's.
            raise StagingUnavailableError(
                f"cannot stage the value of {key!r} in {self.staging!r}: {unavailable(exc)}", key
            ) from exc

    async def content(self, origin: Origin, value: Any) -> str | None:
        """The content fingerprint of the value at ``origin`` (``None`` if it cannot be fingerprinted): the value's,
        with the content of the files it names (``Path`` values) and of the files its module declares."""
        if origin.in_memory:
            return origin.fingerprint  # inputs and constants are fingerprinted by content already
        known = self.contents.get(origin.key)
        if known is None:
            try:
                known = await asyncio.to_thread(self._content_now, origin.key, value)
            except FingerprintError:
                return None
            self.contents[origin.key] = known
        return known

    def _content_now(self, key: str, value: Any) -> str:
        own = value_fingerprint(value)
        files = sorted({*self.files_of.get(key, ()), *(self.absolute(p) for p in paths_in(value))})
        if not files:
            return own
        return derive("content-with-files", {}, {"value": own, **{f"file:{f}": self.file_content(f) for f in files}})

    def absolute(self, path: str) -> str:
        """``path`` resolved against the folder the run started in."""
        return os.path.abspath(os.path.join(self.base, path))

    def file_content(self, path: str) -> str:
        """The content fingerprint of the file or folder at ``path``, or ``"absent"``."""
        try:
            return content_fingerprint(Path(path), self.cache) or "absent"
        except WorkflowInputError:
            return "absent"

    async def retag(self, key: str, old: str, new: str) -> bool:
        """Record the value under ``key`` for ``new`` if it is there for ``old`` (a marker write where possible)."""
        self.check()
        retag = getattr(self.staging, "retag", None)
        if retag is not None:
            return bool(await asyncio.to_thread(retag, key, old, new))
        if not await asyncio.to_thread(self.staging.has, key, old):
            return False
        value = await asyncio.to_thread(self.staging.get, key, old)
        await self.put(key, value, new)
        return True

    def emit(self, event: Event) -> None:
        """Report progress, if anyone listens."""
        if self.progress is not None:
            self.progress(event)

"""The asynchronous interpreter of seed ``004_6a2e88f6382bfe5d.txt`` §2.2–2.3, made never stale by fingerprints.

**Derivation.** Before anything runs, every port of every module instance gets an :class:`Origin`: the staging
key its value lives under and the fingerprint that value must have been computed for (a build system's
derivation hash). A workflow in-port's fingerprint is its value's; a simple module's out-port ``o`` has
``derive(fingerprint of its code and parameters, {"out-port": o}, {i: fingerprint of i for every i with o ∈
deps(i)})``; a port fed by a connection has its source's origin; a loop's out-port is derived from the loop's
structure — its wiring and every module inside it with its code, parameters and constants, at every depth —
and its in-ports the same way (its final iteration's value is copied there). A port *has a value* (is in ``H``)
when its origin holds a value stored under exactly that fingerprint — changed code, parameters or inputs make
it absent — and it is not *tainted*: a module asked to rerun (``rerun=``), or whose declared files changed
since it wrote them, and everything derived from its outputs, count as absent.

**Interpreters** are asyncio tasks speaking the §2.2 protocol: each gets ``I*`` and ``O*``, receives in-port-has-
value messages on an ``asyncio.Queue`` and sends out-port-has-value messages to its invoker. A parent interpreter
computes its resume state with :func:`~pytimely.workflow.resume.compute_resume_state_async` (``H`` asked lazily
and concurrently through ``asyncio.to_thread(staging.has, key, fp)``), starts child interpreters per §2.3 with
``child_inputs``/``child_outputs``, forwards a value only to connection targets whose state is *recompute* (never
to ready or irrelevant ports), and finishes when every requested out-port has a value. A simple-module interpreter
waits for its recomputed in-ports, loads its inputs (from memory when held by the run, else from staging: values
are not kept between readers), runs the function through the executor and stores every out-port atomically with
its fingerprint before reporting. A loop runs its body (the loop module read as a composite) as a child
interpreter per iteration under ``<loop>/iter-<k>``; iteration ``k``'s paired in-ports take iteration ``k-1``'s
paired out-ports, so stored iterations resume as all-ready and the first incomplete one resumes from its own
checkpoint. Another iteration follows while the iteration's continue port is true; the last iteration's values are
then stored as the loop's out-ports.

**Failures.** Beside §2.2's messages, a port can be reported *lost*: the module that was to compute it failed,
or did not run. A module whose input is lost does not run and loses its own out-ports; a parent passes lost
values on like values, so every interpreter ends. When a module fails, nothing new starts (unless the run keeps
going: then modules that do not depend on the failure still run), modules already running finish and their
values are staged, and the run then raises the failure — values already staged stay, which is what makes the
next run resume. A run asked to stop (``stop`` set, e.g. by Ctrl-C) behaves the same way and raises
:class:`~pytimely.errors.RunStoppedError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytimely.errors import (
    ExecutorError,
    FingerprintError,
    LoopError,
    ModuleCycleError,
    ModuleDefinitionError,
    ModuleFailedError,
    ModuleOutputError,
    ModulesFailedError,
    ModuleTimeoutError,
    RunStoppedError,
    StagingError,
    StagingUnavailableError,
    UndeclaredWriteError,
    UnpicklableOutputError,
    UnpicklableValueError,
    WorkerDiedError,
    WorkflowError,
    WorkflowInputError,
)
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.executors import Call, Executor
from pytimely.workflow.fingerprint import code_fingerprint, derive, value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.logs import LOGS
from pytimely.workflow.model import Kind, Module, PortRef
from pytimely.workflow.resume import ResumeState, compute_resume_state_async
from pytimely.workflow.staging import MemoryStaging, StagingArea, unavailable
from pytimely.workflow.writes import WRITTEN, declared_paths, paths_in, unaccounted

__all__ = [
    "Event",
    "Instance",
    "Invocation",
    "Lost",
    "Origin",
    "Runtime",
    "Trace",
    "derive_instance",
    "interpret",
    "structure_fingerprint",
]

MAX_LOOP_ITERATIONS = 100_000


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


MODULE_FAILURES: tuple[type[BaseException], ...] = (
    ModuleFailedError, ModuleOutputError, WorkerDiedError, ModuleTimeoutError, UndeclaredWriteError,
    UnpicklableOutputError,
)  # fmt: skip
"""What a module's own run can end in: the module failed, not the run (staging and executor faults stop the run)."""

RETRIED: tuple[type[BaseException], ...] = (ModuleFailedError, WorkerDiedError, ModuleTimeoutError)
"""Failures worth another attempt (``retries=``): not the deterministic ones (a wrong output, an undeclared file)."""

MAX_BACKOFF = 300.0
"""The longest wait between two attempts, in seconds, however many retries."""


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


# -- derivation ------------------------------------------------------------------------------------------------------


def simple_fingerprint(code: str, params: Mapping[str, Any]) -> str:
    """What a simple module computes besides its inputs: its code fingerprint and its parameters' values."""
    return derive(code, {"params": dict(params)}, {})


def structure_fingerprint(module: Module, child_fp: Callable[[Module], str] | None = None) -> str:
    """A fingerprint of what a module computes: a simple module's code and parameters, a constant's value, or a
    parent's wiring, its children's structure (so parameters and constants at every depth) and, for a loop, its
    I/O pairs and stop condition."""
    sub = child_fp or structure_fingerprint
    if module.kind is Kind.SIMPLE:
        return simple_fingerprint(code_fingerprint(module.function), module.params)
    if module.kind is Kind.INPUT:
        return value_fingerprint(module.value)
    params: dict[str, Any] = {
        "kind": module.kind.value,
        "inputs": list(module.input_names),
        "outputs": list(module.output_names),
        "connections": sorted(f"{c.source}->{c.target}" for c in module.connections),
        "io": [list(pair) for pair in module.io_ports],
        "deps": {i: sorted(outs) for i, outs in sorted(module.deps.items())},
    }
    if module.kind is Kind.LOOP:
        params["continue"] = module.continue_port
    children = {child.name: sub(child) for child in module.submodules}
    return derive("structure", params, children)


def declared_files(rt: Runtime, module: Module) -> tuple[str, ...]:
    """A simple module's declared files as absolute paths, ``{name}`` filled from its parameters and defaults."""
    if not module.writes:
        return ()
    defaults = getattr(module.function, "__kwdefaults__", None) or {}
    return tuple(declared_paths(module.writes, {**defaults, **module.params}, rt.base))


def _black_box_outputs(
    rt: Runtime, module: Module, path: str, inputs: Mapping[str, Origin | None]
) -> dict[str, Origin | None]:
    """Out-port origins of a module whose outputs are computed as a whole (simple or loop)."""
    code = rt.structure(module)
    outputs: dict[str, Origin | None] = {}
    # Tainted outputs do not count as staged: the module is forced to run, or derives from one that is.
    source = path if rt.forced(module, path) else None
    for origin in inputs.values():
        if source is None and origin is not None and origin.key in rt.tainted:
            source = rt.tainted[origin.key]
    for o in module.output_names:
        fps: dict[str, str] = {}
        fp: str | None = None
        for i in sorted(i for i, outs in module.deps.items() if o in outs):
            origin = inputs.get(i)
            if origin is None and module.input(i).optional:
                continue  # unconnected: the function's default, which its code fingerprint covers
            if origin is None or origin.fingerprint is None:
                break
            fps[i] = origin.fingerprint
        else:
            fp = derive(code, {"out-port": o}, fps)
        outputs[o] = Origin(f"{path}/{o}", fp)
        if source is not None:
            rt.tainted[f"{path}/{o}"] = source
    return outputs


def derive_instance(
    rt: Runtime, module: Module, path: str, inputs: Mapping[str, Origin | None], *, as_composite: bool = False
) -> Instance:
    """The instance of ``module`` at ``path`` with the given in-port origins, its ports' origins all derived."""
    inst = Instance(module, path, dict(inputs))
    kind = Kind.COMPOSITE if as_composite else module.kind
    if kind in (Kind.SIMPLE, Kind.LOOP):
        inst.outputs = _black_box_outputs(rt, module, path, inputs)
        if kind is Kind.SIMPLE and module.writes:
            inst.files = declared_files(rt, module)
            for o in module.output_names:
                rt.files_of[f"{path}/{o}"] = inst.files
        return inst
    if kind is Kind.INPUT:
        values = _constant_values(module)
        for o in module.output_names:
            key = f":{path}/{o}"
            rt.remember(key, values[o])
            inst.outputs[o] = Origin(key, value_fingerprint(values[o]))
        return inst
    sources = {c.target: c.source for c in module.connections}
    building: list[str] = []

    def child(name: str) -> Instance:
        done = inst.children.get(name)
        if done is not None:
            return done
        if name in building:
            cycle = " -> ".join([*building[building.index(name) :], name])
            raise ModuleCycleError(f"module {path!r}: its submodules' connections form a cycle: {cycle}")
        building.append(name)
        sub = module.child(name)
        ins = {i: source_of(PortRef(name, i)) for i in sub.input_names}
        inst.child_inputs.update((PortRef(name, i), origin) for i, origin in ins.items())
        made = inst.children[name] = derive_instance(rt, sub, f"{path}/{name}", ins)
        building.pop()
        return made

    def source_of(target: PortRef) -> Origin | None:
        source = sources.get(target)
        if source is None:
            return None
        if source.module is None:
            return inst.inputs.get(source.port)
        return child(source.module).outputs[source.port]

    for sub in module.submodules:
        child(sub.name)
    for o in module.output_names:
        inst.outputs[o] = source_of(PortRef(None, o))
    return inst


def returns_paths(module: Module) -> bool:
    """Whether a simple module's out-ports carry paths (``Path``, ``os.PathLike``, or containers of them): the
    files they name are checked, like declared ones, before its values are reused."""

    def pathish(tp: Any) -> bool:
        if tp is Any or tp is object:
            return False
        args = typing.get_args(tp)
        if args:
            return any(pathish(a) for a in args)
        return isinstance(tp, type) and issubclass(tp, os.PathLike)

    return module.kind is Kind.SIMPLE and any(pathish(p.type) for p in module.outputs)


def _checks_files(module: Module) -> bool:
    return module.kind is Kind.SIMPLE and (bool(module.writes) or returns_paths(module))


async def check_files(rt: Runtime, root: Instance) -> bool:
    """Mark dirty the modules below ``root`` whose files (declared, or named by out-ports typed as paths) no longer
    hold what they wrote — edited or deleted since — where their staged values would otherwise be reused; a loop
    counts as dirty when a file its stored iterations wrote last changed. Whether any was marked (the caller then
    derives again, so that what depends on them is tainted)."""
    if not rt.reuse:
        return False

    def changed_since(inst: Instance) -> str | None:
        # One thread hop per module: its record, then its files. Whether its values are staged does not matter:
        # a module whose values are not runs anyway, dirty or not.
        if _checks_files(inst.module):
            written = _record_now(rt, trace_key(inst.path))
            files = dict(written.get("files") or {}) if written is not None else {}
        else:
            files = _last_written(rt, inst.path)
        for name, recorded in sorted(files.items()):
            now = rt.file_content(name)
            if now != recorded:
                return f"its file {name} {'was deleted' if now == 'absent' else 'changed'} since it wrote it"
        return None

    async def check(inst: Instance) -> bool:
        changed = await asyncio.to_thread(changed_since, inst)
        if changed is None:
            return False
        rt.dirty[inst.path] = changed
        return True

    checked = [
        inst
        for inst in root.walk()
        if inst.path not in rt.dirty
        and (_checks_files(inst.module) or (inst.module.kind is Kind.LOOP and inst is not root
                                            and any(_checks_files(m) for m in inst.module.walk())))
    ]  # fmt: skip
    return any(await asyncio.gather(*(check(inst) for inst in checked)))


def _last_written(rt: Runtime, prefix: str) -> dict[str, str]:
    """The files the trace records below ``prefix`` (a loop's iterations) list, each with the content recorded by
    the latest iteration that wrote it: earlier iterations' versions were overwritten on purpose."""
    latest: dict[str, tuple[tuple[int, ...], str]] = {}
    for key in rt.staging.keys(prefix):
        if not key.endswith("/" + TRACE):
            continue
        record = _record_now(rt, key)
        if record is None:
            continue
        order = tuple(int(k) for k in re.findall(r"/iter-(\d+)/", key))
        for name, content in dict(record.get("files") or {}).items():
            if name not in latest or order >= latest[name][0]:
                latest[name] = (order, str(content))
    return {name: content for name, (_, content) in latest.items()}


def _record_now(rt: Runtime, key: str) -> dict[str, Any] | None:
    """The trace record under ``key``, whatever it was recorded for, or ``None`` (absent, or unreadable)."""
    try:
        record = rt.staging.get(key)
    except (StagingError, OSError):
        return None
    return record if isinstance(record, dict) and record.get("version") == RECORD_VERSION else None


async def latest_record(rt: Runtime, key: str) -> dict[str, Any] | None:
    """The trace record under ``key``, whatever it was recorded for, or ``None`` (absent, or unreadable)."""
    return await asyncio.to_thread(_record_now, rt, key)


def _constant_values(module: Module) -> dict[str, Any]:
    names = module.output_names
    if len(names) == 1:
        return {names[0]: module.value}
    if not isinstance(module.value, Mapping) or set(module.value) != set(names):
        raise ModuleDefinitionError(
            f"input module {module.name!r} has out-ports {list(names)}: its value must be a mapping with those names"
        )
    return {n: module.value[n] for n in names}


def body_outputs(loop: Module, requested: Iterable[str]) -> frozenset[str]:
    """What each iteration of ``loop`` must compute for ``requested``: those out-ports, the continue port, and the
    I/O pairs' out-ports whose in-ports the requested ones depend on (``deps`` of a loop spans its iterations); an
    I/O pair nothing requested depends on is left alone."""
    wanted = frozenset(requested)
    needed = {i for i in loop.input_names if loop.deps.get(i, frozenset()) & wanted}
    return wanted | {str(loop.continue_port)} | {o for i, o in loop.io_ports if i in needed}


def iteration_inputs(loop: Instance, k: int, previous: Instance | None) -> dict[str, Origin | None]:
    """Iteration ``k``'s in-port origins: paired in-ports from iteration ``k-1``'s out-ports, others the loop's."""
    pairs = dict(loop.module.io_ports)
    if previous is None:
        return dict(loop.inputs)
    return {i: previous.outputs[pairs[i]] if i in pairs else loop.inputs[i] for i in loop.module.input_names}


def iteration_recomputed(loop: Instance, recomputed: frozenset[str], previous: ResumeState | None) -> frozenset[str]:
    """Iteration ``k``'s ``I*``: the loop's own, and paired in-ports whose source got a new value in ``k-1``."""
    if previous is None:
        return recomputed
    pairs = dict(loop.module.io_ports)
    fresh = {o for o in previous.graph.module.output_names if previous.state.get(Vertex.outport(o)) == "recompute"}
    return frozenset(
        i for i in loop.module.input_names if (i in pairs and pairs[i] in fresh) or (i not in pairs and i in recomputed)
    )


# -- interpreters ----------------------------------------------------------------------------------------------------


Report = Callable[[str, bool], None]
"""How an interpreter tells its invoker an out-port has its value (``True``) or never will in this run (``False``)."""


async def interpret(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[Message],
    report: Report,
    *,
    as_composite: bool = False,
) -> None:
    """Run the interpreter for ``inst``'s kind until every requested out-port has been reported."""
    kind = Kind.COMPOSITE if as_composite else inst.module.kind
    rt.trace.invocations.append(Invocation(inst.path, kind, recomputed, requested))
    if kind is Kind.COMPOSITE:
        await _parent(rt, inst, recomputed, requested, inbox, report)
    elif kind is Kind.SIMPLE:
        await _simple(rt, inst, recomputed, requested, inbox, report)
    elif kind is Kind.LOOP:
        await _loop(rt, inst, recomputed, requested, inbox, report)
    else:
        for o in sorted(requested):
            report(o, True)


async def resume_state(rt: Runtime, inst: Instance, recomputed: frozenset[str], requested: frozenset[str],
                       assume: Iterable[Vertex] = ()) -> ResumeState:  # fmt: skip
    """``ComputeResumeState`` for a parent instance, ``H`` checked lazily against the derived origins."""
    assumed = frozenset(assume)

    async def has_value(v: Vertex) -> bool:
        return v in assumed or await rt.has(inst.origin_of(v))

    return await compute_resume_state_async(inst.module, has_value, recomputed, requested)


async def _parent(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[Message],
    report: Report,
) -> None:
    """§2.3: resume from the optimal consistent checkpoint, start children, forward values toward ``O*``."""
    module = inst.module
    rs = await resume_state(rt, inst, recomputed, requested)
    rt.trace.states[inst.path] = rs
    loop = rt.iterations.pop(inst.path, None)
    if loop is not None and any(s == "recompute" for s in rs.state.values()):
        # The first iteration with something to recompute: where the loop resumes (announced before it runs).
        rt.trace.loop_starts[loop[0]] = loop[1]
        rt.emit(Event("resumed", loop[0], iteration=loop[1]))
    for v in rs.ready:
        origin = inst.origin_of(v) if v.is_port else None
        if origin is not None and not origin.in_memory:
            rt.trace.reused.add(origin.key)
    targets: dict[PortRef, list[PortRef]] = {}
    for c in module.connections:
        targets.setdefault(c.source, []).append(c.target)
    events: asyncio.Queue[tuple[str | None, str, bool]] = asyncio.Queue()
    children: dict[str, tuple[asyncio.Task[None], asyncio.Queue[Message]]] = {}
    outstanding = set(requested)

    def start(name: str) -> asyncio.Queue[Message] | None:
        running = children.get(name)
        if running is not None:
            return running[1]
        wanted = rs.child_outputs(name)
        if not wanted:
            return None
        queue: asyncio.Queue[Message] = asyncio.Queue()

        def child_report(port: str, ok: bool, name: str = name) -> None:
            events.put_nowait((name, port, ok))

        task = asyncio.create_task(
            interpret(rt, inst.children[name], rs.child_inputs(name), wanted, queue, child_report),
            name=f"pytimely-workflow:{inst.children[name].path}",
        )
        children[name] = (task, queue)
        return queue

    def forward(source: PortRef, ok: bool) -> None:
        for target in targets.get(source, ()):
            vertex = (
                Vertex.outport(target.port) if target.module is None else Vertex.child_in(target.module, target.port)
            )
            if rs.state.get(vertex) != "recompute":
                continue  # ready ports keep their value; irrelevant ones are not needed now
            if ok:
                rt.trace.forwarded.append((inst.path, vertex))
            if target.module is None:
                if target.port in outstanding:
                    outstanding.discard(target.port)
                    report(target.port, ok)
            else:
                queue = start(target.module)
                if queue is not None:
                    queue.put_nowait(target.port if ok else Lost(target.port))

    for o in sorted(requested):
        if rs.state[Vertex.outport(o)] == "ready":
            outstanding.discard(o)
            report(o, True)
    for v in sorted(rs.ready):
        if v.kind == "in" and v.port is not None:
            forward(PortRef(None, v.port), True)
    for first in rs.children_to_start():
        start(first)

    awaited = set(recomputed)

    async def pump() -> None:
        while True:
            message = await inbox.get()
            port = message.port if isinstance(message, Lost) else message
            awaited.discard(port)
            events.put_nowait((None, port, not isinstance(message, Lost)))

    pumping = asyncio.create_task(pump())
    try:
        # Until every requested out-port is reported and every child has ended: after a failure, the out-ports may
        # all be lost while children still run or wait for values (to stage what they compute, or to be told
        # their inputs are lost), so values keep being forwarded to them.
        while True:
            running = [task for task, _ in children.values() if not task.done()]
            if not running and events.empty():
                if not outstanding:
                    break
                if not awaited:
                    # Nothing can send a value any more: a bug, but a hang would hide it.
                    raise WorkflowError(
                        f"module {inst.path!r}: out-ports {sorted(outstanding)} can never get a value"
                    )
            getting = asyncio.create_task(events.get())
            watched: set[asyncio.Future[Any]] = {getting, *running}
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not getting and task.exception() is not None:
                    getting.cancel()
                    raise task.exception()  # type: ignore[misc]
            if getting in done:
                name, port, ok = getting.result()
                forward(PortRef(name, port), ok)
            else:
                getting.cancel()  # a child finished; nothing was taken from the queue
            while not events.empty():
                name, port, ok = events.get_nowait()
                forward(PortRef(name, port), ok)
        await asyncio.gather(*(task for task, _ in children.values()))
    finally:
        pumping.cancel()
        for task, _ in children.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(pumping, *(task for task, _ in children.values()), return_exceptions=True)


async def _wait_for(inbox: asyncio.Queue[Message], ports: Iterable[str]) -> str | None:
    """Wait until each of ``ports`` has its value; the first that never will, or ``None``."""
    waiting = set(ports)
    while waiting:
        message = await inbox.get()
        if isinstance(message, Lost):
            if message.port in waiting:
                return message.port
            continue
        waiting.discard(message)
    return None


def _lost_text(rt: Runtime, port: str) -> str:
    """Why in-port ``port`` has no value, in words."""
    cause = "the run was asked to stop" if rt.stop_requested and not rt.failures else "what computes it failed"
    return f"its in-port {port} has no value ({cause})"


def _skip(rt: Runtime, inst: Instance, requested: frozenset[str], report: Report, why: str) -> None:
    """The module does not run in this run: say why, and that its out-ports will have no value."""
    rt.trace.skipped.append(inst.path)
    rt.emit(Event("skipped", inst.path, message=why))
    for o in sorted(requested):
        report(o, False)


async def _simple(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[Message],
    report: Report,
) -> None:
    """Wait for the recomputed in-ports, run the function through the executor, stage its out-ports, report."""
    module = inst.module
    lost = await _wait_for(inbox, recomputed)
    if lost is not None:
        _skip(rt, inst, requested, report, _lost_text(rt, lost))
        return
    if rt.stopping():
        _skip(rt, inst, requested, report, rt.why_stopping())
        return
    values: dict[str, Any] = {}
    for i in module.input_names:
        origin = inst.inputs.get(i)
        if origin is None and module.input(i).optional:
            continue
        if origin is None or origin.fingerprint is None:
            raise WorkflowInputError(f"module {inst.path!r}: in-port {i!r} is not connected to any value")
        values[i] = await rt.load(origin)  # ValueMissingError, naming the key, if it vanished meanwhile
    recipe = await _content_recipe(rt, inst, values)
    if recipe is not None and rt.reuse and rt.forced(module, inst.path) is None and await _cut_off(rt, inst, recipe):
        rt.trace.cut_off.append(inst.path)
        rt.emit(Event("cut-off", inst.path))
        for o in sorted(requested):
            report(o, True)
        return
    executor = rt.executor if module.executor is None else rt.executors.get(module.executor)
    if executor is None:
        named = "" if module.executor is None else f" {module.executor!r} (given: {sorted(rt.executors)})"
        raise WorkflowInputError(f"module {inst.path!r} must run, but no executor{named} was given")
    if rt.stopping():
        _skip(rt, inst, requested, report, rt.why_stopping())
        return
    rt.emit(Event("started", inst.path))
    began = time.perf_counter()
    try:
        call = Call(inst.path, module.function, values, dict(module.params), module.output_names, rt.capture_logs,
                    rt.watch_writes)  # fmt: skip
        outputs = await _attempts(rt, executor, inst, call)
        logs = outputs.pop(LOGS, None)
        files = _files(rt, inst, outputs, outputs.pop(WRITTEN, None))
        for o in module.output_names:
            origin = inst.outputs[o]
            assert origin is not None
            await rt.store(origin, outputs[o], inst.path, o)
        await _record_trace(rt, inst, recipe, outputs, files)
        if logs is not None:
            await _keep_logs(rt, inst, "finished", logs)
    except asyncio.CancelledError:
        rt.emit(Event("cancelled", inst.path, time.perf_counter() - began))
        raise
    except MODULE_FAILURES as exc:
        assert isinstance(exc, ExecutorError)
        took = time.perf_counter() - began
        if rt.stop_requested:
            # Stopped as asked (a worker killed by Ctrl-C): not the module's failure.
            rt.trace.stopped.append(inst.path)
            rt.emit(Event("cancelled", inst.path, took))
        else:
            rt.failures.append(exc)
            rt.trace.failed.append(inst.path)
            rt.halted = rt.halted or not rt.keep_going
            rt.emit(Event("failed", inst.path, took, message=str(exc)))
            if rt.capture_logs:
                streams = (getattr(exc, "stdout", ""), getattr(exc, "stderr", ""))
                await _keep_logs(rt, inst, "failed", streams, error=f"{type(exc).__name__}: {exc}")
        for o in sorted(requested):
            report(o, False)
        return
    except BaseException:
        rt.emit(Event("failed", inst.path, time.perf_counter() - began))
        raise
    rt.trace.ran.append(inst.path)
    rt.emit(Event("finished", inst.path, time.perf_counter() - began))
    for o in sorted(requested):
        report(o, True)


def _files(rt: Runtime, inst: Instance, outputs: Mapping[str, Any], written: Iterable[str] | None) -> list[str]:
    """The files the module wrote that are part of its outputs (declared, and named by returned paths); a declared
    file it did not write, or a file it wrote and neither declared nor returned, fails it."""
    for name in inst.files:
        if not os.path.exists(name):
            raise ModuleOutputError(
                f"module {inst.path!r} declares that it writes {name}, but the file is not there after it ran",
                inst.path,
            )
    returned = [rt.absolute(p) for o in inst.module.output_names for p in paths_in(outputs[o])]
    if written:
        left = unaccounted(written, [*inst.files, *returned])
        if left:
            raise UndeclaredWriteError(
                f"module {inst.path!r} wrote {left[0]} without declaring it: add it to @simple(writes=...) or "
                "return it as a pathlib.Path, so that a change to it is never hidden",
                inst.path,
                left[0],
            )
    return sorted({*inst.files, *returned})


async def _attempts(rt: Runtime, executor: Executor, inst: Instance, call: Call) -> dict[str, Any]:
    """Run ``call`` with the module's timeout per attempt, and again after a failure while retries are left, each
    retry waiting twice as long as the one before (from ``backoff`` seconds), unless the run is stopping."""
    module = inst.module
    for attempt in range(module.retries + 1):
        try:
            if module.timeout is None:
                return await executor.run(call)
            try:
                return await asyncio.wait_for(executor.run(call), module.timeout)
            except TimeoutError:
                raise ModuleTimeoutError(
                    f"module {inst.path!r} ran longer than its timeout of {module.timeout:g} s", inst.path
                ) from None
        except RETRIED as exc:
            if attempt == module.retries or rt.stopping():
                raise
            wait = min(module.backoff * 2**attempt, MAX_BACKOFF)
            rt.emit(Event("retry", inst.path, iteration=attempt + 1, message=f"{exc}; again in {wait:g} s"))
            await _pause(rt, wait)
            if rt.stopping():
                raise
    raise AssertionError("unreachable")


async def _pause(rt: Runtime, seconds: float) -> None:
    """Wait ``seconds``, or less if the run is asked to stop meanwhile."""
    if rt.stop is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(rt.stop.wait(), seconds)


# -- early cutoff ------------------------------------------------------------------------------------------------
#
# A module's out-port origins are derived from its inputs' *origins*, so anything upstream that reruns makes it
# recompute. After a run, a trace record under ``<path>/=trace`` keeps the module's *content recipe* — its code,
# parameters and its inputs' content fingerprints — with the fingerprint and content of each out-port's value and
# the content of the files it wrote. When the module is to run again and its content recipe is the one recorded
# (an upstream rerun produced what it produced before) and its files still hold what it wrote, the staged values
# are right: they are retagged with their new fingerprints and the module does not run. Its dependents then see
# unchanged contents too, and are cut off in turn. The record also says, for ``plan``'s reasons, what the module
# last ran with: its code and each parameter and input.

TRACE = "=trace"
"""The key segment, below a module's path, of its trace record."""

RECORD_VERSION = 2
"""The trace record's layout; records of another version are not used (the module runs, which is always right)."""


def trace_key(path: str) -> str:
    """The staging key of the trace record of the module at ``path``."""
    return f"{path}/{TRACE}"


LOG = "=log"
"""The key segment, below a module's path, of what its function printed the last time it ran."""


def log_key(path: str) -> str:
    """The staging key of the captured output of the module at ``path``."""
    return f"{path}/{LOG}"


def code_recipe(rt: Runtime, module: Module) -> str:
    """A simple module's code and parameters: what besides its inputs decides its outputs."""
    return rt.structure(module)


def shown(value: Any, width: int = 120) -> str:
    """A value as ``plan`` shows it: its ``repr``, shortened."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= width else text[: width - 1] + "…"


async def _content_recipe(rt: Runtime, inst: Instance, values: Mapping[str, Any]) -> str | None:
    contents: dict[str, str] = {}
    for i, value in values.items():
        origin = inst.inputs.get(i)
        if origin is None:
            return None
        fp = await rt.content(origin, value)
        if fp is None:
            return None
        contents[i] = fp
    inst.contents = contents
    return derive(code_recipe(rt, inst.module), {}, contents)


async def _cut_off(rt: Runtime, inst: Instance, recipe: str) -> bool:
    key = trace_key(inst.path)
    try:
        if not await asyncio.to_thread(rt.staging.has, key, recipe):
            return False
        record = await asyncio.to_thread(rt.staging.get, key, recipe)
        if record.get("version") != RECORD_VERSION:
            return False
        for name, recorded in dict(record["files"]).items():
            if await asyncio.to_thread(rt.file_content, name) != recorded:
                return False  # a file it wrote was changed or deleted since: run it to write it again
        outputs = record["outputs"]
        for o in inst.module.output_names:
            origin = inst.outputs[o]
            assert origin is not None and origin.fingerprint is not None
            old = outputs[o]["fingerprint"]
            if old == origin.fingerprint:
                if not await asyncio.to_thread(rt.staging.has, origin.key, old):
                    return False  # lost since (deleted, or overwritten): run the module
            elif not await rt.retag(origin.key, old, origin.fingerprint):
                return False  # overwritten since: run the module (it overwrites what was retagged)
        for o in inst.module.output_names:
            origin = inst.outputs[o]
            assert origin is not None and origin.fingerprint is not None
            rt.contents[origin.key] = outputs[o]["content"]
            rt.made.add(origin.key)
            outputs[o]["fingerprint"] = origin.fingerprint
        await rt.put(key, record, recipe)
    except (StagingError, KeyError, TypeError, AttributeError):
        return False  # no usable record: the module runs, which is always right
    return True


async def _record_trace(
    rt: Runtime, inst: Instance, recipe: str | None, outputs: Mapping[str, Any], files: Iterable[str]
) -> None:
    """Record what the module ran with and what it made (see above); without a content recipe (an input that
    cannot be fingerprinted) the record still explains the run, but no cutoff can use it."""
    module = inst.module
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "code": rt.code(module.function),
        "params": {p: value_fingerprint(v) for p, v in sorted(module.params.items())},
        "shown": {p: shown(v) for p, v in sorted(module.params.items())},
        "origins": {i: o.fingerprint for i, o in sorted(inst.inputs.items()) if o is not None},
        "given": {i: shown(rt.memory[o.key]) for i, o in sorted(inst.inputs.items()) if o is not None and o.in_memory},
        "inputs": inst.contents,
        "outputs": {},
        "files": {name: await asyncio.to_thread(rt.file_content, name) for name in files},
        "run": rt.run_id,
        "time": rt.began,
    }
    usable = recipe is not None
    for o in module.output_names:
        origin = inst.outputs[o]
        assert origin is not None
        content = await rt.content(origin, outputs[o])
        usable = usable and content is not None
        record["outputs"][o] = {"fingerprint": origin.fingerprint, "content": content}
    # A value without a content fingerprint cannot be recognised again: its record serves plan's reasons only.
    await rt.put(trace_key(inst.path), record, recipe if usable and recipe is not None else f"run-{rt.run_id}")


async def _keep_logs(rt: Runtime, inst: Instance, status: str, logs: tuple[str, str], error: str = "") -> None:
    """Keep what the module printed, with the run, the time and how it ended (a failed run's too)."""
    record = {"module": inst.path, "stdout": logs[0], "stderr": logs[1], "status": status, "run": rt.run_id,
              "time": rt.began, "error": error}  # fmt: skip
    await rt.put(log_key(inst.path), record, f"log-{rt.run_id}")


async def _iteration(
    rt: Runtime, loop: Instance, k: int, inputs: Mapping[str, Origin | None], recomputed: frozenset[str],
    requested: frozenset[str],
) -> tuple[Instance, bool]:  # fmt: skip
    """Run iteration ``k`` of ``loop``; the body's instance and whether every requested out-port got its value."""
    path = f"{loop.path}/iter-{k}"
    body = derive_instance(rt, loop.module, path, inputs, as_composite=True)
    if await check_files(rt, body):
        body = derive_instance(rt, loop.module, path, inputs, as_composite=True)  # the dirty modules' dependents
    inbox: asyncio.Queue[Message] = asyncio.Queue()
    for i in sorted(recomputed):
        inbox.put_nowait(i)  # their values exist already: the loop waited for them or iteration k-1 made them
    lost: list[str] = []
    await interpret(rt, body, recomputed, requested, inbox, lambda port, ok: None if ok else lost.append(port),
                    as_composite=True)  # fmt: skip
    return body, not lost


async def _loop(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[Message],
    report: Report,
) -> None:
    """Iterate the body until the stop condition holds, resuming each iteration from its own checkpoint."""
    lost = await _wait_for(inbox, recomputed)
    if lost is not None:
        _skip(rt, inst, requested, report, _lost_text(rt, lost))
        return
    module = inst.module
    flag = str(module.continue_port)
    body_requested = body_outputs(module, requested)
    previous: Instance | None = None
    fresh = recomputed
    for k in range(MAX_LOOP_ITERATIONS):
        if inst.path not in rt.trace.loop_starts:
            rt.iterations[f"{inst.path}/iter-{k}"] = (inst.path, k)
        body, complete = await _iteration(rt, inst, k, iteration_inputs(inst, k, previous), fresh, body_requested)
        if not complete:
            for o in sorted(requested):
                report(o, False)
            return
        state = rt.trace.states[body.path]
        origin = body.outputs[flag]
        assert origin is not None
        if not await rt.load(origin):
            break
        fresh = iteration_recomputed(inst, recomputed, state)
        previous = body
    else:
        raise LoopError(f"loop {inst.path!r} did not stop within {MAX_LOOP_ITERATIONS} iterations")
    for o in sorted(requested):
        source, target = body.outputs[o], inst.outputs[o]
        assert source is not None and target is not None
        await rt.store(target, await rt.load(source))
        report(o, True)

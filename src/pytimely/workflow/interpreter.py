"""The asynchronous interpreter of seed ``004_6a2e88f6382bfe5d.txt`` §2.2–2.3, made never stale by fingerprints.

**Derivation.** Before anything runs, every port of every module instance gets an :class:`Origin`: the staging
key its value lives under and the fingerprint that value must have been computed for (a build system's
derivation hash). A workflow in-port's fingerprint is its value's; a simple module's out-port ``o`` has
``derive(code_fingerprint(fn), {"out-port": o}, {i: fingerprint of i for every i with o ∈ deps(i)})``; a port
fed by a connection has its source's origin; a loop's out-port is derived from the loop's structure and its
in-ports the same way (its final iteration's value is copied there). A port *has a value* (is in ``H``) when
its origin holds a value stored under exactly that fingerprint — changed code or inputs make it absent.

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

Values already staged stay when a module fails: that is what makes the next run resume.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pytimely.errors import (
    FingerprintError,
    LoopError,
    ModuleCycleError,
    ModuleDefinitionError,
    ModuleFailedError,
    ModuleTimeoutError,
    StagingError,
    StagingUnavailableError,
    WorkerDiedError,
    WorkflowError,
    WorkflowInputError,
)
from pytimely.workflow.executors import Call, Executor
from pytimely.workflow.fingerprint import code_fingerprint, derive, value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.logs import LOGS
from pytimely.workflow.model import Kind, Module, PortRef
from pytimely.workflow.resume import ResumeState, compute_resume_state_async
from pytimely.workflow.staging import MemoryStaging, StagingArea, unavailable

__all__ = [
    "Event",
    "Instance",
    "Invocation",
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


@dataclass(frozen=True, slots=True)
class Event:
    """A progress event: a module ``started``, ``finished``, ``failed`` or ``cancelled`` (with seconds), ``cut-off``
    (early cutoff), a ``retry`` (attempt number in ``iteration``, the failure in ``message``), or a loop ``resumed``
    at iteration k."""

    kind: Literal["started", "finished", "failed", "cancelled", "resumed", "cut-off", "retry"]
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


class Runtime:
    """What every interpreter of one run shares: staging, executor, in-memory values and the trace."""

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
    ) -> None:
        self.staging = staging
        self.capture_logs = capture_logs
        self.executors = dict(executors or {})
        self.executor = executor
        self.reuse = reuse
        self.progress = progress
        self.trace = trace if trace is not None else Trace()
        self.memory: dict[str, Any] = {}
        self.produced: dict[str, Any] = {}
        """Values kept for this run's readers: only where staging keeps them in memory anyway."""
        self.made: set[str] = set()
        """Keys whose values this run staged (computed, or retagged by early cutoff)."""
        # A memory area holds the objects themselves: reading them back costs nothing, and keeps identity.
        self.keep_values = isinstance(staging, MemoryStaging)
        self.contents: dict[str, str] = {}
        """Content fingerprints of staged values known in this run, by key."""
        self._structure: dict[int, str] = {}
        self._code: dict[int, tuple[Any, str]] = {}
        self.iterations: dict[str, tuple[str, int]] = {}
        """Iteration paths of loops not yet known to resume, to their loop's path and iteration number."""

    # -- derivation ----------------------------------------------------------------------------------------------

    def structure(self, module: Module) -> str:
        """``structure_fingerprint(module)``, computed once per module object in this run."""
        fp = self._structure.get(id(module))
        if fp is None:
            if module.kind is Kind.SIMPLE:
                fp = self.code(module.function)
            else:
                fp = structure_fingerprint(module, self.structure)
            self._structure[id(module)] = fp
        return fp

    def code(self, fn: Any) -> str:
        """``code_fingerprint(fn)``, computed once per function object in this run (many modules share one)."""
        known = self._code.get(id(fn))
        if known is None:
            # The function is kept with its fingerprint so that its id cannot be reused meanwhile.
            known = self._code[id(fn)] = (fn, code_fingerprint(fn))
        return known[1]

    def remember(self, key: str, value: Any) -> None:
        """Hold an in-memory value (a workflow input or a constant module's output)."""
        self.memory[key] = value

    # -- values ----------------------------------------------------------------------------------------------------

    async def has(self, origin: Origin | None) -> bool:
        """Whether ``origin`` holds a value computed for its fingerprint (the ``v ∈ H`` test)."""
        if origin is None or origin.fingerprint is None:
            return False
        if origin.in_memory:
            return origin.key in self.memory
        if origin.key in self.made:
            return True
        if not self.reuse:
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

    async def store(self, origin: Origin, value: Any) -> None:
        """Stage ``value`` at ``origin`` (atomically, with its fingerprint); readers load it from there."""
        assert origin.fingerprint is not None
        try:
            await asyncio.to_thread(self.staging.put, origin.key, value, origin.fingerprint)
        except OSError as exc:
            # The staging area's fault (a folder that cannot be written, a bucket that is gone), not the module's.
            raise StagingUnavailableError(
                f"cannot stage the value of {origin.key!r} in {self.staging!r}: {unavailable(exc)}", origin.key
            ) from exc
        self.made.add(origin.key)
        if self.keep_values:
            self.produced[origin.key] = value

    async def content(self, origin: Origin, value: Any) -> str | None:
        """The content fingerprint of the value at ``origin`` (``None`` if it cannot be fingerprinted)."""
        if origin.in_memory:
            return origin.fingerprint  # inputs and constants are fingerprinted by content already
        known = self.contents.get(origin.key)
        if known is None:
            try:
                known = self.contents[origin.key] = await asyncio.to_thread(value_fingerprint, value)
            except FingerprintError:
                return None
        return known

    async def retag(self, key: str, old: str, new: str) -> bool:
        """Record the value under ``key`` for ``new`` if it is there for ``old`` (a marker write where possible)."""
        retag = getattr(self.staging, "retag", None)
        if retag is not None:
            return bool(await asyncio.to_thread(retag, key, old, new))
        if not await asyncio.to_thread(self.staging.has, key, old):
            return False
        value = await asyncio.to_thread(self.staging.get, key, old)
        await asyncio.to_thread(self.staging.put, key, value, new)
        return True

    def emit(self, event: Event) -> None:
        """Report progress, if anyone listens."""
        if self.progress is not None:
            self.progress(event)


# -- derivation ------------------------------------------------------------------------------------------------------


def structure_fingerprint(module: Module, child_fp: Callable[[Module], str] | None = None) -> str:
    """A fingerprint of what a module computes: a simple module's code, a constant's value, or a parent's wiring,
    its children's structure and (for a loop) its I/O pairs and stop condition."""
    sub = child_fp or structure_fingerprint
    if module.kind is Kind.SIMPLE:
        return code_fingerprint(module.function)
    if module.kind is Kind.INPUT:
        return value_fingerprint(module.value)
    params: dict[str, Any] = {
        "kind": module.kind.value,
        "inputs": list(module.input_names),
        "outputs": list(module.output_names),
        "connections": sorted(f"{c.source}->{c.target}" for c in module.connections),
        "io": [list(pair) for pair in module.io_ports],
        "deps": {i: sorted(os) for i, os in module.deps.items()},
    }
    if module.kind is Kind.LOOP:
        params["continue"] = module.continue_port
    children = {child.name: sub(child) for child in module.submodules}
    return derive("structure", params, children)


def _black_box_outputs(
    rt: Runtime, module: Module, path: str, inputs: Mapping[str, Origin | None]
) -> dict[str, Origin | None]:
    """Out-port origins of a module whose outputs are computed as a whole (simple or loop)."""
    code = rt.structure(module)
    outputs: dict[str, Origin | None] = {}
    for o in module.output_names:
        fps: dict[str, str] = {}
        fp: str | None = None
        for i in sorted(i for i, os in module.deps.items() if o in os):
            origin = inputs.get(i)
            if origin is None and module.input(i).optional:
                continue  # unconnected: the function's default, which its code fingerprint covers
            if origin is None or origin.fingerprint is None:
                break
            fps[i] = origin.fingerprint
        else:
            fp = derive(code, {"out-port": o, "params": dict(module.params)}, fps)
        outputs[o] = Origin(f"{path}/{o}", fp)
    return outputs


def derive_instance(
    rt: Runtime, module: Module, path: str, inputs: Mapping[str, Origin | None], *, as_composite: bool = False
) -> Instance:
    """The instance of ``module`` at ``path`` with the given in-port origins, its ports' origins all derived."""
    inst = Instance(module, path, dict(inputs))
    kind = Kind.COMPOSITE if as_composite else module.kind
    if kind in (Kind.SIMPLE, Kind.LOOP):
        inst.outputs = _black_box_outputs(rt, module, path, inputs)
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


def _constant_values(module: Module) -> dict[str, Any]:
    names = module.output_names
    if len(names) == 1:
        return {names[0]: module.value}
    if not isinstance(module.value, Mapping) or set(module.value) != set(names):
        raise ModuleDefinitionError(
            f"input module {module.name!r} has out-ports {list(names)}: its value must be a mapping with those names"
        )
    return {n: module.value[n] for n in names}


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


Report = Callable[[str], None]


async def interpret(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[str],
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
            report(o)


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
    inbox: asyncio.Queue[str],
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
    events: asyncio.Queue[tuple[str | None, str]] = asyncio.Queue()
    children: dict[str, tuple[asyncio.Task[None], asyncio.Queue[str]]] = {}
    outstanding = set(requested)

    def start(name: str) -> asyncio.Queue[str] | None:
        running = children.get(name)
        if running is not None:
            return running[1]
        wanted = rs.child_outputs(name)
        if not wanted:
            return None
        queue: asyncio.Queue[str] = asyncio.Queue()

        def child_report(port: str, name: str = name) -> None:
            events.put_nowait((name, port))

        task = asyncio.create_task(
            interpret(rt, inst.children[name], rs.child_inputs(name), wanted, queue, child_report),
            name=f"pytimely-workflow:{inst.children[name].path}",
        )
        children[name] = (task, queue)
        return queue

    def forward(source: PortRef) -> None:
        for target in targets.get(source, ()):
            vertex = (
                Vertex.outport(target.port) if target.module is None else Vertex.child_in(target.module, target.port)
            )
            if rs.state.get(vertex) != "recompute":
                continue  # ready ports keep their value; irrelevant ones are not needed now
            rt.trace.forwarded.append((inst.path, vertex))
            if target.module is None:
                if target.port in outstanding:
                    outstanding.discard(target.port)
                    report(target.port)
            else:
                queue = start(target.module)
                if queue is not None:
                    queue.put_nowait(target.port)

    for o in sorted(requested):
        if rs.state[Vertex.outport(o)] == "ready":
            outstanding.discard(o)
            report(o)
    for v in sorted(rs.ready):
        if v.kind == "in" and v.port is not None:
            forward(PortRef(None, v.port))
    for first in rs.children_to_start():
        start(first)

    awaited = set(recomputed)

    async def pump() -> None:
        while True:
            port = await inbox.get()
            awaited.discard(port)
            events.put_nowait((None, port))

    pumping = asyncio.create_task(pump())
    try:
        while outstanding:
            running = [task for task, _ in children.values() if not task.done()]
            if not running and not awaited and events.empty():
                # Nothing can send a value any more: a bug, but a hang would hide it.
                raise WorkflowError(f"module {inst.path!r}: out-ports {sorted(outstanding)} can never get a value")
            getting = asyncio.create_task(events.get())
            watched: set[asyncio.Future[Any]] = {getting, *running}
            done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not getting and task.exception() is not None:
                    getting.cancel()
                    raise task.exception()  # type: ignore[misc]
            if getting in done:
                name, port = getting.result()
                forward(PortRef(name, port))
            else:
                getting.cancel()  # a child finished; nothing was taken from the queue
            while not events.empty():
                name, port = events.get_nowait()
                forward(PortRef(name, port))
        await asyncio.gather(*(task for task, _ in children.values()))
    finally:
        pumping.cancel()
        for task, _ in children.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(pumping, *(task for task, _ in children.values()), return_exceptions=True)


async def _wait_for(inbox: asyncio.Queue[str], ports: Iterable[str]) -> None:
    waiting = set(ports)
    while waiting:
        waiting.discard(await inbox.get())


async def _simple(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[str],
    report: Report,
) -> None:
    """Wait for the recomputed in-ports, run the function through the executor, stage its out-ports, report."""
    await _wait_for(inbox, recomputed)
    module = inst.module
    values: dict[str, Any] = {}
    for i in module.input_names:
        origin = inst.inputs.get(i)
        if origin is None and module.input(i).optional:
            continue
        if origin is None or origin.fingerprint is None:
            raise WorkflowInputError(f"module {inst.path!r}: in-port {i!r} is not connected to any value")
        values[i] = await rt.load(origin)  # ValueMissingError, naming the key, if it vanished meanwhile
    recipe = await _content_recipe(rt, inst, values)
    if recipe is not None and rt.reuse and await _cut_off(rt, inst, recipe):
        rt.trace.cut_off.append(inst.path)
        rt.emit(Event("cut-off", inst.path))
        for o in sorted(requested):
            report(o)
        return
    executor = rt.executor if module.executor is None else rt.executors.get(module.executor)
    if executor is None:
        named = "" if module.executor is None else f" {module.executor!r} (given: {sorted(rt.executors)})"
        raise WorkflowInputError(f"module {inst.path!r} must run, but no executor{named} was given")
    rt.emit(Event("started", inst.path))
    began = time.perf_counter()
    try:
        call = Call(inst.path, module.function, values, dict(module.params), module.output_names, rt.capture_logs)
        outputs = await _attempts(rt, executor, inst, call)
        logs = outputs.pop(LOGS, None)
        for o in module.output_names:
            origin = inst.outputs[o]
            assert origin is not None
            await rt.store(origin, outputs[o])
        if recipe is not None:
            await _record_trace(rt, inst, recipe, outputs)
        if logs is not None:
            first = inst.outputs[module.output_names[0]]
            assert first is not None and first.fingerprint is not None
            record = {"module": inst.path, "stdout": logs[0], "stderr": logs[1]}
            await asyncio.to_thread(rt.staging.put, log_key(inst.path), record, first.fingerprint)
    except asyncio.CancelledError:
        rt.emit(Event("cancelled", inst.path, time.perf_counter() - began))
        raise
    except BaseException:
        rt.emit(Event("failed", inst.path, time.perf_counter() - began))
        raise
    rt.trace.ran.append(inst.path)
    rt.emit(Event("finished", inst.path, time.perf_counter() - began))
    for o in sorted(requested):
        report(o)


async def _attempts(rt: Runtime, executor: Executor, inst: Instance, call: Call) -> dict[str, Any]:
    """Run ``call`` with the module's timeout per attempt, and again after a failure while retries are left."""
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
        except (ModuleFailedError, WorkerDiedError, ModuleTimeoutError) as exc:
            if attempt == module.retries:
                raise
            rt.emit(Event("retry", inst.path, iteration=attempt + 1, message=str(exc)))
    raise AssertionError("unreachable")


# -- early cutoff ------------------------------------------------------------------------------------------------
#
# A module's out-port origins are derived from its inputs' *origins*, so anything upstream that reruns makes it
# recompute. After a run, a trace record under ``<path>/=trace`` keeps the module's *content recipe* — its code,
# parameters and its inputs' content fingerprints — with the fingerprint and content of each out-port's value.
# When the module is to run again and its content recipe is the one recorded (an upstream rerun produced what
# it produced before), the staged values are right: they are retagged with their new fingerprints and the
# module does not run. Its dependents then see unchanged contents too, and are cut off in turn.

TRACE = "=trace"
"""The key segment, below a module's path, of its trace record."""


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
    return derive(rt.structure(module), {"params": dict(module.params)}, {})


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
        await asyncio.to_thread(rt.staging.put, key, record, recipe)
    except (StagingError, KeyError, TypeError):
        return False  # no usable record: the module runs, which is always right
    return True


async def _record_trace(rt: Runtime, inst: Instance, recipe: str, outputs: Mapping[str, Any]) -> None:
    record: dict[str, Any] = {"code": code_recipe(rt, inst.module), "inputs": inst.contents, "outputs": {}}
    for o in inst.module.output_names:
        origin = inst.outputs[o]
        assert origin is not None
        content = await rt.content(origin, outputs[o])
        if content is None:
            return  # a value without a content fingerprint cannot be recognised again
        record["outputs"][o] = {"fingerprint": origin.fingerprint, "content": content}
    await asyncio.to_thread(rt.staging.put, trace_key(inst.path), record, recipe)


async def _iteration(
    rt: Runtime, loop: Instance, k: int, inputs: Mapping[str, Origin | None], recomputed: frozenset[str],
    requested: frozenset[str],
) -> Instance:  # fmt: skip
    body = derive_instance(rt, loop.module, f"{loop.path}/iter-{k}", inputs, as_composite=True)
    inbox: asyncio.Queue[str] = asyncio.Queue()
    for i in sorted(recomputed):
        inbox.put_nowait(i)  # their values exist already: the loop waited for them or iteration k-1 made them
    await interpret(rt, body, recomputed, requested, inbox, lambda _: None, as_composite=True)
    return body


async def _loop(
    rt: Runtime,
    inst: Instance,
    recomputed: frozenset[str],
    requested: frozenset[str],
    inbox: asyncio.Queue[str],
    report: Report,
) -> None:
    """Iterate the body until the stop condition holds, resuming each iteration from its own checkpoint."""
    await _wait_for(inbox, recomputed)
    module = inst.module
    flag = str(module.continue_port)
    body_requested = frozenset(requested) | {o for _, o in module.io_ports} | {flag}
    previous: Instance | None = None
    fresh = recomputed
    for k in range(MAX_LOOP_ITERATIONS):
        if inst.path not in rt.trace.loop_starts:
            rt.iterations[f"{inst.path}/iter-{k}"] = (inst.path, k)
        body = await _iteration(rt, inst, k, iteration_inputs(inst, k, previous), fresh, body_requested)
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
        report(o)

"""The asynchronous interpreter of seed ``004_6a2e88f6382bfe5d.txt`` §2.2–2.3, made never stale by fingerprints.

The origins of ports are derived first (:mod:`pytimely.workflow.derivation`); what they are checked against is
the run's state (:mod:`pytimely.workflow.runtime`) and the trace records (:mod:`pytimely.workflow.records`).

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
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pytimely.errors import (
    ExecutorError,
    LoopError,
    ModuleFailedError,
    ModuleOutputError,
    ModuleTimeoutError,
    UndeclaredWriteError,
    UnpicklableOutputError,
    WorkerDiedError,
    WorkflowError,
    WorkflowInputError,
)
from pytimely.workflow.derivation import body_outputs, derive_instance, iteration_inputs, iteration_recomputed
from pytimely.workflow.executors import Call, Executor
from pytimely.workflow.graph import Vertex
from pytimely.workflow.logs import LOGS
from pytimely.workflow.model import Kind, PortRef
from pytimely.workflow.records import check_files, content_recipe, cut_off, keep_logs, record_trace
from pytimely.workflow.resume import ResumeState, compute_resume_state_async
from pytimely.workflow.runtime import Event, Instance, Invocation, Lost, Message, Origin, Runtime
from pytimely.workflow.writes import WRITTEN, paths_in, unaccounted

__all__ = ["Report", "interpret", "resume_state"]

MAX_LOOP_ITERATIONS = 100_000


MODULE_FAILURES: tuple[type[BaseException], ...] = (
    ModuleFailedError, ModuleOutputError, WorkerDiedError, ModuleTimeoutError, UndeclaredWriteError,
    UnpicklableOutputError,
)  # fmt: skip
"""What a module's own run can end in: the module failed, not the run (staging and executor faults stop the run)."""

RETRIED: tuple[type[BaseException], ...] = (ModuleFailedError, WorkerDiedError, ModuleTimeoutError)
"""Failures worth another attempt (``retries=``): not the deterministic ones (a wrong output, an undeclared file)."""

MAX_BACKOFF = 300.0
"""The longest wait between two attempts, in seconds, however many retries."""


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
    rs = await resume_state(rt, inst, recomputed, requested)
    _note_resumed(rt, inst, rs)
    parent = _Parent(rt, inst, rs, requested, report)
    for o in sorted(requested):
        if rs.state[Vertex.outport(o)] == "ready":
            parent.outstanding.discard(o)
            report(o, True)
    for v in sorted(rs.ready):
        if v.kind == "in" and v.port is not None:
            parent.forward(PortRef(None, v.port), True)
    for first in rs.children_to_start():
        parent.start(first)
    await parent.run(inbox, set(recomputed))


def _note_resumed(rt: Runtime, inst: Instance, rs: ResumeState) -> None:
    """Keep the parent's resume state in the trace, with the staged values it reuses and, for a loop's iteration,
    whether the loop resumes there."""
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


class _Parent:
    """A parent interpreter's children and the values it forwards along its connections (§2.3)."""

    def __init__(self, rt: Runtime, inst: Instance, rs: ResumeState, requested: frozenset[str], report: Report) -> None:
        self.rt = rt
        self.inst = inst
        self.rs = rs
        self.report = report
        self.targets: dict[PortRef, list[PortRef]] = {}
        for c in inst.module.connections:
            self.targets.setdefault(c.source, []).append(c.target)
        self.events: asyncio.Queue[tuple[str | None, str, bool]] = asyncio.Queue()
        """What the parent's inbox and its children report: ``(child or None, port, has a value)``."""
        self.children: dict[str, tuple[asyncio.Task[None], asyncio.Queue[Message]]] = {}
        self.outstanding = set(requested)

    def start(self, name: str) -> asyncio.Queue[Message] | None:
        """The inbox of child ``name``, started now if it is not running yet; ``None`` if nothing is wanted of it."""
        running = self.children.get(name)
        if running is not None:
            return running[1]
        wanted = self.rs.child_outputs(name)
        if not wanted:
            return None
        queue: asyncio.Queue[Message] = asyncio.Queue()

        def child_report(port: str, ok: bool, name: str = name) -> None:
            self.events.put_nowait((name, port, ok))

        child = self.inst.children[name]
        task = asyncio.create_task(
            interpret(self.rt, child, self.rs.child_inputs(name), wanted, queue, child_report),
            name=f"pytimely-workflow:{child.path}",
        )
        self.children[name] = (task, queue)
        return queue

    def forward(self, source: PortRef, ok: bool) -> None:
        """Pass the value (or its loss) at ``source`` on to the connection targets that are to be recomputed."""
        for target in self.targets.get(source, ()):
            vertex = (
                Vertex.outport(target.port) if target.module is None else Vertex.child_in(target.module, target.port)
            )
            if self.rs.state.get(vertex) != "recompute":
                continue  # ready ports keep their value; irrelevant ones are not needed now
            if ok:
                self.rt.trace.forwarded.append((self.inst.path, vertex))
            if target.module is None:
                if target.port in self.outstanding:
                    self.outstanding.discard(target.port)
                    self.report(target.port, ok)
            else:
                queue = self.start(target.module)
                if queue is not None:
                    queue.put_nowait(target.port if ok else Lost(target.port))

    async def run(self, inbox: asyncio.Queue[Message], awaited: set[str]) -> None:
        """Forward what arrives until every requested out-port is reported and every child has ended; ``awaited``:
        the in-ports whose values (or losses) are still to come through ``inbox``."""
        pumping = asyncio.create_task(self._pump(inbox, awaited))
        try:
            # Until every requested out-port is reported and every child has ended: after a failure, the out-ports may
            # all be lost while children still run or wait for values (to stage what they compute, or to be told
            # their inputs are lost), so values keep being forwarded to them.
            while True:
                running = [task for task, _ in self.children.values() if not task.done()]
                if not running and self.events.empty():
                    if not self.outstanding:
                        break
                    if not awaited:
                        # Nothing can send a value any more: a bug, but a hang would hide it.
                        raise WorkflowError(
                            f"module {self.inst.path!r}: out-ports {sorted(self.outstanding)} can never get a value"
                        )
                await self._next(running)
            await asyncio.gather(*(task for task, _ in self.children.values()))
        finally:
            pumping.cancel()
            for task, _ in self.children.values():
                if not task.done():
                    task.cancel()
            await asyncio.gather(pumping, *(task for task, _ in self.children.values()), return_exceptions=True)

    async def _pump(self, inbox: asyncio.Queue[Message], awaited: set[str]) -> None:
        while True:
            message = await inbox.get()
            port = message.port if isinstance(message, Lost) else message
            awaited.discard(port)
            self.events.put_nowait((None, port, not isinstance(message, Lost)))

    async def _next(self, running: list[asyncio.Task[None]]) -> None:
        """Wait for an event or for a running child to end (raising what it raised); forward every event there is."""
        getting = asyncio.create_task(self.events.get())
        watched: set[asyncio.Future[Any]] = {getting, *running}
        done, _ = await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not getting and task.exception() is not None:
                getting.cancel()
                raise task.exception()  # type: ignore[misc]
        if getting in done:
            name, port, ok = getting.result()
            self.forward(PortRef(name, port), ok)
        else:
            getting.cancel()  # a child finished; nothing was taken from the queue
        while not self.events.empty():
            name, port, ok = self.events.get_nowait()
            self.forward(PortRef(name, port), ok)


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
    values = await _inputs(rt, inst)
    recipe = await content_recipe(rt, inst, values)
    if recipe is not None and rt.reuse and rt.forced(module, inst.path) is None and await cut_off(rt, inst, recipe):
        rt.trace.cut_off.append(inst.path)
        rt.emit(Event("cut-off", inst.path))
        for o in sorted(requested):
            report(o, True)
        return
    executor = _executor_of(rt, inst)
    if rt.stopping():
        _skip(rt, inst, requested, report, rt.why_stopping())
        return
    rt.emit(Event("started", inst.path))
    began = time.perf_counter()
    try:
        await _run_and_stage(rt, inst, executor, values, recipe)
    except asyncio.CancelledError:
        rt.emit(Event("cancelled", inst.path, time.perf_counter() - began))
        raise
    except MODULE_FAILURES as exc:
        assert isinstance(exc, ExecutorError)
        await _failed(rt, inst, exc, time.perf_counter() - began)
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


async def _inputs(rt: Runtime, inst: Instance) -> dict[str, Any]:
    """The values of the module's connected in-ports, from memory or staging."""
    module = inst.module
    values: dict[str, Any] = {}
    for i in module.input_names:
        origin = inst.inputs.get(i)
        if origin is None and module.input(i).optional:
            continue
        if origin is None or origin.fingerprint is None:
            raise WorkflowInputError(f"module {inst.path!r}: in-port {i!r} is not connected to any value")
        values[i] = await rt.load(origin)  # ValueMissingError, naming the key, if it vanished meanwhile
    return values


def _executor_of(rt: Runtime, inst: Instance) -> Executor:
    """The executor the module runs on: the run's, or the one it names."""
    module = inst.module
    executor = rt.executor if module.executor is None else rt.executors.get(module.executor)
    if executor is None:
        named = "" if module.executor is None else f" {module.executor!r} (given: {sorted(rt.executors)})"
        raise WorkflowInputError(f"module {inst.path!r} must run, but no executor{named} was given")
    return executor


async def _run_and_stage(
    rt: Runtime, inst: Instance, executor: Executor, values: dict[str, Any], recipe: str | None
) -> None:
    """Run the module's function on ``executor``, stage its out-ports and record what it ran with and made."""
    module = inst.module
    call = Call(inst.path, module.function, values, dict(module.params), module.output_names, rt.capture_logs,
                rt.watch_writes)  # fmt: skip
    outputs = await _attempts(rt, executor, inst, call)
    logs = outputs.pop(LOGS, None)
    files = _files(rt, inst, outputs, outputs.pop(WRITTEN, None))
    for o in module.output_names:
        origin = inst.outputs[o]
        assert origin is not None
        await rt.store(origin, outputs[o], inst.path, o)
    await record_trace(rt, inst, recipe, outputs, files)
    if logs is not None:
        await keep_logs(rt, inst, "finished", logs)


async def _failed(rt: Runtime, inst: Instance, exc: ExecutorError, took: float) -> None:
    """The module's run ended in ``exc`` after ``took`` seconds: a failure of the run, unless it was asked to stop."""
    if rt.stop_requested:
        # Stopped as asked (a worker killed by Ctrl-C): not the module's failure.
        rt.trace.stopped.append(inst.path)
        rt.emit(Event("cancelled", inst.path, took))
        return
    rt.failures.append(exc)
    rt.trace.failed.append(inst.path)
    rt.halted = rt.halted or not rt.keep_going
    rt.emit(Event("failed", inst.path, took, message=str(exc)))
    if rt.capture_logs:
        streams = (getattr(exc, "stdout", ""), getattr(exc, "stderr", ""))
        await keep_logs(rt, inst, "failed", streams, error=f"{type(exc).__name__}: {exc}")


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

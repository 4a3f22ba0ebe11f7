"""Running, planning and drawing a workflow: :func:`run`, :func:`arun`, :func:`plan` and :func:`show`.

A *workflow* is a composite :class:`~pytimely.workflow.model.Module`; its in-ports are given as ``inputs``
and its out-ports (all, or the ``outputs`` asked for) come back as a dict. Every run resumes: values already
staged under their expected fingerprints are reused and exactly the modules the optimal consistent checkpoint
leaves are run (``reuse=False`` ignores what is staged). :func:`plan` computes, without running anything, the
resume state of every module instance that would be interpreted — which ports are ready, which will be
recomputed and which are irrelevant — and so which modules will run, each with its reasons (:class:`Reason`).
A run can be steered: ``rerun=`` modules to run again whatever is staged, ``until=`` a module to stop after,
``keep_going`` past a failure, ``stop`` to end it (see :func:`arun`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import ModuleDefinitionError, UnknownModuleError, WorkflowInputError
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.derivation import body_outputs, derive_instance, iteration_inputs, iteration_recomputed
from pytimely.workflow.executors import Executor, ThreadExecutor
from pytimely.workflow.fingerprint import derive, value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.interpreter import interpret, resume_state
from pytimely.workflow.model import Connection, Kind, Module, Port, PortRef
from pytimely.workflow.records import LOG, check_files, latest_record, shown, trace_key
from pytimely.workflow.resume import ResumeState
from pytimely.workflow.runtime import Event, Instance, Message, Origin, Runtime, Trace
from pytimely.workflow.staging import (
    LocalStaging,
    MemoryStaging,
    StagingArea,
    check_key,
    open_staging,
    staging_lock,
)
from pytimely.workflow.staging.lock import LEASE_SECONDS

__all__ = ["Plan", "Reason", "aplan", "arun", "find_module", "module_logs", "plan", "run", "show", "stop_after"]

StagingLike = StagingArea | str | None


def _staging(staging: StagingLike) -> StagingArea:
    if staging is None:
        return MemoryStaging()
    if isinstance(staging, str):
        return open_staging(staging)
    return staging


CACHE_NAME = ".fingerprints.json"
"""The file in a local staging area's root that caches its inputs' content fingerprints (not a staging key)."""


def default_cache(staging: StagingArea) -> FingerprintCache:
    """The content-fingerprint cache a run on ``staging`` uses by default: in a local area's root, else in memory."""
    if isinstance(staging, LocalStaging):
        return FingerprintCache(f"{staging.root}/{CACHE_NAME}")
    return FingerprintCache()


def input_fingerprint(
    value: Any, cache: FingerprintCache, storage_options: Mapping[str, Any] | None = None
) -> str:
    """A workflow input's fingerprint: its value's, and for a path or URL also the content it names."""
    own = value_fingerprint(value)
    content = content_fingerprint(value, cache, storage_options=storage_options)
    if content is None:
        return own
    return derive("input-content", {}, {"value": own, "content": content})


def find_module(workflow: Module, name: str, what: str = "") -> Module:
    """The module of ``workflow`` that ``name`` names: its path (``wf/core/peel``), its path below the workflow
    (``core/peel``), or its last part (``peel``) when only one module has it; ``UnknownModuleError`` otherwise."""
    candidates = [m for m in workflow.walk() if m.kind is not Kind.INPUT]
    found = [m for m in candidates if name in (m.path, f"{workflow.name}/{name}")]
    if not found:
        found = [m for m in candidates if m.path.endswith("/" + name)]
    where = f"{what}: " if what else ""
    if not found:
        names = [m.path for m in candidates[1:]]
        listed = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
        raise UnknownModuleError(f"{where}workflow {workflow.name!r} has no module {name!r} (its modules: {listed})")
    if len(found) > 1:
        raise UnknownModuleError(
            f"{where}{name!r} names {len(found)} modules ({', '.join(m.path for m in found)}); give its path"
        )
    return found[0]


def rerun_reasons(workflow: Module, names: Iterable[str]) -> dict[str, str]:
    """The module paths a run must recompute for ``rerun=names``, with why: each named module and the modules in it,
    and the loops holding one (a loop's values are made by its body)."""
    forced: dict[str, str] = {}
    for name in names:
        target = find_module(workflow, name, "--rerun")
        for inner in target.walk():
            if inner.kind in (Kind.SIMPLE, Kind.LOOP):
                forced.setdefault(inner.path, f"asked to rerun ({name})")
        parts = target.path.split("/")
        for k in range(1, len(parts)):
            outer = "/".join(parts[:k])
            if workflow.find(outer).kind is Kind.LOOP:
                forced.setdefault(outer, f"holds {target.path}, asked to rerun ({name})")
    return forced


UNTIL = "until="
"""The prefix of the out-ports a workflow is given to stop after a module (``until=``): ``until=<port>``."""


def stop_after(workflow: Module, name: str) -> tuple[Module, Module]:
    """``workflow`` with the out-ports of the module ``name`` names brought up to its own (as ``until=<port>``),
    and that module: running it for those out-ports runs what that module needs and nothing else."""
    target = find_module(workflow, name, "--until")
    if target is workflow:
        return workflow, workflow
    parts = target.path.split("/")[1:]
    for k in range(1, len(parts)):
        outer = workflow.find("/".join([workflow.name, *parts[:k]]))
        if outer.kind is Kind.LOOP:
            raise UnknownModuleError(
                f"--until: {target.path!r} is inside loop {outer.path!r}, which has no single moment after it; "
                f"name the loop instead"
            )

    def expose(module: Module, rest: list[str]) -> Module:
        child = module.child(rest[0])
        if len(rest) > 1:
            child = expose(child, rest[1:])
            ports = [p for p in child.outputs if p.name.startswith(UNTIL)]
            sources = {p.name: PortRef(child.name, p.name) for p in ports}
        else:
            ports = [Port(UNTIL + p.name, p.type) for p in child.outputs]
            sources = {UNTIL + p.name: PortRef(child.name, p.name) for p in child.outputs}
        taken = set(module.output_names)
        clash = sorted(set(sources) & taken)
        if clash:
            raise UnknownModuleError(f"--until: module {module.path!r} already has an out-port {clash[0]!r}")
        return dataclasses.replace(
            module,
            outputs=(*module.outputs, *ports),
            submodules=tuple(child if m.name == child.name else m for m in module.submodules),
            connections=(*module.connections, *(Connection(src, PortRef(None, p)) for p, src in sources.items())),
            deps={},  # computed again, minimally, with the new out-ports
        )

    return expose(workflow, parts), target


async def _prepare(
    rt: Runtime,
    workflow: Module,
    inputs: Mapping[str, Any],
    outputs: Sequence[str] | None,
    cache: FingerprintCache | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[Instance, frozenset[str]]:
    if workflow.kind is not Kind.COMPOSITE:
        raise ModuleDefinitionError(f"a workflow is a composite module; {workflow.name!r} is {workflow.kind.value}")
    try:
        check_key(workflow.name)
    except ValueError as exc:
        raise ModuleDefinitionError(f"workflow name {workflow.name!r} cannot be a staging key: {exc}") from None
    unknown = sorted(set(inputs) - set(workflow.input_names))
    if unknown:
        raise WorkflowInputError(
            f"workflow {workflow.name!r} has no in-port {unknown[0]!r} (its in-ports: {list(workflow.input_names)})"
        )
    requested = frozenset(workflow.output_names if outputs is None else outputs)
    missing_out = sorted(requested - set(workflow.output_names))
    if missing_out:
        raise WorkflowInputError(f"workflow {workflow.name!r} has no out-port {missing_out[0]!r}")
    if not requested:
        raise WorkflowInputError(f"workflow {workflow.name!r}: no out-port requested")
    origins: dict[str, Origin | None] = {}
    cache = cache if cache is not None else default_cache(rt.staging)
    rt.cache = cache
    for name in workflow.input_names:
        if name in inputs:
            key = f":input/{name}"
            rt.remember(key, inputs[name])
            origins[name] = Origin(key, input_fingerprint(inputs[name], cache, storage_options))
        else:
            origins[name] = None
    for name in workflow.input_names:
        needed = workflow.deps.get(name, frozenset()) & requested
        if needed and name not in inputs:
            raise WorkflowInputError(
                f"workflow {workflow.name!r}: in-port {name!r} needs a value (out-port {sorted(needed)[0]!r} "
                "depends on it)"
            )
    root = derive_instance(rt, workflow, workflow.name, origins)
    if await check_files(rt, root):
        rt.tainted.clear()
        root = derive_instance(rt, workflow, workflow.name, origins)  # now the dirty modules' dependents are tainted
    cache.save()
    return root, requested


def _stop_after(workflow: Module, until: str | None, outputs: Sequence[str] | None) -> tuple[Module, list[str] | None]:
    if until is None:
        return workflow, None if outputs is None else list(outputs)
    if outputs is not None:
        raise WorkflowInputError("give either the out-ports to compute or a module to stop after (until=), not both")
    exposed, _ = stop_after(workflow, until)
    if exposed is workflow:
        return workflow, None
    return exposed, [p for p in exposed.output_names if p.startswith(UNTIL)]


async def arun(
    workflow: Module,
    inputs: Mapping[str, Any] | None = None,
    *,
    staging: StagingLike = None,
    executor: Executor | None = None,
    outputs: Sequence[str] | None = None,
    reuse: bool = True,
    progress: Callable[[Event], None] | None = None,
    trace: Trace | None = None,
    fingerprint_cache: FingerprintCache | None = None,
    storage_options: Mapping[str, Any] | None = None,
    holder: str | None = None,
    capture_logs: bool = False,
    executors: Mapping[str, Executor] | None = None,
    rerun: Iterable[str] = (),
    until: str | None = None,
    keep_going: bool = False,
    stop: asyncio.Event | None = None,
    lease_seconds: float = LEASE_SECONDS,
) -> dict[str, Any]:
    """Run (or resume) ``workflow`` on ``inputs`` and return its requested out-ports' values by name.

    ``staging`` is a staging area or a URL (default: a fresh in-memory area); ``executor`` runs the simple
    modules (default: a :class:`ThreadExecutor` closed afterwards). ``progress`` gets an :class:`Event` per
    module start and finish; ``trace`` (if given) is filled with what the run did. Inputs naming files,
    directories or URLs count by content (``fingerprint_cache``: default :func:`default_cache`;
    ``storage_options`` for fsspec URLs). The run holds the staging area's lock (:func:`staging_lock`, as
    ``holder``; on object stores a lease of ``lease_seconds``): a run already holding it makes this one fail with
    ``StagingLockedError`` naming it. ``capture_logs`` keeps what each module prints with its values (see
    :func:`module_logs`). ``executors`` names the executors of modules that ask for one
    (``@simple(executor="spark")``).

    Steering: ``rerun`` names modules to run again whatever is staged (and, through their values, what depends
    on them); ``until`` names a module to stop after — the run computes what it needs and returns its out-ports
    instead of the workflow's; ``keep_going`` runs on past a failed module wherever nothing depends on it. When
    ``stop`` is set, nothing new starts, what runs finishes (its values are staged) and ``RunStoppedError`` is
    raised. A failed module raises its error (several: ``ModulesFailedError``) once what was running finished.
    """
    area = _staging(staging)
    target, wanted = _stop_after(workflow, until, outputs)
    forced = rerun_reasons(workflow, rerun)
    with staging_lock(area, holder or f"a run of workflow {workflow.name!r}", ttl=lease_seconds) as lock:
        rt = Runtime(area, executor, reuse=reuse, progress=progress, trace=trace, capture_logs=capture_logs,
                     executors=executors, keep_going=keep_going, stop=stop, rerun=forced,
                     guard=lock.check)  # fmt: skip
        result = await _arun(rt, target, inputs, wanted, fingerprint_cache, storage_options)
    if until is None or target is workflow:
        return result
    return {name[len(UNTIL) :]: value for name, value in result.items()}


async def _arun(
    rt: Runtime,
    workflow: Module,
    inputs: Mapping[str, Any] | None,
    outputs: Sequence[str] | None,
    fingerprint_cache: FingerprintCache | None,
    storage_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    root, requested = await _prepare(rt, workflow, inputs or {}, outputs, fingerprint_cache, storage_options)
    own = rt.executor is None
    if own:
        rt.executor = ThreadExecutor()
    try:
        got: dict[str, bool] = {}
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        await interpret(rt, root, frozenset(), requested, inbox, got.__setitem__)
        rt.outcome(complete=all(got.get(o, False) for o in requested))
        result = {}
        for o in sorted(requested):
            origin = root.outputs[o]
            if origin is None:
                raise ModuleDefinitionError(f"workflow {workflow.name!r}: out-port {o!r} is not connected")
            result[o] = await rt.load(origin)
        return result
    finally:
        if own and rt.executor is not None:
            await asyncio.to_thread(rt.executor.close)


def run(
    workflow: Module,
    inputs: Mapping[str, Any] | None = None,
    *,
    staging: StagingLike = None,
    executor: Executor | None = None,
    outputs: Sequence[str] | None = None,
    reuse: bool = True,
    progress: Callable[[Event], None] | None = None,
    trace: Trace | None = None,
    fingerprint_cache: FingerprintCache | None = None,
    storage_options: Mapping[str, Any] | None = None,
    holder: str | None = None,
    capture_logs: bool = False,
    executors: Mapping[str, Executor] | None = None,
    rerun: Iterable[str] = (),
    until: str | None = None,
    keep_going: bool = False,
    lease_seconds: float = LEASE_SECONDS,
) -> dict[str, Any]:
    """:func:`arun` from synchronous code (starts an event loop; not for use inside a running one)."""
    return asyncio.run(
        arun(
            workflow,
            inputs,
            staging=staging,
            executor=executor,
            outputs=outputs,
            reuse=reuse,
            progress=progress,
            trace=trace,
            fingerprint_cache=fingerprint_cache,
            storage_options=storage_options,
            holder=holder,
            capture_logs=capture_logs,
            executors=executors,
            rerun=rerun,
            until=until,
            keep_going=keep_going,
            lease_seconds=lease_seconds,
        )
    )


# -- plan ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a module will run: ``kind`` (``rerun``, ``files``, ``upstream``, ``new``, ``code``, ``parameter``,
    ``input``, ``missing``) and the words ``plan --why`` prints."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


@dataclass
class Plan:
    """What a run would do, per module instance: resume states of parents, which simple modules run, loops."""

    path: str
    kind: Kind
    recomputed: frozenset[str]
    requested: frozenset[str]
    state: ResumeState | None = None
    children: dict[str, Plan] = field(default_factory=dict)
    iteration: int | None = None
    """For a loop: the iteration it resumes at (later iterations run in full until the stop condition holds);
    ``None`` when every iteration it needs is stored."""
    may_cut_off: bool = False
    """For a simple module that will be recomputed: its code and parameters are those of its trace record, so
    if its inputs come out as they were, it is cut off (not run)."""
    reasons: list[Reason] = field(default_factory=list)
    """For a simple module that will be recomputed: why (its code, a parameter, an input changed, ...)."""

    def walk(self) -> Iterator[Plan]:
        """This plan and every plan below it, parents first."""
        yield self
        for name in sorted(self.children):
            yield from self.children[name].walk()

    def will_run(self) -> list[str]:
        """The paths of the simple modules that will run (in a resumed loop: those of the iteration it resumes at)."""
        return sorted(p.path for p in self.walk() if p.kind is Kind.SIMPLE)

    def may_be_cut_off(self) -> list[str]:
        """The modules to recompute that will not run if their inputs come out unchanged (early cutoff)."""
        return sorted(p.path for p in self.walk() if p.kind is Kind.SIMPLE and p.may_cut_off)

    def why(self) -> dict[str, list[Reason]]:
        """Each module that will run, with the reasons it runs (like Snakemake's dry-run reasons)."""
        return {p.path: list(p.reasons) for p in sorted(self.walk(), key=lambda p: p.path) if p.kind is Kind.SIMPLE}

    def loops(self) -> dict[str, int | None]:
        """Each loop that will be interpreted, with the iteration it resumes at."""
        return {p.path: p.iteration for p in self.walk() if p.kind is Kind.LOOP}

    def render(self, why: bool = False) -> str:
        """A human-readable account: per parent, its ready, recomputed and irrelevant ports; modules to run, each
        with its reasons when ``why``."""
        lines: list[str] = []
        for p in self.walk():
            if p.state is not None:
                lines.append(f"{p.path} ({'loop body' if p.kind is Kind.LOOP else 'composite'}):")
                for label, vertices in (
                    ("ready", p.state.ready),
                    ("recompute", p.state.recompute),
                    ("irrelevant", p.state.irrelevant),
                ):
                    names = sorted(str(v) for v in vertices if v.is_port)
                    lines.append(f"  {label:<10} {', '.join(names) if names else '-'}")
            elif p.kind is Kind.LOOP:
                at = "all iterations stored" if p.iteration is None else f"resumes at iteration {p.iteration}"
                lines.append(f"{p.path} (loop): {at}")
        runs = self.will_run()
        many = "s" if len(runs) != 1 else ""
        if why:
            cut = set(self.may_be_cut_off())
            lines.append(f"will run {len(runs)} module{many}{':' if runs else ': -'}")
            for path, reasons in self.why().items():
                text = "; ".join(str(r) for r in reasons)
                if path in cut:
                    text += " — may be cut off (not run if its inputs come out unchanged)"
                lines.append(f"  {path}: {text}")
        else:
            lines.append(f"will run {len(runs)} module{many}: {', '.join(runs) or '-'}")
            cut_list = self.may_be_cut_off()
            if cut_list:
                lines.append(
                    f"of which may be cut off (not run if their inputs come out unchanged): {', '.join(cut_list)}"
                )
        for path, k in self.loops().items():
            if k is not None:
                lines.append(f"then loop {path} runs the iterations after {k} while it continues")
        return "\n".join(lines)


async def aplan(
    workflow: Module,
    inputs: Mapping[str, Any] | None = None,
    *,
    staging: StagingLike = None,
    outputs: Sequence[str] | None = None,
    reuse: bool = True,
    fingerprint_cache: FingerprintCache | None = None,
    storage_options: Mapping[str, Any] | None = None,
    rerun: Iterable[str] = (),
    until: str | None = None,
) -> Plan:
    """:func:`plan` for async code."""
    target, wanted = _stop_after(workflow, until, outputs)
    rt = Runtime(_staging(staging), None, reuse=reuse, rerun=rerun_reasons(workflow, rerun))
    root, requested = await _prepare(rt, target, inputs or {}, wanted, fingerprint_cache, storage_options)
    return await _plan(rt, root, Kind.COMPOSITE, frozenset(), requested)


def plan(
    workflow: Module,
    inputs: Mapping[str, Any] | None = None,
    *,
    staging: StagingLike = None,
    outputs: Sequence[str] | None = None,
    reuse: bool = True,
    fingerprint_cache: FingerprintCache | None = None,
    storage_options: Mapping[str, Any] | None = None,
    rerun: Iterable[str] = (),
    until: str | None = None,
) -> Plan:
    """Which ports are ready, which will be recomputed and which are irrelevant, and why each module that will run
    does, without running anything (``rerun`` and ``until`` as for :func:`run`)."""
    return asyncio.run(
        aplan(workflow, inputs, staging=staging, outputs=outputs, reuse=reuse, fingerprint_cache=fingerprint_cache,
              storage_options=storage_options, rerun=rerun, until=until)
    )  # fmt: skip


async def _plan(
    rt: Runtime,
    inst: Instance,
    kind: Kind,
    recomputed: frozenset[str],
    requested: frozenset[str],
    assume: frozenset[Vertex] = frozenset(),
    upstream: Mapping[str, str] | None = None,
) -> Plan:
    node = Plan(inst.path, kind, recomputed, requested)
    upstream = upstream or {}
    if kind is Kind.COMPOSITE:
        rs = node.state = await resume_state(rt, inst, recomputed, requested, assume)
        for name in rs.children_involved():
            wanted = rs.child_outputs(name)
            if wanted:
                child = inst.children[name]
                fresh = rs.child_inputs(name)
                why = {i: _source_text(inst, name, i, upstream) for i in fresh}
                node.children[name] = await _plan(rt, child, child.module.kind, fresh, wanted, upstream=why)
    elif kind is Kind.LOOP:
        await _plan_loop(rt, inst, node, upstream)
    elif kind is Kind.SIMPLE:
        if rt.reuse and rt.forced(inst.module, inst.path) is None:
            node.may_cut_off = await _may_cut_off(rt, inst)
        node.reasons = await _reasons(rt, inst, recomputed, upstream)
    return node


def _source_text(inst: Instance, child: str, port: str, upstream: Mapping[str, str]) -> str:
    """What feeds in-port ``port`` of ``child`` and will be recomputed, in words (a module's path)."""
    source = inst.module.source_of(PortRef(child, port))
    if source is None:
        return "its source"
    if source.module is None:
        return upstream.get(source.port, f"in-port {source.port} of {inst.path}")
    return inst.children[source.module].path


async def _reasons(
    rt: Runtime, inst: Instance, recomputed: frozenset[str], upstream: Mapping[str, str]
) -> list[Reason]:
    """Why the simple module ``inst`` will be recomputed, from its trace record and what feeds it."""
    module = inst.module
    reasons: list[Reason] = []
    forced = rt.forced(module, inst.path)
    if forced is not None:
        reasons.append(Reason("rerun" if module.path in rt.rerun else "files", forced))
    elif not recomputed:  # else the in-ports' reasons below say what reruns
        for origin in inst.inputs.values():
            if origin is not None and origin.key in rt.tainted:
                reasons.append(Reason("rerun", f"it depends on {rt.tainted[origin.key]}, which is to rerun"))
                break
    for i in sorted(recomputed):
        reasons.append(Reason("upstream", f"in-port {i}: {upstream.get(i, 'its source')} reruns"))
    record = await latest_record(rt, trace_key(inst.path))
    if record is None:
        if not reasons:
            reasons.append(Reason("new", "it never ran here (no record of it in this staging area)"))
        return reasons
    if record.get("code") != rt.code(module.function):
        reasons.append(Reason("code", "its code changed"))
    before = dict(record.get("params") or {})
    shown_before = dict(record.get("shown") or {})
    for p in sorted(set(before) | set(module.params)):
        now = value_fingerprint(module.params[p]) if p in module.params else None
        if now != before.get(p):
            was = shown_before.get(p, "unset")
            is_now = shown(module.params[p]) if p in module.params else "unset"
            reasons.append(Reason("parameter", f"parameter {p} changed: {was} → {is_now}"))
    origins = dict(record.get("origins") or {})
    given = dict(record.get("given") or {})
    for i, origin in sorted(inst.inputs.items()):
        if origin is None or i in recomputed or origins.get(i) == origin.fingerprint:
            continue
        if origin.in_memory:
            now_text = shown(rt.memory[origin.key])
            if given.get(i) == now_text:
                reasons.append(Reason("input", f"in-port {i}: the content of {now_text} changed"))
            else:
                reasons.append(Reason("input", f"in-port {i} changed: {given.get(i, 'unset')} → {now_text}"))
        else:
            source = origin.key.rsplit("/", 1)[0]
            reasons.append(Reason("upstream", f"in-port {i}: the value of {source} changed since it ran"))
    if not reasons:
        for o in module.output_names:
            origin = inst.outputs[o]
            if origin is not None and not await rt.has(origin):
                reasons.append(Reason("missing", f"its staged value of out-port {o} is gone"))
    if not reasons:
        reasons.append(Reason("missing", "its staged values were computed from other inputs"))
    return reasons


async def _may_cut_off(rt: Runtime, inst: Instance) -> bool:
    record = await latest_record(rt, trace_key(inst.path))
    if record is None or record.get("code") is None:
        return False
    if record["code"] != rt.code(inst.module.function):
        return False
    if record.get("params") != {p: value_fingerprint(v) for p, v in sorted(inst.module.params.items())}:
        return False
    # Inputs held by the run (workflow inputs, constants) are known now: a changed one rules cutoff out.
    for i, origin in inst.inputs.items():
        if origin is not None and origin.in_memory and record["inputs"].get(i) != origin.fingerprint:
            return False
    return True


async def _plan_loop(rt: Runtime, inst: Instance, node: Plan, upstream: Mapping[str, str]) -> None:
    module = inst.module
    flag = str(module.continue_port)
    body_requested = body_outputs(module, node.requested)
    previous: Instance | None = None
    fresh = node.recomputed
    pairs = dict(module.io_ports)
    why = dict(upstream)
    k = 0
    while True:
        path = f"{inst.path}/iter-{k}"
        inputs = iteration_inputs(inst, k, previous)
        body = derive_instance(rt, module, path, inputs, as_composite=True)
        if await check_files(rt, body):
            body = derive_instance(rt, module, path, inputs, as_composite=True)
        # In-ports recomputed by the loop will have their values when the iteration starts.
        assume = frozenset(Vertex.inport(i) for i in fresh)
        sub = await _plan(rt, body, Kind.COMPOSITE, fresh, body_requested, assume, why)
        assert sub.state is not None
        if any(s == "recompute" for s in sub.state.state.values()):
            node.iteration = k
            node.children[f"iter-{k}"] = sub
            node.state = None
            return
        origin = body.outputs[flag]
        assert origin is not None
        if not await rt.load(origin):
            return
        fresh = iteration_recomputed(inst, node.recomputed, sub.state)
        why = {i: (f"{path} (its {pairs[i]})" if i in pairs else upstream.get(i, "its source")) for i in fresh}
        previous = body
        k += 1


# -- show ------------------------------------------------------------------------------------------------------------


def show(workflow: Module) -> str:
    """The module graph as a Mermaid flowchart: in- and out-ports, submodules (parents as subgraphs), connections."""
    lines = ["flowchart LR"]
    counter = iter(range(1 << 30))
    ids: dict[tuple[str, str, str], str] = {}

    def node_id(path: str, what: str, port: str) -> str:
        key = (path, what, port)
        if key not in ids:
            ids[key] = f"n{next(counter)}"
        return ids[key]

    def esc(text: str) -> str:
        return text.replace('"', "#quot;")

    def draw(module: Module, path: str, indent: str) -> None:
        for p in module.input_names:
            lines.append(f'{indent}{node_id(path, "in", p)}(["{esc(p)}"])')
        for p in module.output_names:
            lines.append(f'{indent}{node_id(path, "out", p)}(["{esc(p)}"])')
        for child in module.submodules:
            sub = f"{path}/{child.name}"
            if child.submodules:
                label = f"{child.name} ({child.kind.value})"
                lines.append(f'{indent}subgraph {node_id(sub, "box", "")}["{esc(label)}"]')
                draw(child, sub, indent + "  ")
                lines.append(f"{indent}end")
            else:
                shape = ('[/"', '"/]') if child.kind is Kind.INPUT else ('["', '"]')
                lines.append(f"{indent}{node_id(sub, 'module', '')}{shape[0]}{esc(child.name)}{shape[1]}")
        for c in module.connections:
            # Edges at a simple module's box say which of its ports they use.
            parts = [
                r.port if r.module is not None and not module.child(r.module).submodules else ""
                for r in (c.source, c.target)
            ]
            label = f'|"{esc(" → ".join(p or "·" for p in parts))}"|' if any(parts) else ""
            lines.append(f"{indent}{end(module, path, c.source, True)} -->{label} {end(module, path, c.target, False)}")
        for i, o in module.io_ports:
            lines.append(f"{indent}{node_id(path, 'out', o)} -. next iteration .-> {node_id(path, 'in', i)}")

    def end(module: Module, path: str, ref: Any, source: bool) -> str:
        if ref.module is None:
            return node_id(path, "in" if source else "out", ref.port)
        child = module.child(ref.module)
        sub = f"{path}/{ref.module}"
        if child.submodules:
            return node_id(sub, "out" if source else "in", ref.port)
        return node_id(sub, "module", "")

    lines.append(f'  subgraph {node_id(workflow.name, "box", "")}["{esc(workflow.name)}"]')
    draw(workflow, workflow.name, "    ")
    lines.append("  end")
    return "\n".join(lines) + "\n"


def module_logs(staging: StagingLike, name: str) -> list[dict[str, str]]:
    """What the modules matching ``name`` (a path like ``workflow/load``, or its last part ``load``) printed the
    last time they ran with ``capture_logs``, failed runs included: ``{"module", "stdout", "stderr", "status"
    ("finished" or "failed"), "run", "time", "error"}`` each (the last four empty for records of older
    versions), by path."""
    area = _staging(staging)
    found = []
    for key in area.keys(""):
        if not key.endswith("/" + LOG):
            continue
        path = key[: -len(LOG) - 1]
        if path == name or path.endswith("/" + name):
            fp = area.fingerprint(key)
            if fp is not None:
                record = dict(area.get(key, fp))
                for field_name in ("status", "run", "time", "error"):
                    record.setdefault(field_name, "")
                found.append(record)
    return sorted(found, key=lambda r: str(r["module"]))

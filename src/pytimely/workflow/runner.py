"""Running, planning and drawing a workflow: :func:`run`, :func:`arun`, :func:`plan` and :func:`show`.

A *workflow* is a composite :class:`~pytimely.workflow.model.Module`; its in-ports are given as ``inputs``
and its out-ports (all, or the ``outputs`` asked for) come back as a dict. Every run resumes: values already
staged under their expected fingerprints are reused and exactly the modules the optimal consistent checkpoint
leaves are run (``reuse=False`` ignores what is staged). :func:`plan` computes, without running anything, the
resume state of every module instance that would be interpreted — which ports are ready, which will be
recomputed and which are irrelevant — and so which modules will run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytimely.errors import ModuleDefinitionError, StagingError, WorkflowInputError
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.executors import Executor, ThreadExecutor
from pytimely.workflow.fingerprint import derive, value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.interpreter import (
    LOG,
    Event,
    Instance,
    Origin,
    Runtime,
    Trace,
    code_recipe,
    derive_instance,
    interpret,
    iteration_inputs,
    iteration_recomputed,
    resume_state,
    trace_key,
)
from pytimely.workflow.model import Kind, Module
from pytimely.workflow.resume import ResumeState
from pytimely.workflow.staging import (
    LocalStaging,
    MemoryStaging,
    StagingArea,
    check_key,
    open_staging,
    staging_lock,
)

__all__ = ["Plan", "aplan", "arun", "module_logs", "plan", "run", "show"]

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


def _prepare(
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
    for name in workflow.input_names:
        if name in inputs:
            key = f":input/{name}"
            rt.remember(key, inputs[name])
            origins[name] = Origin(key, input_fingerprint(inputs[name], cache, storage_options))
        else:
            origins[name] = None
    cache.save()
    for name in workflow.input_names:
        needed = workflow.deps.get(name, frozenset()) & requested
        if needed and name not in inputs:
            raise WorkflowInputError(
                f"workflow {workflow.name!r}: in-port {name!r} needs a value (out-port {sorted(needed)[0]!r} "
                "depends on it)"
            )
    return derive_instance(rt, workflow, workflow.name, origins), requested


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
) -> dict[str, Any]:
    """Run (or resume) ``workflow`` on ``inputs`` and return its requested out-ports' values by name.

    ``staging`` is a staging area or a URL (default: a fresh in-memory area); ``executor`` runs the simple
    modules (default: a :class:`ThreadExecutor` closed afterwards). ``progress`` gets an :class:`Event` per
    module start and finish; ``trace`` (if given) is filled with what the run did. Inputs naming files,
    directories or URLs count by content (``fingerprint_cache``: default :func:`default_cache`;
    ``storage_options`` for fsspec URLs). The run holds the staging area's lock (:func:`staging_lock`, as
    ``holder``): a run already holding it makes this one fail with ``StagingLockedError`` naming it.
    ``capture_logs`` keeps what each module prints with its values (see :func:`module_logs`). ``executors``
    names the executors of modules that ask for one (``@simple(executor="spark")``).
    """
    area = _staging(staging)
    with staging_lock(area, holder or f"a run of workflow {workflow.name!r}"):
        rt = Runtime(area, executor, reuse=reuse, progress=progress, trace=trace, capture_logs=capture_logs,
                     executors=executors)  # fmt: skip
        return await _arun(rt, workflow, inputs, outputs, fingerprint_cache, storage_options)


async def _arun(
    rt: Runtime,
    workflow: Module,
    inputs: Mapping[str, Any] | None,
    outputs: Sequence[str] | None,
    fingerprint_cache: FingerprintCache | None,
    storage_options: Mapping[str, Any] | None,
) -> dict[str, Any]:
    root, requested = _prepare(rt, workflow, inputs or {}, outputs, fingerprint_cache, storage_options)
    own = rt.executor is None
    if own:
        rt.executor = ThreadExecutor()
    try:
        reported: list[str] = []
        inbox: asyncio.Queue[str] = asyncio.Queue()
        await interpret(rt, root, frozenset(), requested, inbox, reported.append)
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
        )
    )


# -- plan ------------------------------------------------------------------------------------------------------------


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

    def loops(self) -> dict[str, int | None]:
        """Each loop that will be interpreted, with the iteration it resumes at."""
        return {p.path: p.iteration for p in self.walk() if p.kind is Kind.LOOP}

    def render(self) -> str:
        """A human-readable account: per parent, its ready, recomputed and irrelevant ports; modules to run."""
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
        lines.append(f"will run {len(runs)} module{'s' if len(runs) != 1 else ''}: {', '.join(runs) or '-'}")
        cut = self.may_be_cut_off()
        if cut:
            lines.append(f"of which may be cut off (not run if their inputs come out unchanged): {', '.join(cut)}")
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
) -> Plan:
    """:func:`plan` for async code."""
    rt = Runtime(_staging(staging), None, reuse=reuse)
    root, requested = _prepare(rt, workflow, inputs or {}, outputs, fingerprint_cache, storage_options)
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
) -> Plan:
    """Which ports are ready, which will be recomputed and which are irrelevant, without running anything."""
    return asyncio.run(
        aplan(workflow, inputs, staging=staging, outputs=outputs, reuse=reuse, fingerprint_cache=fingerprint_cache,
              storage_options=storage_options)
    )


async def _plan(
    rt: Runtime,
    inst: Instance,
    kind: Kind,
    recomputed: frozenset[str],
    requested: frozenset[str],
    assume: frozenset[Vertex] = frozenset(),
) -> Plan:
    node = Plan(inst.path, kind, recomputed, requested)
    if kind is Kind.COMPOSITE:
        rs = node.state = await resume_state(rt, inst, recomputed, requested, assume)
        for name in rs.children_involved():
            wanted = rs.child_outputs(name)
            if wanted:
                child = inst.children[name]
                node.children[name] = await _plan(rt, child, child.module.kind, rs.child_inputs(name), wanted)
    elif kind is Kind.LOOP:
        await _plan_loop(rt, inst, node)
    elif kind is Kind.SIMPLE and rt.reuse:
        node.may_cut_off = await _may_cut_off(rt, inst)
    return node


async def _may_cut_off(rt: Runtime, inst: Instance) -> bool:
    key = trace_key(inst.path)
    try:
        fp = await asyncio.to_thread(rt.staging.fingerprint, key)
        if fp is None:
            return False
        record = await asyncio.to_thread(rt.staging.get, key, fp)
        if record["code"] != code_recipe(rt, inst.module):
            return False
        # Inputs held by the run (workflow inputs, constants) are known now: a changed one rules cutoff out.
        for i, origin in inst.inputs.items():
            if origin is not None and origin.in_memory and record["inputs"].get(i) != origin.fingerprint:
                return False
        return True
    except (StagingError, KeyError, TypeError):
        return False


async def _plan_loop(rt: Runtime, inst: Instance, node: Plan) -> None:
    module = inst.module
    flag = str(module.continue_port)
    body_requested = node.requested | {o for _, o in module.io_ports} | {flag}
    previous: Instance | None = None
    fresh = node.recomputed
    k = 0
    while True:
        body = derive_instance(
            rt, module, f"{inst.path}/iter-{k}", iteration_inputs(inst, k, previous), as_composite=True
        )
        # In-ports recomputed by the loop will have their values when the iteration starts.
        assume = frozenset(Vertex.inport(i) for i in fresh)
        sub = await _plan(rt, body, Kind.COMPOSITE, fresh, body_requested, assume)
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
    last time they ran with ``capture_logs``: ``{"module", "stdout", "stderr"}`` each, by path."""
    area = _staging(staging)
    found = []
    for key in area.keys(""):
        if not key.endswith("/" + LOG):
            continue
        path = key[: -len(LOG) - 1]
        if path == name or path.endswith("/" + name):
            fp = area.fingerprint(key)
            if fp is not None:
                found.append(area.get(key, fp))
    return sorted(found, key=lambda r: str(r["module"]))

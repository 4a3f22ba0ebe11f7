"""Derivation: the origin of every port of every module instance, before anything runs.

Every port of every module instance gets an :class:`Origin`: the staging
key its value lives under and the fingerprint that value must have been computed for (a build system's
derivation hash). A workflow in-port's fingerprint is its value's; a simple module's out-port ``o`` has
``derive(fingerprint of its code and parameters, {"out-port": o}, {i: fingerprint of i for every i with o ∈
deps(i)})``; a port fed by a connection has its source's origin; a loop's out-port is derived from the loop's
structure — its wiring and every module inside it with its code, parameters and constants, at every depth —
and its in-ports the same way (its final iteration's value is copied there). A port *has a value* (is in ``H``)
when its origin holds a value stored under exactly that fingerprint — changed code, parameters or inputs make
it absent — and it is not *tainted*: a module asked to rerun (``rerun=``), or whose declared files changed
since it wrote them, and everything derived from its outputs, count as absent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pytimely.errors import ModuleCycleError, ModuleDefinitionError
from pytimely.workflow.fingerprint import derive, value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.model import Kind, Module, PortRef
from pytimely.workflow.resume import ResumeState
from pytimely.workflow.runtime import Instance, Origin, Runtime
from pytimely.workflow.writes import declared_paths

__all__ = ["body_outputs", "declared_files", "derive_instance", "iteration_inputs", "iteration_recomputed"]


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

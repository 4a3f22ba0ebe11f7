"""Preparing a run: its staging area, its inputs fingerprinted by value and content, the modules ``rerun=`` and
``until=`` name found, and the root instance derived with every changed file accounted for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pytimely.errors import ModuleDefinitionError, UnknownModuleError, WorkflowInputError
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.derivation import derive_instance
from pytimely.workflow.fingerprint import derive, value_fingerprint
from pytimely.workflow.model import Connection, Kind, Module, Port, PortRef
from pytimely.workflow.records import check_files
from pytimely.workflow.runtime import Instance, Origin, Runtime
from pytimely.workflow.staging import LocalStaging, MemoryStaging, StagingArea, check_key, open_staging

__all__ = [
    "CACHE_NAME",
    "UNTIL",
    "StagingLike",
    "default_cache",
    "find_module",
    "input_fingerprint",
    "prepare",
    "rerun_reasons",
    "staging_area",
    "stop_after",
    "until_target",
]

StagingLike = StagingArea | str | None


def staging_area(staging: StagingLike) -> StagingArea:
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


async def prepare(
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


def until_target(workflow: Module, until: str | None, outputs: Sequence[str] | None) -> tuple[Module, list[str] | None]:
    if until is None:
        return workflow, None if outputs is None else list(outputs)
    if outputs is not None:
        raise WorkflowInputError("give either the out-ports to compute or a module to stop after (until=), not both")
    exposed, _ = stop_after(workflow, until)
    if exposed is workflow:
        return workflow, None
    return exposed, [p for p in exposed.output_names if p.startswith(UNTIL)]

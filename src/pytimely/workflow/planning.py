"""Planning a run without running it: per module instance, which ports are ready, which will be recomputed and
which are irrelevant, so which modules will run, each with its reasons (:class:`Reason`), and where loops resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytimely.workflow.content import FingerprintCache
from pytimely.workflow.derivation import body_outputs, derive_instance, iteration_inputs, iteration_recomputed
from pytimely.workflow.fingerprint import value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.interpreter import resume_state
from pytimely.workflow.model import Kind, Module, PortRef
from pytimely.workflow.preparation import StagingLike, prepare, rerun_reasons, staging_area, until_target
from pytimely.workflow.records import check_files, latest_record, shown, trace_key
from pytimely.workflow.resume import ResumeState
from pytimely.workflow.runtime import Instance, Runtime

__all__ = ["Plan", "Reason", "aplan", "plan"]

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
    target, wanted = until_target(workflow, until, outputs)
    rt = Runtime(staging_area(staging), None, reuse=reuse, rerun=rerun_reasons(workflow, rerun))
    root, requested = await prepare(rt, target, inputs or {}, wanted, fingerprint_cache, storage_options)
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

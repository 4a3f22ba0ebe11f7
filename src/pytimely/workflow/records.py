"""Trace records and early cutoff: what each module last ran with and made, and the files it wrote.

A module's out-port origins are derived from its inputs' *origins*, so anything upstream that reruns makes it
recompute. After a run, a trace record under ``<path>/=trace`` keeps the module's *content recipe* — its code,
parameters and its inputs' content fingerprints — with the fingerprint and content of each out-port's value and
the content of the files it wrote. When the module is to run again and its content recipe is the one recorded
(an upstream rerun produced what it produced before) and its files still hold what it wrote, the staged values
are right: they are retagged with their new fingerprints and the module does not run. Its dependents then see
unchanged contents too, and are cut off in turn. The record also says, for ``plan``'s reasons, what the module
last ran with: its code and each parameter and input.

A module's files (declared, or named by out-ports typed as paths) are checked against its record before its
values are reused: one edited or deleted since marks the module dirty (:func:`check_files`).
"""

from __future__ import annotations

import asyncio
import os
import re
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pytimely.errors import StagingError
from pytimely.workflow.fingerprint import derive, value_fingerprint
from pytimely.workflow.model import Kind, Module
from pytimely.workflow.runtime import Instance, Runtime

__all__ = [
    "LOG",
    "TRACE",
    "check_files",
    "code_recipe",
    "content_recipe",
    "cut_off",
    "keep_logs",
    "latest_record",
    "log_key",
    "record_trace",
    "shown",
    "trace_key",
]


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


async def content_recipe(rt: Runtime, inst: Instance, values: Mapping[str, Any]) -> str | None:
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


async def cut_off(rt: Runtime, inst: Instance, recipe: str) -> bool:
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


async def record_trace(
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


async def keep_logs(rt: Runtime, inst: Instance, status: str, logs: tuple[str, str], error: str = "") -> None:
    """Keep what the module printed, with the run, the time and how it ended (a failed run's too)."""
    record = {"module": inst.path, "stdout": logs[0], "stderr": logs[1], "status": status, "run": rt.run_id,
              "time": rt.began, "error": error}  # fmt: skip
    await rt.put(log_key(inst.path), record, f"log-{rt.run_id}")

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

"""Running a workflow: :func:`run` and :func:`arun`, and what its modules printed (:func:`module_logs`).

A *workflow* is a composite :class:`~pytimely.workflow.model.Module`; its in-ports are given as ``inputs``
and its out-ports (all, or the ``outputs`` asked for) come back as a dict. Every run resumes: values already
staged under their expected fingerprints are reused and exactly the modules the optimal consistent checkpoint
leaves are run (``reuse=False`` ignores what is staged); :func:`~pytimely.workflow.planning.plan` says which,
without running anything. A run can be steered: ``rerun=`` modules to run again whatever is staged, ``until=`` a
module to stop after, ``keep_going`` past a failure, ``stop`` to end it (see :func:`arun`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pytimely.errors import ModuleDefinitionError
from pytimely.workflow.content import FingerprintCache
from pytimely.workflow.executors import Executor, ThreadExecutor
from pytimely.workflow.interpreter import interpret
from pytimely.workflow.model import Module
from pytimely.workflow.preparation import UNTIL, StagingLike, prepare, rerun_reasons, staging_area, until_target
from pytimely.workflow.records import LOG
from pytimely.workflow.runtime import Event, Message, Runtime, Trace
from pytimely.workflow.staging import staging_lock
from pytimely.workflow.staging.lock import LEASE_SECONDS

__all__ = ["arun", "module_logs", "run"]

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
    area = staging_area(staging)
    target, wanted = until_target(workflow, until, outputs)
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
    root, requested = await prepare(rt, workflow, inputs or {}, outputs, fingerprint_cache, storage_options)
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




def module_logs(staging: StagingLike, name: str) -> list[dict[str, str]]:
    """What the modules matching ``name`` (a path like ``workflow/load``, or its last part ``load``) printed the
    last time they ran with ``capture_logs``, failed runs included: ``{"module", "stdout", "stderr", "status"
    ("finished" or "failed"), "run", "time", "error"}`` each (the last four empty for records of older
    versions), by path."""
    area = staging_area(staging)
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

"""Resumable workflows (seed ``004_6a2e88f6382bfe5d.txt``, CloudKeeper): modules wired by ports, the optimal
consistent checkpoint to resume from, staging areas that never count a stale or half-written value, and
executors for module code."""

from pytimely.workflow.drawing import show
from pytimely.workflow.dsl import Outputs, PortValue, composite, constant, loop, simple
from pytimely.workflow.executors import (
    Call,
    DataflowStep,
    Executor,
    ProcessExecutor,
    SparkExecutor,
    ThreadExecutor,
    dataflow_step,
)
from pytimely.workflow.fingerprint import code_fingerprint, derive, value_fingerprint
from pytimely.workflow.graph import DependencyGraph, Vertex
from pytimely.workflow.model import (
    CONTINUE,
    Connection,
    ConnectionKind,
    Kind,
    Module,
    Port,
    PortRef,
    is_assignable,
    minimal_deps,
)
from pytimely.workflow.planning import Plan, aplan, plan
from pytimely.workflow.resume import (
    Fifo,
    Lifo,
    Priority,
    ResumeState,
    SetQueue,
    compute_resume_state,
    compute_resume_state_async,
)
from pytimely.workflow.runner import arun, run
from pytimely.workflow.staging import (
    FsspecStaging,
    LocalStaging,
    MemoryStaging,
    StagingArea,
    open_staging,
)

__all__ = [
    "CONTINUE",
    "Call",
    "Connection",
    "ConnectionKind",
    "DataflowStep",
    "DependencyGraph",
    "Executor",
    "Fifo",
    "FsspecStaging",
    "Kind",
    "Lifo",
    "LocalStaging",
    "MemoryStaging",
    "Module",
    "Outputs",
    "Plan",
    "Port",
    "PortRef",
    "PortValue",
    "Priority",
    "ProcessExecutor",
    "ResumeState",
    "SetQueue",
    "SparkExecutor",
    "StagingArea",
    "ThreadExecutor",
    "Vertex",
    "aplan",
    "arun",
    "code_fingerprint",
    "composite",
    "compute_resume_state",
    "compute_resume_state_async",
    "constant",
    "dataflow_step",
    "derive",
    "is_assignable",
    "loop",
    "minimal_deps",
    "open_staging",
    "plan",
    "run",
    "show",
    "simple",
    "value_fingerprint",
]

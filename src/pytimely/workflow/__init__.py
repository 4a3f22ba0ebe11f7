"""Resumable workflows (CloudKeeper, seed 004): modules, their dependency graphs and resume states."""

from pytimely.workflow.dsl import Outputs, PortValue, composite, constant, loop, simple
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
from pytimely.workflow.resume import (
    Fifo,
    Lifo,
    Priority,
    ResumeState,
    SetQueue,
    compute_resume_state,
    compute_resume_state_async,
)

__all__ = [
    "CONTINUE",
    "Connection",
    "ConnectionKind",
    "DependencyGraph",
    "Fifo",
    "Kind",
    "Lifo",
    "Module",
    "Outputs",
    "Port",
    "PortRef",
    "PortValue",
    "Priority",
    "ResumeState",
    "SetQueue",
    "Vertex",
    "composite",
    "compute_resume_state",
    "compute_resume_state_async",
    "constant",
    "is_assignable",
    "loop",
    "minimal_deps",
    "simple",
]

"""Resumable workflows (CloudKeeper, seed 004): modules, their dependency graphs and resume states."""

from pytimely.workflow.model import Connection, ConnectionKind, Kind, Module, Port, PortRef, minimal_deps

__all__ = ["Connection", "ConnectionKind", "Kind", "Module", "Port", "PortRef", "minimal_deps"]

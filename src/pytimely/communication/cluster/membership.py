"""Membership events: a process joined or left an elastic computation."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Membership"]


@dataclass(frozen=True, slots=True)
class Membership:
    """A process joined or left: its workers' ids and, for a join, the worker its workers bootstrap from."""

    kind: str
    """``"join"`` or ``"leave"``."""
    process: int
    workers: tuple[int, ...]
    server: int | None

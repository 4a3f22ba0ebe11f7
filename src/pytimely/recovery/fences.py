"""Fences: the epoch an operator that declared state is snapshotted at next, and when it has passed it.

Each such operator has a *fence*, the next epoch ``e`` the policy snapshots. While it stands the operator is
handed no message of a later epoch; once nothing at an epoch ``<= e`` can reach it any more, its state holds
exactly the records of epochs ``<= e`` and is taken (:mod:`pytimely.recovery.runtime`). :func:`passed_fences`
says which snapshot that is and where the fence moves next; it is a pure function, so the lockstep test of the
snapshot model (``tests/lockstep/test_recovery_lockstep.py``) runs the code the runtime runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytimely.recovery.policy import SnapshotPolicy

__all__ = ["passed_fences"]


def passed_fences(
    fence: int,
    lows: list[int],
    policy: SnapshotPolicy,
    stop: int | None = None,
    *,
    held: list[int] | None = None,
    next_change: int | None = None,
) -> tuple[list[tuple[int, bool]], int | None]:
    """The snapshot an operator takes now and its next fence.

    ``lows``: the epochs of what can still reach the operator; ``held``: the epochs of the capabilities it holds
    (what it may still emit, once nothing can reach it any more); ``next_change``: the first epoch at which its
    state may change without input, if it can tell (a window's end).

    A fence ``f`` is passed once everything that can still reach the operator is at an epoch after ``f``: the
    snapshot is of ``f`` and the next fence is the next epoch the policy snapshots (never one further: a state
    whose changes come with its frontiers, windows closing, differs at each epoch even when no record comes).
    Once nothing can reach it, it steps on while it still holds capabilities (to ``next_change`` at once when it
    can tell); once it holds none its state changes no more, and this snapshot is its last (``final``): every
    later snapshot, the final one included, holds it as it is. A worker leaving at ``stop`` takes none at or
    after it.
    """
    if lows:
        if min(lows) <= fence:
            return [], fence
        after = policy.first_at_or_after(fence + 1)
    elif not held:
        return [(fence, True)], None
    else:
        after = policy.first_at_or_after(max(fence + 1, next_change if next_change is not None else fence + 1))
    return [(fence, False)], None if stop is not None and after >= stop else after

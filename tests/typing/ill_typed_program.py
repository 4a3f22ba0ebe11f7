"""A user program with type errors ``mypy --strict`` must report (each marked ``# error:`` with its reason)."""

from __future__ import annotations

from pytimely import Scope


def build(scope: Scope[int]) -> None:
    """Misuse typed streams."""
    handle, words = scope.new_input(type=str)
    handle.send(3)  # error: arg-type
    counts = words.count_by()
    counts.map(lambda kv: kv[0] + 1)  # error: operator
    lengths = words.map(len)
    words.join(lengths)  # error: misc
    scope.replay([(0, [1])]).map(str.upper)  # error: arg-type

"""What every executable model offers to the checkers: actions, successors, invariants.

A model is a transition system in the style of seed ``000_306a8e6bd5c43d47.txt``
(``Init`` and ``Next``), made finite by the bounds of its configuration.
Stutter steps (``c' = c``) are never produced: ``successors`` yields only the
enabled actions, each with the configuration it leads to.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Action", "Invariant", "Model", "TransitionInvariant", "fmt_value"]

S = TypeVar("S", bound=Hashable)


def fmt_value(v: object) -> str:
    """A compact rendering of an action argument (sets and tuples without noise)."""
    if isinstance(v, frozenset | set):
        return "{" + ", ".join(sorted(fmt_value(x) for x in v)) + "}"
    return repr(v)


@dataclass(frozen=True, slots=True)
class Action:
    """One step of ``Next``: the paper's action name and its arguments, e.g. ``send_upd(w=0, P={p1})``."""

    name: str
    args: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        inner = ", ".join(f"{k}={fmt_value(v)}" for k, v in self.args)
        return f"{self.name}({inner})"

    def arg(self, key: str) -> Any:
        """The value of argument ``key``."""
        for k, v in self.args:
            if k == key:
                return v
        raise KeyError(key)


@dataclass(frozen=True, slots=True)
class Invariant(Generic[S]):
    """A named state predicate that must hold in every reachable configuration."""

    name: str
    holds: Callable[[S], bool]


@dataclass(frozen=True, slots=True)
class TransitionInvariant(Generic[S]):
    """A named predicate on every transition ``(c, action, c')``."""

    name: str
    holds: Callable[[S, Action, S], bool]


class Model(Protocol[S]):
    """A finite-bounded transition system the checkers can explore."""

    name: str

    def initial_states(self) -> Iterable[S]:
        """Every configuration satisfying ``Init`` within the bounds."""
        ...

    def successors(self, state: S) -> Iterable[tuple[Action, S]]:
        """Every enabled action (no stutter) with the configuration it leads to."""
        ...

    def invariants(self) -> Sequence[Invariant[S]]:
        """The state predicates to check."""
        ...

    def transition_invariants(self) -> Sequence[TransitionInvariant[S]]:
        """The transition predicates to check."""
        ...

    def format_state(self, state: S) -> str:
        """A one-line readable rendering of a configuration."""
        ...

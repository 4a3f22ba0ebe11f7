"""Finite partial orders over abstract pointstamps (the ``'p :: order`` of §3 and §4).

The clocks and exchange protocols (seed ``000_306a8e6bd5c43d47.txt`` §3–§4)
treat pointstamps abstractly: all they need is a partial order. :class:`Poset`
is a finite one with its relation precomputed, so ``le``/``lt`` are set
look-ups. The combined protocol builds one from the could-result-in order.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

__all__ = ["Poset"]


class Poset:
    """A finite partial order: its elements and the relation ``≤`` as a set of pairs."""

    __slots__ = ("_below", "_le", "_lt", "elements", "name")

    def __init__(self, elements: Iterable[Hashable], le: Callable[[Any, Any], bool], name: str = "") -> None:
        self.elements: tuple[Hashable, ...] = tuple(elements)
        self.name = name
        pairs = {(a, b) for a in self.elements for b in self.elements if a == b or le(a, b)}
        for a in self.elements:
            for b in self.elements:
                if a != b and (a, b) in pairs and (b, a) in pairs:
                    raise ValueError(f"not antisymmetric: {a!r} and {b!r} are below each other")
                for c in self.elements:
                    if (a, b) in pairs and (b, c) in pairs and (a, c) not in pairs:
                        raise ValueError(f"not transitive: {a!r} <= {b!r} <= {c!r}")
        self._le = frozenset(pairs)
        self._lt = frozenset((a, b) for (a, b) in pairs if a != b)
        self._below = {b: frozenset(a for a in self.elements if (a, b) in pairs) for b in self.elements}

    @classmethod
    def from_covers(
        cls, elements: Iterable[Hashable], covers: Iterable[tuple[Hashable, Hashable]], name: str = ""
    ) -> Poset:
        """The reflexive-transitive closure of the given ``(smaller, larger)`` pairs."""
        elems = tuple(elements)
        reach = {a: {a} for a in elems}
        for a, b in covers:
            reach[a].add(b)
        changed = True
        while changed:
            changed = False
            for a in elems:
                new = set().union(*(reach[b] for b in reach[a]))
                if not new <= reach[a]:
                    reach[a] |= new
                    changed = True
        return cls(elems, lambda x, y: y in reach[x], name)

    def le(self, a: Any, b: Any) -> bool:
        """``a ≤ b``."""
        return (a, b) in self._le

    def lt(self, a: Any, b: Any) -> bool:
        """``a < b``."""
        return (a, b) in self._lt

    def below(self, p: Any) -> frozenset[Hashable]:
        """Every element ``≤ p`` (including ``p``)."""
        return self._below[p]

    def __repr__(self) -> str:
        return f"Poset({self.name or list(self.elements)!r})"

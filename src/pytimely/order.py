"""Partial orders and the product order used for timestamps inside loops.

Timestamps compare with Python's ``<=`` and ``<`` as a *partial* order (seed
``001_c5a48b9716911bb9.txt``, "Path Summaries"). Structures that must pick a
minimal element first (worklists, frontiers) also need a total order that
extends the partial one; :func:`sort_key` gives it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

__all__ = ["PartialOrder", "Product", "comparable", "flat_key", "less_equal", "less_than", "sort_key"]


@runtime_checkable
class PartialOrder(Protocol):
    """A value with a partial order spelled ``<=`` / ``<`` and a hash."""

    def __le__(self, other: Any, /) -> bool: ...

    def __lt__(self, other: Any, /) -> bool: ...

    def __hash__(self) -> int: ...


OuterT = TypeVar("OuterT", bound=Hashable)
InnerT = TypeVar("InnerT", bound=Hashable)


class Product(Generic[OuterT, InnerT]):
    """A pair ordered coordinate-wise: ``(a, b) <= (c, d)`` iff ``a <= c`` and ``b <= d``.

    Nested loops nest products: ``Product(Product(epoch, i), j)``.
    """

    __slots__ = ("_hash", "_key", "inner", "outer")

    outer: OuterT
    inner: InnerT
    _key: tuple[Any, Any]
    _hash: int

    def __init__(self, outer: OuterT, inner: InnerT) -> None:
        object.__setattr__(self, "outer", outer)
        object.__setattr__(self, "inner", inner)
        object.__setattr__(self, "_key", (sort_key(outer), sort_key(inner)))
        object.__setattr__(self, "_hash", hash((outer, inner)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Product is immutable")

    def __reduce__(self) -> tuple[type[Product[OuterT, InnerT]], tuple[OuterT, InnerT]]:
        return (Product, (self.outer, self.inner))

    def __le__(self, other: Product[OuterT, InnerT]) -> bool:
        return bool(self.outer <= other.outer and self.inner <= other.inner)  # type: ignore[operator]

    def __lt__(self, other: Product[OuterT, InnerT]) -> bool:
        return self is not other and self != other and self <= other

    def __ge__(self, other: Product[OuterT, InnerT]) -> bool:
        return other <= self

    def __gt__(self, other: Product[OuterT, InnerT]) -> bool:
        return other < self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Product):
            return NotImplemented
        return bool(self.outer == other.outer and self.inner == other.inner)

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"({self.outer!r}, {self.inner!r})"

    def sort_key(self) -> tuple[Any, Any]:
        """A lexicographic key: a total order that extends the product order."""
        return self._key


def sort_key(t: Any) -> Any:
    """Return a key whose total order extends the partial order of ``t``'s type.

    Plain numbers (and other totally ordered values) are their own key; types
    with a proper partial order provide a ``sort_key()`` method.
    """
    method = getattr(t, "sort_key", None)
    return t if method is None else method()


def flat_key(t: Any) -> tuple[Any, ...]:
    """Like :func:`sort_key`, flattened to one tuple, so timestamps of different nesting compare.

    ``3`` gives ``(3,)`` and ``Product(Product(3, 1), 2)`` gives ``(3, 1, 2)``; a
    scope's outer time sorts just before the inner times entered from it.
    """
    if isinstance(t, Product):
        return flat_key(t.outer) + flat_key(t.inner)
    return (sort_key(t),)


def less_equal(a: Any, b: Any) -> bool:
    """``a <= b`` in the partial order."""
    return bool(a <= b)


def less_than(a: Any, b: Any) -> bool:
    """``a < b`` in the partial order."""
    return bool(a < b)


def comparable(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are ordered one way or the other."""
    return bool(a <= b or b <= a)

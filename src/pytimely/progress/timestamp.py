"""Timestamps and the path summaries that move them along dataflow edges.

Seed ``001_c5a48b9716911bb9.txt`` ("Path Summaries") and seed
``000_306a8e6bd5c43d47.txt`` §5 (the ``dataflow`` locale) fix the laws:

* ``t ⊕ 0 = t`` — the identity summary leaves a timestamp alone;
* ``(t ⊕ s) ⊕ s' = t ⊕ (s + s')`` — ``followed_by`` composes summaries;
* ``t <= t' and s <= s'  ⇒  t ⊕ s <= t' ⊕ s'`` — monotonicity;
* ``t <= t ⊕ s`` — ``results_in`` never goes back in time.

``results_in`` may answer ``None``: the timestamp cannot travel the path (for
example past a loop's iteration bound). ``None`` behaves as a top element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, Self, TypeVar, runtime_checkable

from pytimely.errors import SummaryGoesBackError, TimestampError
from pytimely.order import PartialOrder, Product

__all__ = [
    "Enter",
    "Increment",
    "Leave",
    "PathSummary",
    "ProductSummary",
    "ScopeChange",
    "Timestamp",
    "identity_for",
    "minimum_for",
    "strictly_advances",
]

Timestamp = PartialOrder
"""A timestamp: hashable, partially ordered by ``<=`` (ints, :class:`Product`, ...)."""

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


@runtime_checkable
class PathSummary(Protocol[T]):
    """What must happen to a timestamp that travels a path in the dataflow graph."""

    def results_in(self, t: T, /) -> T | None:
        """The timestamp after the path, or ``None`` if it cannot travel the path."""
        ...

    def followed_by(self, other: Self, /) -> Self | None:
        """The summary of this path followed by ``other``'s, or ``None`` if nothing passes both."""
        ...

    def __le__(self, other: Any, /) -> bool: ...

    def __hash__(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Increment:
    """Add ``by`` to an integer timestamp; results past ``limit`` (inclusive) do not exist.

    ``Increment(0)`` is the identity; ``Increment(1, limit=9)`` is a loop's feedback
    edge that stops after iteration 9.
    """

    by: int = 0
    limit: int | None = None

    def __post_init__(self) -> None:
        if type(self.by) is not int:
            raise TimestampError(f"Increment.by must be an int, got {self.by!r}")
        if self.by < 0:
            raise SummaryGoesBackError(
                f"Increment({self.by}) would move timestamps back in time; increments must be >= 0"
            )
        if self.limit is not None and type(self.limit) is not int:
            raise TimestampError(f"Increment.limit must be an int or None, got {self.limit!r}")

    def results_in(self, t: int, /) -> int | None:
        """``t + by``, or ``None`` when that passes ``limit``."""
        r = t + self.by
        if self.limit is not None and r > self.limit:
            return None
        return r

    def followed_by(self, other: Increment, /) -> Increment | None:
        """Both increments in turn; the tighter of the two limits, seen from the start."""
        limits = []
        if self.limit is not None:
            limits.append(self.limit + other.by)
        if other.limit is not None:
            limits.append(other.limit)
        return Increment(self.by + other.by, min(limits) if limits else None)

    def __le__(self, other: Increment) -> bool:
        # s <= s' iff t ⊕ s <= t ⊕ s' for every t, with "no timestamp" as top.
        if self.by > other.by:
            return False
        if other.limit is None:
            return self.limit is None
        return self.limit is None or other.limit - other.by + self.by <= self.limit

    def __lt__(self, other: Increment) -> bool:
        return self != other and self <= other

    def strictly_advances(self) -> bool:
        """Whether every timestamp that passes comes out strictly later."""
        return self.by > 0

    def __repr__(self) -> str:
        return f"Increment({self.by})" if self.limit is None else f"Increment({self.by}, limit={self.limit})"


S1 = TypeVar("S1", bound=PathSummary[Any])
S2 = TypeVar("S2", bound=PathSummary[Any])


@dataclass(frozen=True, slots=True)
class ProductSummary(Generic[S1, S2]):
    """Summaries applied coordinate-wise to a :class:`~pytimely.order.Product` timestamp."""

    outer: S1
    inner: S2

    def results_in(self, t: Product[Any, Any], /) -> Product[Any, Any] | None:
        """Apply ``outer`` and ``inner`` to the two coordinates; ``None`` if either gives none."""
        o = self.outer.results_in(t.outer)
        if o is None:
            return None
        i = self.inner.results_in(t.inner)
        if i is None:
            return None
        return Product(o, i)

    def followed_by(self, other: ProductSummary[S1, S2], /) -> ProductSummary[S1, S2] | None:
        """Compose coordinate-wise."""
        o = self.outer.followed_by(other.outer)
        if o is None:
            return None
        i = self.inner.followed_by(other.inner)
        if i is None:
            return None
        return ProductSummary(o, i)

    def __le__(self, other: ProductSummary[S1, S2]) -> bool:
        return bool(self.outer <= other.outer and self.inner <= other.inner)

    def __lt__(self, other: ProductSummary[S1, S2]) -> bool:
        return self != other and self <= other

    def strictly_advances(self) -> bool:
        """Whether either coordinate strictly advances (then the product does, in the product order)."""
        return strictly_advances(self.outer) or strictly_advances(self.inner)

    def __repr__(self) -> str:
        return f"ProductSummary({self.outer!r}, {self.inner!r})"


class ScopeChange:
    """A summary that changes a timestamp's shape (entering or leaving a nested scope).

    Such summaries sit on no cycle of their own, so they never advance a
    timestamp, compare only with themselves, and do not compose: nested scopes
    are tracked location by location.
    """

    __slots__ = ()
    changes_scope = True

    def followed_by(self, other: Any, /) -> Any:
        """Not offered across scopes."""
        raise TimestampError("summaries that change scope do not compose; track nested scopes location by location")

    def __le__(self, other: Any) -> bool:
        return bool(self == other)

    def strictly_advances(self) -> bool:
        """Never."""
        return False


@dataclass(frozen=True, slots=True)
class Enter(ScopeChange):
    """Entering a nested scope: ``t`` becomes ``Product(t, inner)`` (``inner`` is the scope's minimum)."""

    inner: Any = 0

    def results_in(self, t: Any, /) -> Product[Any, Any]:
        """``Product(t, inner)``."""
        return Product(t, self.inner)


@dataclass(frozen=True, slots=True)
class Leave(ScopeChange):
    """Leaving a nested scope: ``Product(t, i)`` becomes ``t``."""

    def results_in(self, t: Product[Any, Any], /) -> Any:
        """The outer coordinate of ``t``."""
        return t.outer


def strictly_advances(summary: Any, identity: Any = None) -> bool:
    """Whether ``t < t ⊕ summary`` for every ``t`` that can travel the path.

    Summary types say so with a ``strictly_advances()`` method; for others we fall
    back to ``identity < summary``, which is right when a summary that differs from
    the identity changes every timestamp it passes.
    """
    method = getattr(summary, "strictly_advances", None)
    if method is not None:
        return bool(method())
    if identity is None:
        raise TimestampError(f"cannot tell whether {summary!r} advances timestamps without an identity summary")
    return bool(identity <= summary and not summary <= identity)


def minimum_for(t: Any) -> Any:
    """The least timestamp of the same shape as ``t`` (``0`` for ints, coordinate-wise for products)."""
    if type(t) is int:
        return 0
    if isinstance(t, Product):
        return Product(minimum_for(t.outer), minimum_for(t.inner))
    minimum = getattr(type(t), "minimum", None)
    if minimum is None:
        raise TimestampError(f"{type(t).__name__} has no minimum(); timestamps must provide one")
    return minimum()


def identity_for(t: Any) -> Any:
    """The identity path summary for timestamps of the same shape as ``t``."""
    if type(t) is int:
        return Increment(0)
    if isinstance(t, Product):
        return ProductSummary(identity_for(t.outer), identity_for(t.inner))
    identity = getattr(type(t), "identity_summary", None)
    if identity is None:
        raise TimestampError(f"{type(t).__name__} has no identity_summary(); timestamps must provide one")
    return identity()

"""Signed multisets (``'p zmultiset``) and the predicates the protocols state over them.

Seed ``000_306a8e6bd5c43d47.txt`` §3 models pointstamp counts as *signed*
multisets: functions to ``int`` that are non-zero at finitely many points.
:class:`ZMSet` is an immutable, hashable, canonical value of that type (only
non-zero counts are stored), so model states built from it can be compared and
deduplicated cheaply.

The helpers :func:`supp`, :func:`upright`, :func:`justified`, :func:`vacant`
and :func:`frontier` transcribe the seed's definitions of the same names; each
takes the partial order it needs as a function (``le`` or ``lt``), defaulting to
Python's ``<=`` / ``<``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

__all__ = [
    "EMPTY",
    "Le",
    "Lt",
    "ZMSet",
    "frontier",
    "frontier_zmset",
    "justified",
    "multisets_upto",
    "nonempty_subsets",
    "submultisets",
    "supp",
    "upright",
    "vacant",
]

T = TypeVar("T", bound=Hashable)
U = TypeVar("U", bound=Hashable)

Le = Callable[[Any, Any], bool]
"""A partial order ``a <= b`` given as a function."""
Lt = Callable[[Any, Any], bool]
"""The strict part ``a < b`` of a partial order, given as a function."""


def _display_key(x: object) -> str:
    return repr(x)


class ZMSet(frozenset[Any], Generic[T]):
    """An immutable signed multiset: a finite map from elements to non-zero integer counts.

    It behaves as a read-only mapping from each element of its support to its
    count (it is registered as a :class:`~collections.abc.Mapping`): ``p in M``
    is the seed's ``p ∈#z M`` (count non-zero) and :meth:`count` is ``M #z p``
    (zero outside the support). Underneath it is the frozen set of its
    ``(element, count)`` pairs, which makes hashing and equality canonical and
    fast — model states are tuples of these.
    """

    __slots__ = ("_d",)

    _d: dict[T, int]

    def __new__(cls, counts: Mapping[T, int] | Iterable[tuple[T, int]] = ()) -> ZMSet[T]:
        d: dict[T, int] = {}
        items = counts.items() if isinstance(counts, Mapping) else counts
        for k, n in items:
            if n:
                m = d.get(k, 0) + n
                if m:
                    d[k] = m
                else:
                    del d[k]
        return cls._raw(d)

    def __init__(self, counts: Mapping[T, int] | Iterable[tuple[T, int]] = ()) -> None:
        pass

    @classmethod
    def _raw(cls, d: dict[T, int]) -> ZMSet[T]:
        """Wrap a dict that already holds only non-zero counts (no copy)."""
        z = frozenset.__new__(cls, d.items())
        z._d = d
        return z

    @classmethod
    def of(cls, *elements: T) -> ZMSet[T]:
        """The (unsigned) multiset with one occurrence per argument."""
        d: dict[T, int] = {}
        for e in elements:
            d[e] = d.get(e, 0) + 1
        return cls._raw(d)

    @classmethod
    def replicate(cls, n: int, p: T) -> ZMSet[T]:
        """``replicate n p``: ``n`` copies of ``p`` (negative ``n`` gives a negative count)."""
        return cls._raw({p: n} if n else {})

    @classmethod
    def from_set(cls, elements: Iterable[T]) -> ZMSet[T]:
        """Each distinct element once (an antichain seen as a multiset)."""
        return cls._raw(dict.fromkeys(elements, 1))

    # Mapping protocol (equality and hashing are those of the frozen set of pairs) -------------------------

    def __getitem__(self, p: T) -> int:
        return self._d[p]

    def __iter__(self) -> Iterator[T]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, p: object) -> bool:
        return p in self._d

    def __bool__(self) -> bool:
        return bool(self._d)

    def keys(self) -> Any:
        """The support."""
        return self._d.keys()

    def values(self) -> Any:
        """The non-zero counts."""
        return self._d.values()

    def get(self, p: T, default: int = 0) -> int:
        """The count of ``p``, or ``default`` when absent."""
        return self._d.get(p, default)

    def as_dict(self) -> dict[T, int]:
        """A plain ``dict`` copy of the non-zero counts."""
        return dict(self._d)

    # Signed-multiset operations ---------------------------------------------------------------------------

    def count(self, p: T) -> int:
        """``M #z p``: the count of ``p`` (zero when absent)."""
        return self._d.get(p, 0)

    def items(self) -> Any:
        """``(element, count)`` pairs of the support."""
        return self._d.items()

    def total(self) -> int:
        """The sum of all counts."""
        return sum(self._d.values())

    def size(self) -> int:
        """The sum of the absolute counts (the number of occurrences, positive or negative)."""
        return sum(abs(n) for n in self._d.values())

    def __add__(self, other: ZMSet[T]) -> ZMSet[T]:
        if not other._d:
            return self
        if not self._d:
            return other
        d = dict(self._d)
        for k, n in other._d.items():
            m = d.get(k, 0) + n
            if m:
                d[k] = m
            else:
                del d[k]
        return ZMSet._raw(d)

    def __sub__(self, other: ZMSet[T]) -> ZMSet[T]:  # type: ignore[override]
        if not other._d:
            return self
        d = dict(self._d)
        for k, n in other._d.items():
            m = d.get(k, 0) - n
            if m:
                d[k] = m
            else:
                del d[k]
        return ZMSet._raw(d)

    def __neg__(self) -> ZMSet[T]:
        return ZMSet._raw({k: -n for k, n in self._d.items()})

    def add(self, p: T, n: int) -> ZMSet[T]:
        """``M + replicate n p``."""
        if not n:
            return self
        d = dict(self._d)
        m = d.get(p, 0) + n
        if m:
            d[p] = m
        else:
            del d[p]
        return ZMSet._raw(d)

    def pos(self) -> ZMSet[T]:
        """``pos_z M``: the positive entries only."""
        return ZMSet._raw({k: n for k, n in self._d.items() if n > 0})

    def neg(self) -> ZMSet[T]:
        """The negative entries only (still negative)."""
        return ZMSet._raw({k: n for k, n in self._d.items() if n < 0})

    def filter(self, pred: Callable[[T], bool]) -> ZMSet[T]:
        """``{#p ∈#z M. pred p#}``: the entries whose element satisfies ``pred``."""
        return ZMSet._raw({k: n for k, n in self._d.items() if pred(k)})

    def image(self, f: Callable[[T], U | None]) -> ZMSet[U]:
        """``f #z M``: counts summed over equal images; elements mapped to ``None`` are dropped."""
        d: dict[U, int] = {}
        for k, n in self._d.items():
            fk = f(k)
            if fk is None:
                continue
            m = d.get(fk, 0) + n
            if m:
                d[fk] = m
            else:
                del d[fk]
        return ZMSet._raw(d)

    def scaled(self, k: int) -> ZMSet[T]:
        """Every count multiplied by ``k``."""
        if not k:
            return ZMSet._raw({})
        return ZMSet._raw({e: n * k for e, n in self._d.items()})

    def is_nonneg(self) -> bool:
        """Whether every count is positive (an unsigned multiset)."""
        return all(n > 0 for n in self._d.values())

    def le_counts(self, other: ZMSet[T]) -> bool:
        """Pointwise ``M #z p <= N #z p`` for every ``p``."""
        od, sd = other._d, self._d
        if any(n > od.get(k, 0) for k, n in sd.items()):
            return False
        return all(n >= 0 for k, n in od.items() if k not in sd)

    def sorted_items(self) -> list[tuple[T, int]]:
        """The entries in a deterministic display order."""
        return sorted(self._d.items(), key=lambda kv: _display_key(kv[0]))

    def __repr__(self) -> str:
        if not self._d:
            return "{}"
        parts = []
        for k, n in self.sorted_items():
            parts.append(repr(k) if n == 1 else f"{k!r}:{n}")
        return "{" + ", ".join(parts) + "}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ZMSet, (dict(self._d),))

    def __copy__(self) -> ZMSet[T]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ZMSet[T]:
        return self


Mapping.register(ZMSet)


EMPTY: ZMSet[Any] = ZMSet()


def supp(M: ZMSet[T], p: T, lt: Lt = operator.lt) -> bool:
    """``supp M p = (∃p' < p. M #z p' < 0)`` — ``p`` is supported by a smaller negative entry (§3)."""
    return any(n < 0 and lt(q, p) for q, n in M.items())


def upright(M: ZMSet[T], lt: Lt = operator.lt) -> bool:
    """``upright M = (∀p. M #z p > 0 ⟶ supp M p)`` (§3)."""
    negs = [q for q, n in M.items() if n < 0]
    return all(any(lt(q, p) for q in negs) for p, n in M.items() if n > 0)


def justified(C: ZMSet[T], M: ZMSet[T], lt: Lt = operator.lt) -> bool:
    """``justified C M`` (§4): every positive entry of ``M`` is supported in ``M``, or by a smaller
    positive entry of ``C``, or has a smaller count in ``M`` than in ``C``."""
    negs = None
    caps = None
    for p, n in M.items():
        if n <= 0:
            continue
        if n < C.count(p):
            continue
        if negs is None:
            negs = [q for q, m in M.items() if m < 0]
        if any(lt(q, p) for q in negs):
            continue
        if caps is None:
            caps = [q for q, m in C.items() if m > 0]
        if any(lt(q, p) for q in caps):
            continue
        return False
    return True


def vacant(M: ZMSet[T], p: T, le: Le = operator.le) -> bool:
    """``vacant M p = (∀p' ≤ p. M #z p' = 0)``: nothing at or below ``p`` has a non-zero count (§3)."""
    return not any(le(q, p) for q in M)


def frontier(M: ZMSet[T], lt: Lt = operator.lt) -> frozenset[T]:
    """``frontier M``: the minimal elements among those with a positive count (§5)."""
    pos = [q for q, n in M.items() if n > 0]
    if len(pos) <= 1:
        return frozenset(pos)
    return frozenset(q for q in pos if not any(lt(r, q) for r in pos))


def frontier_zmset(M: ZMSet[T], lt: Lt = operator.lt) -> ZMSet[T]:
    """``frontier M`` as a signed multiset with count one per element (the seed's implicit conversion)."""
    return ZMSet.from_set(frontier(M, lt))


def multisets_upto(elements: Iterable[T], k: int) -> list[ZMSet[T]]:
    """Every unsigned multiset over ``elements`` with at most ``k`` occurrences (the empty one first)."""
    elems = list(dict.fromkeys(elements))
    out: list[ZMSet[T]] = [ZMSet()]
    layer: list[tuple[int, ZMSet[T]]] = [(0, ZMSet())]
    for _ in range(k):
        nxt: list[tuple[int, ZMSet[T]]] = []
        for start, m in layer:
            for i in range(start, len(elems)):
                grown = m.add(elems[i], 1)
                nxt.append((i, grown))
                out.append(grown)
        layer = nxt
    return out


def submultisets(M: ZMSet[T], k: int) -> list[ZMSet[T]]:
    """Every unsigned multiset below ``pos_z M`` (pointwise) with at most ``k`` occurrences."""
    pos = M.pos()
    return [m for m in multisets_upto(sorted(pos.keys(), key=_display_key), k) if m.le_counts(pos)]


def nonempty_subsets(elements: Iterable[T]) -> list[frozenset[T]]:
    """Every non-empty subset of ``elements``."""
    elems = list(dict.fromkeys(elements))
    out: list[frozenset[T]] = []
    for mask in range(1, 1 << len(elems)):
        out.append(frozenset(e for i, e in enumerate(elems) if mask >> i & 1))
    return out

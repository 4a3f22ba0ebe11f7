"""What a window can compute besides counts and sums: :class:`Fold`, :class:`Reduce`, ``"collect"``,
``"max_by"`` and ``"min_by"`` (see :mod:`.folds` for the windows that hold them).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytimely.dataflow.operators.windowing import first_of
from pytimely.errors import InvalidArgument

__all__ = ["MISSING", "Aggregation", "By", "Fold", "Reduce", "aggregation"]

MISSING: Any = object()
"""An accumulator not started yet."""
"""No accumulator yet."""


@dataclass(frozen=True, slots=True)
class Fold:
    """Fold each window's values: ``acc = fold(acc, value)`` from ``init()``; ``merge(a, b)`` joins two
    accumulators (needed by sliding and session windows; see the module doc)."""

    init: Callable[[], Any]
    fold: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class Reduce:
    """Reduce each window's values with ``f(acc, value)`` (associative: it also merges panes and sessions)."""

    f: Callable[[Any, Any], Any]


class Aggregation:
    """How one kind of aggregation starts, adds values, merges and finishes an accumulator."""

    by = False
    """Whether items are ``(value, record)`` pairs (max_by / min_by) rather than values."""

    timed = False
    """Whether items are ``(event time, value)`` pairs (collect: sorted by time when the window closes)."""

    def add(self, acc: Any, items: list[Any]) -> Any:
        """``acc`` (or ``MISSING``) with ``items`` folded in, in order."""
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        """``a`` and ``b`` together (``a`` earlier); may change ``a``, never ``b``."""
        raise NotImplementedError

    def fresh(self, first: Any) -> Any:
        """An accumulator equal to ``first`` that merging into does not change ``first`` (a pane shared by windows)."""
        return first

    def finish(self, acc: Any) -> Any:
        """What the window emits for ``acc``."""
        return acc


class _Fold(Aggregation):
    def __init__(self, spec: Fold) -> None:
        self.init, self.fold, self.merger = spec.init, spec.fold, spec.merge

    def add(self, acc: Any, items: list[Any]) -> Any:
        fold = self.fold
        if acc is MISSING:
            acc = self.init()
        for v in items:
            acc = fold(acc, v)
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        assert self.merger is not None
        return self.merger(a, b)

    def fresh(self, first: Any) -> Any:
        return self.merge(self.init(), first)


class _Reduce(Aggregation):
    def __init__(self, spec: Reduce) -> None:
        self.f = spec.f

    def add(self, acc: Any, items: list[Any]) -> Any:
        f = self.f
        it = iter(items)
        if acc is MISSING:
            acc = next(it)
        for v in it:
            acc = f(acc, v)
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        return self.f(a, b)

    def fresh(self, first: Any) -> Any:
        return copy.copy(first)


class _Collect(Aggregation):
    timed = True

    def finish(self, acc: Any) -> Any:
        acc.sort(key=first_of)
        return [v for _, v in acc]

    def add(self, acc: Any, items: list[Any]) -> Any:
        if acc is MISSING:
            return list(items)
        acc.extend(items)
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        a.extend(b)
        return a

    def fresh(self, first: Any) -> Any:
        return list(first)


class By(Aggregation):
    """``"max_by"`` / ``"min_by"``: the record whose value is largest / smallest (the first to arrive wins a tie)."""

    by = True

    def __init__(self, largest: bool) -> None:
        self.largest = largest

    def add(self, acc: Any, items: list[Any]) -> Any:
        largest = self.largest
        for item in items:
            if acc is MISSING or (item[0] > acc[0] if largest else item[0] < acc[0]):
                acc = item
        return acc

    def merge(self, a: Any, b: Any) -> Any:
        return b if (b[0] > a[0] if self.largest else b[0] < a[0]) else a

    def finish(self, acc: Any) -> Any:
        return acc[1]


def aggregation(spec: Any, kind_name: str, name: str) -> Aggregation | None:
    """The aggregation for ``spec`` (None when ``spec`` is one of the numeric aggregates); checks its arguments."""
    if isinstance(spec, Fold):
        if not callable(spec.init) or not callable(spec.fold) or not (spec.merge is None or callable(spec.merge)):
            raise InvalidArgument(f"{name!r}: Fold takes functions init(), fold(acc, value) and merge(a, b)")
        if spec.merge is None and kind_name in ("Sliding", "Session"):
            raise InvalidArgument(
                f"{name!r}: a fold over {kind_name.lower()} windows needs merge(a, b): a {kind_name.lower()} window "
                "is the merge of " + ("its panes" if kind_name == "Sliding" else "the sessions a value bridges")
            )
        return _Fold(spec)
    if isinstance(spec, Reduce):
        if not callable(spec.f):
            raise InvalidArgument(f"{name!r}: Reduce takes a function f(acc, value), got {spec.f!r}")
        return _Reduce(spec)
    if spec == "collect":
        return _Collect()
    if spec in ("max_by", "min_by"):
        return By(spec == "max_by")
    return None

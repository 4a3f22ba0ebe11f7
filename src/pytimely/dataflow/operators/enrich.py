"""``enrich_cached``: join records with values looked up from outside (a database, a service), each key
fetched once and kept in a per-worker cache, optionally refreshed after a number of epochs.

The cache is declared state (a :class:`~pytimely.dataflow.state.LogState` of fetches, ``"cache"``): with
recovery on, a snapshot writes the values fetched since the previous one (and now and then the whole cache), and
a resumed run answers from the values the interrupted one had fetched by the epoch it resumes after, as an
uninterrupted run would have, instead of asking the outside again. On another number of workers, a worker takes
the caches of the old workers it stands in for (the newest fetch of a key wins).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pytimely.container as container
from pytimely.dataflow.state import declare
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["EnrichCache", "enrich_cached"]

K = TypeVar("K")
V = TypeVar("V")


class EnrichCache(Generic[K, V]):
    """``get(key)`` answers from the cache, calling ``getter(key)`` only for a key not fetched within ``ttl``."""

    def __init__(self, getter: Callable[[K], V], ttl: int | None) -> None:
        self._getter = getter
        self._ttl = ttl
        self._values: dict[K, tuple[Any, V]] = {}
        self.now: Any = None
        """The time of the batch being enriched (set by the operator)."""
        self.fetches = 0
        """How many times ``getter`` was called on this worker."""
        self._fetched: list[tuple[K, Any, V]] | None = None
        """The fetches since the last snapshot (None: recovery is off, nothing is noted)."""

    def get(self, key: K) -> V:
        """The value for ``key``, fetched if it is not cached or has expired."""
        held = self._values.get(key)
        if held is not None and (self._ttl is None or self.now - held[0] < self._ttl):
            return held[1]
        self.fetches += 1
        value = self._getter(key)
        self._values[key] = (self.now, value)
        if self._fetched is not None:
            self._fetched.append((key, self.now, value))
        return value

    def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        """``{key: value}`` for the distinct ``keys`` (one fetch per missing key): for mappers of whole batches."""
        return {k: self.get(k) for k in dict.fromkeys(keys)}

    def __len__(self) -> int:
        return len(self._values)

    # -- declared state (pytimely.dataflow.state: LogState, Tracked) ------------------------------------

    def track(self) -> None:
        """Note fetches from now on (recovery is on)."""
        self._fetched = []

    def appended(self) -> list[tuple[K, Any, V]]:
        """``(key, fetched at, value)`` of the fetches since the last call."""
        new, self._fetched = self._fetched or [], []
        return new

    def entries(self) -> list[tuple[K, Any, V]]:
        """``(key, fetched at, value)`` of every value cached now (what a whole rewrite of the log holds)."""
        return [(k, at, v) for k, (at, v) in self._values.items()]

    def restore(self, entries: list[tuple[K, Any, V]]) -> None:
        """Put back fetches of the old workers this worker stands in for; a key's newest fetch wins."""
        values = self._values
        for k, at, v in entries:
            held = values.get(k)
            if held is None or held[0] <= at:
                values[k] = (at, v)


def enrich_cached(
    stream: Stream[Any],
    getter: Callable[[Any], Any],
    mapper: Callable[[EnrichCache[Any, Any], Any], Any],
    ttl: int | None,
    vectorized: bool,
    name: str,
) -> Stream[Any]:
    """``mapper(cache, record)`` per record (``mapper(cache, batch)`` per batch when ``vectorized``).

    ``ttl``, in units of the (integer) timestamps, bounds how old a cached value may be; ``None``: forever.
    """
    if ttl is not None and (type(ttl) is not int or ttl < 1):
        raise InvalidArgument(f"{name}: ttl must be a positive int (timestamps) or None, got {ttl!r}")
    if not callable(getter) or not callable(mapper):
        raise InvalidArgument(f"{name}: getter and mapper must be callable")
    op = stream.scope.add_operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]
    cache: EnrichCache[Any, Any] = EnrichCache(getter, ttl)
    declare(op, "cache", cache, layout="enrich/1")

    def logic() -> None:
        for time, batch in port.batches():
            cache.now = time
            if vectorized:
                result = mapper(cache, batch)
                if result is not None and len(result):
                    out._push(time, result)
            else:
                out._push(time, [mapper(cache, r) for r in container.records(batch)])

    op.logic = logic
    return stream.scope.stream(out)

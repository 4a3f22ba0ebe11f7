"""The pushers that route: an exchange by a key per record, a direct channel by the worker a router names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.channels.pushers.failures import push_to
from pytimely.errors import ArityError, OperatorError, RouteError

if TYPE_CHECKING:
    from pytimely.communication.allocator import Push
    from pytimely.dataflow.ports import InputPort, Record

__all__ = ["DirectPusher", "ExchangePusher"]


class ExchangePusher:
    """Routes each record to worker ``route(record) % peers``; this worker's share skips the mailbox."""

    __slots__ = ("_index", "_local", "_location", "_peers", "_pushes", "_record", "_route", "_vectorized", "sender")

    def __init__(
        self,
        target: InputPort[Any, Any],
        pushes: Sequence[Push[Any]],
        index: int,
        route: Callable[[Any], Any],
        vectorized: bool,
        record: Record,
    ) -> None:
        self._local = target
        self._location = target.location
        self._pushes = pushes
        self._index = index
        self._peers = len(pushes)
        self._route = route
        self._vectorized = vectorized
        self._record = record
        self.sender: str | None = None
        """The operator whose output feeds this channel (set when connected), for errors."""

    def push(self, time: Any, batch: Any) -> None:
        parts: Sequence[Any]
        if self._vectorized:
            parts = self._split_by_keys(time, batch)
        elif type(batch) is list:
            buckets: list[list[Any]] = [[] for _ in range(self._peers)]
            appends = [b.append for b in buckets]
            route = self._route
            peers = self._peers
            r: Any = None
            try:
                for r in batch:
                    appends[route(r) % peers](r)
            except Exception as exc:
                raise self._failed(time, exc, r) from exc
            parts = buckets
        else:
            parts = self._split_by_records(time, batch)
        record = self._record
        location = self._location
        index = self._index
        for j, part in enumerate(parts):
            if len(part):
                record(location, time, 1)
                if j == index:
                    self._local._deliver((time, part))
                else:
                    push_to(self._pushes[j], "exchange", self.sender, self._local, time, part)

    def _split_by_keys(self, time: Any, batch: Any) -> Sequence[Any]:
        """A columnar batch's share of each worker, by the one key per row a vectorized route gives."""
        import numpy as np

        peers = self._peers
        try:
            keys = np.asarray(self._route(batch))
            # For integer keys and a power-of-two peer count, two's complement makes ``& (peers - 1)``
            # the floor modulo, at a fraction of its cost.
            power_of_two = keys.dtype.kind in "iu" and peers & (peers - 1) == 0
            keys = keys & (peers - 1) if power_of_two else keys % peers
        except Exception as exc:
            raise self._failed(time, exc) from exc
        if keys.shape != (len(batch),):
            raise ArityError(
                f"exchange into {self._local._op.name!r}: a vectorized route must give one key per row "
                f"({len(batch)} rows), got shape {keys.shape}"
            )
        if len(keys) and bool((keys == keys[0]).all()):
            # Every row has the same owner: send the batch itself rather than a copy of it.
            owner = int(keys[0])
            return [batch if j == owner else () for j in range(peers)]
        return container.split(batch, keys, peers)

    def _split_by_records(self, time: Any, batch: Any) -> Sequence[Any]:
        """A columnar batch routed record by record: its rows go out in its own kind."""
        import numpy as np

        peers = self._peers
        records = container.records(batch)
        route = self._route
        dests = np.empty(len(records), dtype=np.int64)
        r = None
        try:
            for i, r in enumerate(records):
                dests[i] = route(r) % peers
        except Exception as exc:
            raise self._failed(time, exc, r) from exc
        return container.split(batch, dests, peers)

    def _failed(self, time: Any, exc: Exception, record: Any = None) -> Exception:
        """The error for a route that raised or gave no int: it names the operator the route belongs to."""
        name = self._local._op.name
        if isinstance(exc, TypeError) and not self._vectorized:
            try:
                key = self._route(record)
            except Exception:
                key = None
            else:
                if not isinstance(key, int):
                    return RouteError(
                        f"exchange into {name!r}: the route must give an int for every record, "
                        f"gave {key!r} for {record!r}"
                    )
        return OperatorError(
            f"operator {name!r} failed on worker {self._index} at time {time!r}: its route raised "
            f"{type(exc).__name__}: {exc}",
            operator=name,
            worker=self._index,
            time=time,
        )


class DirectPusher:
    """Sends each batch whole to the worker ``dest()`` names (a router that has split its batches already)."""

    __slots__ = ("_dest", "_index", "_local", "_location", "_pushes", "_record", "sender")

    def __init__(
        self,
        target: InputPort[Any, Any],
        pushes: Sequence[Push[Any]],
        index: int,
        dest: Callable[[], int],
        record: Record,
    ) -> None:
        self._local = target
        self._location = target.location
        self._pushes = pushes
        self._index = index
        self._dest = dest
        self._record = record
        self.sender: str | None = None
        """The operator whose output feeds this channel (set when connected), for errors."""

    def push(self, time: Any, batch: Any) -> None:
        if not len(batch):
            return
        j = self._dest()
        self._record(self._location, time, 1)
        if j == self._index:
            self._local._deliver((time, batch))
        else:
            push_to(self._pushes[j], "exchange", self.sender, self._local, time, batch)

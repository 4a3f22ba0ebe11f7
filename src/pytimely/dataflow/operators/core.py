"""Operators that move records along without holding on to them: map, filter, exchange, and friends.

They share one skeleton (:func:`per_batch`): an operator with one input and some outputs
whose logic handles each ``(time, batch)`` as it is taken and sends at the same time.
Each operator below is only the function it applies to a batch. Functions given to them see records
(:func:`pytimely.container.records`: rows of numpy and Arrow batches as tuples); ``filter``, ``branch`` and
``partition`` pass on the rows they keep in the batch's own kind, so a columnar batch stays columnar.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pytimely.container as container
from pytimely.dataflow.channels import Broadcast, Exchange, Pact
from pytimely.errors import ArityError, RouteError

if TYPE_CHECKING:
    from pytimely.dataflow.ports import OutputPort
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = [
    "branch",
    "broadcast",
    "concat",
    "exchange",
    "filter_",
    "flat_map",
    "inspect",
    "inspect_batch",
    "map_",
    "map_batch",
    "partition",
    "passthrough",
    "per_batch",
    "sink",
]

BatchLogic = Callable[[Any, Any, Sequence["OutputPort[Any, Any]"]], None]
"""``handle(time, batch, outputs)``: what a per-batch operator does with each batch it takes."""


def per_batch(
    stream: Stream[Any], name: str, handle: BatchLogic, *, outputs: int = 1, pact: Pact | None = None
) -> list[Stream[Any]]:
    """An operator calling ``handle(time, batch, outputs)`` for every batch of ``stream``; its output streams."""
    scope = stream.scope
    op = scope.add_operator(name, [(stream, pact)], outputs)
    port, outs = op.inputs[0], op.outputs

    def logic() -> None:
        for time, batch in port.batches():
            handle(time, batch, outs)

    op.logic = logic
    return [scope.stream(out) for out in outs]


def _where(batch: Any, predicate: Callable[[Any], bool]) -> Any:
    """The positions of the records of a columnar ``batch`` that ``predicate`` accepts."""
    import numpy as np

    records = container.records(batch)
    return np.flatnonzero(np.fromiter(map(predicate, records), dtype=bool, count=len(records)))


def _one(stream: Stream[Any], name: str, handle: BatchLogic, pact: Pact | None = None) -> Stream[Any]:
    return per_batch(stream, name, handle, pact=pact)[0]


def map_(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """Apply ``f`` to every record."""
    return _one(stream, name, lambda time, batch, outs: outs[0]._push(time, list(map(f, container.records(batch)))))


def filter_(stream: Stream[Any], predicate: Callable[[Any], bool], name: str) -> Stream[Any]:
    """Keep the records ``predicate`` accepts."""

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        if type(batch) is list:
            kept = list(filter(predicate, batch))
            if kept:
                outs[0]._push(time, kept)
            return
        kept_rows = _where(batch, predicate)
        if len(kept_rows):
            outs[0]._push(time, container.take(batch, kept_rows))

    return _one(stream, name, handle)


def flat_map(stream: Stream[Any], f: Callable[[Any], Iterable[Any]], name: str) -> Stream[Any]:
    """Replace every record by the records ``f`` gives for it."""

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        result: list[Any] = []
        extend = result.extend
        for record in container.records(batch):
            extend(f(record))
        if result:
            outs[0]._push(time, result)

    return _one(stream, name, handle)


def map_batch(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """Apply ``f`` to each whole batch (a list, numpy array or Arrow batch); empty results are dropped."""

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        result = f(batch)
        if result is not None and container.length(result):
            outs[0]._push(time, result)

    return _one(stream, name, handle)


def inspect(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """Call ``f`` on every record and pass the records on unchanged."""

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        for record in container.records(batch):
            f(record)
        outs[0]._push(time, batch)

    return _one(stream, name, handle)


def inspect_batch(stream: Stream[Any], f: Callable[[Any, Any], Any], name: str) -> Stream[Any]:
    """Call ``f(time, batch)`` on every batch and pass it on unchanged."""

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        f(time, batch)
        outs[0]._push(time, batch)

    return _one(stream, name, handle)


def sink(stream: Stream[Any], f: Callable[[Any, Any], Any], name: str) -> None:
    """Call ``f(time, batch)`` on every batch; nothing flows on."""
    per_batch(stream, name, lambda time, batch, outs: f(time, batch), outputs=0)


def _forward(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
    outs[0]._push(time, batch)


def passthrough(stream: Stream[Any], pact: Pact | None, name: str) -> Stream[Any]:
    """Forward batches unchanged over an edge with contract ``pact`` (exchange, broadcast)."""
    return _one(stream, name, _forward, pact)


def exchange(stream: Stream[Any], route: Callable[[Any], Any], vectorized: bool, name: str) -> Stream[Any]:
    """Send each record to worker ``route(record) % peers``."""
    if not callable(route):
        raise RouteError(f"{name}: route must be callable, got {route!r}")
    return passthrough(stream, Exchange(route, vectorized), name)


def broadcast(stream: Stream[Any], name: str) -> Stream[Any]:
    """Send every record to every worker."""
    return passthrough(stream, Broadcast(), name)


def concat(scope: Scope[Any], streams: list[Stream[Any]], name: str) -> Stream[Any]:
    """Merge several streams of one scope."""
    op = scope.add_operator(name, [(s, None) for s in streams], 1)
    out = op.outputs[0]
    ports = op.inputs

    def logic() -> None:
        for port in ports:
            for time, batch in port.batches():
                out._push(time, batch)

    op.logic = logic
    return scope.stream(out)


def partition(stream: Stream[Any], parts: int, route: Callable[[Any], int], name: str) -> list[Stream[Any]]:
    """Split into ``parts`` streams; record ``r`` goes to stream ``route(r)``."""
    if type(parts) is not int or parts < 1:
        raise ArityError(f"{name}: the number of parts must be a positive int, got {parts!r}")

    def part_of(record: Any) -> int:
        k = route(record)
        if type(k) is not int or not 0 <= k < parts:
            raise ArityError(f"{name}: route gave {k!r} for {record!r}; parts are numbered 0..{parts - 1}")
        return k

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        if type(batch) is list:
            buckets: list[list[Any]] = [[] for _ in range(parts)]
            appends = [b.append for b in buckets]
            for record in batch:
                appends[part_of(record)](record)
            pieces: list[Any] = buckets
        else:
            import numpy as np

            records = container.records(batch)
            dests = np.fromiter(map(part_of, records), dtype=np.int64, count=len(records))
            pieces = container.split(batch, dests, parts)
        for out, piece in zip(outs, pieces, strict=True):
            if len(piece):
                out._push(time, piece)

    return per_batch(stream, name, handle, outputs=parts)


def branch(stream: Stream[Any], predicate: Callable[[Any], bool], name: str) -> tuple[Stream[Any], Stream[Any]]:
    """Split into the records ``predicate`` accepts and the rest."""

    def handle(time: Any, batch: Any, outs: Sequence[OutputPort[Any, Any]]) -> None:
        if type(batch) is list:
            accepted: list[Any] = []
            rejected: list[Any] = []
            for record in batch:
                (accepted if predicate(record) else rejected).append(record)
            pieces: list[Any] = [accepted, rejected]
        else:
            import numpy as np

            records = container.records(batch)
            verdicts = np.fromiter(map(predicate, records), dtype=bool, count=len(records))
            pieces = [container.take(batch, np.flatnonzero(verdicts)), container.take(batch, np.flatnonzero(~verdicts))]
        for out, piece in zip(outs, pieces, strict=True):
            if len(piece):
                out._push(time, piece)

    yes, no = per_batch(stream, name, handle, outputs=2)
    return yes, no

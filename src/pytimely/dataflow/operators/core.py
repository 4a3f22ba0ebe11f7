"""Operators that move records along without holding on to them: map, filter, exchange, and friends."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pytimely.errors import ArityError, RouteError

if TYPE_CHECKING:
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = [
    "branch",
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
    "sink",
]


def _stream(scope: Scope[Any], port: Any) -> Stream[Any]:
    from pytimely.dataflow.stream import Stream

    return Stream(scope, port)


def map_(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """Apply ``f`` to every record."""
    op = stream.scope._operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            out._push(time, list(map(f, batch)))

    op.logic = logic
    return _stream(stream.scope, out)


def filter_(stream: Stream[Any], predicate: Callable[[Any], bool], name: str) -> Stream[Any]:
    """Keep the records ``predicate`` accepts."""
    op = stream.scope._operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            kept = list(filter(predicate, batch))
            if kept:
                out._push(time, kept)

    op.logic = logic
    return _stream(stream.scope, out)


def flat_map(stream: Stream[Any], f: Callable[[Any], Iterable[Any]], name: str) -> Stream[Any]:
    """Replace every record by the records ``f`` gives for it."""
    op = stream.scope._operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            result: list[Any] = []
            extend = result.extend
            for record in batch:
                extend(f(record))
            if result:
                out._push(time, result)

    op.logic = logic
    return _stream(stream.scope, out)


def map_batch(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """Apply ``f`` to each whole batch (a list, numpy array or Arrow batch); empty results are dropped."""
    op = stream.scope._operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            result = f(batch)
            if result is not None and len(result):
                out._push(time, result)

    op.logic = logic
    return _stream(stream.scope, out)


def inspect(stream: Stream[Any], f: Callable[[Any], Any], name: str) -> Stream[Any]:
    """Call ``f`` on every record and pass the records on unchanged."""
    op = stream.scope._operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            for record in batch:
                f(record)
            out._push(time, batch)

    op.logic = logic
    return _stream(stream.scope, out)


def inspect_batch(stream: Stream[Any], f: Callable[[Any, Any], Any], name: str) -> Stream[Any]:
    """Call ``f(time, batch)`` on every batch and pass it on unchanged."""
    op = stream.scope._operator(name, [(stream, None)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            f(time, batch)
            out._push(time, batch)

    op.logic = logic
    return _stream(stream.scope, out)


def sink(stream: Stream[Any], f: Callable[[Any, Any], Any], name: str) -> None:
    """Call ``f(time, batch)`` on every batch; nothing flows on."""
    op = stream.scope._operator(name, [(stream, None)], 0)
    port = op.inputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            f(time, batch)

    op.logic = logic


def passthrough(stream: Stream[Any], pact: Any, name: str) -> Stream[Any]:
    """Forward batches unchanged over an edge with contract ``pact`` (exchange, broadcast)."""
    op = stream.scope._operator(name, [(stream, pact)], 1)
    port, out = op.inputs[0], op.outputs[0]

    def logic() -> None:
        for time, batch in port.batches():
            out._push(time, batch)

    op.logic = logic
    return _stream(stream.scope, out)


def exchange(stream: Stream[Any], route: Callable[[Any], Any], vectorized: bool, name: str) -> Stream[Any]:
    """Send each record to worker ``route(record) % peers``."""
    if not callable(route):
        raise RouteError(f"{name}: route must be callable, got {route!r}")
    return passthrough(stream, ("exchange", route, vectorized), name)


def concat(scope: Scope[Any], streams: list[Stream[Any]], name: str) -> Stream[Any]:
    """Merge several streams of one scope."""
    op = scope._operator(name, [(s, None) for s in streams], 1)
    out = op.outputs[0]
    ports = op.inputs

    def logic() -> None:
        for port in ports:
            for time, batch in port.batches():
                out._push(time, batch)

    op.logic = logic
    return _stream(scope, out)


def partition(stream: Stream[Any], parts: int, route: Callable[[Any], int], name: str) -> list[Stream[Any]]:
    """Split into ``parts`` streams; record ``r`` goes to stream ``route(r)``."""
    if type(parts) is not int or parts < 1:
        raise ArityError(f"{name}: the number of parts must be a positive int, got {parts!r}")
    op = stream.scope._operator(name, [(stream, None)], parts)
    port, outs = op.inputs[0], op.outputs

    def logic() -> None:
        for time, batch in port.batches():
            buckets: list[list[Any]] = [[] for _ in range(parts)]
            appends = [b.append for b in buckets]
            for record in batch:
                k = route(record)
                if type(k) is not int or not 0 <= k < parts:
                    raise ArityError(f"{name}: route gave {k!r} for {record!r}; parts are numbered 0..{parts - 1}")
                appends[k](record)
            for out, bucket in zip(outs, buckets, strict=True):
                if bucket:
                    out._push(time, bucket)

    op.logic = logic
    return [_stream(stream.scope, out) for out in outs]


def branch(stream: Stream[Any], predicate: Callable[[Any], bool], name: str) -> tuple[Stream[Any], Stream[Any]]:
    """Split into the records ``predicate`` accepts and the rest."""
    op = stream.scope._operator(name, [(stream, None)], 2)
    port, yes, no = op.inputs[0], op.outputs[0], op.outputs[1]

    def logic() -> None:
        for time, batch in port.batches():
            accepted: list[Any] = []
            rejected: list[Any] = []
            for record in batch:
                (accepted if predicate(record) else rejected).append(record)
            if accepted:
                yes._push(time, accepted)
            if rejected:
                no._push(time, rejected)

    op.logic = logic
    return _stream(stream.scope, yes), _stream(stream.scope, no)

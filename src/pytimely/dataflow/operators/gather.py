"""Gathering a stream on one worker: every batch goes whole to worker ``to``.

Where ``exchange(lambda _: 0)`` routes each record through a route and ties the records to every worker the
computation started with (any of them could be routed to), ``gather`` names its one receiver. So in an elastic
computation only that worker's process is held: the others may leave (:mod:`pytimely.membership` checks a plan
against what each operator pins, before anything runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytimely.dataflow.channels import Direct
from pytimely.dataflow.operators.core import passthrough
from pytimely.errors import InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["gather"]


def gather(stream: Stream[Any], to: int, name: str) -> Stream[Any]:
    """Send every batch of ``stream`` whole to worker ``to``; the records arrive there only."""
    scope = stream.scope
    if type(to) is not int or not 0 <= to < scope.peers:
        raise InvalidArgument(f"{name}: to= names a worker, 0 to {scope.peers - 1}, got {to!r}")
    gathered = passthrough(stream, Direct(lambda: to), name)
    scope.subgraph.pin(name, (to,))
    return gathered

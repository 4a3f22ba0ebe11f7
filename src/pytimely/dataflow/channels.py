"""Parallelisation contracts (pacts): how an edge moves records between the workers of a dataflow.

timely's ``dataflow/channels/pact.rs`` holds the same idea: an operator's input names
the contract its records arrive under, and the dataflow builds the channel for it.

* :class:`Pipeline` keeps records on the worker that produced them.
* :class:`Exchange` routes each record to worker ``route(record) % peers``.
* :class:`Broadcast` copies every batch to every worker.
* :class:`Direct` sends each batch whole to the worker ``dest()`` names (a router
  that has split its batches by owner already).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from pytimely.errors import InvalidPact, RouteError

__all__ = ["Broadcast", "Direct", "Exchange", "Pact", "Pipeline", "exchange_for", "pact_of"]


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Records stay on the worker that produced them."""

    kind: ClassVar[str] = "pipeline"


@dataclass(frozen=True, slots=True)
class Exchange:
    """Each record goes to worker ``route(record) % peers`` (one key per row with ``vectorized``)."""

    route: Callable[[Any], Any]
    vectorized: bool = False
    kind: ClassVar[str] = "exchange"

    def __post_init__(self) -> None:
        if not callable(self.route):
            raise RouteError(f"an exchange route must be callable, got {self.route!r}")


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Every batch goes to every worker (every member at the time, when workers join and leave)."""

    kind: ClassVar[str] = "broadcast"


@dataclass(frozen=True, slots=True)
class Direct:
    """Each batch goes whole to the worker ``dest()`` names when it is sent."""

    dest: Callable[[], int]
    kind: ClassVar[str] = "direct"


Pact: TypeAlias = Pipeline | Exchange | Broadcast | Direct
"""One of the four contracts."""

PIPELINE = Pipeline()


def exchange_for(route: Callable[[Any], Any] | None, vectorized: bool = False) -> Pact:
    """:class:`Exchange` by ``route``, or :class:`Pipeline` when there is no route."""
    return PIPELINE if route is None else Exchange(route, vectorized)


def pact_of(value: Pact | None, where: str = "edge") -> Pact:
    """``value`` as a contract: ``None`` is a pipeline; anything else must be one of the four types."""
    if value is None:
        return PIPELINE
    if isinstance(value, (Pipeline, Exchange, Broadcast, Direct)):
        return value
    raise InvalidPact(
        f"{where}: {value!r} is not a channel contract; use Pipeline(), Exchange(route), Broadcast() or Direct(dest) "
        "from pytimely.dataflow.channels"
    )

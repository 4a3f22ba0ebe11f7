"""Parallelisation contracts (pacts): how an edge moves records between the workers of a dataflow.

timely's ``dataflow/channels/pact.rs`` holds the same idea: an operator's input names
the contract its records arrive under, and the contract connects the edge: :meth:`connect`
makes the pusher (:mod:`pytimely.dataflow.channels.pushers`) that carries an output's
batches to the input, asking the dataflow (a :class:`Wiring`) for a channel between the
workers when records leave this one. Each contract has a :attr:`kind`, its name (graph views show it).

* :class:`Pipeline` keeps records on the worker that produced them.
* :class:`Exchange` routes each record to worker ``route(record) % peers``.
* :class:`Broadcast` copies every batch to every worker.
* :class:`Direct` sends each batch whole to the worker ``dest()`` names (a router
  that has split its batches by owner already).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

from pytimely.dataflow.channels.pushers import BroadcastPusher, DirectPusher, ExchangePusher, LocalPusher, Pusher
from pytimely.errors import InvalidPact, RouteError

if TYPE_CHECKING:
    from pytimely.communication.allocator import Push
    from pytimely.dataflow.ports import InputPort, Record

__all__ = ["Broadcast", "Direct", "Exchange", "Pact", "Pipeline", "Wiring", "exchange_for", "pact_of"]


class Wiring(Protocol):
    """What a contract asks of the dataflow whose edge it connects (a :class:`~pytimely.dataflow.subgraph.Subgraph`)."""

    @property
    def worker(self) -> int:
        """The index of this worker."""

    @property
    def record(self) -> Record:
        """How the dataflow counts a message sent or taken in this worker's progress."""

    @property
    def local(self) -> bool:
        """Whether this worker is the dataflow's only one (and none may join): every contract is then a pipeline."""

    def allocate_channel(self, target: InputPort[Any, Any]) -> Sequence[Push[Any]]:
        """A new channel between the workers whose receiving end feeds ``target``; one sending end per worker."""

    def pin_started(self, operator: str) -> None:
        """Say that records reach ``operator`` on the workers the computation started with (unless pinned already)."""


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Records stay on the worker that produced them."""

    kind: ClassVar[str] = "pipeline"

    def connect(self, wiring: Wiring, target: InputPort[Any, Any]) -> Pusher:
        """A pusher handing batches to ``target`` on this worker."""
        return LocalPusher(target, wiring.record)


@dataclass(frozen=True, slots=True)
class Exchange:
    """Each record goes to worker ``route(record) % peers`` (one key per row with ``vectorized``)."""

    route: Callable[[Any], Any]
    vectorized: bool = False
    kind: ClassVar[str] = "exchange"

    def __post_init__(self) -> None:
        if not callable(self.route):
            raise RouteError(f"an exchange route must be callable, got {self.route!r}")

    def connect(self, wiring: Wiring, target: InputPort[Any, Any]) -> Pusher:
        """A pusher routing each record to its worker; ``target``'s operator pins the workers the run started with."""
        if wiring.local:
            return LocalPusher(target, wiring.record)
        pushes = wiring.allocate_channel(target)
        # ``exchange`` spreads records over the workers the computation started with: only those receive.
        wiring.pin_started(target.operator_name)
        return ExchangePusher(target, pushes, wiring.worker, self.route, self.vectorized, wiring.record)


@dataclass(frozen=True, slots=True)
class Broadcast:
    """Every batch goes to every worker (every member at the time, when workers join and leave)."""

    kind: ClassVar[str] = "broadcast"

    def connect(self, wiring: Wiring, target: InputPort[Any, Any]) -> Pusher:
        """A pusher copying every batch to ``target`` on every worker."""
        if wiring.local:
            return LocalPusher(target, wiring.record)
        return BroadcastPusher(target, wiring.allocate_channel(target), wiring.worker, wiring.record)


@dataclass(frozen=True, slots=True)
class Direct:
    """Each batch goes whole to the worker ``dest()`` names when it is sent."""

    dest: Callable[[], int]
    kind: ClassVar[str] = "direct"

    def connect(self, wiring: Wiring, target: InputPort[Any, Any]) -> Pusher:
        """A pusher sending each batch to ``target`` on the worker ``dest()`` names."""
        if wiring.local:
            return LocalPusher(target, wiring.record)
        return DirectPusher(target, wiring.allocate_channel(target), wiring.worker, self.dest, wiring.record)


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

"""Channels: the contracts that say how an edge moves records between workers, and the pushers that do it.

timely's ``dataflow/channels``: :mod:`.pact` holds the contracts (:class:`Pipeline`, :class:`Exchange`,
:class:`Broadcast`, :class:`Direct`), each of which connects an edge by making its pusher; :mod:`.pushers`
holds the pushers.
"""

from pytimely.dataflow.channels.pact import (
    Broadcast,
    Direct,
    Exchange,
    Pact,
    Pipeline,
    Wiring,
    exchange_for,
    pact_of,
)

__all__ = ["Broadcast", "Direct", "Exchange", "Pact", "Pipeline", "Wiring", "exchange_for", "pact_of"]

"""Pushers: the sending ends of channels, one per parallelisation contract (timely's ``dataflow/channels/pushers``).

A pusher takes ``push(time, batch)`` from an operator's output and delivers the batch (or its parts) to the
input port it is bound for, on this worker or through the allocator to others, counting each message it
sends in the worker's progress.
"""

from __future__ import annotations

from typing import Any, Protocol

from pytimely.dataflow.channels.pushers.broadcast import BroadcastPusher
from pytimely.dataflow.channels.pushers.buffer import Session
from pytimely.dataflow.channels.pushers.checked import CheckedPusher
from pytimely.dataflow.channels.pushers.exchange import DirectPusher, ExchangePusher
from pytimely.dataflow.channels.pushers.local import LocalPusher

__all__ = ["BroadcastPusher", "CheckedPusher", "DirectPusher", "ExchangePusher", "LocalPusher", "Pusher", "Session"]


class Pusher(Protocol):
    """The sending end of a channel."""

    sender: str | None
    """The operator whose output feeds the channel (set when it is connected), for errors."""

    def push(self, time: Any, batch: Any, /) -> None:
        """Send ``batch`` at ``time`` on to the channel's input port(s)."""

"""The pusher of a pipeline: batches go to a port on the same worker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort, Record

__all__ = ["LocalPusher"]


class LocalPusher:
    """Hands batches to a port on the same worker."""

    __slots__ = ("_location", "_record", "_target", "sender")

    def __init__(self, target: InputPort[Any, Any], record: Record) -> None:
        self._target = target
        self._location = target.location
        self._record = record
        self.sender: str | None = None
        """The operator whose output feeds this channel (set when connected)."""

    def push(self, time: Any, batch: Any) -> None:
        self._record(self._location, time, 1)
        self._target._deliver((time, batch))

"""The pusher of a broadcast: every batch to every worker (every member at the time, when workers join and leave)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytimely.communication.allocator import Members
from pytimely.dataflow.channels.pushers.failures import push_failed, push_to
from pytimely.errors import PytimelyError

if TYPE_CHECKING:
    from pytimely.communication.allocator import Push
    from pytimely.dataflow.ports import InputPort, Record

__all__ = ["BroadcastPusher"]


class BroadcastPusher:
    """Copies every batch to every worker (every member at the time, when workers join and leave)."""

    __slots__ = ("_index", "_local", "_location", "_members", "_pushes", "_record", "sender")

    def __init__(self, target: InputPort[Any, Any], pushes: Sequence[Push[Any]], index: int, record: Record) -> None:
        self._local = target
        self._location = target.location
        self._pushes = pushes
        # Decided once: checking a runtime Protocol costs microseconds.
        self._members: Members | None = pushes if isinstance(pushes, Members) else None
        self._index = index
        self._record = record
        self.sender: str | None = None
        """The operator whose output feeds this channel (set when connected), for errors."""

    def push(self, time: Any, batch: Any) -> None:
        members = self._members
        if members is not None:
            # Only the members at the time get a copy, when workers join and leave; the batch is serialised once
            # and crosses to each other process once, for all of its workers.
            targets = members.targets()
            for j, _ in targets:
                self._record(self._location, time, 1)
                if j == self._index:
                    self._local._deliver((time, batch))
            try:
                members.broadcast((time, batch), skip=self._index)
            except PytimelyError:
                raise
            except Exception as exc:  # the communication layer pickles: its error names no operator
                push_failed("broadcast", self.sender, self._local, time, batch, exc)
            return
        for j, push in enumerate(self._pushes):
            self._record(self._location, time, 1)
            if j == self._index:
                self._local._deliver((time, batch))
            else:
                push_to(push, "broadcast", self.sender, self._local, time, batch)

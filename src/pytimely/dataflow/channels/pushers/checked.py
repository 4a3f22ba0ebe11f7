"""A pusher that serialises every batch as the network would, so a record that cannot cross fails at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytimely.communication.payload import dumps, loads
from pytimely.dataflow.channels.pushers.failures import unpicklable

if TYPE_CHECKING:
    from pytimely.dataflow.ports import InputPort

__all__ = ["CheckedPusher"]


class CheckedPusher:
    """Wraps a channel of an exchange pact: every batch goes through the cross-process codec first.

    In one process an exchange hands records over by reference, so a record that cannot be
    pickled passes unnoticed until the job runs on several processes. This channel serialises
    each batch as the network would and delivers the copy, so such a record fails at once,
    named, and a sender that keeps mutating what it sent cannot pass either.
    """

    __slots__ = ("_inner", "_kind", "_target", "sender")

    def __init__(self, inner: Any, kind: str, target: InputPort[Any, Any], sender: str) -> None:
        self._inner = inner
        self._kind = kind
        self._target = target
        self.sender: str | None = sender

    def push(self, time: Any, batch: Any) -> None:
        try:
            parts, _ = dumps((time, batch))
            _, copy = loads(b"".join(parts))
        except Exception as exc:
            raise unpicklable(self._kind, self.sender, self._target, time, batch, exc) from exc
        self._inner.push(time, copy)

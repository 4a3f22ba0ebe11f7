"""The source operator every connector uses: a poll function called as the worker steps, told what to send.

``poll()`` returns what happened since the last call: batches to send at a time, the time the source has
moved on to (nothing earlier will follow), or that it has ended; ``None`` or an empty list when nothing did.
The operator keeps the one capability, sends a bounded amount per activation and asks to run again until the
poll says the end. Connectors that wait on the outside world (a directory, a socket, stdin) poll without
blocking; when nothing came, the operator waits a little (``idle``, at most a few milliseconds) so a waiting
source does not spin a core.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.errors import InputError

if TYPE_CHECKING:
    from pytimely.dataflow.capability import Capability
    from pytimely.dataflow.operator import OperatorInfo
    from pytimely.dataflow.ports import OutputPort
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["Advance", "End", "Send", "polled_source"]


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``batch`` at ``time``."""

    time: Any
    batch: Any


@dataclass(frozen=True, slots=True)
class Advance:
    """Nothing earlier than ``time`` will be sent."""

    time: Any


@dataclass(frozen=True, slots=True)
class End:
    """Nothing more will be sent."""


Action = Send | Advance | End
Poll = Callable[[], "list[Action] | None"]


def polled_source(
    scope: Scope[Any], make_poll: Callable[[Any], Poll], *, name: str, idle: float = 0.002
) -> Stream[Any]:
    """A source driven by ``make_poll(minimum)()`` (called once per activation); see the module doc."""

    def constructor(cap: Capability[Any], info: OperatorInfo) -> Callable[[OutputPort[Any, Any]], None]:
        poll = make_poll(cap.time)

        def logic(output: OutputPort[Any, Any]) -> None:
            if not cap.valid:
                return
            actions = poll()
            moved = False
            for action in actions or ():
                if type(action) is Send:
                    if not cap.time <= action.time:
                        raise InputError(f"{name}: a batch at {action.time!r}, after moving on to {cap.time!r}")
                    if len(action.batch):
                        output._push(action.time, action.batch)
                        moved = True
                elif type(action) is Advance:
                    if action.time != cap.time:
                        cap.downgrade(action.time)
                        moved = True
                else:
                    cap.drop()
                    return
            if not moved and idle > 0:
                _time.sleep(idle)  # nothing arrived: poll again soon, without spinning a core
            info.activate()

        return logic

    return scope.source(constructor, name=name)

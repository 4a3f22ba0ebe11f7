"""The runtime record of one operator: its ports, its logic, what it is called."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.errors import ArityError

if TYPE_CHECKING:
    from pytimely.dataflow.capability import InputCapability
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.scope import Scope

__all__ = ["OperatorCore", "OperatorInfo"]


@dataclass(frozen=True, slots=True)
class OperatorInfo:
    """What an operator's constructor may want to know about where it runs.

    ``activate()`` schedules the operator again at the next step, for logic that
    has more to do without new input (a source sending a little at a time).
    """

    name: str
    index: int
    worker: int
    peers: int
    activate: Callable[[], None]


class OperatorCore:
    """One operator in a worker's dataflow: ports, logic, and bookkeeping for its schedule."""

    __slots__ = (
        "index",
        "initial_caps",
        "input_caps",
        "inputs",
        "logic",
        "name",
        "notify",
        "outputs",
        "scope",
        "time",
    )

    def __init__(self, index: int, name: str, scope: Scope[Any]) -> None:
        self.index = index
        self.name = name
        self.scope = scope
        self.inputs: list[InputPort[Any, Any]] = []
        self.outputs: list[OutputPort[Any, Any]] = []
        self.logic: Callable[[], None] | None = None
        self.notify = False
        """Schedule the operator when an input frontier changes, not only when data arrives."""
        self.initial_caps = False
        """Whether every worker's copy starts holding a capability at the scope's minimum on each output."""
        self.input_caps: list[InputCapability[Any]] = []
        self.time: Any = None
        """The time of the message being handled, for error reports."""

    def output_port(self, port: int) -> OutputPort[Any, Any]:
        """Output port ``port``, or :class:`ArityError` naming the operator."""
        if type(port) is not int or not 0 <= port < len(self.outputs):
            raise ArityError(f"{self.name} has no output {port!r} (it has {len(self.outputs)})")
        return self.outputs[port]

    def __repr__(self) -> str:
        return f"<operator {self.index} {self.name!r}>"

"""The runtime record of one operator: its ports, its logic, what it is called."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pytimely.errors import ArityError, SummaryViolationError

if TYPE_CHECKING:
    from pytimely.dataflow.activate import SyncActivator
    from pytimely.dataflow.capability import InputCapability
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.state import Declared

__all__ = ["OperatorCore", "OperatorInfo"]


@dataclass(frozen=True, slots=True)
class OperatorInfo:
    """What an operator's constructor may want to know about where it runs.

    ``activate()`` schedules the operator again at the next step, for logic that
    has more to do without new input (a source sending a little at a time).
    ``may_change(time)`` says whether declared state (:mod:`pytimely.dataflow.state`) may change at ``time``
    now: an operator that changes it when a frontier moves (a window closing, a bin shipped) waits while it is
    false; it is scheduled again when it may. ``declare_state(name, state, layout)`` declares the operator's
    state from its constructor.
    """

    name: str
    index: int
    worker: int
    peers: int
    activate: Callable[[], None]
    make_sync_activator: Callable[[], SyncActivator] | None = None
    may_change: Callable[[Any], bool] = lambda _time: True
    declare_state: Callable[[str, Any, str], None] | None = None

    def declare(self, name: str, state: Any, layout: str = "1") -> None:
        """Declare ``state`` as this operator's state ``name`` (:func:`pytimely.dataflow.state.declare`)."""
        if self.declare_state is None:
            raise ArityError(f"{self.name}: this operator info was made without an operator to declare state on")
        self.declare_state(name, state, layout)

    def sync_activator(self) -> SyncActivator:
        """An activator another thread may call to schedule this operator (see :mod:`.activate`)."""
        if self.make_sync_activator is None:
            raise ArityError(f"{self.name}: this operator info was made without a dataflow to wake")
        return self.make_sync_activator()


class OperatorCore:
    """One operator in a worker's dataflow: ports, logic, and bookkeeping for its schedule."""

    __slots__ = (
        "index",
        "initial_caps",
        "input_caps",
        "inputs",
        "internal",
        "logic",
        "name",
        "notify",
        "outputs",
        "scope",
        "states",
        "time",
        "undeclared_state",
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
        self.internal: dict[tuple[int, int], list[Any]] | None = None
        """Declared internal path summaries per ``(input, output)``; ``None``: the identity for every pair."""
        self.undeclared_state: str | None = None
        """What state the operator keeps across timestamps that a snapshot would not hold (``None``: none)."""
        self.states: list[Declared] = []
        """The state it declared (:mod:`pytimely.dataflow.state`): the runtime snapshots and restores it."""

    def check_summary(self, port: int, output: int, time: Any, later: Any) -> None:
        """:class:`SummaryViolationError` unless a message at ``time`` on input ``port`` may lead to ``later``
        on ``output`` under the operator's declared internal summaries."""
        internal = self.internal
        if internal is None:
            return
        summaries = internal.get((port, output))
        if not summaries:
            raise SummaryViolationError(
                f"operator {self.name!r} declared no path from input {port} to output {output}, so a message at "
                f"{time!r} on that input cannot give a capability on that output"
            )
        for summary in summaries:
            reached = summary.results_in(time)
            if reached is not None and reached <= later:
                return
        raise SummaryViolationError(
            f"operator {self.name!r} declared the summaries {summaries!r} from input {port} to output {output}: a "
            f"message at {time!r} may only lead to times at or after "
            f"{[s.results_in(time) for s in summaries]!r}, not {later!r}"
        )

    def output_port(self, port: int) -> OutputPort[Any, Any]:
        """Output port ``port``, or :class:`ArityError` naming the operator."""
        if type(port) is not int or not 0 <= port < len(self.outputs):
            raise ArityError(f"{self.name} has no output {port!r} (it has {len(self.outputs)})")
        return self.outputs[port]

    def __repr__(self) -> str:
        return f"<operator {self.index} {self.name!r}>"

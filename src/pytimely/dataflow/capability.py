"""Capabilities: the right to send data at a timestamp, and the pointstamps they stand for.

An operator may send on an output only at a time it holds a capability for.
Holding a :class:`Capability` is a pointstamp at the operator's output port:
creating one counts ``+1``, dropping it ``-1``, and downgrading it moves the
count to the later time. Every change is recorded with the worker's progress
and broadcast at the end of the step, together with the messages sent under it.

A received message comes with an :class:`InputCapability`: valid while the
operator handles that message, it lets the operator send at the message's time
right away, or :meth:`~InputCapability.retain` a capability to send later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.errors import CapabilityError, InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.operator import OperatorCore
    from pytimely.dataflow.ports import OutputPort

__all__ = ["Capability", "InputCapability"]

T = TypeVar("T")


def same_kind(old: Any, time: Any, where: str) -> Any:
    """``time``, refused with :class:`InvalidArgument` where ``old`` is an int and ``time`` is not a whole number
    (a float time in an integer scope); a numpy integer becomes an int."""
    if type(time) is type(old) or type(old) is not int:
        return time
    import numbers

    if not isinstance(time, bool) and isinstance(time, numbers.Integral):
        return int(time)
    raise InvalidArgument(
        f"{where}: times of this scope are ints; {time!r} is a {type(time).__name__} (round it, or give the event "
        "time to a window or clock as time= and keep timestamps whole)"
    )


class Capability(Generic[T]):
    """The right to send at ``time`` (and later) on one output port of one operator."""

    __slots__ = ("_output", "_time", "_valid")

    def __init__(self, time: T, output: OutputPort[T, Any], *, counted: bool = False) -> None:
        self._time = time
        self._output = output
        self._valid: bool | None = True
        if counted:
            output.initial.append(self)
        else:
            output._record(output.source, time, 1)

    @property
    def time(self) -> T:
        """The earliest time this capability allows sending at."""
        if not self._valid:
            raise CapabilityError(f"{self._describe()} was dropped; its time is no longer held")
        return self._time

    @property
    def output(self) -> int:
        """The index of the output port this capability is for."""
        return self._output.port

    @property
    def valid(self) -> bool:
        """Whether the capability is still held (not dropped)."""
        return bool(self._valid)

    def _describe(self) -> str:
        return f"capability at {self._time!r} for output {self._output.port} of {self._output.operator_name}"

    def _check(self) -> None:
        if not self._valid:
            raise CapabilityError(f"{self._describe()} was already dropped and cannot be used")

    def delayed(self, time: T, output: int | None = None) -> Capability[T]:
        """A new capability at ``time`` (not earlier than this one's), optionally for another output."""
        self._check()
        time = same_kind(self._time, time, self._output.operator_name)
        if not self._time <= time:  # type: ignore[operator]
            raise CapabilityError(
                f"{self._describe()} cannot be delayed to {time!r}, which is not later than {self._time!r}"
            )
        target = self._output if output is None else self._output.sibling(output)
        return Capability(time, target)

    def downgrade(self, time: T) -> None:
        """Move this capability forward to ``time``; moving it backwards raises :class:`CapabilityError`."""
        self._check()
        old = self._time
        time = same_kind(old, time, self._output.operator_name)
        if not old <= time:  # type: ignore[operator]
            raise CapabilityError(f"{self._describe()} cannot be downgraded backwards (or sideways) to {time!r}")
        if old == time:
            return
        record = self._output._record
        source = self._output.source
        record(source, time, 1)
        record(source, old, -1)
        self._time = time

    def drop(self) -> None:
        """Give the capability up; the time it held may now pass downstream."""
        if self._valid is None:
            return  # never granted: a worker that joined after every copy of it was dropped
        self._check()
        self._valid = False
        self._output._record(self._output.source, self._time, -1)

    def _retime(self, time: T | None) -> None:
        """At a joining worker's bootstrap: the capability is the one minted for it at ``time``, or none at all."""
        if time is None:
            self._valid = None
        else:
            self._time = time

    def __repr__(self) -> str:
        state = "" if self._valid else ", dropped"
        return f"Capability({self._time!r}, output={self._output.port}{state})"


class InputCapability(Generic[T]):
    """The time of a message being handled; valid only while the operator handles it."""

    __slots__ = ("_op", "_port", "_time", "_valid")

    def __init__(self, time: T, op: OperatorCore, port: int = 0) -> None:
        self._time = time
        self._op = op
        self._port = port
        self._valid = True

    @property
    def time(self) -> T:
        """The message's timestamp."""
        return self._time

    def _check(self) -> None:
        if not self._valid:
            raise CapabilityError(
                f"the input capability at {self._time!r} of {self._op.name} is only valid while its message is "
                "handled; retain() a Capability to send later"
            )

    @property
    def port(self) -> int:
        """The input port the message arrived on."""
        return self._port

    def retain(self, output: int = 0) -> Capability[T]:
        """A capability at the message's time for output ``output``, held until dropped.

        Under a declared internal summary that advances times (see ``OperatorBuilder``) the message's own
        time may be out of reach: :class:`~pytimely.errors.SummaryViolationError`; use :meth:`delayed`.
        """
        self._check()
        port = self._op.output_port(output)
        self._op.check_summary(self._port, output, self._time, self._time)
        return Capability(self._time, port)

    def delayed(self, time: T, output: int = 0) -> Capability[T]:
        """A capability at ``time`` (not earlier than the message's) for output ``output``.

        ``time`` must be reachable from the message's time by a declared internal summary from the
        message's input to ``output``, else :class:`~pytimely.errors.SummaryViolationError`.
        """
        self._check()
        time = same_kind(self._time, time, self._op.name)
        if not self._time <= time:  # type: ignore[operator]
            raise CapabilityError(
                f"{self._op.name} cannot hold a capability at {time!r} from a message at {self._time!r}"
            )
        port = self._op.output_port(output)
        self._op.check_summary(self._port, output, self._time, time)
        return Capability(time, port)

    def __repr__(self) -> str:
        return f"InputCapability({self._time!r})"


class EarliestEmission(Generic[T]):
    """One capability held at the earliest time an operator still owes output at (a window's end, a session's
    deadline): lowered when something is owed earlier, raised or given up as what is owed is sent."""

    __slots__ = ("capability",)

    def __init__(self) -> None:
        self.capability: Capability[T] | None = None

    def hold(self, cap: InputCapability[T], time: T) -> None:
        """Owe output at ``time`` too: hold a capability there unless one is held at or before it."""
        held = self.capability
        if held is None or time < held.time:  # type: ignore[operator]
            self.capability = cap.delayed(time)
            if held is not None:
                held.drop()

    def give(self, output: OutputPort[T, Any], time: T, batch: Any) -> None:
        """Send ``batch`` at ``time``, no earlier than the held capability (moved there)."""
        held = self.capability
        if held is None:
            raise CapabilityError(f"{output.operator_name}: nothing owed at {time!r}, no capability held")
        held.downgrade(time)
        output.give(held, batch)

    def settle(self, earliest: T | None) -> None:
        """Move the held capability to ``earliest``, the earliest time output is still owed at, or give it up
        (``None``: nothing is owed)."""
        if self.capability is None:
            return
        if earliest is None:
            self.capability.drop()
            self.capability = None
        elif self.capability.time < earliest:  # type: ignore[operator]
            self.capability.downgrade(earliest)

    def resume(self, start: Capability[T], earliest: T | None) -> None:
        """Before the first step of a restored copy: hold ``start`` at ``earliest``, or drop it if nothing is owed."""
        self.capability = start
        self.settle(earliest)

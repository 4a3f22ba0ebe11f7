"""Operator ports: where channels end (inputs) and start (outputs); ``OutputPort.session`` buffers records.

Messages are ``(time, batch)`` pairs: a batch is a list of records, a numpy
array or an Arrow record batch. Every message is a pointstamp at the input port
it is bound for: the sender counts ``+1`` when it pushes, the receiver ``-1``
when it takes it, both in their worker's progress for the step.

An output sends each batch to the pusher of every channel connected to it; the
edge's contract made that pusher (:mod:`pytimely.dataflow.channels`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.dataflow.capability import Capability, InputCapability
from pytimely.dataflow.channels.pushers.buffer import Session
from pytimely.errors import CapabilityError
from pytimely.progress.frontier import MutableAntichain
from pytimely.progress.location import Source, Target

if TYPE_CHECKING:
    from pytimely.dataflow.channels.pushers import Pusher
    from pytimely.dataflow.operator import OperatorCore
    from pytimely.observe.eventlog import EventLogger

__all__ = ["InputPort", "OutputPort", "Session"]

T = TypeVar("T")
D = TypeVar("D")

Record = Callable[[Any, Any, int], None]
"""How a port counts a message in its worker's progress: ``record(location, time, diff)``."""


class InputPort(Generic[T, D]):
    """An operator's input: queued messages and the frontier of what may still arrive."""

    __slots__ = ("_activate", "_location", "_log", "_op", "_queue", "_record", "frontier", "port")

    def __init__(self, op: OperatorCore, port: int, record: Record, activate: Callable[[int], None]) -> None:
        self._op = op
        self.port = port
        self._location = Target(op.index, port)
        self._queue: deque[tuple[T, D]] = deque()
        self._record = record
        self._activate = activate
        self._log: EventLogger | None = None
        self.frontier: MutableAntichain[T] = MutableAntichain()
        """Times that may still arrive here (minimal elements); read-only, kept current by the worker."""

    @property
    def location(self) -> Target:
        """This port as a progress location."""
        return self._location

    @property
    def operator_name(self) -> str:
        """The name of the operator this port belongs to."""
        return self._op.name

    def _deliver(self, message: tuple[T, D]) -> None:
        self._queue.append(message)
        self._activate(self._op.index)

    def __iter__(self) -> Iterator[tuple[InputCapability[T], D]]:
        """Take each queued message as ``(input capability, batch)``."""
        queue = self._queue
        record = self._record
        location = self._location
        op = self._op
        caps = op.input_caps
        log = self._log
        while queue:
            time, batch = queue.popleft()
            record(location, time, -1)
            op.time = time
            if log is not None:
                log.messages(op.index, self.port, "received", time, batch)
            cap = InputCapability(time, op, self.port)
            caps.append(cap)
            yield cap, batch

    def batches(self) -> Iterator[tuple[T, D]]:
        """Take each queued message as ``(time, batch)`` (for operators that send at the same time)."""
        queue = self._queue
        record = self._record
        location = self._location
        op = self._op
        log = self._log
        while queue:
            time, batch = queue.popleft()
            record(location, time, -1)
            op.time = time
            if log is not None:
                log.messages(op.index, self.port, "received", time, batch)
            yield time, batch

    def pending(self) -> int:
        """How many messages are queued."""
        return len(self._queue)


class OutputPort(Generic[T, D]):
    """An operator's output: sends batches to every channel connected to it."""

    __slots__ = ("_channels", "_log", "_op", "_record", "initial", "port", "source")

    def __init__(self, op: OperatorCore, port: int, record: Record) -> None:
        self._op = op
        self.port = port
        self.source = Source(op.index, port)
        self._record = record
        self._channels: list[Pusher] = []
        self._log: EventLogger | None = None
        self.initial: list[Capability[T]] = []
        """The capabilities this worker's copy started with (a joining worker re-times them at its bootstrap)."""

    @property
    def operator_name(self) -> str:
        """The name of the operator this port belongs to."""
        return self._op.name

    def sibling(self, port: int) -> OutputPort[T, Any]:
        """Another output port of the same operator."""
        return self._op.output_port(port)

    def _connect(self, channel: Pusher) -> None:
        channel.sender = self._op.name
        self._channels.append(channel)

    def _push(self, time: T, batch: D) -> None:
        for channel in self._channels:
            channel.push(time, batch)
        if self._log is not None:
            self._log.messages(self._op.index, self.port, "sent", time, batch, len(self._channels))

    def _check(self, cap: Capability[T] | InputCapability[T]) -> T:
        if type(cap) is InputCapability:
            cap._check()
            if cap._op is not self._op:
                raise CapabilityError(f"{self._op.name} cannot send with an input capability of {cap._op.name}")
            if self._op.internal is not None:
                self._op.check_summary(cap._port, self.port, cap._time, cap._time)
            return cap._time
        if type(cap) is Capability:
            cap._check()
            if cap._output is not self:
                raise CapabilityError(
                    f"a capability for output {cap._output.port} of {cap._output.operator_name} cannot send on "
                    f"output {self.port} of {self._op.name}"
                )
            return cap._time
        raise CapabilityError(f"{self._op.name}: sending needs a Capability or InputCapability, got {cap!r}")

    def give(self, cap: Capability[T] | InputCapability[T], batch: D) -> None:
        """Send ``batch`` at ``cap``'s time; an empty batch sends nothing."""
        time = self._check(cap)
        if len(batch):  # type: ignore[arg-type]
            self._push(time, batch)

    def session(self, cap: Capability[T] | InputCapability[T], size: int = 4096) -> Session[T]:
        """A buffer for sending records one by one at ``cap``'s time (use it in a ``with`` block)."""
        self._check(cap)
        return Session(self, cap, size)

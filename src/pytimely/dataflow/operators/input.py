"""Getting data in: input handles driven by the worker's own code, and streams read from iterables."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.dataflow.capability import Capability
from pytimely.errors import InputError, InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.ports import OutputPort
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["InputHandle", "new_input", "to_stream"]

T = TypeVar("T")
D = TypeVar("D")


class InputHandle(Generic[T, D]):
    """Feeds records into a dataflow at a current time that only moves forward.

    ``send`` buffers records at :attr:`time`; ``advance_to`` promises nothing
    earlier will follow, which lets frontiers downstream pass; ``close`` promises
    nothing more at all. Handles still open when the worker's function returns
    are closed for it.
    """

    def __init__(self, output: OutputPort[T, D], capability: Capability[T], name: str, batch_size: int = 4096) -> None:
        self._output = output
        self._cap: Capability[T] | None = capability
        self._time = capability.time
        self._name = name
        self._buffer: list[Any] = []
        self._batch_size = batch_size

    @property
    def time(self) -> T:
        """The time new records are sent at."""
        return self._time

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._cap is None

    def _open(self) -> Capability[T]:
        if self._cap is None:
            raise InputError(f"input {self._name!r} is closed; nothing more can be sent or advanced")
        return self._cap

    def send(self, record: D) -> None:
        """Send one record at the current time."""
        self._open()
        self._buffer.append(record)
        if len(self._buffer) >= self._batch_size:
            self.flush()

    def send_batch(self, batch: Any) -> None:
        """Send a whole batch (list, numpy array, Arrow batch) at the current time."""
        self._open()
        self.flush()
        if len(batch):
            self._output._push(self._time, batch)

    def flush(self) -> bool:
        """Push buffered records into the dataflow now; return whether there were any."""
        if not self._buffer:
            return False
        batch, self._buffer = self._buffer, []
        self._output._push(self._time, batch)  # type: ignore[arg-type]
        return True

    def advance_to(self, time: T) -> None:
        """Move the current time forward to ``time``; earlier (or incomparable) times raise :class:`InputError`."""
        cap = self._open()
        if not self._time <= time:  # type: ignore[operator]
            raise InputError(
                f"input {self._name!r} cannot advance from {self._time!r} to {time!r}: input times only move forward"
            )
        self.flush()
        cap.downgrade(time)
        self._time = time

    def close(self) -> None:
        """Send what is buffered and give up the input's capability (closing twice is harmless)."""
        if self._cap is None:
            return
        self.flush()
        self._cap.drop()
        self._cap = None

    def _rejoined(self) -> None:
        """After a joining worker's bootstrap: follow the capability minted for this copy, or start closed."""
        cap = self._cap
        if cap is not None:
            if cap.valid:
                self._time = cap.time
            else:
                self._cap = None

    def __repr__(self) -> str:
        return f"InputHandle({self._name!r}, time={self._time!r}{', closed' if self.closed else ''})"


def new_input(scope: Scope[T], name: str) -> tuple[InputHandle[T, Any], Stream[Any]]:
    """Create an input operator in ``scope``; see :meth:`Scope.new_input`."""
    op = scope._operator(name, [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    handle: InputHandle[T, Any] = InputHandle(output, Capability(scope.minimum, output, counted=True), name)
    scope.subgraph.on_step(handle.flush)
    scope.subgraph.inputs.append(handle)
    return handle, scope.stream(output)


def to_stream(scope: Scope[T], iterable: Iterable[D], *, batch_size: int, name: str) -> Stream[D]:
    """A source reading ``iterable`` a few batches per step; see :meth:`Scope.to_stream`."""
    if type(batch_size) is not int or batch_size < 1:
        raise InvalidArgument(f"{name}: batch_size must be a positive int, got {batch_size!r}")
    op = scope._operator(name, [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    cap = Capability(scope.minimum, output, counted=True)
    iterator = iter(iterable)
    subgraph = scope.subgraph
    index = op.index
    time = scope.minimum
    batches_per_step = max(1, 65536 // batch_size)

    def logic() -> None:
        if not cap.valid:
            return
        for _ in range(batches_per_step):
            batch = list(itertools.islice(iterator, batch_size))
            if batch:
                output._push(time, batch)
            if len(batch) < batch_size:
                cap.drop()
                return
        subgraph._active.add(index)

    op.logic = logic
    return scope.stream(output)

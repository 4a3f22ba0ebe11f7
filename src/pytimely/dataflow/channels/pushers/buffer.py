"""The buffer of an output: records given one at a time, sent as batches (timely's ``pushers/buffer.rs``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from pytimely.dataflow.capability import Capability, InputCapability
    from pytimely.dataflow.ports import OutputPort

__all__ = ["Session"]

T = TypeVar("T")


class Session(Generic[T]):
    """Buffers records given one at a time and sends them as batches."""

    __slots__ = ("_buffer", "_cap", "_output", "_size")

    def __init__(self, output: OutputPort[T, Any], cap: Capability[T] | InputCapability[T], size: int) -> None:
        self._output = output
        self._cap = cap
        self._size = size
        self._buffer: list[Any] = []

    def give(self, record: Any) -> None:
        """Send one record (buffered)."""
        self._buffer.append(record)
        if len(self._buffer) >= self._size:
            self.flush()

    def give_iterable(self, records: Any) -> None:
        """Send every record of an iterable (buffered)."""
        self._buffer.extend(records)
        if len(self._buffer) >= self._size:
            self.flush()

    def flush(self) -> None:
        """Send what is buffered; the capability must still be valid (a kept session cannot outlive it)."""
        if self._buffer:
            time = self._output._check(self._cap)
            self._output._push(time, self._buffer)
            self._buffer = []

    def __enter__(self) -> Session[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()

"""Getting data in: input handles driven by the worker's own code, and streams read from iterables."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import pytimely.container as container
from pytimely.container.kind import BatchKind
from pytimely.dataflow.capability import Capability, same_kind
from pytimely.errors import BatchError, BatchKindError, DroppedDataflowError, InputError, InvalidArgument

if TYPE_CHECKING:
    from pytimely.dataflow.activate import SyncActivator
    from pytimely.dataflow.ports import OutputPort, Session
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = [
    "InputHandle",
    "SyncInputHandle",
    "UnorderedHandle",
    "new_input",
    "new_sync_input",
    "new_unordered_input",
    "to_stream",
]

T = TypeVar("T")
D = TypeVar("D")


class InputHandle(Generic[T, D]):
    """Feeds records into a dataflow at a current time that only moves forward.

    ``send`` buffers records at :attr:`time`; ``advance_to`` promises nothing
    earlier will follow, which lets frontiers downstream pass; ``close`` promises
    nothing more at all. Handles still open when the worker's function returns
    are closed for it.
    """

    def __init__(
        self,
        output: OutputPort[T, D],
        capability: Capability[T],
        name: str,
        batch_size: int = 4096,
        schema: Any = None,
    ) -> None:
        self._output = output
        self._cap: Capability[T] | None = capability
        self._time = capability.time
        self._name = name
        self._buffer: list[Any] = []
        self._batch_size = batch_size
        self._dropped_from: str | None = None
        self._columns = _columns_for(schema, name)
        """The kind records become and its schema or dtype, when sent as columns (``new_input(schema=)``)."""

    @property
    def time(self) -> T:
        """The time new records are sent at."""
        return self._time

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._cap is None

    def _open(self) -> Capability[T]:
        if self._dropped_from is not None:
            raise DroppedDataflowError(f"input {self._name!r} belongs to {self._dropped_from!r}, which was dropped")
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
        try:
            kind = container.kind_of(batch)
        except BatchKindError as exc:
            exc.name_operator(self._name, None, self._time)
            raise
        self.flush()
        if kind.length(batch):
            self._output._push(self._time, batch)

    def flush(self) -> bool:
        """Push buffered records into the dataflow now; return whether there were any."""
        if not self._buffer:
            return False
        batch, self._buffer = self._buffer, []
        if self._columns is not None:
            kind, like = self._columns
            try:
                batch = kind.from_records(batch, like)
            except BatchError as exc:
                exc.name_operator(self._name, None, self._time)
                raise
        self._output._push(self._time, batch)  # type: ignore[arg-type]
        return True

    def advance_to(self, time: T) -> None:
        """Move the current time forward to ``time``; earlier (or incomparable) times raise :class:`InputError`."""
        cap = self._open()
        time = same_kind(self._time, time, f"input {self._name!r}")
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

    def _dropped(self, dataflow: str) -> None:
        """The dataflow was dropped: nothing may be sent any more (and nothing buffered is kept)."""
        self._dropped_from = dataflow
        self._buffer = []
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


def _source(scope: Scope[T], name: str) -> tuple[Any, Any, Capability[T]]:
    """An operator with no inputs and one output, and the capability at the scope's minimum it starts with."""
    op = scope.add_operator(name, [], 1)
    op.initial_caps = True
    output = op.outputs[0]
    return op, output, Capability(scope.minimum, output, counted=True)


def _columns_for(schema: Any, name: str) -> tuple[BatchKind, Any] | None:
    """The batch kind and schema records sent one by one are gathered into (None: lists)."""
    if schema is None:
        return None
    import numpy as np

    if type(schema).__module__.startswith("pyarrow"):
        import pyarrow as pa

        if isinstance(schema, pa.Schema):
            return container.kind_named("arrow"), schema
    else:
        try:
            return container.kind_named("numpy"), np.dtype(schema)
        except TypeError:
            pass
    raise InvalidArgument(f"input {name!r}: schema must be a pyarrow.Schema or a numpy dtype, got {schema!r}")


def new_input(scope: Scope[T], name: str, schema: Any = None) -> tuple[InputHandle[T, Any], Stream[Any]]:
    """Create an input operator in ``scope``; see :meth:`Scope.new_input`."""
    _, output, cap = _source(scope, name)
    handle: InputHandle[T, Any] = InputHandle(output, cap, name, schema=schema)
    scope.subgraph.on_step(handle.flush)
    scope.subgraph.inputs.append(handle)
    return handle, scope.stream(output)


def to_stream(scope: Scope[T], iterable: Iterable[D], *, batch_size: int, name: str) -> Stream[D]:
    """A source reading ``iterable`` a few batches per step; see :meth:`Scope.to_stream`."""
    if type(batch_size) is not int or batch_size < 1:
        raise InvalidArgument(f"{name}: batch_size must be a positive int, got {batch_size!r}")
    op, output, cap = _source(scope, name)
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


class UnorderedHandle(Generic[T, D]):
    """An input whose records may be sent at any time it holds a capability for (timely's unordered input).

    :attr:`capability` starts at the scope's minimum; ``capability.delayed(t)`` gives capabilities for later
    times, and each may be downgraded or dropped on its own, so several times stay open at once. The input is
    finished when every capability is dropped. Use it on the worker's thread; another thread feeds a dataflow
    through :meth:`Scope.new_sync_input`.
    """

    def __init__(self, output: OutputPort[T, D], capability: Capability[T], name: str) -> None:
        self._output = output
        self.capability = capability
        """The first capability, at the scope's minimum (drop it once it is of no more use)."""
        self._name = name

    def give(self, cap: Capability[T], batch: Any) -> None:
        """Send ``batch`` (list, numpy array, Arrow batch) at ``cap``'s time."""
        self._output.give(cap, batch)

    def session(self, cap: Capability[T], size: int = 4096) -> Session[T]:
        """A buffer for sending records one by one at ``cap``'s time (use it in a ``with`` block)."""
        return self._output.session(cap, size)

    def __repr__(self) -> str:
        return f"UnorderedHandle({self._name!r})"


def new_unordered_input(scope: Scope[T], name: str) -> tuple[UnorderedHandle[T, Any], Stream[Any]]:
    """Create an unordered input in ``scope``; see :meth:`Scope.new_unordered_input`."""
    _, output, cap = _source(scope, name)
    handle: UnorderedHandle[T, Any] = UnorderedHandle(output, cap, name)
    return handle, scope.stream(output)


_CLOSE = object()


class SyncInputHandle(Generic[T, D]):
    """An input another thread feeds: ``send(time, records)`` at any time not before :attr:`time`.

    Calls are safe from any thread: records queue up and an activator
    (:class:`~pytimely.dataflow.activate.SyncActivator`) wakes the input's operator, which sends them on the
    worker's thread. ``advance_to`` promises nothing earlier will follow; ``close`` promises nothing more. Until
    it is closed the worker does not take its idle steps for a stall: close it when the feeding thread is done.
    """

    def __init__(self, name: str, minimum: T) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._time = minimum
        self._closed = False
        self._queue: deque[Any] = deque()
        self._activator: SyncActivator | None = None

    @property
    def time(self) -> T:
        """The earliest time records may still be sent at."""
        return self._time

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _started(self, activator: SyncActivator) -> None:
        self._activator = activator

    def _wake(self) -> None:
        activator = self._activator
        if activator is None:
            raise InputError(f"input {self._name!r} is fed once its dataflow is built (after the build function)")
        activator.activate()

    def send(self, time: T, records: Any) -> None:
        """Send ``records`` (a list, numpy array or Arrow batch) at ``time``, which must not be before :attr:`time`."""
        time = same_kind(self._time, time, f"input {self._name!r}")
        with self._lock:
            if self._closed:
                raise InputError(f"input {self._name!r} is closed; nothing more can be sent")
            if not self._time <= time:  # type: ignore[operator]
                raise InputError(f"input {self._name!r} cannot send at {time!r}: it was advanced to {self._time!r}")
            self._queue.append((time, records))
        self._wake()

    def advance_to(self, time: T) -> None:
        """Promise that nothing earlier than ``time`` will be sent."""
        time = same_kind(self._time, time, f"input {self._name!r}")
        with self._lock:
            if self._closed:
                raise InputError(f"input {self._name!r} is closed; it cannot advance")
            if not self._time <= time:  # type: ignore[operator]
                raise InputError(
                    f"input {self._name!r} cannot advance from {self._time!r} to {time!r}: times only move forward"
                )
            self._time = time
            self._queue.append(time)
        self._wake()

    def close(self) -> None:
        """Send nothing more (closing twice is harmless)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.append(_CLOSE)
        activator = self._activator
        if activator is not None:
            activator.close()

    def _rejoined(self, cap: Capability[T]) -> None:
        """After a joining worker's bootstrap: start at the capability minted for this copy, or closed."""
        with self._lock:
            if cap.valid:
                self._time = cap.time
            else:
                self._closed = True
        if not cap.valid and self._activator is not None:
            self._activator.close()

    def _drain(self) -> list[Any]:
        out = []
        queue = self._queue
        while queue:
            out.append(queue.popleft())
        return out

    def __repr__(self) -> str:
        return f"SyncInputHandle({self._name!r}, time={self._time!r}{', closed' if self._closed else ''})"


def new_sync_input(scope: Scope[T], name: str) -> tuple[SyncInputHandle[T, Any], Stream[Any]]:
    """Create an input another thread feeds; see :meth:`Scope.new_sync_input`."""
    op, output, cap = _source(scope, name)
    handle: SyncInputHandle[T, Any] = SyncInputHandle(name, scope.minimum)
    handle._started(scope._info(op).sync_activator())
    scope.subgraph.on_rejoin(lambda: handle._rejoined(cap))

    def logic() -> None:
        for item in handle._drain():
            if not cap.valid:
                return
            if item is _CLOSE:
                cap.drop()
            elif type(item) is tuple:
                time, batch = item
                if len(batch):
                    output._push(time, batch)
            else:
                cap.downgrade(item)

    op.logic = logic
    return handle, scope.stream(output)

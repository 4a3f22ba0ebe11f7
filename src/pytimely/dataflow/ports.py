"""Operator ports and the channels between them.

Messages are ``(time, batch)`` pairs: a batch is a list of records, a numpy
array or an Arrow record batch. Every message is a pointstamp at the input port
it is bound for: the sender counts ``+1`` when it pushes, the receiver ``-1``
when it takes it, both in their worker's progress for the step.

Channels follow the *parallelisation contract* of the edge: a pipeline keeps
data on the worker that produced it; an exchange routes each record to worker
``route(record) % peers``; a broadcast copies every batch to every worker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn, TypeVar

import pytimely.container as container
from pytimely.communication.allocator import Members
from pytimely.communication.payload import dumps, loads
from pytimely.dataflow.capability import Capability, InputCapability
from pytimely.errors import (
    ArityError,
    CapabilityError,
    OperatorError,
    PytimelyError,
    RouteError,
    UnpicklableRecordError,
)
from pytimely.progress.frontier import MutableAntichain
from pytimely.progress.location import Source, Target

if TYPE_CHECKING:
    from pytimely.communication.allocator import Push
    from pytimely.dataflow.operator import OperatorCore
    from pytimely.observe.eventlog import EventLogger

__all__ = ["InputPort", "OutputPort", "Session"]

T = TypeVar("T")
D = TypeVar("D")

Record = Callable[[Any, Any, int], None]


def _unpicklable(
    kind: str, sender: str | None, target: InputPort[Any, Any], time: Any, batch: Any, exc: BaseException
) -> UnpicklableRecordError:
    """The error for a batch an exchange could not serialise: names the channel, both operators and a record."""
    receiver = target._op.name
    dataflow = target._op.scope.subgraph.name
    channel = f"{kind} from {sender!r} to {receiver!r} in dataflow {dataflow!r}"
    culprit = ""
    if type(batch) is list:
        for record in batch:
            try:
                dumps(record)
            except Exception:
                text = repr(record)
                culprit = f" (the record {text[:80] + '...' if len(text) > 80 else text})"
                break
    return UnpicklableRecordError(
        f"operator {sender!r} sent a record at time {time!r} that cannot be pickled through the {channel}, so it "
        f"cannot reach another process{culprit}: {type(exc).__name__}: {exc}",
        channel=channel,
        sender=sender,
        receiver=receiver,
    )


def _push_failed(
    kind: str, sender: str | None, target: InputPort[Any, Any], time: Any, batch: Any, exc: Exception
) -> NoReturn:
    """Raise what a push to another process raised: named, when the message cannot be pickled; else as it is."""
    try:
        dumps((time, batch))
    except Exception:
        raise _unpicklable(kind, sender, target, time, batch, exc) from exc
    raise exc


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


class _Pipeline:
    """Hands batches to a port on the same worker."""

    __slots__ = ("_location", "_record", "_target")

    def __init__(self, target: InputPort[Any, Any], record: Record) -> None:
        self._target = target
        self._location = target.location
        self._record = record

    def push(self, time: Any, batch: Any) -> None:
        self._record(self._location, time, 1)
        self._target._deliver((time, batch))


class _Exchange:
    """Routes each record to worker ``route(record) % peers``; this worker's share skips the mailbox."""

    __slots__ = ("_index", "_local", "_location", "_peers", "_pushes", "_record", "_route", "_vectorized", "sender")

    def __init__(
        self,
        target: InputPort[Any, Any],
        pushes: Sequence[Push[Any]],
        index: int,
        route: Callable[[Any], Any],
        vectorized: bool,
        record: Record,
    ) -> None:
        self._local = target
        self._location = target.location
        self._pushes = pushes
        self._index = index
        self._peers = len(pushes)
        self._route = route
        self._vectorized = vectorized
        self._record = record
        self.sender: str | None = None
        """The operator whose output feeds this channel (set when connected), for errors."""

    def push(self, time: Any, batch: Any) -> None:
        peers = self._peers
        record = self._record
        location = self._location
        parts: Sequence[Any]
        if self._vectorized:
            import numpy as np

            try:
                keys = np.asarray(self._route(batch))
                # For integer keys and a power-of-two peer count, two's complement makes ``& (peers - 1)``
                # the floor modulo, at a fraction of its cost.
                power_of_two = keys.dtype.kind in "iu" and peers & (peers - 1) == 0
                keys = keys & (peers - 1) if power_of_two else keys % peers
            except Exception as exc:
                raise self._failed(time, exc) from exc
            if keys.shape != (len(batch),):
                raise ArityError(
                    f"exchange into {self._local._op.name!r}: a vectorized route must give one key per row "
                    f"({len(batch)} rows), got shape {keys.shape}"
                )
            if len(keys) and bool((keys == keys[0]).all()):
                # Every row has the same owner: send the batch itself rather than a copy of it.
                owner = int(keys[0])
                parts = [batch if j == owner else () for j in range(peers)]
            else:
                parts = container.split(batch, keys, peers)
        elif type(batch) is list:
            buckets: list[list[Any]] = [[] for _ in range(peers)]
            appends = [b.append for b in buckets]
            route = self._route
            r: Any = None
            try:
                for r in batch:
                    appends[route(r) % peers](r)
            except Exception as exc:
                raise self._failed(time, exc, r) from exc
            parts = buckets
        else:
            # A columnar batch routed record by record: its rows go out in its own kind.
            import numpy as np

            records = container.records(batch)
            route = self._route
            dests = np.empty(len(records), dtype=np.int64)
            r = None
            try:
                for i, r in enumerate(records):
                    dests[i] = route(r) % peers
            except Exception as exc:
                raise self._failed(time, exc, r) from exc
            parts = container.split(batch, dests, peers)
        index = self._index
        for j, part in enumerate(parts):
            if len(part):
                record(location, time, 1)
                if j == index:
                    self._local._deliver((time, part))
                else:
                    try:
                        self._pushes[j].push((time, part))
                    except PytimelyError:
                        raise
                    except Exception as exc:  # the communication layer pickles: its error names no operator
                        _push_failed("exchange", self.sender, self._local, time, part, exc)

    def _failed(self, time: Any, exc: Exception, record: Any = None) -> Exception:
        """The error for a route that raised or gave no int: it names the operator the route belongs to."""
        name = self._local._op.name
        if isinstance(exc, TypeError) and not self._vectorized:
            try:
                key = self._route(record)
            except Exception:
                key = None
            else:
                if not isinstance(key, int):
                    return RouteError(
                        f"exchange into {name!r}: the route must give an int for every record, "
                        f"gave {key!r} for {record!r}"
                    )
        return OperatorError(
            f"operator {name!r} failed on worker {self._index} at time {time!r}: its route raised "
            f"{type(exc).__name__}: {exc}",
            operator=name,
            worker=self._index,
            time=time,
        )


class _Broadcast:
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
                _push_failed("broadcast", self.sender, self._local, time, batch, exc)
            return
        for j, push in enumerate(self._pushes):
            self._record(self._location, time, 1)
            if j == self._index:
                self._local._deliver((time, batch))
            else:
                try:
                    push.push((time, batch))
                except PytimelyError:
                    raise
                except Exception as exc:  # the communication layer pickles: its error names no operator
                    _push_failed("broadcast", self.sender, self._local, time, batch, exc)


class _Direct:
    """Sends each batch whole to the worker ``dest()`` names (a router that has split its batches already)."""

    __slots__ = ("_dest", "_index", "_local", "_location", "_pushes", "_record", "sender")

    def __init__(
        self,
        target: InputPort[Any, Any],
        pushes: Sequence[Push[Any]],
        index: int,
        dest: Callable[[], int],
        record: Record,
    ) -> None:
        self._local = target
        self._location = target.location
        self._pushes = pushes
        self._index = index
        self._dest = dest
        self._record = record
        self.sender: str | None = None
        """The operator whose output feeds this channel (set when connected), for errors."""

    def push(self, time: Any, batch: Any) -> None:
        if not len(batch):
            return
        j = self._dest()
        self._record(self._location, time, 1)
        if j == self._index:
            self._local._deliver((time, batch))
        else:
            try:
                self._pushes[j].push((time, batch))
            except PytimelyError:
                raise
            except Exception as exc:  # the communication layer pickles: its error names no operator
                _push_failed("exchange", self.sender, self._local, time, batch, exc)


class _Checked:
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
        self.sender = sender

    def push(self, time: Any, batch: Any) -> None:
        try:
            parts, _ = dumps((time, batch))
            _, copy = loads(b"".join(parts))
        except Exception as exc:
            raise _unpicklable(self._kind, self.sender, self._target, time, batch, exc) from exc
        self._inner.push(time, copy)


class OutputPort(Generic[T, D]):
    """An operator's output: sends batches to every channel connected to it."""

    __slots__ = ("_channels", "_log", "_op", "_record", "initial", "port", "source")

    def __init__(self, op: OperatorCore, port: int, record: Record) -> None:
        self._op = op
        self.port = port
        self.source = Source(op.index, port)
        self._record = record
        self._channels: list[Any] = []
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

    def _connect(self, channel: Any) -> None:
        if not isinstance(channel, _Pipeline):
            channel.sender = self._op.name
        self._channels.append(channel)

    def _check_serialization(self, kind: str, target: InputPort[Any, Any]) -> None:
        """Make the channel connected last (to ``target``, by an exchange pact) serialise what it carries."""
        self._channels[-1] = _Checked(self._channels[-1], kind, target, self._op.name)

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

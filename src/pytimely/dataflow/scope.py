"""Scopes: where streams live and what their timestamps look like.

A dataflow's root scope has the timestamps its inputs use (``int`` epochs by
default). :meth:`Scope.iterative` opens a nested scope whose timestamps are
``Product(outer, iteration)``; streams cross into it with ``enter`` and out of it
with ``leave``, and a :meth:`Scope.feedback` edge carries data back to the top of
the loop one iteration later.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from pytimely.dataflow.capability import Capability
from pytimely.dataflow.channels import Pact
from pytimely.dataflow.operator import OperatorCore, OperatorInfo
from pytimely.dataflow.operators import capture as _capture
from pytimely.dataflow.operators import core as _core
from pytimely.dataflow.operators import input as _input
from pytimely.dataflow.ports import OutputPort
from pytimely.dataflow.state import declare
from pytimely.dataflow.stream import Stream
from pytimely.errors import ArityError, InvalidArgument, ScopeError
from pytimely.order import Product
from pytimely.progress.timestamp import Increment, ProductSummary, identity_for

if TYPE_CHECKING:
    from pytimely.dataflow.operators.event_stream import EventReader
    from pytimely.dataflow.operators.input import InputHandle, SyncInputHandle, UnorderedHandle
    from pytimely.dataflow.subgraph import Subgraph

__all__ = ["LoopHandle", "Scope"]

T = TypeVar("T")
D = TypeVar("D")

SourceLogic = Callable[[OutputPort[Any, Any]], None]


def _check_record_type(name: str, kind: object) -> None:
    """:class:`InvalidArgument` unless ``kind`` is ``None``, a class or a parametrised generic (``tuple[str, int]``)."""
    if kind is None or isinstance(kind, type) or hasattr(kind, "__origin__"):
        return
    raise InvalidArgument(f"{name}: type= takes a type such as str or tuple[str, int], got {kind!r}")


class Scope(Generic[T]):
    """A region of a dataflow whose operators share one timestamp type."""

    def __init__(
        self,
        subgraph: Subgraph,
        minimum: T,
        parent: Scope[Any] | None = None,
        name: str = "root",
        summaries: dict[int, dict[tuple[int, int], Any]] | None = None,
        *,
        check_serialization: bool = False,
        region: bool = False,
    ) -> None:
        self.subgraph = subgraph
        self.is_region = region
        """Whether this is a region (:meth:`region`): a nested scope with its parent's timestamps."""
        self.minimum = minimum
        """The least timestamp of this scope."""
        self.parent = parent
        self.name = name
        self._summaries: dict[int, dict[tuple[int, int], Any]] = {} if summaries is None else summaries
        self.check_serialization: bool = check_serialization if parent is None else parent.check_serialization
        """Whether exchanges serialise their records even where they stay in this process (for tests)."""

    @property
    def index(self) -> int:
        """The index of the worker building this scope."""
        return self.subgraph.worker

    @property
    def peers(self) -> int:
        """How many workers run this dataflow."""
        return self.subgraph.peers

    @property
    def depth(self) -> int:
        """0 for a dataflow's root scope, one more per nested loop."""
        return 0 if self.parent is None else self.parent.depth + 1

    def __repr__(self) -> str:
        return f"<scope {self.name!r} of dataflow {self.subgraph.name!r}>"

    # -- for operator builders ------------------------------------------------------------

    def add_operator(
        self,
        name: str,
        inputs: Sequence[tuple[Stream[Any], Pact | None]],
        outputs: int,
        summary: dict[tuple[int, int], Any] | None = None,
    ) -> OperatorCore:
        """Add an operator to this scope, fed by ``inputs`` (each a stream and its pact), with ``outputs`` outputs.

        This is how operators are built: the operator's ports are connected (each pact connects its edge,
        ``None`` being a pipeline) and the caller gives it ``logic`` (a function of no arguments the worker
        runs when it is scheduled) and reads its outputs with :meth:`stream`. ``summary`` maps ``(input,
        output)`` to the path summary (or summaries) between them, when not the identity.
        """
        for stream, _ in inputs:
            self._check_owns(stream, name)
        op = self.subgraph.add_operator(name, self, len(inputs), outputs)
        for port, (stream, pact) in enumerate(inputs):
            self.subgraph.connect(stream._port, op.inputs[port], pact, check_serialization=self.check_serialization)
        if summary is not None:
            self._summaries[op.index] = summary
            op.internal = {
                pair: list(value) if isinstance(value, (list, tuple)) else [value] for pair, value in summary.items()
            }
        return op

    def stream(self, port: OutputPort[Any, Any]) -> Stream[Any]:
        """The stream of what ``port`` (an output of an operator of this scope) sends."""
        return Stream(self, port)

    def _check_owns(self, stream: Stream[Any], name: str) -> None:
        if not isinstance(stream, Stream):
            raise ScopeError(f"{name}: expected a Stream, got {type(stream).__name__}")
        if stream.scope is not self:
            where = "another dataflow" if stream.scope.subgraph is not self.subgraph else f"scope {stream.scope.name!r}"
            raise ScopeError(
                f"{name}: the stream lives in {where}, not in {self.name!r}; "
                "use enter()/leave() to cross scopes, and build each dataflow from its own streams"
            )

    def _info(self, op: Any) -> OperatorInfo:
        subgraph = self.subgraph
        index = op.index
        return OperatorInfo(
            op.name,
            index,
            subgraph.worker,
            subgraph.peers,
            lambda: subgraph._active.add(index),
            lambda: subgraph.sync_activator(index),
            lambda time: subgraph.may_change(index, time),
            lambda name, state, layout: declare(op, name, state, layout=layout),
        )

    # -- sources --------------------------------------------------------------------------

    @overload
    def new_input(
        self, name: str = ..., *, type: None = None, schema: Any = None
    ) -> tuple[InputHandle[T, Any], Stream[Any]]: ...

    @overload
    def new_input(
        self, name: str = ..., *, type: type[D], schema: Any = None
    ) -> tuple[InputHandle[T, D], Stream[D]]: ...

    def new_input(
        self, name: str = "input", *, type: type[D] | None = None, schema: Any = None
    ) -> tuple[InputHandle[T, Any], Stream[Any]]:
        """An input handle (``send``, ``advance_to``, ``close``) and the stream of what it sends.

        ``type`` (``str``, ``tuple[str, int]``, ...) types the handle and the stream for the type
        checker: ``new_input(type=str)`` gives ``InputHandle[T, str]`` and ``Stream[str]``. Records are not
        checked at run time. ``schema`` (a ``pyarrow.Schema`` or a numpy dtype) makes records sent one by one
        travel as columns: each batch the handle sends is an Arrow record batch of that schema (records are
        tuples in column order, or dicts) or a numpy array of that dtype (records are numbers or tuples of
        them), so exchanges move buffers instead of pickled Python objects; a record that does not fit is a
        :class:`~pytimely.errors.ColumnError` naming the input and the column.
        """
        _check_record_type(name, type)
        return _input.new_input(self, name, schema)

    @overload
    def new_unordered_input(
        self, name: str = ..., *, type: None = None
    ) -> tuple[UnorderedHandle[T, Any], Stream[Any]]: ...

    @overload
    def new_unordered_input(self, name: str = ..., *, type: type[D]) -> tuple[UnorderedHandle[T, D], Stream[D]]: ...

    def new_unordered_input(
        self, name: str = "unordered_input", *, type: type[D] | None = None
    ) -> tuple[UnorderedHandle[T, Any], Stream[Any]]:
        """An input sending at any time it holds a capability for (``handle.capability``, ``delayed``, ``give``)."""
        _check_record_type(name, type)
        return _input.new_unordered_input(self, name)

    @overload
    def new_sync_input(self, name: str = ..., *, type: None = None) -> tuple[SyncInputHandle[T, Any], Stream[Any]]: ...

    @overload
    def new_sync_input(self, name: str = ..., *, type: type[D]) -> tuple[SyncInputHandle[T, D], Stream[D]]: ...

    def new_sync_input(
        self, name: str = "sync_input", *, type: type[D] | None = None
    ) -> tuple[SyncInputHandle[T, Any], Stream[Any]]:
        """An input another thread feeds (``send(time, records)``, ``advance_to``, ``close``), waking the worker."""
        _check_record_type(name, type)
        return _input.new_sync_input(self, name)

    @property
    def dataflow_index(self) -> int:
        """The index of this scope's dataflow on its worker (what ``Worker.drop_dataflow`` takes)."""
        return self.subgraph.ident

    def to_stream(self, iterable: Iterable[D], *, batch_size: int = 4096, name: str = "to_stream") -> Stream[D]:
        """The records of ``iterable``, at this scope's minimum time, read in batches as the worker steps.

        Each worker runs its own copy: give each worker its share of the data.
        """
        return _input.to_stream(self, iterable, batch_size=batch_size, name=name)

    def source(
        self,
        constructor: Callable[[Capability[T], OperatorInfo], Callable[[OutputPort[T, list[D]]], None]],
        *,
        name: str = "source",
    ) -> Stream[D]:
        """A generic source: ``constructor(capability, info)`` returns ``logic(output)``.

        The logic runs once when the dataflow starts, and again at the next step
        each time it calls ``info.activate()``.
        """
        op = self.add_operator(name, [], 1)
        op.initial_caps = True
        output = op.outputs[0]
        logic = constructor(Capability(self.minimum, output, counted=True), self._info(op))
        op.logic = lambda: logic(output)
        return Stream(self, output)

    def concat(self, streams: Iterable[Stream[D]], *, name: str = "concat") -> Stream[D]:
        """One stream with the records of all ``streams``."""
        items = list(streams)
        if not items:
            raise ArityError(f"{name}: needs at least one stream")
        return _core.concat(self, items, name)

    def replay(self, events: Iterable[tuple[T, Iterable[D]]], *, name: str = "replay") -> Stream[D]:
        """A stream that sends captured ``(time, batch)`` events again, each at its own time."""
        return _capture.replay(self, events, name)

    def replay_files(
        self, directory: str | os.PathLike[str], *, secret: bytes | None = None, name: str = "replay_files"
    ) -> Stream[Any]:
        """Replay what ``Stream.capture_to_files`` wrote to ``directory``, with its progress, on any worker count.

        Every file must be a stream of one capture, under its own worker's name. With ``secret`` a file not sealed
        with it is refused before anything in it is unpickled; without, the files are trusted like code."""
        return _capture.replay_files(self, directory, secret=secret, name=name)

    def replay_events(self, readers: Sequence[EventReader], *, name: str = "replay_events") -> Stream[Any]:
        """Replay event streams (files or sockets; this worker's share of the captured workers) with their progress."""
        return _capture.replay_events(self, readers, name=name)

    # -- nesting --------------------------------------------------------------------------

    def region(self, name: str = "region") -> Scope[T]:
        """A nested scope with this scope's timestamps, grouping operators (``enter``/``leave`` change no time)."""
        return Scope(self.subgraph, self.minimum, parent=self, name=name, summaries=self._summaries, region=True)

    def iterative(self, name: str = "loop") -> Scope[Product[T, int]]:
        """A nested scope with timestamps ``Product(outer, iteration)``."""
        return Scope(self.subgraph, Product(self.minimum, 0), parent=self, name=name, summaries=self._summaries)

    def feedback(
        self, step: int = 1, limit: int | None = None, *, name: str = "feedback"
    ) -> tuple[LoopHandle, Stream[Any]]:
        """A loop variable: a stream fed back from :meth:`Stream.connect_loop`, ``step`` iterations later.

        With ``limit``, records that would pass iteration ``limit`` are discarded.
        """
        if self.parent is None or not isinstance(self.minimum, Product):
            raise ScopeError(f"{name}: feedback edges belong in an iterative scope; open one with scope.iterative()")
        if type(step) is not int or step < 1:
            raise ScopeError(f"{name}: a feedback edge must advance the iteration by at least 1, got {step!r}")
        summary = ProductSummary(identity_for(self.minimum.outer), Increment(step, limit))
        op = self.subgraph.add_operator(name, self, 1, 1)
        self._summaries[op.index] = {(0, 0): summary}
        handle = LoopHandle(self, op, summary)
        output = op.outputs[0]
        port = op.inputs[0]
        results_in = summary.results_in

        def logic() -> None:
            for time, batch in port.batches():
                later = results_in(time)
                if later is not None:
                    output._push(later, batch)

        op.logic = logic
        self.subgraph.on_build(handle._check_connected)
        return handle, Stream(self, output)


class LoopHandle:
    """The far end of a feedback edge; give it to :meth:`Stream.connect_loop` exactly once."""

    def __init__(self, scope: Scope[Any], op: Any, summary: ProductSummary[Any, Any]) -> None:
        self.scope = scope
        self._op = op
        self.summary = summary
        self.connected = False

    def connect(self, stream: Stream[Any]) -> None:
        """Feed ``stream`` back into this loop variable (what :meth:`Stream.connect_loop` does)."""
        if self.connected:
            raise ScopeError(f"{self._op.name!r} is already connected; a loop variable has one source")
        self.scope._check_owns(stream, self._op.name)
        self.scope.subgraph.connect(stream._port, self._op.inputs[0], None)
        self.connected = True

    def _check_connected(self) -> None:
        if not self.connected:
            raise ScopeError(f"{self._op.name!r} in scope {self.scope.name!r} was never connected; call connect_loop()")

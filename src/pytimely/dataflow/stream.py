"""``Stream[D]``: a typed stream of records in a scope, and the operators that build on it.

Every method adds an operator to the worker's copy of the dataflow and returns
the stream(s) it produces. Messages are batches; functions given to ``map``,
``filter`` and the like are applied per record in a tight loop over the batch,
and ``map_batch`` hands over the whole batch (a list, numpy array or Arrow
record batch) at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, overload

from pytimely.dataflow.operators import capture as _capture
from pytimely.dataflow.operators import collect as _collect
from pytimely.dataflow.operators import core as _core
from pytimely.dataflow.operators import enrich as _enrich
from pytimely.dataflow.operators import enterleave as _enterleave
from pytimely.dataflow.operators import extremes as _extremes
from pytimely.dataflow.operators import finals as _finals
from pytimely.dataflow.operators import gather as _gather
from pytimely.dataflow.operators import generic as _generic
from pytimely.dataflow.operators import join as _join
from pytimely.dataflow.operators import keyed as _keyed
from pytimely.dataflow.operators import probe as _probe
from pytimely.dataflow.operators import redistribute as _redistribute
from pytimely.dataflow.operators import reduce as _reduce
from pytimely.dataflow.operators import state_machine as _state_machine
from pytimely.dataflow.operators import window as _window

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pytimely.dataflow.capability import Capability
    from pytimely.dataflow.operator import OperatorInfo
    from pytimely.dataflow.operators.clock import EventClock, SystemClock
    from pytimely.dataflow.operators.join import Interval
    from pytimely.dataflow.operators.probe import ProbeHandle
    from pytimely.dataflow.operators.window import Aggregate, DropLate, Field, Session, SideOutput, Sliding, Tumbling
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.scope import LoopHandle, Scope

__all__ = ["Stream"]

D = TypeVar("D")
E = TypeVar("E")
K = TypeVar("K")
V = TypeVar("V")
W = TypeVar("W")
S = TypeVar("S")
R = TypeVar("R")
P = ParamSpec("P")

UnaryLogic = Callable[["InputPort[Any, list[D]]", "OutputPort[Any, list[E]]"], None]
"""``logic(input, output)`` of a unary operator from ``Stream[D]`` to ``Stream[E]`` (batches typed as lists)."""


class Stream(Generic[D]):
    """A stream of records of type ``D`` produced by one operator output, inside one scope."""

    __slots__ = ("_port", "scope")

    def __init__(self, scope: Scope[Any], port: OutputPort[Any, Any]) -> None:
        self.scope = scope
        self._port = port

    def __repr__(self) -> str:
        return f"<Stream from {self._port.operator_name!r} output {self._port.port} in {self.scope.name!r}>"

    def then(self, f: Callable[Concatenate[Stream[D], P], R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``f(self, *args, **kwargs)``: a function of a stream (an operator of one's own) chained like a method.

        ``words.then(count_long, 5).map(str)`` reads in the order the records flow, where
        ``count_long(words, 5).map(str)`` does not; ``Stream`` needs no method for it.
        """
        return f(self, *args, **kwargs)

    # -- record at a time -----------------------------------------------------------------

    def map(self, f: Callable[[D], E], *, name: str = "map") -> Stream[E]:
        """``f(record)`` for every record."""
        return _core.map_(self, f, name)

    def filter(self, predicate: Callable[[D], bool], *, name: str = "filter") -> Stream[D]:
        """The records for which ``predicate`` is true."""
        return _core.filter_(self, predicate, name)

    def flat_map(self, f: Callable[[D], Iterable[E]], *, name: str = "flat_map") -> Stream[E]:
        """Every record of ``f(record)`` for every record."""
        return _core.flat_map(self, f, name)

    def map_batch(self, f: Callable[[Any], Any], *, name: str = "map_batch") -> Stream[Any]:
        """``f(batch)`` for each whole batch (list, numpy array or Arrow batch); empty results vanish."""
        return _core.map_batch(self, f, name)

    def inspect(self, f: Callable[[D], Any], *, name: str = "inspect") -> Stream[D]:
        """Call ``f(record)`` on every record and pass the stream on unchanged."""
        return _core.inspect(self, f, name)

    def inspect_batch(self, f: Callable[[Any, Any], Any], *, name: str = "inspect_batch") -> Stream[D]:
        """Call ``f(time, batch)`` on every batch and pass the stream on unchanged."""
        return _core.inspect_batch(self, f, name)

    def sink(self, f: Callable[[Any, Any], Any], *, name: str = "sink") -> None:
        """Call ``f(time, batch)`` on every batch; the stream ends here."""
        _core.sink(self, f, name)

    # -- moving data between workers -------------------------------------------------------

    def exchange(self, route: Callable[[Any], Any], *, vectorized: bool = False, name: str = "exchange") -> Stream[D]:
        """Send each record to worker ``route(record) % peers``.

        With ``vectorized=True`` the route is called once per batch (a numpy array
        or Arrow batch) and must return one integer key per row.
        """
        return _core.exchange(self, route, vectorized, name)

    def gather(self, to: int = 0, *, name: str = "gather") -> Stream[D]:
        """Send every batch whole to worker ``to``, which alone receives them (only it is pinned: in an elastic
        computation any other process may leave)."""
        return _gather.gather(self, to, name)

    def broadcast(self, *, name: str = "broadcast") -> Stream[D]:
        """Send every record to every worker."""
        return _core.broadcast(self, name)

    def concat(self, *others: Stream[D], name: str = "concat") -> Stream[D]:
        """This stream's records together with those of ``others``."""
        return _core.concat(self.scope, [self, *others], name)

    def partition(self, parts: int, route: Callable[[D], int], *, name: str = "partition") -> list[Stream[D]]:
        """``parts`` streams; record ``r`` goes to stream number ``route(r)``."""
        return _core.partition(self, parts, route, name)

    def branch(self, predicate: Callable[[D], bool], *, name: str = "branch") -> tuple[Stream[D], Stream[D]]:
        """``(accepted, rejected)``: the records ``predicate`` accepts, and the rest."""
        return _core.branch(self, predicate, name)

    # -- progress -------------------------------------------------------------------------

    def probe(self, *, name: str = "probe") -> ProbeHandle[Any]:
        """A handle reporting which times could still appear on this stream."""
        return _probe.probe(self, name)

    def probe_with(self, handle: ProbeHandle[Any], *, name: str = "probe_with") -> Stream[D]:
        """Make ``handle`` watch this stream too (it reports what could still appear on any of its streams);
        returns this stream."""
        _probe.probe_with(self, handle, name)
        return self

    # -- generic operators ----------------------------------------------------------------

    def unary(
        self,
        constructor: Callable[[Capability[Any], OperatorInfo], UnaryLogic[D, E]],
        *,
        name: str = "unary",
        exchange: Callable[[D], Any] | None = None,
        vectorized: bool = False,
    ) -> Stream[E]:
        """A custom operator: ``constructor(capability, info)`` returns ``logic(input, output)``.

        ``logic`` runs when data arrives or the input frontier moves; it reads
        ``for cap, batch in input``, checks ``input.frontier``, and sends with
        ``output.give(cap, batch)``. ``exchange`` routes records between workers first. The output's
        record type comes from the logic's annotation (``OutputPort[T, list[E]]`` gives ``Stream[E]``).
        """
        return _generic.unary(self, constructor, name=name, exchange=exchange, vectorized=vectorized)

    def binary(
        self,
        other: Stream[E],
        constructor: Callable[
            [Capability[Any], OperatorInfo],
            Callable[[InputPort[Any, list[D]], InputPort[Any, list[E]], OutputPort[Any, list[V]]], None],
        ],
        *,
        name: str = "binary",
        exchange1: Callable[[D], Any] | None = None,
        exchange2: Callable[[E], Any] | None = None,
        vectorized: bool = False,
    ) -> Stream[V]:
        """A custom two-input operator: ``constructor(capability, info)`` returns ``logic(in1, in2, output)``."""
        return _generic.binary(
            self, other, constructor, name=name, exchange1=exchange1, exchange2=exchange2, vectorized=vectorized
        )

    # -- keyed, per timestamp --------------------------------------------------------------

    def count(self, *, name: str = "count") -> Stream[int]:
        """The number of records at each time, across all workers (sent from worker 0)."""
        return _reduce.count(self, name)

    @overload
    def count_by(
        self,
        key: None = None,
        *,
        name: str = ...,
        control: Stream[Any] | None = ...,
        bins: int = ...,
    ) -> Stream[tuple[D, int]]: ...

    @overload
    def count_by(
        self,
        key: Callable[[D], K],
        *,
        name: str = ...,
        control: Stream[Any] | None = ...,
        bins: int = ...,
    ) -> Stream[tuple[K, int]]: ...

    @overload
    def count_by(
        self,
        key: int | str,
        *,
        name: str = ...,
        control: Stream[Any] | None = ...,
        bins: int = ...,
    ) -> Stream[tuple[Any, int]]: ...

    def count_by(
        self,
        key: Callable[[D], Any] | int | str | None = None,
        *,
        name: str = "count_by",
        control: Stream[Any] | None = None,
        bins: int = 256,
    ) -> Stream[tuple[Any, int]]:
        """``(key, count)`` per key at each time; without ``key`` the record is its own key.

        ``key`` may be a column (position or name): numpy and Arrow batches are counted on it at once.
        Keys go to workers through ``bins`` bins; ``control``, a stream of ``Move`` records, changes
        which worker owns a bin from a given time on (see ``pytimely.dataflow.bins``).
        """
        return _reduce.count_by(self, key, name, control, bins)

    def sum_by(
        self,
        key: Callable[[D], K] | int | str,
        value: Callable[[D], V] | int | str,
        *,
        name: str = "sum_by",
        control: Stream[Any] | None = None,
        bins: int = 256,
    ) -> Stream[tuple[K, V]]:
        """``(key, sum of value(record))`` per key at each time (``control``, ``bins``: as ``count_by``).

        ``key`` and ``value`` may be columns (position or name): numpy and Arrow batches are summed at once.
        """
        return _reduce.sum_by(self, key, value, name, control, bins)

    def fold_by(
        self,
        key: Callable[[D], K],
        init: Callable[[], E],
        step: Callable[[E, D], E],
        *,
        name: str = "fold_by",
        control: Stream[Any] | None = None,
        bins: int = 256,
    ) -> Stream[tuple[K, E]]:
        """``(key, acc)`` per key at each time, with ``acc = step(acc, record)`` starting from ``init()``."""
        return _reduce.fold_by(self, key, init, step, name, control, bins)

    def reduce_by(
        self,
        key: Callable[[D], K],
        reducer: Callable[[K, list[D]], E],
        *,
        name: str = "reduce_by",
        control: Stream[Any] | None = None,
        bins: int = 256,
    ) -> Stream[tuple[K, E]]:
        """``(key, reducer(key, records))`` per key at each time."""
        return _reduce.reduce_by(self, key, reducer, name, control, bins)

    def join(
        self: Stream[tuple[K, V]],
        other: Stream[tuple[K, W]],
        *,
        how: Literal["inner", "left", "outer"] = "inner",
        over: Literal["time", "latest"] | Tumbling | Sliding | Session | Interval = "time",
        time: Field | tuple[Field, Field] = None,
        clock: EventClock | SystemClock | None = None,
        late: DropLate | SideOutput | None = None,
        name: str = "join",
        control: Stream[Any] | None = None,
        bins: int = 256,
    ) -> Stream[tuple[K, tuple[V, W]]]:
        """For ``(k, a)`` here and ``(k, b)`` in ``other`` that meet: ``(k, (a, b))``.

        ``over`` says what meets: values at the same timestamp (``"time"``), each side's latest value per key
        (``"latest"``), values in the same window of event time (``Tumbling``/``Sliding``/``Session``, with
        ``time=`` read from the values and ``clock=``/``late=`` as for windows) or in an ``Interval(lower,
        upper)`` of event time. ``how="left"``/``"outer"`` also sends values without a partner, with ``None``
        for the missing side. See ``pytimely.dataflow.operators.join``.
        """
        return _join.join(
            self, other, name, control, bins, how=how, over=over, time=time, clock=clock, late=late
        )

    # -- keyed, across timestamps ---------------------------------------------------------

    def state_machine(
        self,
        fold: Callable[[Any, Any, Any], tuple[Any, Iterable[E] | None]],
        *,
        key: Callable[[D], Any] | None = None,
        control: Stream[Any] | None = None,
        bins: int = 256,
        name: str = "state_machine",
        inspect_state: Callable[[int, Any, Mapping[Any, Any]], None] | None = None,
    ) -> Stream[E]:
        """Per-key state across times: ``fold(key, value, state) -> (new_state, outputs)`` per record.

        Records are ``(key, value)`` pairs unless ``key`` extracts the key (then the value is the
        record). Each key's records are applied in timestamp order; the state starts as ``None`` and a
        ``new_state`` of ``None`` forgets the key. ``outputs`` are emitted at the record's time. Moves on
        ``control`` carry the state of a bin's keys to its new owner. ``inspect_state(worker, time,
        states)`` is a debugging hook called after each time is applied.
        """
        return _state_machine.state_machine(self, fold, key, control, bins, name, inspect_state)

    # -- windows over event time ----------------------------------------------------------

    def tumbling(
        self,
        size: int,
        *,
        time: Field = None,
        key: Field = None,
        value: Field = None,
        aggregate: Aggregate = "count",
        late: DropLate | SideOutput | None = None,
        clock: EventClock | SystemClock | None = None,
        name: str = "tumbling",
    ) -> Stream[tuple[int, int, Any, Any]]:
        """``(start, end, key, aggregate)`` per key and window ``[k*size, (k+1)*size)`` of event time.

        ``time``/``key``/``value`` are functions of the record or columns (``time=None``: the
        record's timestamp, windows over epochs; ``key=None``: the record itself). A window is emitted at
        time ``end - 1`` once the frontier has passed it; a record whose event time is before its own
        timestamp is late and goes to ``late`` (default: dropped). ``aggregate`` is ``"count"``, ``"sum"``,
        ``"min"``, ``"max"`` of the values, ``"collect"`` (their list), ``"max_by"``/``"min_by"`` (the record
        with the largest/smallest value), ``Fold(init, fold, merge)`` or ``Reduce(f)``. ``clock`` makes the
        watermark from the data (``EventClock(delay)``) or the wall clock (``SystemClock()``) instead of the
        frontier. See ``pytimely.dataflow.operators.window``, ``folds`` and ``clock``.
        """
        over = _window.Tumbling(size)
        return _window.window(
            self, over, time=time, key=key, value=value, aggregate=aggregate, late=late, name=name, clock=clock
        )

    def sliding(
        self,
        size: int,
        step: int,
        *,
        time: Field = None,
        key: Field = None,
        value: Field = None,
        aggregate: Aggregate = "count",
        late: DropLate | SideOutput | None = None,
        clock: EventClock | SystemClock | None = None,
        name: str = "sliding",
    ) -> Stream[tuple[int, int, Any, Any]]:
        """``(start, end, key, aggregate)`` per key and window ``[k*step, k*step + size)`` (as ``tumbling``)."""
        over = _window.Sliding(size, step)
        return _window.window(
            self, over, time=time, key=key, value=value, aggregate=aggregate, late=late, name=name, clock=clock
        )

    def session(
        self,
        gap: int,
        *,
        time: Field = None,
        key: Field = None,
        value: Field = None,
        aggregate: Aggregate = "count",
        late: DropLate | SideOutput | None = None,
        clock: EventClock | SystemClock | None = None,
        name: str = "session",
    ) -> Stream[tuple[int, int, Any, Any]]:
        """``(first, last + 1, key, aggregate)`` per key and run of event times at most ``gap`` apart.

        A session is emitted at time ``last + gap`` once the frontier has passed it (as ``tumbling``).
        """
        over = _window.Session(gap)
        return _window.window(
            self, over, time=time, key=key, value=value, aggregate=aggregate, late=late, name=name, clock=clock
        )

    # -- capture --------------------------------------------------------------------------

    def capture(
        self, into: list[tuple[Any, list[D]]] | None = None, *, name: str = "capture"
    ) -> list[tuple[Any, list[D]]]:
        """A list that fills with ``(time, records)`` as batches reach this worker; replay it with ``scope.replay``.

        List batches are copied into lists; a numpy array or Arrow batch is kept as it is (typed as its records).
        """
        return _capture.capture(self, [] if into is None else into, name)

    # -- loops ----------------------------------------------------------------------------

    def enter(self, inner: Scope[Any], *, name: str = "enter") -> Stream[D]:
        """This stream inside the nested scope ``inner`` (time ``t`` becomes ``(t, 0)``)."""
        return _enterleave.enter(self, inner, name)

    def leave(self, *, name: str = "leave") -> Stream[D]:
        """This stream outside its nested scope (time ``(t, i)`` becomes ``t``)."""
        return _enterleave.leave(self, name)

    def connect_loop(self, handle: LoopHandle) -> None:
        """Feed this stream back into the loop variable of ``handle``."""
        handle.connect(self)

    def iterate(
        self,
        body: Callable[[Stream[D]], Stream[D]],
        *,
        limit: int | None = None,
        name: str = "iterate",
    ) -> Stream[D]:
        """Run ``body`` in a loop: what it returns goes round again one iteration later, and leaves.

        The loop ends when ``body`` stops producing records (or after iteration ``limit``).
        """
        return _enterleave.iterate(self, body, limit, name)

    # -- everyday operators (keyed, collect, redistribute, enrich, final extremes) -----------

    def key_on(self, key: Callable[[D], K] | int | str, *, name: str = "key_on") -> Stream[tuple[K, D]]:
        """``(key(record), record)`` per record; ``key`` may be a column (position or name) of numpy/Arrow batches."""

        return _keyed.key_on(self, key, name)

    def map_value(self, f: Callable[[Any], E], *, name: str = "map_value") -> Stream[tuple[Any, E]]:
        """``(key, f(value))`` for every ``(key, value)`` pair."""

        return _keyed.map_value(self, f, name)

    def stateful_map(
        self: Stream[tuple[K, V]],
        mapper: Callable[[S | None, V], tuple[S | None, E]],
        *,
        name: str = "stateful_map",
        control: Stream[Any] | None = None,
        bins: int = 256,
    ) -> Stream[tuple[K, E]]:
        """``(key, output)`` per ``(key, value)``, ``(state, output) = mapper(state, value)`` per key across times.

        ``mapper`` must return a ``(state, output)`` tuple (anything else is an ``InvalidArgument`` naming the
        operator); a state of ``None`` forgets the key.
        """

        return _keyed.stateful_map(self, mapper, name, control, bins)

    @overload
    def collect(
        self: Stream[tuple[K, V]],
        *,
        keyed: Literal[True] = ...,
        every: int | None = ...,
        max_size: int | None = ...,
        timeout: float | None = ...,
        name: str = ...,
    ) -> Stream[tuple[K, list[V]]]: ...

    @overload
    def collect(
        self,
        *,
        keyed: Literal[False],
        every: int | None = ...,
        max_size: None = ...,
        timeout: None = ...,
        name: str = ...,
    ) -> Stream[Any]: ...

    def collect(
        self,
        *,
        keyed: bool = True,
        every: int | None = None,
        max_size: int | None = None,
        timeout: float | None = None,
        name: str = "collect",
    ) -> Stream[Any]:
        """Each time's (or each ``every``-epoch window's) records gathered: ``(key, [values])``, or one collection.

        With ``max_size``/``timeout`` (keyed), a key's values are gathered across times and sent once there are
        ``max_size`` of them or ``timeout`` seconds after the first came (Bytewax's ``collect``).
        """

        return _collect.collect(self, keyed, every, name, max_size, timeout)

    def redistribute(self, *, name: str = "redistribute") -> Stream[D]:
        """The same records spread evenly over the workers, round robin."""

        return _redistribute.redistribute(self, name)

    def enrich_cached(
        self,
        getter: Callable[[Any], Any],
        mapper: Callable[[Any, Any], Any],
        *,
        ttl: int | None = None,
        vectorized: bool = False,
        name: str = "enrich_cached",
    ) -> Stream[Any]:
        """``mapper(cache, record)`` per record; ``cache.get(key)`` calls ``getter(key)`` once per key (and ``ttl``)."""

        return _enrich.enrich_cached(self, getter, mapper, ttl, vectorized, name)

    def min_final(self, *, key: Field = 0, value: Field = 1, name: str = "min_final") -> Stream[tuple[Any, Any]]:
        """``(key, smallest value)`` per key, once the input has ended (records ``(key, value)`` by default)."""

        return _extremes.final(self, "min", key, value, name)

    def max_final(self, *, key: Field = 0, value: Field = 1, name: str = "max_final") -> Stream[tuple[Any, Any]]:
        """``(key, largest value)`` per key, once the input has ended."""

        return _extremes.final(self, "max", key, value, name)

    def first_final(self, *, key: Field = 0, value: Field = 1, name: str = "first_final") -> Stream[tuple[Any, Any]]:
        """``(key, value at the earliest time)`` per key, once the input has ended."""

        return _extremes.final(self, "first", key, value, name)

    def last_final(self, *, key: Field = 0, value: Field = 1, name: str = "last_final") -> Stream[tuple[Any, Any]]:
        """``(key, value at the latest time)`` per key, once the input has ended."""

        return _extremes.final(self, "last", key, value, name)

    @overload
    def count_final(self, key: None = None, *, name: str = ...) -> Stream[tuple[D, int]]: ...

    @overload
    def count_final(self, key: Callable[[D], K], *, name: str = ...) -> Stream[tuple[K, int]]: ...

    @overload
    def count_final(self, key: int | str, *, name: str = ...) -> Stream[tuple[Any, int]]: ...

    def count_final(
        self, key: Callable[[D], Any] | int | str | None = None, *, name: str = "count_final"
    ) -> Stream[tuple[Any, int]]:
        """``(key, count)`` per key over the whole stream, once the input has ended (the record is its own key)."""

        return _finals.count_final(self, key, name)

    def fold_final(
        self,
        init: Callable[[], E],
        fold: Callable[[E, Any], E],
        *,
        key: Field = 0,
        value: Field = 1,
        name: str = "fold_final",
    ) -> Stream[tuple[Any, E]]:
        """``(key, acc)`` per key once the input has ended, ``acc = fold(acc, value)`` from ``init()``."""

        return _finals.fold_final(self, init, fold, key, value, name)

    def reduce_final(
        self,
        f: Callable[[Any, Any], Any],
        *,
        key: Field = 0,
        value: Field = 1,
        name: str = "reduce_final",
    ) -> Stream[tuple[Any, Any]]:
        """``(key, f(f(v1, v2), v3)...)`` per key once the input has ended (records ``(key, value)`` by default)."""

        return _finals.reduce_final(self, f, key, value, name)

    def capture_into(self, open_writer: Callable[[Any], Any], *, name: str = "capture_into") -> None:
        """Write this stream's messages and progress to ``open_writer(binding)``, an ``EventWriter`` (the
        ``Binding`` names the capture, this worker and the count of workers)."""

        _capture.capture_into(self, open_writer, name)

    def capture_to_files(self, directory: str, *, secret: bytes | None = None, name: str = "capture_to_files") -> None:
        """Each worker writes its messages and progress to ``directory``, replacing the capture it held; replay
        with ``scope.replay_files``. Without ``secret`` the files are trusted like code when replayed."""

        _capture.capture_to_files(self, directory, secret, name)

    def capture_to_socket(
        self, address: tuple[str, int], secret: bytes, *, timeout: float = 30.0, name: str = "capture_to_socket"
    ) -> None:
        """Each worker sends its messages and progress to a replaying process at ``address``, authenticated."""

        _capture.capture_to_socket(self, address, secret, timeout, name)

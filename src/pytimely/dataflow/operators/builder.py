"""The operator builder: any number of inputs and outputs, declared internal summaries (timely's
``OperatorBuilder``, ``new_input_connection``, ``set_notify``).

An operator's *internal summary* says, for each input and output, how the time of a message
arriving on the input may change before it leaves on the output (seed ``001_c5a48b9716911bb9.txt``,
"Operator summaries"). The default is the identity from every input to every output. Declaring
``Increment(2)`` from input 0 to output 0 promises that a message at ``t`` leads to output at
``t + 2`` or later, so downstream frontiers move two epochs ahead of the input's; leaving a pair
out promises there is no path at all. The promise is checked: an input capability may only be
retained or delayed to a time a declared summary reaches (:class:`SummaryViolationError`).

    builder = OperatorBuilder(scope, "delay")
    builder.new_input(stream, summaries={0: Increment(2)})
    builder.new_output()

    def constructor(caps, info):
        for cap in caps:
            cap.drop()
        def logic(inputs, outputs):
            for cap, batch in inputs[0]:
                later = cap.delayed(cap.time + 2)
                outputs[0].give(later, batch)
                later.drop()
        return logic

    (delayed,) = builder.build(constructor)

**State.** An operator that keeps something across timestamps declares it, and the runtime snapshots it at
epoch boundaries and restores it before the first step when the job runs with recovery (see
:mod:`pytimely.dataflow.state`): ``seen = builder.keyed_state("seen")`` gives a dict in bins (route the
input with ``exchange_by_bin(key)`` so a restore on another number of workers finds each key where it
arrives); ``builder.state(name, obj)`` declares any :class:`~pytimely.dataflow.state.BinnedState`,
``WorkerState``, ``LogState`` or ``Positions``::

    builder = OperatorBuilder(scope, "distinct")
    seen = builder.keyed_state("seen")
    builder.new_input(stream, exchange_by_bin())
    builder.new_output()

    def constructor(caps, info):
        for cap in caps:
            cap.drop()
        def logic(inputs, outputs):
            for cap, batch in inputs[0]:
                fresh = []
                for r in batch:
                    if r not in seen:
                        seen[r] = True
                        fresh.append(r)
                if fresh:
                    outputs[0].give(cap, fresh)
        return logic

    (firsts,) = builder.build(constructor)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pytimely.dataflow.bins import DEFAULT_BINS
from pytimely.dataflow.capability import Capability
from pytimely.dataflow.state import KeyedState, declare
from pytimely.errors import ArityError, InvalidArgument, ScopeError
from pytimely.progress.timestamp import identity_for

if TYPE_CHECKING:
    from pytimely.dataflow.channels import Pact
    from pytimely.dataflow.operator import OperatorInfo
    from pytimely.dataflow.ports import InputPort, OutputPort
    from pytimely.dataflow.scope import Scope
    from pytimely.dataflow.stream import Stream

__all__ = ["BuilderLogic", "OperatorBuilder"]

T = TypeVar("T")

BuilderLogic = Callable[[Sequence["InputPort[T, Any]"], Sequence["OutputPort[T, Any]"]], None]
"""``logic(inputs, outputs)``: runs when data arrives, an input frontier moves (with notify) or it is activated."""

Summaries = Mapping[int, Any]
"""Per output index: the internal path summary (or a list of them) from an input to that output."""


class OperatorBuilder(Generic[T]):
    """Collects an operator's inputs, outputs and internal summaries, then builds it (module doc)."""

    def __init__(self, scope: Scope[T], name: str = "operator") -> None:
        self._scope = scope
        self._name = name
        self._inputs: list[tuple[Stream[Any], Pact | None, Summaries | None]] = []
        self._outputs = 0
        self._notify = True
        self._built = False
        self._states: list[tuple[str, Any, str]] = []

    @property
    def name(self) -> str:
        """The operator's name."""
        return self._name

    def new_input(self, stream: Stream[Any], pact: Pact | None = None, *, summaries: Summaries | None = None) -> int:
        """Add an input fed by ``stream`` under ``pact`` (default: pipeline); return its index.

        ``summaries`` maps output indices to the internal summary from this input to that output;
        outputs it leaves out are unreachable from this input. ``None``: the identity to every output.
        """
        self._check_open()
        self._scope._check_owns(stream, self._name)
        if summaries is not None and not isinstance(summaries, Mapping):
            raise ArityError(f"{self._name}: summaries must map output indices to summaries, got {summaries!r}")
        self._inputs.append((stream, pact, summaries))
        return len(self._inputs) - 1

    def new_output(self) -> int:
        """Add an output; return its index (its stream comes from :meth:`build`)."""
        self._check_open()
        self._outputs += 1
        return self._outputs - 1

    def state(self, name: str, state: Any, *, layout: str = "1") -> Any:
        """Declare ``state`` as the operator's state ``name`` (see the module doc); return it.

        ``layout`` names the version of its shape: a recovery store written with another is refused.
        """
        self._check_open()
        if any(n == name for n, _, _ in self._states):
            raise InvalidArgument(f"operator {self._name!r} declares the state {name!r} twice")
        self._states.append((name, state, layout))
        return state

    def keyed_state(self, name: str, *, bins: int = DEFAULT_BINS, layout: str = "1") -> KeyedState[Any, Any]:
        """A dict of per-key state in ``bins`` bins, declared as the operator's state ``name``."""
        state: KeyedState[Any, Any] = KeyedState(bins)
        return self.state(name, state, layout=layout)  # type: ignore[no-any-return]

    def set_notify(self, notify: bool) -> None:
        """Whether the logic runs when an input frontier moves (default), or only on data and activation."""
        self._check_open()
        self._notify = bool(notify)

    def _check_open(self) -> None:
        if self._built:
            raise ScopeError(f"operator {self._name!r} is already built")

    def _summary(self) -> dict[tuple[int, int], Any] | None:
        """The ``(input, output)`` summaries for the tracker, or ``None`` when every input is the identity."""
        if all(s is None for _, _, s in self._inputs):
            return None
        identity = self._identity()
        out: dict[tuple[int, int], Any] = {}
        for i, (_, _, summaries) in enumerate(self._inputs):
            if summaries is None:
                for o in range(self._outputs):
                    out[(i, o)] = identity
                continue
            for o, summary in summaries.items():
                if type(o) is not int or not 0 <= o < self._outputs:
                    raise ArityError(
                        f"{self._name}: input {i} declares a summary to output {o!r}, but the operator has "
                        f"{self._outputs} output(s)"
                    )
                out[(i, o)] = summary
        return out

    def _identity(self) -> Any:
        return identity_for(self._scope.minimum)

    def build(self, constructor: Callable[[list[Capability[T]], OperatorInfo], BuilderLogic[T]]) -> list[Stream[Any]]:
        """Create the operator: ``constructor(capabilities, info)`` returns ``logic(inputs, outputs)``.

        ``capabilities`` holds one capability per output at the scope's minimum: the logic's to keep,
        downgrade or drop. Returns the output streams, in output order.
        """
        self._check_open()
        summary = self._summary()
        scope = self._scope
        op = scope.add_operator(self._name, [(s, p) for s, p, _ in self._inputs], self._outputs, summary)
        self._built = True
        for name, state, layout in self._states:
            declare(op, name, state, layout=layout)
        op.notify = self._notify
        op.initial_caps = True
        inputs, outputs = list(op.inputs), list(op.outputs)
        caps: list[Capability[T]] = [Capability(scope.minimum, out, counted=True) for out in outputs]
        logic = constructor(caps, scope._info(op))
        op.logic = lambda: logic(inputs, outputs)
        return [scope.stream(out) for out in outputs]

"""Capabilities: what they allow, how they move, and every misuse raising CapabilityError."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from pytimely import Capability, InputCapability, Product, Worker, execute
from pytimely.dataflow import OperatorInfo
from pytimely.errors import ArityError, CapabilityError

from .helpers import Events, merge

pytestmark = pytest.mark.timeout(60)

Constructor = Callable[[Capability[Any], OperatorInfo], Callable[..., None]]


def run_unary(constructor: Constructor, workers: int = 1, epochs: int = 3) -> list[Events]:
    """Feed records ``[10 * epoch + worker]`` at epochs ``0..epochs-1`` into one unary operator; capture it."""

    def job(worker: Worker) -> Events:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            return handle, stream.unary(constructor, name="op under test").capture()

        handle, out = worker.dataflow(build)
        for epoch in range(epochs):
            handle.advance_to(epoch)
            handle.send(10 * epoch + worker.index)
            worker.step()
        return out

    return execute(job, workers, check_serialization=True)


# -- what capabilities allow -----------------------------------------------------------------


def test_capability_properties_and_repr() -> None:
    seen: list[Any] = []

    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        seen.extend([cap.time, cap.output, cap.valid, repr(cap)])
        later = cap.delayed(4)
        later.downgrade(4)  # downgrading to the same time is allowed and changes nothing
        later.downgrade(6)
        seen.extend([later.time, repr(later)])
        cap.drop()
        seen.extend([cap.valid, repr(cap)])

        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                seen.extend([type(in_cap), in_cap.time, repr(in_cap)])
                output.give(later, batch)
            if not input.frontier.less_equal(6) and later.valid:
                later.drop()

        return logic

    assert merge(run_unary(constructor)) == {6: Counter([0, 10, 20])}
    assert seen[:6] == [0, 0, True, "Capability(0, output=0)", 6, "Capability(6, output=0)"]
    assert seen[6:8] == [False, "Capability(0, output=0, dropped)"]
    assert seen[8:11] == [InputCapability, 0, "InputCapability(0)"]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_retained_capabilities_send_later_and_hold_the_frontier(workers: int) -> None:
    """An operator that sends each epoch's records one epoch late, holding a retained capability meanwhile."""

    def delay(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()
        held: dict[int, tuple[Capability[int], list[int]]] = {}

        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                if in_cap.time not in held:
                    held[in_cap.time] = (in_cap.delayed(in_cap.time + 1), [])
                held[in_cap.time][1].extend(batch)
            for t in sorted(held):
                if not input.frontier.less_equal(t):
                    c, batch = held.pop(t)
                    with output.session(c) as session:
                        session.give_iterable(batch)
                    c.drop()

        return logic

    got = merge(run_unary(delay, workers))
    assert got == {e + 1: Counter(10 * e + w for w in range(workers)) for e in range(3)}


def test_capabilities_for_missing_outputs_are_refused() -> None:

    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()

        def logic(input: Any, output: Any) -> None:
            for in_cap, _ in input:
                with pytest.raises(ArityError, match="no output 1"):
                    in_cap.retain(1)
                with pytest.raises(ArityError, match="no output 2"):
                    in_cap.delayed(in_cap.time, output=2)
                c = in_cap.retain()
                with pytest.raises(ArityError):
                    c.delayed(5, output=1)
                c.drop()

        return logic

    assert run_unary(constructor) == [[]]


# -- misuse ------------------------------------------------------------------------------------


def test_downgrading_backwards_is_refused() -> None:
    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.downgrade(5)

        def logic(input: Any, output: Any) -> None:
            for _ in input:
                pass
            cap.downgrade(3)

        return logic

    with pytest.raises(CapabilityError, match="backwards") as info:
        run_unary(constructor)
    assert any("op under test" in note for note in info.value.__notes__)


def test_downgrading_sideways_in_a_loop_is_refused() -> None:
    def constructor(cap: Capability[Any], info: OperatorInfo) -> Callable[..., None]:
        def logic(input: Any, output: Any) -> None:
            for _ in input:
                pass
            cap.downgrade(Product(0, 2))
            cap.downgrade(Product(1, 1))  # incomparable with (0, 2)

        return logic

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.enter(scope.iterative()).unary(constructor, name="sideways").leave()
            return handle

        worker.dataflow(build).send(1)

    with pytest.raises(CapabilityError, match=r"sideways\) to \(1, 1\)"):
        execute(job)


@pytest.mark.parametrize("which", ["capability", "input capability"])
def test_delaying_to_an_earlier_time_is_refused(which: str) -> None:
    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.downgrade(2)

        def logic(input: Any, output: Any) -> None:
            for in_cap, _ in input:
                if which == "capability":
                    cap.delayed(1)
                else:
                    in_cap.delayed(in_cap.time - 1)

        return logic

    with pytest.raises(CapabilityError, match=r"cannot be delayed|cannot hold a capability"):
        run_unary(constructor)


@pytest.mark.parametrize(
    "misuse",
    [
        lambda cap, out: out.give(cap, [1]),
        lambda cap, out: out.session(cap),
        lambda cap, out: cap.downgrade(3),
        lambda cap, out: cap.delayed(3),
        lambda cap, out: cap.drop(),
        lambda cap, out: cap.time,
    ],
    ids=["give", "session", "downgrade", "delayed", "drop", "time"],
)
def test_a_dropped_capability_cannot_be_used(misuse: Callable[[Capability[int], Any], Any]) -> None:
    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()

        def logic(input: Any, output: Any) -> None:
            for _ in input:
                pass
            misuse(cap, output)

        return logic

    with pytest.raises(CapabilityError, match="dropped"):
        run_unary(constructor)


@pytest.mark.parametrize("use", ["give", "session", "retain", "delayed"])
@pytest.mark.parametrize("workers", [1, 2])
def test_an_input_capability_is_only_valid_during_its_call(use: str, workers: int) -> None:
    kept: list[InputCapability[int]] = []

    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()

        def logic(input: Any, output: Any) -> None:
            for in_cap, _ in input:
                if not kept:
                    kept.append(in_cap)
                    continue
                old = kept[0]
                assert old.time == 0  # its time stays readable
                if use == "give":
                    output.give(old, [1])
                elif use == "session":
                    output.session(old)
                elif use == "retain":
                    old.retain()
                else:
                    old.delayed(5)

        return logic

    with pytest.raises(CapabilityError, match="only valid while its message is handled"):
        run_unary(constructor, workers)


def test_giving_with_another_operators_capabilities_is_refused() -> None:
    outputs: dict[str, Any] = {}
    caps: dict[str, Capability[int]] = {}
    errors: list[str] = []

    def make(name: str) -> Constructor:
        def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
            caps[name] = cap

            def logic(input: Any, output: Any) -> None:
                outputs[name] = output
                for in_cap, _ in input:
                    if name != "thief":
                        continue
                    attempts = [
                        (outputs["victim"], caps["thief"]),
                        (outputs["victim"], in_cap),
                        (output, caps["victim"]),
                    ]
                    for port, offender in attempts:
                        try:
                            port.give(offender, [1])
                        except CapabilityError as exc:
                            errors.append(str(exc))
                if cap.valid and input.frontier.is_empty():
                    cap.drop()

            return logic

        return constructor

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            stream.unary(make("victim"), name="victim")
            stream.unary(make("thief"), name="thief")
            return handle

        worker.dataflow(build).send(1)

    execute(job)
    assert len(errors) == 3
    assert "output 0 of thief cannot send on output 0 of victim" in errors[0]
    assert "victim cannot send with an input capability of thief" in errors[1]
    assert "output 0 of victim cannot send on output 0 of thief" in errors[2]


def test_sending_without_a_capability_is_refused() -> None:
    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()

        def logic(input: Any, output: Any) -> None:
            for in_cap, batch in input:
                output.give(in_cap.time, batch)

        return logic

    with pytest.raises(CapabilityError, match="needs a Capability or InputCapability"):
        run_unary(constructor)


def test_a_capability_from_another_worker_is_refused() -> None:
    caps: dict[int, Capability[int]] = {}

    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        caps[info.worker] = cap

        def logic(input: Any, output: Any) -> None:
            for _, batch in input:
                if 1 - info.worker in caps:  # the other worker may not have built its copy yet
                    output.give(caps[1 - info.worker], batch)

        return logic

    with pytest.raises(CapabilityError, match="cannot send on output 0 of op under test"):
        run_unary(constructor, workers=2)


def test_a_session_kept_past_its_call_cannot_send() -> None:
    sessions: list[Any] = []
    delivered: list[tuple[int, Any]] = []
    frontiers: list[list[int]] = []

    def constructor(cap: Capability[int], info: OperatorInfo) -> Callable[..., None]:
        cap.drop()

        def logic(input: Any, output: Any) -> None:
            for in_cap, _ in input:
                if not sessions:
                    sessions.append(output.session(in_cap))
                else:
                    sessions[0].give(("late", in_cap.time))
                    sessions[0].flush()

        return logic

    def job(worker: Worker) -> None:
        def build(scope: Any) -> Any:
            handle, stream = scope.new_input()
            out = stream.unary(constructor, name="keeper")
            return handle, out.inspect_batch(lambda t, b: delivered.extend((t, r) for r in b)).probe()

        handle, probe = worker.dataflow(build)
        handle.send(1)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        frontiers.append(probe.frontier().elements())  # time 0 is complete
        handle.advance_to(5)
        handle.send(2)
        worker.step_while(lambda: probe.less_than(5))

    with pytest.raises(CapabilityError):
        execute(job)
    # Nothing at time 0 may reach a stream whose probe already passed time 0.
    assert frontiers == [[1]]
    assert delivered == []

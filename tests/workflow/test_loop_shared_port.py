"""A loop out-port feeding two in-ports: resumed runs give what fresh runs give (no stale value)."""

from __future__ import annotations

from pathlib import Path

from pytimely.workflow.model import CONTINUE, Connection, Kind, Module, Port, PortRef
from pytimely.workflow.runner import run
from pytimely.workflow.runtime import Trace
from pytimely.workflow.staging import LocalStaging


def add_two(a: int) -> int:
    return a + 2


def double(a: int) -> int:
    return a * 2


def below_20(a: int) -> bool:
    return a < 20


def leaf(name: str, fn: object, out: type = int) -> Module:
    return Module(name, Kind.SIMPLE, (Port("a", int),), (Port("b", out),), function=fn)


def wire(source: str, target: str) -> Connection:
    def ref(text: str) -> PortRef:
        module, _, port = text.rpartition(".")
        return PortRef(module or None, port)

    return Connection(ref(source), ref(target))


def workflow() -> Module:
    """x_out feeds both p and q of the next iteration; y and the stop condition come from q alone."""
    body = (leaf("step", add_two), leaf("use", double), leaf("test", below_20, bool))
    grow = Module(
        "grow", Kind.LOOP, (Port("p", int), Port("q", int)),
        (Port("x_out", int), Port("y", int), Port(CONTINUE, bool)), submodules=body,
        connections=tuple(wire(*w.split(" -> ")) for w in (
            "p -> step.a", "step.b -> x_out", "q -> use.a", "use.b -> y", "use.b -> test.a", "test.b -> continue")),
        io_ports=(("q", "x_out"), ("p", "x_out")),
    )  # fmt: skip
    return Module(
        "wf", Kind.COMPOSITE, (Port("p0", int), Port("q0", int)), (Port("x", int), Port("y", int)),
        submodules=(grow,),
        connections=tuple(wire(*w.split(" -> ")) for w in ("p0 -> grow.p", "q0 -> grow.q", "grow.x_out -> x",
                                                             "grow.y -> y")),
    )  # fmt: skip


def test_resumed_runs_match_fresh_runs_when_the_shared_port_changes(tmp_path: Path) -> None:
    wf = workflow()
    staging = LocalStaging(tmp_path / "stage")
    for p0 in (0, 1, 0, 3):
        fresh = run(wf, {"p0": p0, "q0": 1})
        trace = Trace()
        assert run(wf, {"p0": p0, "q0": 1}, staging=staging, trace=trace) == fresh
    assert run(wf, {"p0": 0, "q0": 1}) == {"x": 12, "y": 20}
    assert run(wf, {"p0": 1, "q0": 1}) == {"x": 13, "y": 22}


def test_a_loop_asked_for_one_out_port_leaves_an_unneeded_pair_alone() -> None:
    """Only ``n`` is asked for and nothing feeds ``v`` a value yet: before, every iteration still asked for ``v``
    and the run failed with ResumePreconditionError (found by the early-cutoff brute force)."""

    def counting(a: int) -> int:
        return a + 1

    def below_3(a: int) -> bool:
        return a < 3

    body = Module(
        "count",
        Kind.LOOP,
        (Port("v", int), Port("n", int)),
        (Port("v", int), Port("n", int), Port(CONTINUE, bool)),
        submodules=(leaf("step", add_two), leaf("inc", counting), leaf("more", below_3, bool)),
        connections=tuple(wire(a, b) for a, b in [("v", "step.a"), ("step.b", "v"), ("n", "inc.a"),
                                                  ("inc.b", "n"), ("inc.b", "more.a"), ("more.b", CONTINUE)]),
        io_ports=(("v", "v"), ("n", "n")),
    )
    start = Module("zero", Kind.INPUT, outputs=(Port("out", int),), value=0)
    wf = Module("wf", Kind.COMPOSITE, (Port("x", int),), (Port("n", int),),
                submodules=(leaf("slow", double), body, start),
                connections=(wire("x", "slow.a"), wire("slow.b", "count.v"), wire("zero.out", "count.n"),
                             wire("count.n", "n")))  # fmt: skip
    trace = Trace()
    assert run(wf, {"x": 1}, trace=trace) == {"n": 3}
    assert not any(path.endswith("/step") for path in trace.ran)  # v was never needed

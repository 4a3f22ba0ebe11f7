"""The module model (seed 004 §2.1): connection kinds, paths, minimal deps, loops, validation and type checks."""

from __future__ import annotations

import collections.abc
import typing
from typing import Any, Literal, NewType, Optional, TypeVar, Union

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.errors import (
    ModuleCycleError,
    ModuleDefinitionError,
    PortTypeError,
    UnconnectedPortError,
    WorkflowError,
)
from pytimely.workflow.model import (
    CONTINUE,
    Connection,
    ConnectionKind,
    Kind,
    Module,
    Port,
    PortRef,
    is_assignable,
    minimal_deps,
    ports,
)
from tests.profiles import examples


def ref(text: str) -> PortRef:
    module, _, port = text.rpartition(".")
    return PortRef(module or None, port)


def wire(source: str, target: str) -> Connection:
    return Connection(ref(source), ref(target))


def leaf(name: str, ins: str, outs: str, deps: dict[str, str] | None = None, tp: Any = Any) -> Module:
    return Module(
        name, Kind.SIMPLE, ports(ins, tp), ports(outs, tp), {i: frozenset(o) for i, o in (deps or {}).items()}
    )


def parent(name: str, ins: str, outs: str, children: tuple[Module, ...], *wires: str, tp: Any = Any) -> Module:
    connections = tuple(wire(*w.split(" -> ")) for w in wires)
    return Module(name, Kind.COMPOSITE, ports(ins, tp), ports(outs, tp), submodules=children, connections=connections)


def test_connections_are_classified_into_the_four_kinds() -> None:
    m = parent(
        "M", "ab", "qr", (leaf("N", "d", "f"), leaf("P", "j", "l")), "a -> N.d", "N.f -> P.j", "P.l -> q", "b -> r"
    )
    kinds = {str(c): c.kind for c in m.connections}
    assert kinds == {
        "a -> N.d": ConnectionKind.PARENT_IN_TO_CHILD_IN,
        "N.f -> P.j": ConnectionKind.SIBLING,
        "P.l -> q": ConnectionKind.CHILD_OUT_TO_PARENT_OUT,
        "b -> r": ConnectionKind.SHORT_CIRCUIT,
    }
    assert m.source_of(ref("P.j")) == ref("N.f")
    assert m.targets_of(ref("a")) == (ref("N.d"),)
    assert m.deps == {"a": frozenset("q"), "b": frozenset("r")}


def test_paths_follow_the_nesting_and_instances_are_renamed() -> None:
    inner = parent("inner", "x", "y", (leaf("step", "a", "b"),), "x -> step.a", "step.b -> y")
    outer = parent(
        "report", "x", "y", (inner, inner.named("again")), "x -> inner.x", "inner.y -> again.x", "again.y -> y"
    )
    assert [m.path for m in outer.walk()] == ["report", "report/inner", "report/inner/step", "report/again",
                                              "report/again/step"]  # fmt: skip
    assert outer.find("report/again/step").name == "step"
    assert inner.path == "inner" and inner.child("step").path == "inner/step"  # the original is unchanged
    with pytest.raises(ModuleDefinitionError, match="nothing at 'report/nope'"):
        outer.find("report/nope")


def test_simple_deps_default_to_every_out_port() -> None:
    m = leaf("S", "ab", "xy", {"a": "x"})
    assert m.deps == {"a": frozenset("x"), "b": frozenset("xy")}


def test_declared_parent_deps_may_grow_but_not_shrink() -> None:
    children = (leaf("N", "d", "f"),)
    base = parent("M", "ab", "q", children, "a -> N.d", "N.f -> q")
    assert base.deps == {"a": frozenset("q"), "b": frozenset()}
    wider = Module("M", Kind.COMPOSITE, ports("ab"), ports("q"), {"b": frozenset("q")}, children, base.connections)
    assert wider.deps == {"a": frozenset("q"), "b": frozenset("q")}
    with pytest.raises(ModuleDefinitionError, match=r"deps\(a\) must contain \['q'\]"):
        Module("M", Kind.COMPOSITE, ports("ab"), ports("q"), {"a": frozenset()}, children, base.connections)


def loop_module(**overrides: Any) -> Module:
    """x is an I/O pair through ``step``; y only feeds z; the continue port comes from ``test`` on x."""
    children = (leaf("step", "a", "b"), leaf("pass_", "a", "b"), leaf("test", "a", "b", tp=Any))
    connections = tuple(
        wire(*w.split(" -> "))
        for w in ("x -> step.a", "step.b -> x_out", "y -> pass_.a", "pass_.b -> z", "x -> test.a", "test.b -> continue")
    )
    fields: dict[str, Any] = {
        "inputs": (Port("x", float), Port("y", int)),
        "outputs": (Port("x_out", float), Port("z", int), Port(CONTINUE, bool)),
        "submodules": children,
        "connections": connections,
        "io_ports": (("x", "x_out"),),
    }
    fields.update(overrides)
    return Module("L", Kind.LOOP, **fields)


def test_loop_deps_are_closed_over_iterations_and_the_continue_port() -> None:
    m = loop_module()
    assert m.continue_port == CONTINUE
    # x decides how often the body runs, so everything depends on it; y feeds z alone.
    assert m.deps == {"x": frozenset({"x_out", "z", CONTINUE}), "y": frozenset({"z"})}
    # Without the continue port depending on x, x still reaches only x_out (and itself next time).
    quiet = loop_module(
        connections=tuple(
            wire(*w.split(" -> "))
            for w in (
                "x -> step.a",
                "step.b -> x_out",
                "y -> pass_.a",
                "pass_.b -> z",
                "y -> test.a",
                "test.b -> continue",
            )
        )
    )
    assert quiet.deps == {"x": frozenset({"x_out"}), "y": frozenset({"z", "x_out", CONTINUE})}


def test_loops_check_their_io_pairs_and_continue_port() -> None:
    with pytest.raises(PortTypeError, match="out-port z \\(int\\) cannot feed in-port x \\(str\\)"):
        loop_module(inputs=(Port("x", str), Port("y", int)), io_ports=(("x", "z"),))
    with pytest.raises(PortTypeError, match="continue port 'continue' carries int"):
        loop_module(outputs=(Port("x_out", float), Port("z", int), Port(CONTINUE, int)))
    with pytest.raises(ModuleDefinitionError, match="has no out-port 'continue'"):
        loop_module(outputs=(Port("x_out", float), Port("z", int)))
    with pytest.raises(ModuleDefinitionError, match="only loop modules have I/O ports"):
        Module("C", Kind.COMPOSITE, io_ports=(("x", "x"),))


def test_unconnected_ports_are_named() -> None:
    with pytest.raises(UnconnectedPortError, match=r"in-port N\.e has no source"):
        parent("M", "a", "q", (leaf("N", "de", "f"),), "a -> N.d", "N.f -> q")
    with pytest.raises(UnconnectedPortError, match="out-port r has no source"):
        parent("M", "a", "qr", (leaf("N", "d", "f"),), "a -> N.d", "N.f -> q")


def test_sibling_cycles_are_named() -> None:
    children = (leaf("A", "i", "o"), leaf("B", "i", "o"), leaf("C", "ij", "o"))
    with pytest.raises(ModuleCycleError, match=r"cycle: C.o -> B.i, B.o -> C.j"):
        parent("M", "x", "y", children, "x -> A.i", "A.o -> C.i", "C.o -> B.i", "B.o -> C.j", "B.o -> y")
    with pytest.raises(ModuleCycleError, match=r"cycle: A.o -> A.i"):
        parent("M", "x", "y", (leaf("A", "i", "o"),), "A.o -> A.i", "A.o -> y")
    assert isinstance(ModuleCycleError("x"), ModuleDefinitionError) and isinstance(ModuleCycleError("x"), WorkflowError)


def test_type_mismatches_name_both_ports_and_types() -> None:
    n = Module("N", Kind.SIMPLE, (Port("d", str),), (Port("f", list[int]),))
    p = Module("P", Kind.SIMPLE, (Port("j", dict[str, int]),), (Port("l", float),))
    with pytest.raises(
        PortTypeError, match=r"connection N.f -> P.j: list\[int\] is not assignable to dict\[str, int\]"
    ):
        Module("M", Kind.COMPOSITE, (Port("a", str),), (Port("q", float),), submodules=(n, p),
               connections=(wire("a", "N.d"), wire("N.f", "P.j"), wire("P.l", "q")))  # fmt: skip
    with pytest.raises(PortTypeError, match=r"connection a -> N.d: int is not assignable to str"):
        Module("M", Kind.COMPOSITE, (Port("a", int),), (), submodules=(n,), connections=(wire("a", "N.d"),))


def test_malformed_modules_are_named() -> None:
    with pytest.raises(ModuleDefinitionError, match="two in-ports named 'a'"):
        Module("S", Kind.SIMPLE, ports("aa"))
    with pytest.raises(ModuleDefinitionError, match="module name 'a/b'"):
        Module("a/b", Kind.SIMPLE)
    with pytest.raises(ModuleDefinitionError, match="out-port name 'x y'"):
        Module("S", Kind.SIMPLE, outputs=(Port("x y"),))
    with pytest.raises(ModuleDefinitionError, match="two submodules named 'N'"):
        parent("M", "a", "", (leaf("N", "d", ""), leaf("N", "e", "")), "a -> N.d")
    with pytest.raises(ModuleDefinitionError, match="simple module 'S' cannot have submodules"):
        Module("S", Kind.SIMPLE, submodules=(leaf("N", "", ""),))
    with pytest.raises(ModuleDefinitionError, match="only simple modules run a function"):
        Module("C", Kind.COMPOSITE, function=print)
    with pytest.raises(ModuleDefinitionError, match="ends at no in-port of 'N'"):
        parent("M", "a", "", (leaf("N", "d", ""),), "a -> N.zz")
    with pytest.raises(ModuleDefinitionError, match="'d' is an in-port, not a parameter"):
        leaf("N", "d", "").with_params(d=1)
    with pytest.raises(UnconnectedPortError, match="in-port 'd' is required"):
        leaf("N", "d", "").without_inputs(["d"])


# -- minimal deps against a transitive closure ----------------------------------------------------------------


@st.composite
def nested_modules(draw: st.DrawFn, depth: int = 2) -> Module:
    """A random acyclic composite whose children are simple modules or (one level down) such composites."""
    ins = [f"i{k}" for k in range(draw(st.integers(1, 3)))]
    outs = [f"o{k}" for k in range(draw(st.integers(1, 3)))]
    available = [PortRef(None, i) for i in ins]
    children: list[Module] = []
    connections: list[Connection] = []
    for c in range(draw(st.integers(1, 4))):
        if depth > 0 and draw(st.booleans()):
            child = draw(nested_modules(depth - 1)).named(f"C{c}")
        else:
            cin = [f"x{k}" for k in range(draw(st.integers(0, 2)))]
            cout = [f"y{k}" for k in range(draw(st.integers(1, 2)))]
            child = Module(f"C{c}", Kind.SIMPLE, ports(cin), ports(cout),
                           {i: frozenset(draw(st.sets(st.sampled_from(cout)))) for i in cin})  # fmt: skip
        children.append(child)
        connections += [Connection(draw(st.sampled_from(available)), PortRef(child.name, i)) for i in child.input_names]
        available += [PortRef(child.name, o) for o in child.output_names]
    connections += [Connection(draw(st.sampled_from(available)), PortRef(None, o)) for o in outs]
    name = "R" if depth == 2 else "inner"
    return Module(name, Kind.COMPOSITE, ports(ins), ports(outs), submodules=tuple(children),
                  connections=tuple(connections))  # fmt: skip


def closure_deps(module: Module) -> dict[str, frozenset[str]]:
    """deps by a boolean transitive closure (Warshall) over every port of every level, bottom-up."""
    nodes: list[tuple[str, str]] = []
    edges: list[tuple[tuple[str, str], tuple[str, str]]] = []

    def add(m: Module, prefix: str) -> None:
        nodes.extend((prefix, f"in:{p}") for p in m.input_names)
        nodes.extend((prefix, f"out:{p}") for p in m.output_names)
        if m.kind is Kind.SIMPLE:
            edges.extend(((prefix, f"in:{i}"), (prefix, f"out:{o}")) for i, os in m.deps.items() for o in os)
            return
        for child in m.submodules:
            add(child, f"{prefix}/{child.name}")
        for c in m.connections:
            src = (prefix if c.source.module is None else f"{prefix}/{c.source.module}",
                   ("in:" if c.source.module is None else "out:") + c.source.port)  # fmt: skip
            dst = (prefix if c.target.module is None else f"{prefix}/{c.target.module}",
                   ("out:" if c.target.module is None else "in:") + c.target.port)  # fmt: skip
            edges.append((src, dst))

    add(module, "")
    index = {n: k for k, n in enumerate(nodes)}
    reach = np.eye(len(nodes), dtype=bool)
    for a, b in edges:
        reach[index[a], index[b]] = True
    for k in range(len(nodes)):
        reach |= reach[:, k : k + 1] & reach[k : k + 1, :]
    return {
        i: frozenset(o for o in module.output_names if reach[index[("", f"in:{i}")], index[("", f"out:{o}")]])
        for i in module.input_names
    }


@settings(max_examples=examples(150), deadline=None)
@given(nested_modules())
def test_minimal_deps_are_exactly_reachability(module: Module) -> None:
    assert module.deps == closure_deps(module)
    assert minimal_deps(module) == module.deps
    for m in module.walk():
        assert all(c.path == f"{m.path}/{c.name}" for c in m.submodules)


# -- is_assignable ----------------------------------------------------------------------------------------------

T = TypeVar("T")
UserId = NewType("UserId", int)


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        (int, int, True),
        (bool, int, True),
        (int, bool, False),
        (int, float, True),
        (float, int, False),
        (float, complex, True),
        (str, bytes, False),
        (Any, str, True),
        (str, Any, True),
        (object, str, True),
        (str, object, True),
        (T, str, True),
        (list[int], list[str], True),  # generics compare by origin
        (list[int], collections.abc.Sequence, True),
        (typing.List[int], list, True),  # noqa: UP006
        (dict[str, int], list[int], False),
        (int, Optional[int], True),  # noqa: UP045
        (None, Optional[int], True),  # noqa: UP045
        (Optional[int], int, False),  # noqa: UP045
        (int | str, Union[int, str, bytes], True),  # noqa: UP007
        (int | str, int, False),
        (Literal["a", "b"], str, True),
        (Literal[1], str, False),
        (str, Literal["a"], False),
        (UserId, int, True),
        (typing.Annotated[int, "meta"], float, True),
    ],
)
def test_is_assignable(source: Any, target: Any, expected: bool) -> None:
    assert is_assignable(source, target) is expected


CLASSES = [bool, int, float, complex, str, bytes, list, tuple, dict, collections.abc.Sequence, collections.abc.Mapping]


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(CLASSES), st.sampled_from(CLASSES), st.sampled_from(CLASSES))
def test_is_assignable_is_a_preorder_on_classes(a: type, b: type, c: type) -> None:
    assert is_assignable(a, a)
    if is_assignable(a, b) and is_assignable(b, c):
        assert is_assignable(a, c)
    # A union target takes exactly what one of its members takes.
    assert is_assignable(a, b | c) == (is_assignable(a, b) or is_assignable(a, c))
    assert is_assignable(a | b, c) == (is_assignable(a, c) and is_assignable(b, c))
    assert is_assignable(list[a], collections.abc.Sequence[b])  # type: ignore[valid-type]


# -- loop deps against an unrolled brute force ----------------------------------------------------------------


@st.composite
def loop_modules(draw: st.DrawFn) -> Module:
    """A random loop of simple modules whose I/O pairs may share an out-port (one out-port, several in-ports)."""
    body = draw(nested_modules(0))
    outs = list(body.output_names)
    ins = list(body.input_names)
    # The continue port: fed by any available port of the body, like the others.
    available = [PortRef(None, i) for i in ins] + [PortRef(c.name, o) for c in body.submodules for o in c.output_names]
    flag = Connection(draw(st.sampled_from(available)), PortRef(None, CONTINUE))
    pairs = tuple((i, draw(st.sampled_from(outs))) for i in ins if draw(st.booleans()))
    return Module("L", Kind.LOOP, ports(ins), (*ports(outs), Port(CONTINUE, bool)), submodules=body.submodules,
                  connections=(*body.connections, flag), io_ports=pairs)  # fmt: skip


def unrolled_deps(loop: Module) -> dict[str, frozenset[str]]:
    """Loop deps by unrolling: iteration k's paired in-ports take iteration k-1's out-ports, the others the loop's;
    an out-port depends on i if i reaches it in some iteration, every out-port if i reaches a continue port."""
    body = Module("B", Kind.COMPOSITE, loop.inputs, loop.outputs, submodules=loop.submodules,
                  connections=loop.connections)  # fmt: skip
    within = closure_deps(body)
    pairs = dict(loop.io_ports)
    rounds = len(loop.input_names) + 2  # a path through I/O pairs visits each in-port at most once
    nodes = [("L", i) for i in loop.input_names]
    nodes += [(k, f"in:{p}") for k in range(rounds) for p in loop.input_names]
    nodes += [(k, f"out:{o}") for k in range(rounds) for o in loop.output_names]
    index = {n: j for j, n in enumerate(nodes)}
    reach = np.eye(len(nodes), dtype=bool)
    for k in range(rounds):
        for p in loop.input_names:
            if k == 0 or p not in pairs:
                reach[index[("L", p)], index[(k, f"in:{p}")]] = True
            else:
                reach[index[(k - 1, f"out:{pairs[p]}")], index[(k, f"in:{p}")]] = True
            for o in within[p]:
                reach[index[(k, f"in:{p}")], index[(k, f"out:{o}")]] = True
    for j in range(len(nodes)):
        reach |= reach[:, j : j + 1] & reach[j : j + 1, :]
    deps = {}
    for i in loop.input_names:
        row = reach[index[("L", i)]]
        hit = {o for o in loop.output_names for k in range(rounds) if row[index[(k, f"out:{o}")]]}
        deps[i] = frozenset(loop.output_names) if CONTINUE in hit else frozenset(hit)
    return deps


@settings(max_examples=examples(300), deadline=None)
@given(loop_modules())
def test_loop_deps_match_the_unrolled_loop(loop: Module) -> None:
    assert minimal_deps(loop) == unrolled_deps(loop)


def test_one_out_port_feeding_two_in_ports_gives_both_their_deps() -> None:
    # b's next value is x_out, and so is a's: y depends on b, so on a too, through the shared out-port.
    children = (leaf("step", "a", "b"), leaf("use", "a", "b"), leaf("test", "a", "b"))
    loop = Module(
        "L", Kind.LOOP, ports("pq"), (*ports(["x_out", "y"]), Port(CONTINUE, bool)), submodules=children,
        connections=tuple(wire(*w.split(" -> ")) for w in (
            "p -> step.a", "step.b -> x_out", "q -> use.a", "use.b -> y", "use.b -> test.a", "test.b -> continue")),
        io_ports=(("q", "x_out"), ("p", "x_out")),
    )  # fmt: skip
    assert loop.deps["p"] == frozenset({"x_out", "y", CONTINUE})
    assert loop.deps == unrolled_deps(loop)


def test_a_submodule_without_out_ports_is_refused_when_defined() -> None:
    from pytimely.errors import SinkModuleError

    sink = Module("save", Kind.SIMPLE, ports("a"), ())
    with pytest.raises(SinkModuleError, match="'save' has no out-ports, so it would never run"):
        parent("W", "x", "", (sink,), "x -> save.a")

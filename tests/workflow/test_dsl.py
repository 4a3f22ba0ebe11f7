"""The workflow DSL: @simple, @composite, @loop and constant build the modules of the model, checked as defined."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.errors import ModuleDefinitionError, PortTypeError, UnconnectedPortError
from pytimely.workflow import (
    CONTINUE,
    ConnectionKind,
    Kind,
    Module,
    Outputs,
    Port,
    PortRef,
    composite,
    constant,
    loop,
    simple,
)
from pytimely.workflow.executors import Call, ProcessExecutor
from tests.profiles import examples


class Summary(NamedTuple):
    mean: float
    count: int


class Split(TypedDict):
    low: list[float]
    high: list[float]


@simple
def clean(raw: list[float], limit: float = 10.0) -> list[float]:
    """Values up to ``limit``."""
    return [x for x in raw if x <= limit]


@simple
def summarise(values: list[float]) -> Summary:
    """Mean and count."""
    return Summary(sum(values) / len(values), len(values))


@simple(deps={"values": ["low"]})
def split(values: list[float], pivot: float) -> Split:
    """Values below and from ``pivot``."""
    return {"low": [v for v in values if v < pivot], "high": [v for v in values if v >= pivot]}


@simple
def scale(values: list[float], *, factor: float = 2.0) -> list[float]:
    """Values times ``factor`` (a parameter, not a port)."""
    return [v * factor for v in values]


@simple
def name_of(n: int) -> str:
    """A string, to feed where numbers are wanted."""
    return str(n)


@composite
def report(raw: list[float]) -> Summary:
    """Clean, then summarise."""
    return summarise(clean(raw, limit=5.0))


def connections(module: Module) -> set[tuple[str, str, ConnectionKind | None]]:
    return {(str(c.source), str(c.target), c.kind) for c in module.connections}


def test_simple_ports_come_from_the_signature() -> None:
    assert clean.kind is Kind.SIMPLE and clean.name == "clean" and clean.path == "clean"
    assert clean.inputs == (Port("raw", list[float]), Port("limit", float, optional=True))
    assert clean.outputs == (Port("out", list[float]),)
    assert summarise.outputs == (Port("mean", float), Port("count", int))
    assert split.outputs == (Port("low", list[float]), Port("high", list[float]))
    assert split.deps == {"values": frozenset({"low"}), "pivot": frozenset({"low", "high"})}
    assert scale.input_names == ("values",)  # factor is keyword-only: a parameter
    # Outside a body a simple module is its function.
    assert clean([1.0, 12.0]) == [1.0] and summarise([1.0, 3.0]) == Summary(2.0, 2)
    assert scale.with_params(factor=3.0)([1.0]) == [3.0]


def test_composite_adds_submodules_constants_and_connections() -> None:
    assert [m.path for m in report.walk()] == ["report", "report/clean", "report/clean_limit", "report/summarise"]
    assert report.child("clean_limit").kind is Kind.INPUT and report.child("clean_limit").value == 5.0
    assert connections(report) == {
        ("raw", "clean.raw", ConnectionKind.PARENT_IN_TO_CHILD_IN),
        ("clean_limit.out", "clean.limit", ConnectionKind.SIBLING),
        ("clean.out", "summarise.values", ConnectionKind.SIBLING),
        ("summarise.mean", "mean", ConnectionKind.CHILD_OUT_TO_PARENT_OUT),
        ("summarise.count", "count", ConnectionKind.CHILD_OUT_TO_PARENT_OUT),
    }
    assert report.outputs == (Port("mean", float), Port("count", int))
    assert report.deps == {"raw": frozenset({"mean", "count"})}


def test_composite_short_circuit_repeated_calls_naming_and_optional_ports() -> None:
    class Both(NamedTuple):
        first: list[float]
        second: list[float]
        original: list[float]

    @composite
    def twice(raw: list[float]) -> Both:
        once = clean(raw)  # limit left out: the function's default is used, the instance has no such port
        again = clean.named("strict")(once, 1.0)
        third = clean(again)
        return Both(first=once, second=third, original=raw)

    assert [c.name for c in twice.submodules] == ["clean", "strict", "strict_limit", "clean_2"]
    assert twice.child("clean").input_names == ("raw",)
    assert twice.child("strict").input_names == ("raw", "limit")
    assert ("raw", "original", ConnectionKind.SHORT_CIRCUIT) in connections(twice)
    assert ("strict.out", "clean_2.raw", ConnectionKind.SIBLING) in connections(twice)
    assert clean.input_names == ("raw", "limit")  # the module itself is unchanged


def test_several_out_ports_by_attribute_name_index_and_unpacking() -> None:
    seen: dict[str, Any] = {}

    @composite
    def parts(values: list[float], pivot: float) -> Split:
        halves = split(values, pivot)
        seen["outputs"] = halves
        low, high = halves
        assert halves.low is low and halves["high"] is high and halves[0] is low and len(halves) == 2
        with pytest.raises(AttributeError, match="no out-port 'middle'"):
            _ = halves.middle
        return {"low": high, "high": low}

    assert isinstance(seen["outputs"], Outputs)
    assert ("split.high", "low", ConnectionKind.CHILD_OUT_TO_PARENT_OUT) in connections(parts)
    assert parts.deps == {"values": frozenset({"high"}), "pivot": frozenset({"low", "high"})}


def test_keyword_only_parameters_bind_per_instance() -> None:
    @composite
    def doubled(values: list[float]) -> list[float]:
        return scale(scale(values), factor=0.5)

    assert doubled.child("scale").params == {} and doubled.child("scale_2").params == {"factor": 0.5}
    assert doubled.child("scale_2").function is scale.function

    with pytest.raises(ModuleDefinitionError, match="'factor' is a parameter, not an in-port"):

        @composite
        def wrong(values: list[float], f: float) -> list[float]:
            return scale(values, factor=f)


def test_return_types_are_inferred_without_annotation() -> None:
    @composite
    def bare(raw):  # type: ignore[no-untyped-def]
        return clean(raw)

    assert bare.outputs == (Port("out", list[float]),) and bare.inputs == (Port("raw", Any),)

    @composite
    def several(raw: list[float]):  # type: ignore[no-untyped-def]
        return {"a": clean(raw), "b": 3}

    assert several.outputs == (Port("a", list[float]), Port("b", int))
    assert several.child("b_value").value == 3


def test_type_mismatches_are_found_at_the_call() -> None:
    with pytest.raises(PortTypeError, match=r"connection name_of.out -> clean.raw: str is not assignable to list"):

        @composite
        def wrong(n: int) -> list[float]:
            return clean(name_of(n))

    with pytest.raises(PortTypeError, match=r"connection clean.out -> out: list\[float\] is not assignable to int"):

        @composite
        def wrong_return(raw: list[float]) -> int:
            return clean(raw)

    with pytest.raises(PortTypeError, match=r"clean_limit\.out -> clean\.limit: str is not assignable to float"):

        @composite
        def wrong_constant(raw: list[float]) -> list[float]:
            return clean(raw, "five")


def test_mistakes_in_bodies_are_named() -> None:
    with pytest.raises(UnconnectedPortError, match=r"in-port split\.pivot has no source"):

        @composite
        def missing(values: list[float]) -> Split:
            return split(values)

    with pytest.raises(UnconnectedPortError, match="out-port count has no source"):

        @composite
        def partial(raw: list[float]) -> Summary:
            return {"mean": summarise(raw).mean}  # type: ignore[return-value]

    with pytest.raises(ModuleDefinitionError, match=r"value of clean\.out is not known while the workflow is defined"):

        @composite
        def branching(raw: list[float]) -> list[float]:
            cleaned = clean(raw)
            return cleaned if cleaned else raw

    with pytest.raises(ModuleDefinitionError, match="has no in-port 'rows'"):

        @composite
        def misspelt(raw: list[float]) -> list[float]:
            return clean(rows=raw)

    with pytest.raises(ModuleDefinitionError, match="is given all out-ports of 'summarise'; pick one"):

        @composite
        def whole(raw: list[float]) -> list[float]:
            return clean(summarise(raw))

    with pytest.raises(ModuleDefinitionError, match="belongs to the definition of 'outer'"):

        @composite
        def outer(raw: list[float]) -> list[float]:
            @composite
            def inner(x: list[float]) -> list[float]:
                return clean(raw)

            return inner(raw)

    with pytest.raises(ModuleDefinitionError, match="composite module 'report' can be called only inside"):
        report([1.0])
    with pytest.raises(ModuleDefinitionError, match="in-port 'raw' has a default"):

        @composite
        def defaulted(raw: list[float] = []) -> list[float]:  # noqa: B006
            return clean(raw)


def test_nested_composites_and_constants() -> None:
    class Pair(NamedTuple):
        given: float
        fixed: float

    @composite
    def top(raw: list[float]) -> Pair:
        numbers = constant([4.0, 6.0], name="numbers")
        return Pair(given=report(raw).mean, fixed=report(numbers).mean)

    assert [m.path for m in top.walk()] == [
        "top", "top/numbers", "top/report", "top/report/clean", "top/report/clean_limit", "top/report/summarise",
        "top/report_2", "top/report_2/clean", "top/report_2/clean_limit", "top/report_2/summarise",
    ]  # fmt: skip
    assert top.find("top/report_2/clean").function is clean.function
    assert ("numbers.out", "report_2.raw", ConnectionKind.SIBLING) in connections(top)
    module = constant(7)
    assert module.kind is Kind.INPUT and module() == 7 and module.outputs == (Port("out", int),)


class Step(NamedTuple):
    x: float
    steps: int


@simple
def halve(x: float) -> float:
    """Half of ``x``."""
    return x / 2


@simple
def increment(n: int) -> int:
    """``n + 1``."""
    return n + 1


@simple
def above(x: float, limit: float) -> bool:
    """Whether ``x > limit``."""
    return x > limit


def test_loop_io_ports_continue_port_and_deps() -> None:
    @loop
    def shrink(x: float, steps: int, limit: float) -> Step:
        y = halve(x)
        return Step(x=y, steps=increment(steps)), above(y, limit)

    assert shrink.kind is Kind.LOOP and shrink.continue_port == CONTINUE
    assert shrink.io_ports == (("x", "x"), ("steps", "steps"))
    assert shrink.output_names == ("x", "steps", CONTINUE)
    assert shrink.source_of(PortRef(None, CONTINUE)) == PortRef("above", "out")
    # x and limit decide how often the body runs, so every out-port depends on them; steps only counts.
    assert shrink.deps == {
        "x": frozenset({"x", "steps", CONTINUE}),
        "steps": frozenset({"steps"}),
        "limit": frozenset({"x", "steps", CONTINUE}),
    }

    with pytest.raises(ModuleDefinitionError, match="must return \\(next_values, continue_flag\\)"):

        @loop
        def no_flag(x: float) -> float:
            return halve(x)

    with pytest.raises(ModuleDefinitionError, match="always True never ends"):

        @loop
        def forever(x: float) -> float:
            return halve(x), True

    with pytest.raises(PortTypeError, match=r"halve_2\.out -> continue: float is not assignable to bool"):

        @loop
        def bad_flag(x: float) -> float:
            return halve(x), halve(x)

    @loop
    def once(x: float) -> float:
        return halve(x), False

    assert once.child("continue_value").value is False and once.io_ports == ()


# -- random programs: what the DSL builds is what was called ---------------------------------------------------


@st.composite
def programs(draw: st.DrawFn) -> tuple[int, list[tuple[int, list[int], dict[int, set[int]]]], list[int]]:
    """In-ports, then steps (outputs, argument value indices, deps), then the values returned."""
    n_in = draw(st.integers(1, 3))
    steps = []
    values = n_in
    for _ in range(draw(st.integers(1, 6))):
        n_out = draw(st.integers(1, 3))
        args = draw(st.lists(st.integers(0, values - 1), max_size=3))
        deps = {k: set(draw(st.sets(st.integers(0, n_out - 1)))) for k in range(len(args))}
        steps.append((n_out, args, deps))
        values += n_out
    returned = draw(st.lists(st.integers(0, values - 1), min_size=1, max_size=4))
    # A step none of whose out-ports is used would never run (and is refused): return its first out-port.
    used = set(returned) | {a for _, args, _ in steps for a in args}
    first = n_in
    for n_out, _, _ in steps:
        if not used & set(range(first, first + n_out)):
            returned.append(first)
        first += n_out
    return n_in, steps, returned


@settings(max_examples=examples(150), deadline=None)
@given(programs())
def test_random_programs_build_the_module_they_describe(
    program: tuple[int, list[tuple[int, list[int], dict[int, set[int]]]], list[int]],
) -> None:
    n_in, steps, returned = program
    leaves = [
        Module(
            f"m{k}",
            Kind.SIMPLE,
            tuple(Port(f"a{j}", int) for j in range(len(args))),
            tuple(Port(f"r{j}", int) for j in range(n_out)),
            {f"a{j}": frozenset(f"r{o}" for o in os) for j, os in deps.items()},
        )
        for k, (n_out, args, deps) in enumerate(steps)
    ]

    def body(*ins):  # type: ignore[no-untyped-def]
        values = list(ins)
        for leaf, (_, args, _) in zip(leaves, steps, strict=True):
            outs = leaf(*(values[a] for a in args))
            values.extend([outs] if not isinstance(outs, Outputs) else list(outs))
        return {f"o{k}": values[v] for k, v in enumerate(returned)}

    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    body.__signature__ = inspect.Signature([inspect.Parameter(f"i{k}", positional) for k in range(n_in)])
    module = composite(body, name="prog")
    assert [c.name for c in module.submodules] == [f"m{k}" for k in range(len(steps))]
    assert len(module.connections) == sum(len(args) for _, args, _ in steps) + len(returned)
    # deps by following values forwards: which in-ports each value was computed from.
    taint: list[set[int]] = [{k} for k in range(n_in)]
    for n_out, args, deps in steps:
        taint += [set().union(*(taint[args[j]] for j, os in deps.items() if o in os)) for o in range(n_out)]
    assert module.deps == {
        f"i{k}": frozenset(f"o{j}" for j, v in enumerate(returned) if k in taint[v]) for k in range(n_in)
    }


# -- functions travel by reference ------------------------------------------------------------------------------


def test_decorated_functions_pickle_by_reference_and_run_in_another_process() -> None:
    assert clean.function.__qualname__ == "clean.function"
    assert pickle.loads(pickle.dumps(clean.function)) is clean.function
    assert b"clean.function" in pickle.dumps(clean.function)

    async def run() -> dict[str, Any]:
        async with ProcessExecutor(max_workers=1) as executor:
            return await executor.run(Call(report.find("report/clean").path, clean.function,
                                           {"raw": [1.0, 7.0, 3.0], "limit": 5.0}))  # fmt: skip

    assert asyncio.run(run()) == {"out": [1.0, 3.0]}


def test_a_fresh_interpreter_finds_the_function_by_module_and_qualname(tmp_path: Path) -> None:
    (tmp_path / "steps_mod.py").write_text(
        textwrap.dedent(
            """
            from pytimely.workflow import simple

            @simple
            def double(x: int) -> int:
                return 2 * x

            def plain(x: int) -> int:
                return x + 1

            inc = simple(plain)
            """
        )
    )
    script = textwrap.dedent(
        """
        import importlib, pickle, sys
        import steps_mod
        blob = pickle.dumps((steps_mod.double.function, steps_mod.inc.function))
        module, qualname = steps_mod.double.function.__module__, steps_mod.double.function.__qualname__
        target = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        print(qualname, steps_mod.inc.function.__qualname__, target(4), len(blob) > 0)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == ["double.function", "plain", "8", "True"]


def test_out_ports_named_like_python_attributes_read_as_ports() -> None:
    class Odd(NamedTuple):
        module: int
        names: int
        keys: int

    @simple
    def odd(x: int) -> Odd:
        return Odd(x, x, x)

    @composite
    def uses(x: int) -> Odd:
        outs = odd(x)
        assert [outs.module.ref.port, outs.names.ref.port, outs.keys.ref.port] == ["module", "names", "keys"]
        return outs

    assert uses.output_names == ("module", "names", "keys")
    assert ("odd.names", "names", ConnectionKind.CHILD_OUT_TO_PARENT_OUT) in connections(uses)


def test_a_called_module_whose_out_ports_feed_nothing_is_refused() -> None:
    from pytimely.errors import SinkModuleError

    written: list[list[float]] = []

    @simple
    def save(values: list[float]) -> None:
        written.append(values)

    @simple
    def double(values: list[float]) -> list[float]:
        return [2 * v for v in values]

    with pytest.raises(SinkModuleError, match="'save' is called but none of its out-ports is used"):

        @composite
        def workflow(values: list[float]) -> list[float]:
            save(values)
            return double(values)

"""Early cutoff: a module recomputed to the same value does not make its dependents run, and never hides a change."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely.workflow.model import CONTINUE, Connection, Kind, Module, Port, PortRef
from pytimely.workflow.planning import plan
from pytimely.workflow.runner import run
from pytimely.workflow.runtime import Trace
from pytimely.workflow.staging import LocalStaging, StagingArea
from tests.profiles import examples

PIPELINE = """
    from typing import NamedTuple
    from pytimely.workflow import composite, simple

    class Out(NamedTuple):
        total: int
        other: int

    @simple
    def double(x: int) -> int:
        return x * 2

    @simple
    def plus_one(y: int) -> int:
        return y + 1

    @simple
    def square(z: int) -> int:
        return z * z

    @simple
    def negate(x: int) -> int:
        return -x

    @composite
    def workflow(x: int) -> Out:
        return Out(square(plus_one(double(x))), negate(x))
"""


def _run(module: Any, staging: StagingArea) -> Trace:
    trace = Trace()
    assert run(module.workflow, {"x": 3}, staging=staging, trace=trace) == {"total": 49, "other": -3}
    return trace


def test_an_output_preserving_edit_reruns_that_module_alone(user_module: Any, tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    first = _run(user_module("pipeline_a", PIPELINE), staging)
    assert sorted(first.ran) == ["workflow/double", "workflow/negate", "workflow/plus_one", "workflow/square"]
    # A comment: no module's code changed at all.
    commented = PIPELINE.replace("return x * 2", "return x * 2  # twice")
    assert _run(user_module("pipeline_a", commented), staging).ran == []
    # The same function computed another way: it reruns, its dependents are cut off.
    same = PIPELINE.replace("return x * 2", "return x + x")
    module = user_module("pipeline_a", same)
    planned = plan(module.workflow, {"x": 3}, staging=staging)
    assert planned.will_run() == ["workflow/double", "workflow/plus_one", "workflow/square"]
    assert planned.may_be_cut_off() == ["workflow/plus_one", "workflow/square"]  # not double: its code changed
    trace = _run(module, staging)
    assert trace.ran == ["workflow/double"]
    assert trace.cut_off == ["workflow/plus_one", "workflow/square"]
    # The cut-off values were retagged: the next run finds everything.
    assert _run(user_module("pipeline_a", same), staging).ran == []
    # A real change reruns everything after it.
    changed = same.replace("return y + 1", "return y + 1 - 0 * y")  # the same values, once more
    trace = _run(user_module("pipeline_a", changed), staging)
    assert trace.ran == ["workflow/plus_one"] and trace.cut_off == ["workflow/square"]


def test_plan_names_the_modules_that_may_be_cut_off(user_module: Any, tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    _run(user_module("pipeline_b", PIPELINE), staging)
    module = user_module("pipeline_b", PIPELINE.replace("return x * 2", "return 2 * x"))
    planned = plan(module.workflow, {"x": 3}, staging=staging)
    # They are recomputed only because double is (ComputeResumeState knows no values), and their code is as
    # their trace records say.
    assert planned.may_be_cut_off() == ["workflow/plus_one", "workflow/square"]
    assert "may be cut off" in planned.render()


def test_a_changed_value_is_not_cut_off(user_module: Any, tmp_path: Path) -> None:
    staging = LocalStaging(tmp_path / "stage")
    _run(user_module("pipeline_c", PIPELINE), staging)
    module = user_module("pipeline_c", PIPELINE.replace("return x * 2", "return x * 4"))
    trace = Trace()
    assert run(module.workflow, {"x": 3}, staging=staging, trace=trace) == {"total": 169, "other": -3}
    assert sorted(trace.ran) == ["workflow/double", "workflow/plus_one", "workflow/square"]
    assert trace.cut_off == []


# -- brute force: random workflows, random edits, resumed runs against fresh runs and plain evaluation -----------
#
# Workflows are built by hand (``Module``) from the functions below: loops (whose bodies hold parameters, a nested
# composite with its own parameter, and a file written and read each iteration), composites, parameters at every
# depth, dicts and lists whose *order* changes while their items do not, files returned as paths and declared
# with ``writes``. Each random workflow is run on one staging area, then edited again and again — a parameter
# anywhere, a module's code (to code computing the same values, or other values), an input, a file edited by
# hand — and after each edit the resumed run must give what a fresh run gives, and what plain evaluation gives.


def num(value: Any) -> int:
    """An order-sensitive integer digest of a value: a dict's and a list's order count; a path counts by its file."""
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, os.PathLike):
        return int(Path(value).read_text())
    if isinstance(value, dict):
        return sum((i + 1) * (7 * len(str(k)) + 11 * ord(str(k)[0]) + num(v)) for i, (k, v) in enumerate(value.items()))
    if isinstance(value, list | tuple):
        return sum((i + 1) * num(v) for i, v in enumerate(value))
    return sum(map(ord, str(value)))


def mix(a0: Any, a1: Any = 0, *, k: int = 0) -> int:
    return (num(a0) * 3 + num(a1) * 5 + k) % 101


def mix_same(a0: Any, a1: Any = 0, *, k: int = 0) -> int:
    return (k + 5 * num(a1) + 3 * num(a0)) % 101  # other code, the same values: cut off downstream


def mix_other(a0: Any, a1: Any = 0, *, k: int = 0) -> int:
    return (num(a0) * 3 + num(a1) * 5 + k + 1) % 101


def order(a0: Any, *, k: int = 0) -> dict[str, int]:
    """The same items whatever ``a0`` is, in an order that depends on it."""
    keys = ["p", "q", "r"]
    turn = (num(a0) + k) % 3
    return {key: 1 for key in keys[turn:] + keys[:turn]}


def first(a0: Any) -> int:
    return ord(next(iter(a0))) if isinstance(a0, dict) and a0 else num(a0)


def listing(a0: Any, *, k: int = 0) -> list[int]:
    """The same items, in an order that depends on ``a0``."""
    items = sorted([num(a0) % 3, k % 3, 2])
    return items if num(a0) % 2 else items[::-1]


def write_path(a0: Any, *, name: str) -> Path:
    path = Path(name)
    path.write_text(str(num(a0) % 50))
    return path


def read_path(a0: Any) -> int:
    return num(a0) + 1


def export(a0: Any, *, name: str) -> int:
    Path(name).write_text(str(num(a0) % 50))
    return num(a0) % 2  # coarse: most of what it did is in the file


def read_named(a0: Any, *, name: str) -> int:
    return int(Path(name).read_text()) * 3 + num(a0)


def step(a0: Any, *, k: int = 0) -> int:
    return (num(a0) + k + 1) % 101


def inc(a0: int) -> int:
    return a0 + 1


def more(a0: int, *, limit: int = 2) -> bool:
    return a0 < limit


FUNCTIONS = {f.__name__: f for f in (mix, mix_same, mix_other, order, first, listing, write_path, read_path,
                                      export, read_named, step, inc, more)}  # fmt: skip


def leaf(name: str, fn: str, ins: int, params: dict[str, Any], out: Any = Any, writes: tuple[str, ...] = ()) -> Module:
    declared = {"writes": writes} if writes else {}
    return Module(name, Kind.SIMPLE, tuple(Port(f"a{i}") for i in range(ins)), (Port("out", out),),
                  function=FUNCTIONS[fn], params=params, **declared)  # fmt: skip


def links(*pairs: str) -> tuple[Connection, ...]:
    def ref(text: str) -> PortRef:
        module, _, port = text.rpartition(".")
        return PortRef(module or None, port)

    return tuple(Connection(ref(a), ref(b)) for a, b in (p.split(">") for p in pairs))


def build_loop(name: str, spec: dict[str, Any]) -> Module:
    """A loop over ``v`` and a counter ``n``: v goes through an optional composite (with a parameter), ``step``
    (with one), and optionally a file written and read back; it stops once ``n`` reaches ``limit``."""
    subs = [leaf("step", "step", 1, {"k": spec["k"]}), leaf("inc", "inc", 1, {}),
            leaf("more", "more", 1, {"limit": spec["limit"]})]  # fmt: skip
    wires = ["n>inc.a0", "inc.out>n", "inc.out>more.a0", "more.out>continue"]
    if spec["inner"] is not None:
        inner = Module("inner", Kind.COMPOSITE, (Port("p0"),), (Port("r0"),),
                       submodules=(leaf("m", spec["inner"]["fn"], 1, {"k": spec["inner"]["k"]}),),
                       connections=links("p0>m.a0", "m.out>r0"))  # fmt: skip
        subs.append(inner)
        wires += ["v>inner.p0", "inner.r0>step.a0"]
    else:
        wires.append("v>step.a0")
    if spec["file"] is not None:
        subs += [leaf("w", "write_path", 1, {"name": spec["file"]}, Path), leaf("r", "read_path", 1, {})]
        wires += ["step.out>w.a0", "w.out>r.a0", "r.out>v"]
    else:
        wires.append("step.out>v")
    return Module(name, Kind.LOOP, (Port("v"), Port("n")), (Port("v"), Port("n"), Port(CONTINUE, bool)),
                  submodules=tuple(subs), connections=links(*wires), io_ports=(("v", "v"), ("n", "n")))  # fmt: skip


def build(spec: dict[str, Any]) -> Module:
    """The workflow a spec describes (see ``specs``)."""
    subs: list[Module] = []
    wires: list[str] = []
    for u, unit in enumerate(spec["units"]):
        name, kind, ins = f"u{u}", unit["kind"], unit["ins"]
        if kind in ("mix", "order", "first", "listing"):
            params = {"k": unit["k"]} if kind != "first" else {}
            subs.append(leaf(name, unit.get("fn", kind), len(ins), params))
            wires += [f"{s}>{name}.a{i}" for i, s in enumerate(ins)]
        elif kind == "paths":
            subs += [leaf(name, "write_path", 1, {"name": unit["file"]}, Path), leaf(f"{name}r", "read_path", 1, {})]
            wires += [f"{ins[0]}>{name}.a0", f"{name}.out>{name}r.a0"]
        elif kind == "export":
            subs += [leaf(name, "export", 1, {"name": unit["file"]}, writes=("{name}",)),
                     leaf(f"{name}r", "read_named", 1, {"name": unit["file"]})]  # fmt: skip
            wires += [f"{ins[0]}>{name}.a0", f"{name}.out>{name}r.a0"]
        elif kind == "composite":
            inner_subs, inner_wires, sources = [], [], [f"p{i}" for i in range(len(ins))]
            for c, child in enumerate(unit["children"]):
                inner_subs.append(leaf(f"c{c}", child["fn"], len(child["ins"]), {"k": child["k"]}))
                inner_wires += [f"{sources[s]}>c{c}.a{i}" for i, s in enumerate(child["ins"])]
                sources.append(f"c{c}.out")
            inner_wires.append(f"{sources[-1]}>r0")
            subs.append(Module(name, Kind.COMPOSITE, tuple(Port(f"p{i}") for i in range(len(ins))), (Port("r0"),),
                               submodules=tuple(inner_subs), connections=links(*inner_wires)))  # fmt: skip
            wires += [f"{s}>{name}.p{i}" for i, s in enumerate(ins)]
        else:
            subs += [build_loop(name, unit), Module(f"{name}z", Kind.INPUT, outputs=(Port("out"),), value=0)]
            wires += [f"{ins[0]}>{name}.v", f"{name}z.out>{name}.n"]
    wires += [f"{s}>o{i}" for i, s in enumerate(spec["outs"])]
    outs = tuple(Port(f"o{i}") for i in range(len(spec["outs"])))
    return Module("wf", Kind.COMPOSITE, (Port("x0"), Port("x1")), outs, submodules=tuple(subs),
                  connections=links(*wires))  # fmt: skip


def outs_of(u: int, unit: dict[str, Any]) -> list[str]:
    """The ports a unit gives to later units and to the workflow's out-ports."""
    if unit["kind"] in ("paths", "export"):
        return [f"u{u}.out", f"u{u}r.out"]
    if unit["kind"] == "composite":
        return [f"u{u}.r0"]
    if unit["kind"] == "loop":
        return [f"u{u}.v", f"u{u}.n"]
    return [f"u{u}.out"]


CODES = ["mix", "mix_same", "mix_other"]
KINDS = ["mix", "order", "first", "listing", "paths", "export", "composite", "loop"]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    """A random workflow: 2-5 units of every kind, wired to earlier ones, with 1-2 out-ports."""
    sources = ["x0", "x1"]
    units: list[dict[str, Any]] = []
    small = st.integers(0, 5)
    for u in range(draw(st.integers(2, 5))):
        kind = draw(st.sampled_from(KINDS))
        arity = 2 if kind in ("mix", "composite") and draw(st.booleans()) else 1
        unit: dict[str, Any] = {"kind": kind, "ins": [draw(st.sampled_from(sources)) for _ in range(arity)]}
        if kind in ("mix", "order", "listing"):
            unit["k"] = draw(small)
        if kind == "mix":
            unit["fn"] = draw(st.sampled_from(CODES))
        if kind in ("paths", "export"):
            unit["file"] = f"f{u}.txt"
        if kind == "composite":
            unit["children"] = []
            for c in range(draw(st.integers(1, 3))):
                picks = draw(st.lists(st.integers(0, arity + c - 1), min_size=1, max_size=2))
                unit["children"].append({"fn": draw(st.sampled_from(CODES)), "k": draw(small), "ins": picks})
        if kind == "loop":
            unit.update(k=draw(small), limit=draw(st.integers(1, 3)))
            unit["inner"] = {"fn": draw(st.sampled_from(CODES)), "k": draw(small)} if draw(st.booleans()) else None
            unit["file"] = f"f{u}.txt" if draw(st.booleans()) else None
        units.append(unit)
        sources += outs_of(u, unit)
    produced = [s for s in sources if "." in s]
    outs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=2))
    return {"units": units, "outs": outs, "inputs": {"x0": draw(small), "x1": draw(small)}}


def edit_points(spec: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    """Where a spec can be edited: (what, path into the spec)."""
    points: list[tuple[str, list[Any]]] = [("input", ["inputs", "x0"]), ("input", ["inputs", "x1"])]
    for u, unit in enumerate(spec["units"]):
        if "k" in unit:
            points.append(("param", ["units", u, "k"]))
        if unit["kind"] == "mix":
            points.append(("code", ["units", u, "fn"]))
        if unit["kind"] == "loop":
            points.append(("param", ["units", u, "limit"]))
            if unit["inner"] is not None:
                points += [("param", ["units", u, "inner", "k"]), ("code", ["units", u, "inner", "fn"])]
        for c, _ in enumerate(unit.get("children", ())):
            points += [("param", ["units", u, "children", c, "k"]), ("code", ["units", u, "children", c, "fn"])]
        if unit.get("file"):
            points.append(("file", ["units", u, "file"]))
    return points


def direct(module: Module, values: dict[str, Any]) -> dict[str, Any]:
    """What a composite (or one iteration of a loop) computes, by plain recursion; loops iterate to their end."""
    cache: dict[str, dict[str, Any]] = {}

    def source(ref: PortRef | None) -> Any:
        assert ref is not None
        return values[ref.port] if ref.module is None else outputs_of(ref.module)[ref.port]

    def outputs_of(name: str) -> dict[str, Any]:
        if name not in cache:
            child = module.child(name)
            ins = {i: source(module.source_of(PortRef(name, i))) for i in child.input_names}
            if child.kind is Kind.SIMPLE:
                cache[name] = {"out": child.function(**ins, **child.params)}
            elif child.kind is Kind.INPUT:
                cache[name] = {"out": child.value}
            elif child.kind is Kind.COMPOSITE:
                cache[name] = direct(child, ins)
            else:
                while True:
                    got = direct(child, ins)
                    if not got[CONTINUE]:
                        break
                    ins = {**ins, **{i: got[o] for i, o in child.io_ports}}
                cache[name] = got
        return cache[name]

    return {o: source(module.source_of(PortRef(None, o))) for o in module.output_names}


def in_folder(folder: str, action: Any) -> Any:
    """``action()`` with ``folder`` as the current directory (modules write their files there)."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        return action()
    finally:
        os.chdir(before)


@settings(max_examples=examples(20), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs(), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 9)), min_size=3, max_size=5))
def test_early_cutoff_never_hides_a_change(spec: dict[str, Any], edits: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as home:
        resumed = os.path.join(home, "resumed")
        os.mkdir(resumed)
        staging = LocalStaging(os.path.join(home, "stage"), durable=False)
        mismatches = []
        for n, (where, value) in enumerate([(None, 0), *edits]):
            if where is not None:
                what, path = edit_points(spec)[where % len(edit_points(spec))]
                target = spec
                for part in path[:-1]:
                    target = target[part]
                if what == "code":
                    target[path[-1]] = CODES[(CODES.index(target[path[-1]]) + 1 + value % 2) % 3]
                elif what == "file":  # edited by hand between two runs, if a run wrote it
                    file = Path(resumed, target[path[-1]])
                    if file.exists():
                        file.write_text(str(value))
                else:
                    target[path[-1]] = value
            workflow = build(spec)
            inputs = dict(spec["inputs"])
            got = in_folder(resumed, lambda: run(workflow, inputs, staging=staging))  # noqa: B023
            fresh_folder = os.path.join(home, f"fresh-{n}")
            os.mkdir(fresh_folder)
            fresh = in_folder(fresh_folder, lambda: run(workflow, inputs))  # noqa: B023
            plain_folder = os.path.join(home, f"plain-{n}")
            os.mkdir(plain_folder)
            plain = in_folder(plain_folder, lambda: direct(workflow, inputs))  # noqa: B023
            if not got == fresh == plain:
                mismatches.append((n, got, fresh, plain))
        assert mismatches == [], (spec, mismatches)

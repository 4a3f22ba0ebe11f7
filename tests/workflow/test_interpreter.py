"""The interpreter against ComputeResumeState: what runs, what is forwarded, what nested children are asked for.

Workflows here are hand-built :class:`Module` trees of simple modules whose function records each call, on
in-memory and local staging areas; runs are interrupted by a module that raises, and resumed.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytimely.errors import ModuleFailedError, WorkflowInputError
from pytimely.workflow.derivation import derive_instance
from pytimely.workflow.fingerprint import value_fingerprint
from pytimely.workflow.graph import Vertex
from pytimely.workflow.model import Connection, Kind, Module, Port, PortRef
from pytimely.workflow.planning import plan
from pytimely.workflow.resume import compute_resume_state
from pytimely.workflow.runner import run
from pytimely.workflow.runtime import Origin, Runtime, Trace
from pytimely.workflow.staging import LocalStaging, MemoryStaging, StagingArea
from tests.profiles import examples

CALLS: Counter[str] = Counter()
FAIL: dict[str, int] = {}
"""Module tag -> the call number (counted in CALLS) at which it raises."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    CALLS.clear()
    FAIL.clear()
    yield
    CALLS.clear()
    FAIL.clear()


def combine(*, tag: str, **inputs: Any) -> Any:
    """A module's function: a value naming the module and everything it was given."""
    CALLS[tag] += 1
    if FAIL.get(tag) == CALLS[tag]:
        raise RuntimeError(f"{tag} fails as asked")
    return (tag, tuple(sorted(inputs.items())))


def combine_v2(*, tag: str, **inputs: Any) -> Any:
    """``combine`` after an edit to its code."""
    CALLS[tag] += 1
    return ("v2", tag, tuple(sorted(inputs.items())))


def node(name: str, ins: list[str], outs: list[str] = ["out"], fn: Any = combine) -> Module:  # noqa: B006
    """A simple module tagged with its name."""
    return Module(
        name,
        Kind.SIMPLE,
        tuple(Port(i) for i in ins),
        tuple(Port(o) for o in outs),
        function=fn,
        params={"tag": name},
    )


def wire(*pairs: str) -> tuple[Connection, ...]:
    """``"a.out>b.x"`` style connections; a name without a dot is the parent's port."""

    def ref(text: str) -> PortRef:
        module, _, port = text.rpartition(".")
        return PortRef(module or None, port)

    return tuple(Connection(ref(a), ref(b)) for a, b in (p.split(">") for p in pairs))


def diamond(fn_c: Any = combine) -> Module:
    """x -> a -> {b, c} -> d -> out1; y -> e -> out2 (e independent of x); a -> f -> out3; a nested composite
    holds b and c."""
    inner = Module(
        "mid",
        Kind.COMPOSITE,
        (Port("v"),),
        (Port("b"), Port("c")),
        submodules=(node("b", ["v"]), node("c", ["v"], fn=fn_c)),
        connections=wire("v>b.v", "v>c.v", "b.out>b", "c.out>c"),
    )
    return Module(
        "wf",
        Kind.COMPOSITE,
        (Port("x"), Port("y")),
        (Port("out1"), Port("out2"), Port("out3")),
        submodules=(node("a", ["x"]), inner, node("d", ["p", "q"]), node("e", ["y"]), node("f", ["z"])),
        connections=wire(
            "x>a.x",
            "a.out>mid.v",
            "mid.b>d.p",
            "mid.c>d.q",
            "d.out>out1",
            "y>e.y",
            "e.out>out2",
            "a.out>f.z",
            "f.out>out3",
        ),
    )


def direct(module: Module, values: dict[str, Any]) -> dict[str, Any]:
    """What a workflow computes, evaluated by plain recursion (no interpreter, no staging)."""
    out: dict[str, Any] = {}
    cache: dict[str, dict[str, Any]] = {}

    def source(ref: PortRef) -> Any:
        if ref.module is None:
            return values[ref.port]
        return outputs_of(ref.module)[ref.port]

    def outputs_of(name: str) -> dict[str, Any]:
        if name not in cache:
            child = module.child(name)
            ins = {i: source(module.source_of(PortRef(name, i))) for i in child.input_names}  # type: ignore[arg-type]
            if child.kind is Kind.SIMPLE:
                cache[name] = {"out": child.function(**ins, **child.params)}
            else:
                cache[name] = direct(child, ins)
        return cache[name]

    for o in module.output_names:
        out[o] = source(module.source_of(PortRef(None, o)))  # type: ignore[arg-type]
    return out


def tags(trace: Trace) -> list[str]:
    return sorted(path.rsplit("/", 1)[1] for path in trace.ran)


def snapshot_h(rt: Runtime, inst: Any) -> set[Vertex]:
    """``H`` of a parent instance as the staging area holds it now."""
    graph_vertices = [Vertex.inport(i) for i in inst.module.input_names]
    graph_vertices += [Vertex.outport(o) for o in inst.module.output_names]
    graph_vertices += [Vertex.child_in(r.module, r.port) for r in inst.child_inputs]
    return {v for v in graph_vertices if asyncio.run(rt.has(inst.origin_of(v)))}


@pytest.fixture(params=["memory", "local"])
def staging(request: pytest.FixtureRequest, tmp_path: Path) -> StagingArea:
    return MemoryStaging() if request.param == "memory" else LocalStaging(tmp_path / "stage")


def test_fresh_run_computes_what_plain_evaluation_does_and_runs_each_module_once(staging: StagingArea) -> None:
    wf = diamond()
    inputs = {"x": 1, "y": [2, 3]}
    expected = direct(wf, inputs)
    CALLS.clear()
    trace = Trace()
    assert run(wf, inputs, staging=staging, trace=trace) == expected
    assert dict(CALLS) == dict.fromkeys("abcdef", 1)
    assert sorted(trace.ran) == ["wf/a", "wf/d", "wf/e", "wf/f", "wf/mid/b", "wf/mid/c"]
    again = Trace()
    assert run(wf, inputs, staging=staging, trace=again) == expected
    assert again.ran == []


def test_changed_input_reruns_exactly_its_dependents(staging: StagingArea) -> None:
    wf = diamond()
    run(wf, {"x": 1, "y": 2}, staging=staging)
    for changed, inputs in (("y", {"x": 1, "y": 5}), ("x", {"x": 7, "y": 5})):
        predicted = plan(wf, inputs, staging=staging)
        trace = Trace()
        assert run(wf, inputs, staging=staging, trace=trace) == direct(wf, inputs)
        assert sorted(trace.ran) == predicted.will_run()
        # The modules downstream of the changed in-port, by the module graph.
        downstream = {"y": ["e"], "x": ["a", "b", "c", "d", "f"]}[changed]
        assert tags(trace) == downstream


def test_requested_subset_never_touches_the_rest(staging: StagingArea) -> None:
    wf = diamond()
    run(wf, {"x": 1, "y": 2}, staging=staging)
    trace = Trace()
    result = run(wf, {"x": 3, "y": 2}, staging=staging, outputs=["out2"], trace=trace)
    assert result == {"out2": direct(wf, {"x": 3, "y": 2})["out2"]}
    assert trace.ran == []
    assert all(not key.startswith(("wf/a", "wf/mid", "wf/d")) for key in trace.reused)
    irrelevant = trace.states["wf"].irrelevant
    assert Vertex.submodule("a") in irrelevant and Vertex.child_in("d", "p") in irrelevant
    # x changes and only out1 is asked for: a's new value goes to mid, never to f (irrelevant now).
    trace = Trace()
    run(wf, {"x": 4, "y": 2}, staging=staging, outputs=["out1"], trace=trace)
    assert tags(trace) == ["a", "b", "c", "d"]
    assert Vertex.child_in("f", "z") in trace.states["wf"].irrelevant
    for path, vertex in trace.forwarded:
        assert trace.states[path].state[vertex] == "recompute", f"{vertex} in {path} got a value it does not need"
    assert (("wf", Vertex.child_in("mid", "v"))) in trace.forwarded


def test_edited_code_reruns_the_module_and_its_dependents_only(staging: StagingArea) -> None:
    inputs = {"x": 1, "y": 2}
    run(diamond(), inputs, staging=staging)
    edited = diamond(fn_c=combine_v2)
    predicted = plan(edited, inputs, staging=staging)
    trace = Trace()
    result = run(edited, inputs, staging=staging, trace=trace)
    assert tags(trace) == ["c", "d"] == sorted(p.rsplit("/", 1)[1] for p in predicted.will_run())
    assert result["out1"][1][1][1][0] == "v2"  # d's q input came from the edited c


def test_failure_names_the_module_path_keeps_staged_values_and_resume_runs_the_rest(staging: StagingArea) -> None:
    wf = diamond()
    inputs = {"x": 1, "y": 2}
    FAIL["d"] = 1
    with pytest.raises(ModuleFailedError, match="'wf/d'") as info:
        run(wf, inputs, staging=staging)
    assert info.value.module == "wf/d"
    staged = set(staging.keys())
    assert {"wf/a/out", "wf/mid/b/out", "wf/mid/c/out"} <= staged and "wf/d/out" not in staged
    predicted = plan(wf, inputs, staging=staging)
    trace = Trace()
    assert run(wf, inputs, staging=staging, trace=trace) == direct(wf, inputs)
    assert sorted(trace.ran) == predicted.will_run()
    assert "wf/d" in trace.ran and "wf/a" not in trace.ran


def test_children_get_the_section_2_3_sets_and_values_go_only_to_recomputed_ports(staging: StagingArea) -> None:
    wf = diamond()
    inputs = {"x": 1, "y": 2}
    run(wf, inputs, staging=staging)
    for key in ("wf/mid/b/out", "wf/d/out"):  # lost: b and d rerun; c's value is reused inside mid
        staging.delete(key)
    rt = Runtime(staging, None)
    rt.remember(":input/x", 1)
    rt.remember(":input/y", 2)
    root = derive_instance(
        rt, wf, "wf", {"x": Origin(":input/x", value_fingerprint(1)), "y": Origin(":input/y", value_fingerprint(2))}
    )
    h_root = snapshot_h(rt, root)
    h_mid = snapshot_h(rt, root.children["mid"])
    trace = Trace()
    run(wf, inputs, staging=staging, trace=trace)
    expected_root = compute_resume_state(wf, h_root, (), wf.output_names)
    assert trace.states["wf"].state == expected_root.state
    assert trace.states["wf"].witnesses == expected_root.witnesses
    invoked = {inv.path: inv for inv in trace.invocations}
    for name in expected_root.children_involved():
        inv = invoked[f"wf/{name}"]
        assert inv.recomputed == expected_root.child_inputs(name)
        assert inv.requested == expected_root.child_outputs(name)
    mid = invoked["wf/mid"]
    expected_mid = compute_resume_state(wf.child("mid"), h_mid, mid.recomputed, mid.requested)
    assert trace.states["wf/mid"].state == expected_mid.state
    assert invoked["wf/mid/b"].requested == expected_mid.child_outputs("b") == {"out"}
    assert "wf/mid/c" not in invoked  # c's value is ready: its interpreter is not started
    for path, state in trace.states.items():
        forwarded = [v for p, v in trace.forwarded if p == path]
        assert len(forwarded) == len(set(forwarded)), "a port got a new value twice"
        recompute_ports = {v for v in state.recompute if v.kind in ("child-in", "out")}
        assert set(forwarded) == recompute_ports
    assert sorted(trace.ran) == ["wf/d", "wf/mid/b"]
    assert set(invoked) == {"wf", "wf/mid", "wf/mid/b", "wf/d"}


def test_a_missing_workflow_input_is_a_typed_error_naming_it() -> None:
    with pytest.raises(WorkflowInputError, match="'x'"):
        run(diamond(), {"y": 1})
    assert run(diamond(), {"y": 1}, outputs=["out2"]) == {"out2": direct(diamond(), {"x": 0, "y": 1})["out2"]}


# -- loops ---------------------------------------------------------------------------------------------------------


def step(*, tag: str, value: int, limit: int) -> dict[str, Any]:
    """One loop iteration: double the value; continue while below the limit."""
    CALLS[tag] += 1
    if FAIL.get(tag) == CALLS[tag]:
        raise RuntimeError(f"{tag} fails as asked at call {CALLS[tag]}")
    doubled = value * 2
    return {"value": doubled, "continue": doubled < limit}


def doubling() -> Module:
    body = Module(
        "step",
        Kind.SIMPLE,
        (Port("value"), Port("limit")),
        (Port("value"), Port("continue", bool)),
        function=step,
        params={"tag": "step"},
    )
    grow = Module(
        "grow",
        Kind.LOOP,
        (Port("value"), Port("limit")),
        (Port("value"), Port("continue", bool)),
        submodules=(body,),
        connections=wire("value>step.value", "limit>step.limit", "step.value>value", "step.continue>continue"),
        io_ports=(("value", "value"),),
    )
    return Module(
        "wf",
        Kind.COMPOSITE,
        (Port("start"), Port("limit")),
        (Port("result"),),
        submodules=(grow, node("after", ["v"])),
        connections=wire("start>grow.value", "limit>grow.limit", "grow.value>after.v", "after.out>result"),
    )


def expected_doubling(start: int, limit: int) -> tuple[int, int]:
    """The final value and the number of iterations, by a plain loop."""
    value, k = start, 0
    while True:
        value, k = value * 2, k + 1
        if value >= limit:
            return value, k


def test_loop_computes_what_a_plain_loop_does(staging: StagingArea) -> None:
    value, iterations = expected_doubling(3, 100)
    trace = Trace()
    assert run(doubling(), {"start": 3, "limit": 100}, staging=staging, trace=trace) == {
        "result": ("after", (("v", value),))
    }
    assert CALLS["step"] == iterations
    assert {p for p in trace.ran if "/iter-" in p} == {f"wf/grow/iter-{k}/step" for k in range(iterations)}


@pytest.mark.parametrize("k", [0, 2, 4])
def test_loop_killed_at_iteration_k_resumes_at_k(staging: StagingArea, k: int) -> None:
    inputs = {"start": 1, "limit": 50}
    value, iterations = expected_doubling(1, 50)
    FAIL["step"] = k + 1
    with pytest.raises(ModuleFailedError, match=f"wf/grow/iter-{k}/step"):
        run(doubling(), inputs, staging=staging)
    predicted = plan(doubling(), inputs, staging=staging)
    assert predicted.loops() == {"wf/grow": k}
    assert predicted.will_run() == ["wf/after", f"wf/grow/iter-{k}/step"]
    FAIL.clear()
    trace = Trace()
    assert run(doubling(), inputs, staging=staging, trace=trace)["result"] == ("after", (("v", value),))
    assert trace.loop_starts == {"wf/grow": k}
    assert sorted(trace.ran) == sorted([f"wf/grow/iter-{j}/step" for j in range(k, iterations)] + ["wf/after"])


def test_a_recomputed_iteration_recomputes_every_later_one(staging: StagingArea) -> None:
    """Consistency (§2.2): a new value for iteration k's out-port makes the later iterations' inputs new too,
    even where values computed from the old one are still stored; each is recomputed, and cut off (not run) when
    its inputs come out as they were."""
    inputs = {"start": 1, "limit": 50}
    value, iterations = expected_doubling(1, 50)
    run(doubling(), inputs, staging=staging)
    for key in ("wf/grow/iter-1/step/value", "wf/grow/value", "wf/after/out"):
        staging.delete(key)
    predicted = plan(doubling(), inputs, staging=staging)
    assert predicted.loops() == {"wf/grow": 1}
    trace = Trace()
    assert run(doubling(), inputs, staging=staging, trace=trace)["result"] == ("after", (("v", value),))
    recomputed = [f"wf/grow/iter-{j}/step" for j in range(1, iterations)] + ["wf/after"]
    assert sorted(trace.ran + trace.cut_off) == sorted(recomputed)
    assert sorted(trace.ran) == ["wf/after", "wf/grow/iter-1/step"]  # the others' inputs came out the same
    # Without what early cutoff keeps, every one of them runs.
    for j in range(iterations):
        staging.delete(f"wf/grow/iter-{j}/step/=trace")
    for key in ("wf/grow/iter-1/step/value", "wf/grow/value", "wf/after/out"):
        staging.delete(key)
    trace = Trace()
    assert run(doubling(), inputs, staging=staging, trace=trace)["result"] == ("after", (("v", value),))
    assert sorted(trace.ran) == sorted(recomputed)


def test_stored_loop_result_is_reused_and_a_changed_limit_reruns_it(staging: StagingArea) -> None:
    run(doubling(), {"start": 1, "limit": 20}, staging=staging)
    trace = Trace()
    run(doubling(), {"start": 1, "limit": 20}, staging=staging, trace=trace)
    assert trace.ran == [] and "wf/grow" not in {i.path for i in trace.invocations}
    trace = Trace()
    value, iterations = expected_doubling(1, 40)
    assert run(doubling(), {"start": 1, "limit": 40}, staging=staging, trace=trace)["result"][1] == (("v", value),)
    assert sum("/iter-" in p for p in trace.ran) == iterations  # the limit feeds every iteration


# -- random workflows, interrupted and resumed ---------------------------------------------------------------------


def check_protocol(trace: Trace) -> None:
    """§2.3 in a run: each child was started with its parent's ``child_inputs``/``child_outputs``, and values
    went to recomputed ports only, each once."""
    for inv in trace.invocations:
        parent, _, name = inv.path.rpartition("/")
        if parent in trace.states and "/iter-" not in inv.path:
            assert inv.recomputed == trace.states[parent].child_inputs(name), inv
            assert inv.requested == trace.states[parent].child_outputs(name), inv
    seen = set()
    for path, vertex in trace.forwarded:
        assert trace.states[path].state[vertex] == "recompute"
        assert (path, vertex) not in seen
        seen.add((path, vertex))


@st.composite
def workflows(draw: st.DrawFn) -> tuple[Module, dict[str, int], list[str]]:
    """A random composite of 2-6 units, each a simple module or a composite of 1-3 wired simple modules."""
    ins = [f"i{k}" for k in range(draw(st.integers(1, 2)))]
    sources = [f"{i}" for i in ins]
    children: list[Module] = []
    connections: list[str] = []
    tags: list[str] = []
    for u in range(draw(st.integers(2, 6))):
        name = f"u{u}"
        arity = draw(st.integers(1, 2))
        feeds = [draw(st.sampled_from(sources)) for _ in range(arity)]
        if draw(st.booleans()):
            children.append(node(name, [f"p{k}" for k in range(arity)]))
            tags.append(name)
            outs = ["out"]
        else:
            inner_sources = [f"p{k}" for k in range(arity)]
            inner: list[Module] = []
            inner_wires: list[str] = []
            for m in range(draw(st.integers(1, 3))):
                leaf = f"{name}m{m}"
                leaf_feeds = draw(st.lists(st.sampled_from(inner_sources), min_size=1, max_size=2, unique=True))
                inner.append(node(leaf, [f"q{k}" for k in range(len(leaf_feeds))]))
                tags.append(leaf)
                inner_wires += [f"{s}>{leaf}.q{k}" for k, s in enumerate(leaf_feeds)]
                inner_sources.append(f"{leaf}.out")
            leaves = [s for s in inner_sources if "." in s]
            outs = [f"r{k}" for k in range(draw(st.integers(1, min(2, len(leaves)))))]
            picked = draw(st.lists(st.sampled_from(leaves), min_size=len(outs), max_size=len(outs), unique=True))
            inner_wires += [f"{s}>{o}" for s, o in zip(picked, outs, strict=True)]
            children.append(
                Module(
                    name,
                    Kind.COMPOSITE,
                    tuple(Port(f"p{k}") for k in range(arity)),
                    tuple(Port(o) for o in outs),
                    submodules=tuple(inner),
                    connections=wire(*inner_wires),
                )
            )
        connections += [f"{s}>{name}.p{k}" for k, s in enumerate(feeds)]
        sources += [f"{name}.{o}" for o in outs]
    produced = [s for s in sources if "." in s]
    outs = [f"o{k}" for k in range(draw(st.integers(1, 2)))]
    connections += [f"{draw(st.sampled_from(produced))}>{o}" for o in outs]
    wf = Module(
        "wf", Kind.COMPOSITE, tuple(Port(i) for i in ins), tuple(Port(o) for o in outs),
        submodules=tuple(children), connections=wire(*connections),
    )  # fmt: skip
    values = {i: draw(st.integers(0, 3)) for i in ins}
    return wf, values, tags


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows(), st.data())
def test_random_workflows_killed_at_a_module_resume_to_the_same_outputs(
    case: tuple[Module, dict[str, int], list[str]], data: st.DataObject
) -> None:
    wf, values, all_tags = case
    CALLS.clear()
    FAIL.clear()
    reference = run(wf, values)
    ran_fully = set(CALLS)
    if not ran_fully:
        return
    victim = data.draw(st.sampled_from(sorted(ran_fully)))
    staging = MemoryStaging()
    CALLS.clear()
    FAIL[victim] = 1
    with pytest.raises(ModuleFailedError, match=victim):
        run(wf, values, staging=staging)
    FAIL.clear()
    predicted = plan(wf, values, staging=staging)
    assert any(p.endswith("/" + victim) for p in predicted.will_run())
    trace = Trace()
    assert run(wf, values, staging=staging, trace=trace) == reference
    # Modules that were running when the victim failed finished and recorded what they made: the plan names
    # them among those that may be cut off, and they are, if their inputs come out as they were.
    assert sorted(trace.ran + trace.cut_off) == predicted.will_run()
    assert set(trace.cut_off) <= set(predicted.may_be_cut_off())
    check_protocol(trace)
    # Every module that ran before the failure and is not downstream of the victim was not run again.
    for path in trace.ran:
        assert path.rsplit("/", 1)[1] in all_tags
    again = Trace()
    run(wf, values, staging=staging, trace=again)
    assert again.ran == []

"""``ComputeResumeState`` (seed 004 §2.4) against brute force: consistent (Definition 2.2), optimal (Lemma 2.11),
independent of the queue (Lemma 2.12), the same when ``H`` is asked lazily and asynchronously."""

from __future__ import annotations

import asyncio
import itertools
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Iterable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.errors import ModuleDefinitionError, ResumePreconditionError
from pytimely.workflow.graph import DependencyGraph, Vertex
from pytimely.workflow.model import Connection, Kind, Module, PortRef, minimal_deps, ports
from pytimely.workflow.resume import (
    Fifo,
    Lifo,
    Priority,
    ResumeState,
    SetQueue,
    compute_resume_state,
    compute_resume_state_async,
)
from tests.profiles import examples


def simple(name: str, ins: Iterable[str], outs: Iterable[str], deps: dict[str, set[str]]) -> Module:
    return Module(name, Kind.SIMPLE, ports(ins), ports(outs), {i: frozenset(o) for i, o in deps.items()})


def wire(source: str, target: str) -> Connection:
    """``"N.f" -> "P.j"``; a bare name is the parent's port."""

    def ref(text: str) -> PortRef:
        module, _, port = text.rpartition(".")
        return PortRef(module or None, port)

    return Connection(ref(source), ref(target))


def example_2_1() -> Module:
    """The module of seed 004's Example 2.1 (Fig. 1).

    Our reading of the figure, which the text describes only in part: deps_N(d) = {f, h} and
    deps_N(e) = {g, h} as stated; deps_P(i) = {l} as stated, deps_P(j) = {l, m} and deps_P(k) = {m} (so that
    q depends on a alone, as the text says, and m on both j and k); deps_Q(n) = deps_Q(o) = {p}.
    """
    n = simple("N", "de", "fgh", {"d": {"f", "h"}, "e": {"g", "h"}})
    p = simple("P", "ijk", "lm", {"i": {"l"}, "j": {"l", "m"}, "k": {"m"}})
    q = simple("Q", "no", "p", {"n": {"p"}, "o": {"p"}})
    connections = [
        wire("a", "P.i"), wire("a", "N.d"), wire("b", "N.e"), wire("c", "Q.o"),
        wire("N.f", "P.j"), wire("N.g", "P.k"), wire("N.h", "Q.n"),
        wire("P.l", "q"), wire("P.m", "r"), wire("Q.p", "s"),
    ]  # fmt: skip
    return Module("M", Kind.COMPOSITE, ports("abc"), ports("qrs"), submodules=(n, p, q), connections=tuple(connections))


# -- brute force ---------------------------------------------------------------------------------------


class BruteForce:
    """Every consistent checkpoint (Definition 2.2) for one (M, I*, O*), by enumerating subsets as bitmasks.

    Whether a set B is consistent does not depend on H except through B ⊆ H ∪ S, so the subsets are
    enumerated once and filtered for each H.
    """

    def __init__(self, module: Module, recomputed: frozenset[str], requested: frozenset[str]) -> None:
        self.graph = DependencyGraph(module, requested)
        self.paths = self.graph.maximal_paths_to({Vertex.outport(o) for o in requested})
        self.i_star = {Vertex.inport(i) for i in recomputed}
        # Only vertices on some path matter; others can be in a checkpoint or not without changing anything.
        self.candidates = sorted({v for path in self.paths for v in path} - self.i_star)
        index = {v: k for k, v in enumerate(self.candidates)}
        masks = np.arange(1 << len(self.candidates), dtype=np.int64)
        ok = np.ones(len(masks), dtype=bool)
        for path in self.paths:
            bits = sum(1 << index[v] for v in path if v in index)
            fixed = sum(1 for v in path if v in self.i_star)
            ok &= np.bitwise_count(masks & bits) + fixed == 1
        self.masks = masks[ok]
        self.reach: dict[int, set[Vertex]] = {}

    def checkpoints(self, h: frozenset[Vertex]) -> list[tuple[frozenset[Vertex], set[Vertex]]]:
        """The consistent checkpoints within ``H ∪ S``, each with the set reachable from it and ``I*``."""
        allowed = sum(1 << k for k, v in enumerate(self.candidates) if v in h or not v.is_port)
        found = []
        for m in self.masks[(self.masks & ~allowed) == 0].tolist():
            b = frozenset(v for k, v in enumerate(self.candidates) if m >> k & 1)
            if m not in self.reach:
                self.reach[m] = self.graph.reachable_from(b | self.i_star)
            found.append((b, self.reach[m]))
        return found


def check_against_brute_force(
    module: Module,
    h: frozenset[Vertex],
    recomputed: frozenset[str],
    requested: frozenset[str],
    brute: BruteForce | None = None,
) -> ResumeState:
    result = compute_resume_state(module, h, recomputed, requested)
    graph = result.graph
    i_star = {Vertex.inport(i) for i in recomputed}
    a = result.ready
    # Lemma 2.5: the checkpoint holds only ports with values and submodules, never a recomputed in-port.
    assert all((v in h or not v.is_port) and v not in i_star for v in a)
    brute = brute or BruteForce(module, recomputed, requested)
    # Corollary 2.9 / Definition 2.2: every maximal path ending in O* holds exactly one vertex of A ∪ I*.
    for path in brute.paths:
        assert sum(1 for v in path if v in a or v in i_star) == 1, path
    # Lemma 2.6: along every edge, v not irrelevant <=> w recomputed.
    for v, w in graph.edges:
        assert (result.state[v] != "irrelevant") == (result.state[w] == "recompute"), (v, w)
    # Lemma 2.10: W is the union of the witnesses of edges leaving vertices reachable from A ∪ I*.
    reach = graph.reachable_from(a | i_star)
    expected_w = {(v.module, o) for v, w in graph.edges if v in reach and v.module for o in graph.outports(v, w)}
    assert result.witnesses == expected_w
    assert reach == {v for v, s in result.state.items() if s != "irrelevant"}
    # Lemma 2.11 / property (iv): optimal — every consistent checkpoint reaches at least as much.
    checkpoints = brute.checkpoints(h)
    assert checkpoints, "the algorithm found a checkpoint where brute force found none"
    for b, b_reach in checkpoints:
        assert reach <= b_reach, (sorted(map(str, b)), sorted(map(str, a)))
    return result


def every_queue(module: Module, h: frozenset[Vertex], recomputed: frozenset[str], requested: frozenset[str]) -> None:
    """Lemma 2.12: FIFO, LIFO, priority (two orders), set semantics and the lazy async run agree."""
    everything = sorted(DependencyGraph(module).vertices)
    shuffled = random.Random(len(h)).sample(everything, k=len(everything))
    rank = {v: k for k, v in enumerate(shuffled)}
    results = [
        compute_resume_state(module, h, recomputed, requested, queue)
        for queue in (Fifo(), Lifo(), Priority(), Priority(rank.__getitem__), SetQueue())
    ]
    for other in results[1:]:
        assert other.state == results[0].state
        assert other.witnesses == results[0].witnesses

    async def lazy(v: Vertex) -> bool:
        await asyncio.sleep(random.Random(hash(v) & 0xFFFF).random() * 0.002)
        return v in h

    lazy_result = asyncio.run(compute_resume_state_async(module, lazy, recomputed, requested))
    assert lazy_result.state == results[0].state
    assert lazy_result.witnesses == results[0].witnesses


# -- Example 2.1, every (O*, I*, H) ----------------------------------------------------------------------


def subsets(items: Iterable[str]) -> list[frozenset[str]]:
    items = list(items)
    return [frozenset(c) for r in range(len(items) + 1) for c in itertools.combinations(items, r)]


def test_example_2_1_as_in_figure_2() -> None:
    """Fig. 2's run: I* = {a}, O* = {r, s}; the text's witnesses and the pruned edges."""
    module = example_2_1()
    graph = DependencyGraph(module, {"r", "s"})
    assert graph.outports(Vertex.child_in("N", "d"), Vertex.child_in("P", "j")) == {"f"}
    assert graph.outports(Vertex.submodule("N"), Vertex.child_in("P", "j")) == {"f"}
    assert (Vertex.inport("a"), Vertex.child_in("P", "i")) not in graph.edges  # i only feeds l, which feeds q
    h = frozenset({Vertex.inport("b"), Vertex.inport("c"), Vertex.child_in("P", "k"), Vertex.child_in("Q", "o")})
    result = check_against_brute_force(module, h, frozenset("a"), frozenset("rs"))
    # N runs again for d; h needs e too, so e is sent again and g, hence k, change as well.
    assert result.child_inputs("P") == {"j", "k"}
    assert result.child_inputs("N") == {"d", "e"}
    assert result.child_outputs("P") == {"m"}
    assert result.child_outputs("N") == {"f", "g", "h"}
    assert result.state[Vertex.inport("b")] == "ready" and result.state[Vertex.child_in("Q", "o")] == "ready"
    assert result.state[Vertex.inport("c")] == "irrelevant"


@pytest.mark.parametrize("requested", [s for s in subsets("qrs") if s], ids=lambda s: "".join(sorted(s)))
def test_example_2_1_every_recomputed_set_and_every_h(requested: frozenset[str]) -> None:
    module = example_2_1()
    graph = DependencyGraph(module, requested)
    # H beyond the pruned graph's vertices never matters (the algorithm never looks at them): checked below.
    relevant = sorted(v for v in graph.vertices if v.is_port and (graph.successors[v] or graph.predecessors[v]))
    relevant += sorted(Vertex.outport(o) for o in requested if Vertex.outport(o) not in relevant)
    outside = sorted(v for v in graph.vertices if v.is_port and v not in relevant)
    checked = 0
    for recomputed in subsets("abc"):
        brute = BruteForce(module, recomputed, requested)
        for bits in range(1 << len(relevant)):
            h = frozenset(v for k, v in enumerate(relevant) if bits >> k & 1)
            needs = {i for i in "abc" if module.deps[i] & requested}
            if not needs <= {v.port for v in h if v.kind == "in"} | recomputed:
                with pytest.raises(ResumePreconditionError, match="needs in-port"):
                    compute_resume_state(module, h, recomputed, requested)
                continue
            result = check_against_brute_force(module, h, recomputed, requested, brute)
            checked += 1
            if bits % 61 == 0:
                every_queue(module, h, recomputed, requested)
                padded = compute_resume_state(module, h | frozenset(outside), recomputed, requested)
                assert padded.state == result.state and padded.witnesses == result.witnesses
    assert checked > 0


# -- random small modules ----------------------------------------------------------------------------------


@st.composite
def modules(draw: st.DrawFn) -> tuple[Module, frozenset[Vertex], frozenset[str], frozenset[str]]:
    """A random acyclic parent module with 1-4 children, and a random (H, I*, O*) meeting the precondition."""
    parent_ins = [f"i{k}" for k in range(draw(st.integers(1, 3)))]
    parent_outs = [f"o{k}" for k in range(draw(st.integers(1, 3)))]
    children: list[Module] = []
    connections: list[Connection] = []
    available = [PortRef(None, i) for i in parent_ins]
    for c in range(draw(st.integers(1, 4))):
        name = f"C{c}"
        ins = [f"x{k}" for k in range(draw(st.integers(0, 2)))]
        outs = [f"y{k}" for k in range(draw(st.integers(1, 2)))]
        deps = {i: draw(st.sets(st.sampled_from(outs))) for i in ins}
        children.append(simple(name, ins, outs, deps))
        for i in ins:
            source = draw(st.sampled_from(available))
            connections.append(Connection(source, PortRef(name, i)))
        available += [PortRef(name, o) for o in outs]
    for o in parent_outs:
        connections.append(Connection(draw(st.sampled_from(available)), PortRef(None, o)))
    module = Module("R", Kind.COMPOSITE, ports(parent_ins), ports(parent_outs), submodules=tuple(children),
                    connections=tuple(connections))  # fmt: skip
    requested = frozenset(draw(st.sets(st.sampled_from(parent_outs), min_size=1)))
    recomputed = frozenset(draw(st.sets(st.sampled_from(parent_ins))))
    graph = DependencyGraph(module)
    port_vertices = sorted(v for v in graph.vertices if v.is_port)
    h = set(draw(st.sets(st.sampled_from(port_vertices))))
    for i in parent_ins:
        if module.deps[i] & requested and i not in recomputed:
            h.add(Vertex.inport(i))
    return module, frozenset(h), recomputed, requested


@settings(max_examples=examples(300), deadline=None)
@given(modules())
def test_random_modules_against_brute_force_and_every_queue(
    case: tuple[Module, frozenset[Vertex], frozenset[str], frozenset[str]],
) -> None:
    module, h, recomputed, requested = case
    check_against_brute_force(module, h, recomputed, requested)
    every_queue(module, h, recomputed, requested)


# -- deps and bad input ----------------------------------------------------------------------------------------


def test_minimal_deps_of_example_2_1() -> None:
    deps = minimal_deps(example_2_1())
    assert deps == {"a": frozenset("qrs"), "b": frozenset("rs"), "c": frozenset("s")}
    assert example_2_1().deps == deps


def test_the_precondition_names_the_in_port() -> None:
    with pytest.raises(ResumePreconditionError, match="needs in-port 'b'"):
        compute_resume_state(example_2_1(), {Vertex.inport("a")}, set(), {"r"})


def test_bad_modules_and_requests_are_named() -> None:
    n = simple("N", "d", "f", {"d": {"f"}})
    with pytest.raises(ModuleDefinitionError, match="two sources"):
        Module("M", Kind.COMPOSITE, ports("ab"), ports("q"), submodules=(n,),
               connections=(wire("a", "N.d"), wire("b", "N.d"), wire("N.f", "q")))  # fmt: skip
    with pytest.raises(ModuleDefinitionError, match="no submodule 'X'"):
        Module("M", Kind.COMPOSITE, ports("a"), ports("q"), submodules=(n,), connections=(wire("a", "X.d"),))
    with pytest.raises(ModuleDefinitionError, match="starts at no out-port"):
        Module("M", Kind.COMPOSITE, ports("a"), ports("q"), submodules=(n,), connections=(wire("N.zz", "q"),))
    with pytest.raises(ModuleDefinitionError, match="deps names in-port 'x'"):
        simple("S", "d", "f", {"x": {"f"}})
    with pytest.raises(ResumePreconditionError, match="O\\* is empty"):
        compute_resume_state(example_2_1(), set(), {"a"}, set())
    with pytest.raises(ModuleDefinitionError, match="no out-port 'z'"):
        compute_resume_state(example_2_1(), set(), {"a", "b", "c"}, {"z"})


def test_lazy_checks_overlap_and_ask_only_what_line_14_needs() -> None:
    """The async variant has several "v ∈ H?" checks in flight at once, asks each vertex at most once, and asks
    only about ports the eager run asks about at line 14, or that the precondition needs."""
    module = example_2_1()
    h = frozenset(
        {Vertex.inport("b"), Vertex.inport("c"), Vertex.child_in("P", "k"), Vertex.child_in("Q", "o"),
         Vertex.child_in("N", "e"), Vertex.outport("r")}
    )  # fmt: skip
    asked: list[Vertex] = []
    in_flight = 0
    peak = 0
    rng = random.Random(7)

    async def slow(v: Vertex) -> bool:
        nonlocal in_flight, peak
        asked.append(v)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(rng.random() * 0.02)
        in_flight -= 1
        return v in h

    lazy = asyncio.run(compute_resume_state_async(module, slow, {"a"}, {"q", "r", "s"}))
    eager_asked: set[Vertex] = set()

    def recording(v: Vertex) -> bool:
        eager_asked.add(v)
        return v in h

    eager = compute_resume_state(module, recording, {"a"}, {"q", "r", "s"})
    assert lazy.state == eager.state and lazy.witnesses == eager.witnesses
    assert peak >= 2
    assert len(asked) == len(set(asked))
    assert set(asked) <= eager_asked | {Vertex.inport(i) for i in "bc"}


def test_a_failing_lazy_check_fails_the_run_and_cancels_the_others() -> None:
    started: list[Vertex] = []
    cancelled: list[Vertex] = []

    async def failing(v: Vertex) -> bool:
        started.append(v)
        if v == Vertex.outport("s"):
            await asyncio.sleep(0.01)
            raise OSError("staging unreachable")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(v)
            raise
        return True

    async def run() -> None:
        with pytest.raises(OSError, match="staging unreachable"):
            await compute_resume_state_async(example_2_1(), failing, {"a", "b", "c"}, {"r", "s"})
        await asyncio.sleep(0)

    asyncio.run(run())
    assert Vertex.outport("s") in started and cancelled
    assert set(cancelled) == set(started) - {Vertex.outport("s")}


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.one_of(st.integers(0, 5), st.none()), max_size=40))
def test_every_queue_kind_meets_the_specification(ops: list[int | None]) -> None:
    """§2.4's queue contract: dequeue returns x fewer times than enqueue(x) was called; set semantics keep an
    element waiting at most once; FIFO and LIFO dequeue in insertion order and its reverse."""
    vertices = [Vertex.inport(f"p{k}") for k in range(6)]
    queues = {"fifo": Fifo(), "lifo": Lifo(), "priority": Priority(), "set": SetQueue()}
    for name, q in queues.items():
        waiting: list[Vertex] = []
        for op in ops:
            if op is not None:
                q.enqueue(vertices[op])
                if name != "set" or vertices[op] not in waiting:
                    waiting.append(vertices[op])
            elif waiting:
                x = q.dequeue()
                assert x in waiting
                expected = {"fifo": waiting[0], "lifo": waiting[-1], "priority": min(waiting)}.get(name, x)
                assert x == expected
                del waiting[len(waiting) - 1 - waiting[::-1].index(x) if name == "lifo" else waiting.index(x)]
            assert q.empty() == (not waiting)


# -- the cached graph and the cached vertex hash ------------------------------------------------------------

_UNPICKLE_ELSEWHERE = """
import pickle, sys
from pytimely.workflow.graph import Vertex
vertices = pickle.loads(sys.stdin.buffer.read())
fresh = [Vertex(v.kind, v.module, v.port) for v in vertices]
assert vertices == fresh
assert [hash(v) for v in vertices] == [hash(v) for v in fresh] == [hash((v.kind, v.module, v.port)) for v in fresh]
assert all(v in set(fresh) for v in vertices) and set(vertices) == set(fresh)
print(hash(fresh[0]))
"""


def test_a_vertex_unpickled_in_another_process_hashes_and_compares_there() -> None:
    """The hash is computed once per vertex but never pickled: str hashes differ between processes."""
    vertices = [Vertex.inport("a"), Vertex.outport("r"), Vertex.submodule("N"), Vertex.child_in("P", "j")]
    data = pickle.dumps(vertices, protocol=5)
    assert pickle.loads(data) == vertices and [hash(v) for v in pickle.loads(data)] == [hash(v) for v in vertices]
    here = hash(vertices[0])
    seeds = ("1", "2")  # two other hash seeds: at least one differs from this process's hash of "a"
    elsewhere = set()
    for seed in seeds:
        done = subprocess.run(
            [sys.executable, "-c", _UNPICKLE_ELSEWHERE],
            input=data,
            capture_output=True,
            timeout=120,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        elsewhere.add(int(done.stdout))
    assert elsewhere - {here}, "the other processes hashed the vertex as this one does: the test shows nothing"


def test_the_graph_of_a_module_is_built_once_per_requested_set() -> None:
    module = example_2_1()
    graph = DependencyGraph.of(module, {"r", "s"})
    assert DependencyGraph.of(module, ["s", "r"]) is graph
    assert compute_resume_state(module, set(), "abc", "rs").graph is graph
    assert DependencyGraph.of(module, {"r"}) is not graph and DependencyGraph.of(module) is not graph
    fresh = DependencyGraph(module, {"r", "s"})
    assert (fresh.vertices, fresh.edges, fresh.successors, fresh.predecessors) == (
        graph.vertices,
        graph.edges,
        graph.successors,
        graph.predecessors,
    )
    # Another module, equal in every field, has its own graph (modules compare by identity).
    assert DependencyGraph.of(example_2_1(), {"r", "s"}) is not graph

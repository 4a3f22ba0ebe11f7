"""Resume-state speed on a large parent module, each figure against a baseline measured in the same run.

    python bench/bench_resume.py [--children N] [--runs R] [--latency S] [--quick] [--json]

The module: ``N`` simple submodules (default 5,000), each with two in-ports and two out-ports and random
``deps``, every in-port fed by a random earlier out-port or one of 16 parent in-ports; 16 parent out-ports fed
by the last submodules. ``H`` holds a random 90% of the ports (seed 1), ``I*`` one parent in-port, ``O*``
every parent out-port.

(a) defining the module (validation: kinds, sources, types, cycles, minimal deps) against copying the same
    submodules and connections into plain tuples and dicts (what a definition cannot do with less);
(b) ``DependencyGraph(module, O*)`` against one breadth-first search over its edges from every source;
(c) ``compute_resume_state`` with each queue kind against the same breadth-first search (the module's graph is
    built by the first call and then cached on it, as when a workflow resumes the same module again);
(d) the lazy variant with an instant async predicate against the eager one (the cost of asking concurrently);
(e) the lazy variant with a predicate that takes ``--latency`` seconds (default 2 ms, a staging look-up) against
    asking the same checks one after another, as the eager algorithm must.

Best of ``R`` runs (default 3; ``--quick``: 500 submodules, one run). Prints a Markdown table; ``--json`` one JSON
object per row instead.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from harness import Column, Table, best_of, parser, report, runs_of
from pytimely.workflow import (
    Connection,
    DependencyGraph,
    Fifo,
    Kind,
    Lifo,
    Module,
    Port,
    PortRef,
    Priority,
    SetQueue,
    Vertex,
    compute_resume_state,
    compute_resume_state_async,
)


def build(children: int, seed: int = 1) -> tuple[list[Module], list[Connection]]:
    rng = random.Random(seed)
    subs: list[Module] = []
    connections: list[Connection] = []
    available = [PortRef(None, f"i{k}") for k in range(16)]
    for c in range(children):
        deps = {i: frozenset(rng.sample(["y0", "y1"], rng.randint(1, 2))) for i in ("x0", "x1")}
        subs.append(Module(f"c{c}", Kind.SIMPLE, (Port("x0", int), Port("x1", int)),
                           (Port("y0", int), Port("y1", int)), deps))  # fmt: skip
        window = available[-200:]  # mostly local wiring, as real pipelines are
        connections += [Connection(rng.choice(window), PortRef(f"c{c}", i)) for i in ("x0", "x1")]
        available += [PortRef(f"c{c}", "y0"), PortRef(f"c{c}", "y1")]
    connections += [Connection(available[-1 - k], PortRef(None, f"o{k}")) for k in range(16)]
    return subs, connections


def define(subs: list[Module], connections: list[Connection]) -> Module:
    return Module("big", Kind.COMPOSITE, tuple(Port(f"i{k}", int) for k in range(16)),
                  tuple(Port(f"o{k}", int) for k in range(16)), submodules=tuple(subs),
                  connections=tuple(connections))  # fmt: skip


def copy_plain(subs: list[Module], connections: list[Connection]) -> Any:
    by_name = {m.name: (m.input_names, m.output_names, dict(m.deps)) for m in subs}
    by_target = {c.target: c.source for c in connections}
    return by_name, by_target


def bfs(graph: DependencyGraph) -> int:
    seen = set(graph.sources())
    frontier = list(seen)
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph.successors[v]:
                if w not in seen:
                    seen.add(w)
                    nxt.append(w)
        frontier = nxt
    return len(seen)


COLUMNS = [
    Column("what", "what"),
    Column("s", "seconds", "{:.4f}"),
    Column("baseline", "baseline"),
    Column("s", "baseline_seconds", "{:.4f}"),
    Column("ratio", "ratio"),
]


def main() -> None:
    """Measure and print."""
    command = parser(__doc__, runs=3)
    command.add_argument("--children", type=int, default=5000, help="submodules of the module (default 5,000)")
    command.add_argument("--latency", type=float, default=0.002, help="seconds a slow check takes (default 0.002)")
    args = command.parse_args()
    if args.quick:
        args.children = 500
    args.runs = runs_of(args)
    subs, connections = build(args.children)
    module = define(subs, connections)
    requested = {f"o{k}" for k in range(16)}
    rng = random.Random(1)
    graph = DependencyGraph(module, requested)
    ports = sorted(v for v in graph.vertices if v.is_port)
    h = frozenset(v for v in ports if rng.random() < 0.9) | {Vertex.inport(f"i{k}") for k in range(16)}
    recomputed = {"i0"}
    rows: list[dict[str, Any]] = []

    def row(what: str, measured: float, baseline_name: str, baseline: float) -> None:
        rows.append({"what": what, "seconds": round(measured, 5), "baseline": baseline_name,
                     "baseline_seconds": round(baseline, 5), "ratio": round(measured / baseline, 2)})  # fmt: skip

    row("define the module", best_of(args.runs, lambda: define(subs, connections))[0],
        "copy into dicts", best_of(args.runs, lambda: copy_plain(subs, connections))[0])  # fmt: skip
    search = best_of(args.runs, lambda: bfs(graph))[0]
    row(
        "DependencyGraph(module, O*)",
        best_of(args.runs, lambda: DependencyGraph(module, requested))[0],
        "BFS",
        search,
    )
    eager = compute_resume_state(module, h, recomputed, requested)
    for name, make in (("Fifo", Fifo), ("Lifo", Lifo), ("Priority", Priority), ("SetQueue", SetQueue)):
        seconds = best_of(args.runs, lambda m=make: compute_resume_state(module, h, recomputed, requested, m()))[0]
        row(f"compute_resume_state ({name}, graph cached)", seconds, "BFS", search)  # fmt: skip

    async def instant(v: Vertex) -> bool:
        return v in h

    lazy_seconds = best_of(
        args.runs, lambda: asyncio.run(compute_resume_state_async(module, instant, recomputed, requested))
    )[0]
    row("lazy, instant checks", lazy_seconds, "eager",
        best_of(args.runs, lambda: compute_resume_state(module, h, recomputed, requested))[0])  # fmt: skip
    lazy = asyncio.run(compute_resume_state_async(module, instant, recomputed, requested))
    assert lazy.state == eager.state and lazy.witnesses == eager.witnesses

    asked = 0

    def blocking(v: Vertex) -> bool:
        nonlocal asked
        asked += 1
        time.sleep(args.latency)
        return v in h

    async def slow(v: Vertex) -> bool:
        await asyncio.sleep(args.latency)
        return v in h

    sequential = best_of(1, lambda: compute_resume_state(module, blocking, recomputed, requested))[0]
    row(f"lazy, {args.latency * 1000:g} ms checks ({asked} asked)",
        best_of(1, lambda: asyncio.run(compute_resume_state_async(module, slow, recomputed, requested)))[0],
        "eager, the same checks one by one", sequential)  # fmt: skip
    vertices, edges = len(graph.vertices), len(graph.edges)
    facts = {"children": args.children, "vertices": vertices, "edges": edges}
    note = f"{args.children} submodules; pruned graph: {vertices} vertices, {edges} edges; best of {args.runs}"
    report([{**r, **facts} for r in rows], Table(COLUMNS), as_json=args.json, facts=facts, note=note)


if __name__ == "__main__":
    main()

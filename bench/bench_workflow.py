"""The workflow interpreter's own cost, against the same functions called directly, measured in one run.

    python bench/bench_workflow.py [--modules N] [--width W] [--repeat R]

A layered workflow of N trivial simple modules (W per layer, each reading two modules of the layer above)
is run fresh on an in-memory staging area and on a local directory, resumed with nothing to do (every value
checked against its fingerprint), planned, and resumed after the last layer's values were lost. The baseline
calls the same functions in topological order in plain Python. Printed: seconds (best of R) and the
per-module overhead.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from typing import Any

from pytimely.workflow.model import Connection, Kind, Module, Port, PortRef
from pytimely.workflow.runner import plan, run
from pytimely.workflow.staging import LocalStaging, MemoryStaging


def add(a: int, b: int) -> int:
    """A module's work: next to nothing, so what is measured is the interpreter."""
    return a + b


def layered(n: int, width: int) -> tuple[Module, list[list[str]]]:
    """N modules in layers of ``width``; module j of a layer reads modules j and j+1 (mod width) of the one above."""
    layers: list[list[str]] = []
    children: list[Module] = []
    wires: list[Connection] = []
    for k in range(n):
        layer, j = divmod(k, width)
        if j == 0:
            layers.append([])
        name = f"m{k}"
        layers[-1].append(name)
        children.append(Module(name, Kind.SIMPLE, (Port("a"), Port("b")), (Port("out"),), function=add))
        if layer == 0:
            sources = [PortRef(None, "x"), PortRef(None, "x")]
        else:
            above = layers[layer - 1]
            sources = [PortRef(above[j % len(above)], "out"), PortRef(above[(j + 1) % len(above)], "out")]
        wires += [Connection(sources[0], PortRef(name, "a")), Connection(sources[1], PortRef(name, "b"))]
    outs = layers[-1]
    wires += [Connection(PortRef(m, "out"), PortRef(None, f"o{m}")) for m in outs]
    wf = Module(
        "bench", Kind.COMPOSITE, (Port("x"),), tuple(Port(f"o{m}") for m in outs),
        submodules=tuple(children), connections=tuple(wires),
    )  # fmt: skip
    return wf, layers


def direct(layers: list[list[str]], width: int, x: int) -> dict[str, int]:
    """The baseline: the same additions in plain Python."""
    values: dict[str, int] = {}
    for layer, names in enumerate(layers):
        for j, name in enumerate(names):
            if layer == 0:
                values[name] = add(x, x)
            else:
                above = layers[layer - 1]
                values[name] = add(values[above[j % len(above)]], values[above[(j + 1) % len(above)]])
    return {f"o{m}": values[m] for m in layers[-1]}


def best(repeat: int, fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=200)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    wf, layers = layered(args.modules, args.width)
    n = args.modules
    assert run(wf, {"x": 1}) == direct(layers, args.width, 1)
    rows: list[tuple[str, float]] = [("plain Python calls", best(args.repeat, lambda: direct(layers, args.width, 1)))]
    rows.append(("fresh run, memory staging", best(args.repeat, lambda: run(wf, {"x": 1}, staging=MemoryStaging()))))
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1 << 30))

        def fresh_local() -> None:
            run(wf, {"x": 1}, staging=LocalStaging(f"{tmp}/fresh{next(counter)}", durable=False))

        rows.append(("fresh run, local staging (no fsync)", best(args.repeat, fresh_local)))
        stage = LocalStaging(f"{tmp}/kept", durable=False)
        run(wf, {"x": 1}, staging=stage)
        rows.append(("resume, nothing to run, local", best(args.repeat, lambda: run(wf, {"x": 1}, staging=stage))))
        rows.append(("plan, nothing to run, local", best(args.repeat, lambda: plan(wf, {"x": 1}, staging=stage))))

        def lose_last_layer() -> None:
            for m in layers[-1]:
                stage.delete(f"bench/{m}/out")
            run(wf, {"x": 1}, staging=stage)

        rows.append((f"resume, last {len(layers[-1])} lost, local", best(args.repeat, lose_last_layer)))
    base = rows[0][1]
    print(f"{n} modules in layers of {args.width}, best of {args.repeat}")
    for label, seconds in rows:
        per = (seconds - base) / n * 1e3
        print(f"  {label:<38} {seconds * 1e3:9.2f} ms   {per:7.3f} ms/module over plain calls")


if __name__ == "__main__":
    main()

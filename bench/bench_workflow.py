"""The workflow interpreter's own cost, against the same functions called directly, measured in one run.

    python bench/bench_workflow.py [--modules N] [--width W] [--runs R] [--input-mb MB] [--skip-large]
                                   [--quick] [--json]

A layered workflow of N trivial simple modules (W per layer, each reading two modules of the layer above)
is run fresh on an in-memory staging area and on a local directory, resumed with nothing to do (every value
checked against its fingerprint), planned, and resumed after the last layer's values were lost. The baseline
calls the same functions in topological order in plain Python. Printed: seconds (best of R) and the
per-module overhead.

Then the costs of what keeps runs from going stale, each against a baseline of the same run (taking turns):
watching the files a module writes (a call on the thread executor, watched against not), the audit hook left in
the process (opening a file, with the hook against without, in two fresh interpreters), and checking the files
modules declare before their values are reused (a resume with nothing to run where every module declares a file,
against the same workflow declaring none).

Then (unless ``--skip-large``): the content fingerprint of an ``--input-mb`` file (1 GB by default, made in a
temporary folder and deleted) the first time and the second (from the size-and-mtime cache), against reading the
file once; the cost of taking and releasing a local staging area's lock, against a resume with nothing to do;
and the peak memory of a 25-iteration loop of 40 MB arrays on local staging, against holding one such array.

Prints a Markdown table per part; ``--json`` prints one JSON object per row instead. ``--quick``: 40 modules, one
run each, no large input.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from harness import Column, Row, Table, best_of, parser, report, runs_of, taking_turns
from pytimely.workflow.content import FingerprintCache, content_fingerprint
from pytimely.workflow.executors import Call, ThreadExecutor
from pytimely.workflow.model import Connection, Kind, Module, Port, PortRef
from pytimely.workflow.planning import plan
from pytimely.workflow.runner import run
from pytimely.workflow.staging import LocalStaging, MemoryStaging, staging_lock


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


def cost(what: str, value: float, unit: str, baseline: str, baseline_value: float) -> Row:
    """A row of the second table: a figure in ``unit`` against its baseline's in the same unit, and their ratio."""
    return {"what": what, "value": round(value, 3), "unit": unit, "baseline": baseline,
            "baseline_value": round(baseline_value, 3), "ratio": round(value / baseline_value, 5)}  # fmt: skip


INTERPRETER = [
    Column("what", "what"),
    Column("ms", "seconds", lambda v: f"{v * 1e3:.2f}"),
    Column("ms/module over plain calls", "ms_per_module_over_plain", "{:.3f}"),
]
COSTS = [
    Column("what", "what"),
    Column("figure", lambda r: f"{r['value']:g} {r['unit']}"),
    Column("baseline", "baseline"),
    Column("baseline figure", lambda r: f"{r['baseline_value']:g} {r['unit']}"),
    Column("ratio", "ratio", "{:.3g}x"),
]


def main() -> None:
    """Measure and print the tables."""
    command = parser(__doc__, runs=3)
    command.add_argument("--modules", type=int, default=200, help="modules of the layered workflow (default 200)")
    command.add_argument("--width", type=int, default=10, help="modules per layer (default 10)")
    command.add_argument("--input-mb", type=int, default=1024, help="size of the large input file (default 1024)")
    command.add_argument("--skip-large", action="store_true", help="leave out the large input, the lock and the loop")
    args = command.parse_args()
    if args.quick:
        args.modules, args.skip_large = 40, True
    args.runs = runs_of(args)
    wf, layers = layered(args.modules, args.width)
    n = args.modules
    assert run(wf, {"x": 1}) == direct(layers, args.width, 1)
    timings: list[tuple[str, float]] = [
        ("plain Python calls", best_of(args.runs, lambda: direct(layers, args.width, 1))[0])
    ]
    timings.append(
        ("fresh run, memory staging", best_of(args.runs, lambda: run(wf, {"x": 1}, staging=MemoryStaging()))[0])
    )
    with tempfile.TemporaryDirectory() as tmp:
        counter = iter(range(1 << 30))

        def fresh_local() -> None:
            run(wf, {"x": 1}, staging=LocalStaging(f"{tmp}/fresh{next(counter)}", durable=False))

        timings.append(("fresh run, local staging (no fsync)", best_of(args.runs, fresh_local)[0]))
        stage = LocalStaging(f"{tmp}/kept", durable=False)
        run(wf, {"x": 1}, staging=stage)
        timings.append(
            ("resume, nothing to run, local", best_of(args.runs, lambda: run(wf, {"x": 1}, staging=stage))[0])
        )
        timings.append(
            ("plan, nothing to run, local", best_of(args.runs, lambda: plan(wf, {"x": 1}, staging=stage))[0])
        )

        def lose_last_layer() -> None:
            for m in layers[-1]:
                stage.delete(f"bench/{m}/out")
            run(wf, {"x": 1}, staging=stage)

        timings.append((f"resume, last {len(layers[-1])} lost, local", best_of(args.runs, lose_last_layer)[0]))
    base = timings[0][1]
    interpreter = [
        {"what": label, "modules": n, "seconds": round(seconds, 6),
         "ms_per_module_over_plain": round((seconds - base) / n * 1e3, 4)}
        for label, seconds in timings
    ]  # fmt: skip
    costs = [bench_watch(args.runs), bench_hook(), bench_declared(args.modules, args.width, args.runs)]
    if not args.skip_large:
        costs += bench_input(args.input_mb)
        costs.append(bench_lock(wf, args.runs))
        costs.append(bench_loop_memory())
    tables = [
        Table(INTERPRETER, interpreter, f"The interpreter: {n} modules in layers of {args.width}, against plain calls"),
        Table(COSTS, costs, "What keeps runs from going stale, and large inputs, each against a baseline"),
    ]
    report(interpreter + costs, tables, as_json=args.json, note=f"best of {args.runs}")


def bench_watch(repeat: int) -> Row:
    """A module call on the thread executor with the files it writes watched, against the same call not watched."""
    calls = 2000

    async def many(watch: bool) -> float:
        async with ThreadExecutor(1) as executor:
            began = time.perf_counter()
            for _ in range(calls):
                await executor.run(Call("bench/m", add, {"a": 1, "b": 2}, watch=watch))
            return (time.perf_counter() - began) / calls

    best = taking_turns(repeat, {"plain": lambda: asyncio.run(many(False)),
                                 "watched": lambda: asyncio.run(many(True))}, key=float)  # fmt: skip
    plain, watched = best["plain"], best["watched"]
    return cost("a call watched for the files it writes", watched * 1e6, "us", "the same call not watched", plain * 1e6)


HOOK = """
import os, sys, tempfile, time
if sys.argv[1] == "hook":
    from pytimely.workflow import writes
    writes._install()
path = os.path.join(tempfile.mkdtemp(), "f")
open(path, "w").close()
best = float("inf")
for _ in range(5):
    began = time.perf_counter()
    for _ in range(20000):
        open(path).close()
    best = min(best, time.perf_counter() - began)
print(best / 20000)
"""


def bench_hook() -> Row:
    """What the audit hook, once installed, costs code that no module runs: opening a file, with it and without."""
    env = {**os.environ}
    times = {}
    for mode in ("plain", "hook", "plain", "hook"):
        done = subprocess.run([sys.executable, "-c", HOOK, mode], capture_output=True, text=True, check=True,
                              env=env, timeout=600)  # fmt: skip
        times[mode] = min(times.get(mode, float("inf")), float(done.stdout))
    return cost("opening a file outside any module, audit hook installed", times["hook"] * 1e6, "us",
                "the same without the hook", times["plain"] * 1e6)  # fmt: skip


def declaring(n: int, width: int, folder: str) -> Module:
    """The layered workflow, every module declaring a file of its own (which it writes)."""
    wf, _ = layered(n, width)
    declared = {"writes": ("{name}",)}
    children = [
        dataclasses.replace(child, function=write_and_add, params={"name": f"{folder}/{child.name}.txt"}, **declared)
        for child in wf.submodules
    ]
    return dataclasses.replace(wf, submodules=tuple(children), path="")


def write_and_add(a: int, b: int, *, name: str) -> int:
    """``add``, writing its result to the file ``name`` too."""
    Path(name).write_text(str(a + b))
    return a + b


def bench_declared(n: int, width: int, repeat: int) -> Row:
    """A resume with nothing to run where every module declares a file (each checked against what it wrote),
    against the same workflow declaring none."""
    with tempfile.TemporaryDirectory() as tmp:
        plain_wf, _ = layered(n, width)
        files_wf = declaring(n, width, f"{tmp}/files")
        os.mkdir(f"{tmp}/files")
        plain_stage = LocalStaging(f"{tmp}/plain", durable=False)
        files_stage = LocalStaging(f"{tmp}/declared", durable=False)
        run(plain_wf, {"x": 1}, staging=plain_stage)
        run(files_wf, {"x": 1}, staging=files_stage)
        best = taking_turns(repeat, {
            "plain": lambda: best_of(1, lambda: run(plain_wf, {"x": 1}, staging=plain_stage))[0],
            "declared": lambda: best_of(1, lambda: run(files_wf, {"x": 1}, staging=files_stage))[0],
        }, key=float)  # fmt: skip
    plain, declared = best["plain"], best["declared"]
    return cost(f"resume with nothing to run, {n} modules each declaring a file", declared * 1e3, "ms",
                "the same workflow declaring none", plain * 1e3)  # fmt: skip


def bench_input(megabytes: int) -> list[Row]:
    """Fingerprinting a large input file: first (read and hashed) and second (cached), against one plain read."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input.bin"
        block = os.urandom(64 << 20)
        with open(path, "wb") as f:
            for _ in range(max(1, megabytes // 64)):
                f.write(block)
        past = time.time() - 3600  # not racy: the cache may keep it
        os.utime(path, (past, past))
        start = time.perf_counter()
        with open(path, "rb") as f:
            buf = bytearray(4 << 20)
            while f.readinto(buf):
                pass
        read = time.perf_counter() - start
        cache = FingerprintCache(Path(tmp) / "cache.json")
        start = time.perf_counter()
        content_fingerprint(path, cache)
        first = time.perf_counter() - start
        cache.save()
        again = FingerprintCache(Path(tmp) / "cache.json")
        start = time.perf_counter()
        content_fingerprint(path, again)
        second = time.perf_counter() - start
        size = path.stat().st_size / (1 << 20)
    what = f"content fingerprint of a {size:.0f} MB file"
    return [
        cost(f"{what}, first time (read and SHA-256)", first * 1e3, "ms", "reading it once", read * 1e3),
        cost(f"{what}, second time (size-and-mtime cache)", second * 1e3, "ms", "reading it once", read * 1e3),
    ]


def bench_lock(wf: Module, repeat: int) -> Row:
    """Taking and releasing a local staging area's lock, against a resume that runs nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        stage = LocalStaging(f"{tmp}/kept", durable=False)
        run(wf, {"x": 1}, staging=stage)
        resume = best_of(repeat, lambda: run(wf, {"x": 1}, staging=stage))[0]
        n = 1000
        start = time.perf_counter()
        for _ in range(n):
            with staging_lock(stage, "bench"):
                pass
        each = (time.perf_counter() - start) / n
    return cost("staging lock, local: taking and releasing it", each * 1e6, "us", "a resume with nothing to run",
                resume * 1e6)  # fmt: skip


LOOP = """
import json, resource, sys
from typing import NamedTuple
import numpy as np
from pytimely.workflow import composite, loop, simple
from pytimely.workflow.runner import run

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

@simple
def start(n: int) -> np.ndarray:
    return np.full(5 << 20, float(n))

@simple
def step(x: np.ndarray) -> np.ndarray:
    return x + 1.0

@simple
def more(x: np.ndarray) -> bool:
    return bool(x[0] < 25)

class State(NamedTuple):
    x: np.ndarray

@loop
def grow(x: np.ndarray) -> State:
    y = step(x)
    return State(x=y), more(y)

@simple
def first(x: np.ndarray) -> float:
    return float(x[0])

@composite
def workflow(n: int) -> float:
    return first(grow(start(n)).x)

one = np.full(5 << 20, 1.0)
one += 1
del one
before = peak()
run(workflow, {"n": 0}, staging=sys.argv[1])
print(json.dumps({"before": before, "after": peak()}))
"""


def bench_loop_memory() -> Row:
    """Peak RSS of a 25-iteration loop of 40 MB arrays on local staging, over the process holding one array."""
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "loop.py"
        script.write_text(textwrap.dedent(LOOP), encoding="utf-8")
        done = subprocess.run([sys.executable, str(script), f"{tmp}/stage"], capture_output=True, text=True,
                              check=True, timeout=600)  # fmt: skip
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = figures["before"] / (1 << 20), figures["after"] / (1 << 20)
    return cost("loop of 25 x 40 MB arrays, local staging: peak RSS", after, "MB", "the process holding one array",
                before)  # fmt: skip


if __name__ == "__main__":
    main()

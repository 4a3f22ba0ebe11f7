"""A resumable workflow: load an edge list → clean it → peel it to its 2-core (a loop) → connected components
with a pytimely dataflow → report.

    pytimely workflow run examples/workflows/components.py:workflow --staging /tmp/stage --input csv=edges.csv
    pytimely workflow plan examples/workflows/components.py:workflow --staging /tmp/stage --input csv=edges.csv
    pytimely workflow show examples/workflows/components.py:workflow

``csv`` is a text file of ``src,dst`` lines (integers; other lines are dropped by ``clean``); ``min_size``
(default 2) is the smallest component the report counts. Run it twice: the second run reuses every staged
value and runs nothing. Edit one function and run again: only it runs, and what depends on it unless its output
came out unchanged (early cutoff). Edit ``edges.csv`` in place: what reads it runs (inputs count by content).

``observe`` lets tests watch and interrupt a run: when ``PYTIMELY_EXAMPLE_TRACE`` names a file, each module
appends its name to it; ``PYTIMELY_EXAMPLE_FAIL=NAME[#N]:raise|kill`` makes the N-th call (default first) of
module NAME raise, or kill its own process with SIGKILL.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from typing import Any, NamedTuple

import numpy as np

from pytimely.algorithms import connected_components
from pytimely.workflow.dsl import composite, loop, simple
from pytimely.workflow.executors import dataflow_step
from pytimely.workflow.model import Kind, Module, Port

_calls: Counter[str] = Counter()


def observe(name: str) -> None:
    """Record that module ``name`` runs, and fail here if the environment asks for it."""
    _calls[name] += 1
    trace = os.environ.get("PYTIMELY_EXAMPLE_TRACE")
    if trace:
        with open(trace, "a", encoding="utf-8") as f:
            f.write(name + "\n")
    wanted = os.environ.get("PYTIMELY_EXAMPLE_FAIL", "")
    if not wanted:
        return
    where, _, how = wanted.partition(":")
    target, _, nth = where.partition("#")
    if target == name and _calls[name] == int(nth or 1):
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise RuntimeError(f"asked to fail in {name} (call {_calls[name]})")


class Peeled(NamedTuple):
    """One peeling round's result."""

    edges: Any
    changed: bool


@simple
def load(csv: str) -> list[str]:
    """The file's lines."""
    observe("load")
    with open(csv, encoding="utf-8") as f:
        return f.read().splitlines()


@simple
def clean(lines: list[str]) -> Any:
    """Well-formed ``src,dst`` lines as an ``(n, 2)`` int64 array: no self-loops, each undirected edge once."""
    observe("clean")
    pairs = set()
    for line in lines:
        parts = line.split(",")
        if len(parts) != 2:
            continue
        try:
            a, b = int(parts[0]), int(parts[1])
        except ValueError:
            continue
        if a != b:
            pairs.add((min(a, b), max(a, b)))
    return np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)


@simple
def peel(edges: Any) -> Peeled:
    """One peeling round: drop the edges at vertices of degree one; ``changed`` says whether any went."""
    observe("peel")
    if len(edges) == 0:
        return Peeled(edges, False)
    vertices, degree = np.unique(edges, return_counts=True)
    leaves = vertices[degree < 2]
    keep = ~(np.isin(edges[:, 0], leaves) | np.isin(edges[:, 1], leaves))
    return Peeled(edges[keep], bool((~keep).any()))


class Core(NamedTuple):
    """The loop's out-port (besides ``continue``)."""

    edges: Any


@loop
def core(edges: Any) -> Core:
    """Peel until a round drops nothing: the 2-core's edges."""
    peeled = peel(edges)
    return Core(peeled.edges), peeled.changed


def components_of(scope: Any, edges: Any) -> Any:
    """The dataflow: connected components of the edges (rows ``vertex, label``)."""
    if scope.index == 0:  # the dataflow is built once per worker; the module runs once
        observe("components")
    return connected_components(edges)


components = Module(
    "components",
    Kind.SIMPLE,
    (Port("edges"),),
    (Port("out"),),
    function=dataflow_step(components_of, workers=2),
)


@simple
def report(labels: Any, edges: Any, core_edges: Any, min_size: int) -> dict[str, Any]:
    """Component count and the largest component (components of at least ``min_size`` vertices), edge counts."""
    observe("report")
    final = {int(v): int(label) for v, label in labels}
    sizes = sorted(Counter(final.values()).values(), reverse=True)
    big = [s for s in sizes if s >= min_size]
    return {
        "vertices": len(final),
        "edges": len(edges),
        "core_edges": len(core_edges),
        "components": len(big),
        "largest": big[0] if big else 0,
    }


class Result(NamedTuple):
    """The workflow's out-ports."""

    summary: dict[str, Any]
    labels: Any


@composite
def workflow(csv: str, min_size: int) -> Result:
    """Load, clean, peel to the 2-core, label components, report."""
    edges = clean(load(csv))
    labels = components(edges)
    return Result(report(labels, edges, core(edges).edges, min_size), labels)

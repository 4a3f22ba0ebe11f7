"""The demo `make demo` runs: connected components of a random graph on the dataflow runtime.

Generates a graph of 100,000 vertices and 300,000 edges (seed 42), runs the
``wcc`` job on two in-process workers, checks every label against union-find,
and prints a summary. (Issue: the Spark-hosted version replaces this.)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import wcc


def union_find_labels(edges: np.ndarray) -> dict[int, int]:
    """Smallest vertex id per component, by union-find (the independent check)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {v: find(v) for v in list(parent)}


def main() -> int:
    """Generate, run, check, report."""
    vertices, edge_count, workers = 100_000, 300_000, 2
    edges = np.random.default_rng(42).integers(0, vertices, size=(edge_count, 2))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "edges.csv"
        np.savetxt(path, edges, fmt="%d", delimiter=",")
        started = time.perf_counter()
        table = wcc.run(str(path), workers)
        elapsed = time.perf_counter() - started
    labels = dict(zip(table[:, 0].tolist(), table[:, 1].tolist(), strict=True))
    expected = union_find_labels(edges)
    sizes = np.unique(table[:, 1], return_counts=True)[1]
    print(f"graph: {len(labels)} vertices with edges, {edge_count} edges (seed 42)")
    print(f"components: {len(sizes)}; largest: {sizes.max()} vertices")
    print(f"workers: {workers}, time: {elapsed:.2f} s (reading the CSV included)")
    agrees = labels == expected
    print(f"agrees with union-find: {'yes' if agrees else 'NO'}")
    return 0 if agrees else 1


if __name__ == "__main__":
    sys.exit(main())

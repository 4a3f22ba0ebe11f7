"""The vectorised local-components kernel of connected components against union-find."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.algorithms.connected_components import _components
from tests.profiles import examples


def union_find_roots(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Each row's least row in its component, by union-find with the smaller root kept."""
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return [find(x) for x in range(n)]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    """Small graphs with self-loops, duplicate edges, isolated rows and long paths."""
    n = draw(st.integers(1, 60))
    row = st.integers(0, n - 1)
    edges = draw(st.lists(st.tuples(row, row), max_size=120))
    if draw(st.booleans()):
        # A path visited in a random order: the shape that needs the most hooking rounds.
        order = draw(st.permutations(range(n)))
        edges += list(itertools.pairwise(order))
    return n, edges


@settings(max_examples=examples(300), deadline=None)
@given(graphs())
def test_components_are_union_find_components_rooted_at_least_row(graph: tuple[int, list[tuple[int, int]]]) -> None:
    n, edges = graph
    a = np.array([e[0] for e in edges], dtype=np.int64)
    b = np.array([e[1] for e in edges], dtype=np.int64)
    assert _components(n, a, b).tolist() == union_find_roots(n, edges)


def test_large_random_graph_agrees_with_union_find() -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    edges = rng.integers(0, n, size=(25_000, 2))
    roots = _components(n, edges[:, 0], edges[:, 1])
    assert roots.tolist() == union_find_roots(n, [tuple(e) for e in edges.tolist()])

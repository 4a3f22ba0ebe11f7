"""The Spark-native baselines compute the same components as NetworkX (so the benchmark compares like with like)."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import pytest

from pytimely.errors import InputFormatError
from pytimely.spark import collect
from pytimely.spark.baselines import graphx_components, label_propagation_components

pytestmark = pytest.mark.timeout(300)


def _graph() -> list[tuple[int, int]]:
    """Random edges plus the awkward cases: self-loops, duplicates, reversed duplicates, huge sparse ids, a chain.

    The random part is seven components (24 vertices the largest, its smallest id 7 hops from the farthest);
    the chain of 9 vertices has its smallest id at one end, so its label must travel 8 hops, one per round.
    Each round of either algorithm is several Spark jobs: the graph is as small as covers these cases.
    """
    rng = np.random.default_rng(11)
    edges = [(int(a), int(b)) for a, b in rng.integers(0, 60, size=(40, 2))]
    chain = [(1000 + k + 1, 1000 + k) for k in range(8)]
    big = 10**12
    return [*edges, *chain, (5, 5), (7, 8), (7, 8), (8, 7), (big, big + 3), (big + 3, 17), (big * 2, big * 2)]


def _reference(edges: list[tuple[int, int]]) -> dict[int, int]:
    graph = nx.Graph()
    graph.add_edges_from(edges)
    return {v: min(c) for c in nx.connected_components(graph) for v in c}


@pytest.mark.parametrize("method", [graphx_components, label_propagation_components])
def test_spark_native_components_equal_networkx(spark: Any, method: Any) -> None:
    edges = _graph()
    frame = spark.createDataFrame(edges, "src long, dst long")
    table = collect(method(spark, frame))
    got = dict(zip(table.column("vertex").to_pylist(), table.column("label").to_pylist(), strict=True))
    assert table.num_rows == len(got), "one row per vertex"
    assert got == _reference(edges)


def test_edges_without_integer_src_and_dst_are_refused(spark: Any) -> None:
    with pytest.raises(InputFormatError, match=r"integer columns src and dst; they have \['a', 'b'\]"):
        graphx_components(spark, spark.createDataFrame([(1, 2)], "a long, b long"))
    with pytest.raises(InputFormatError, match="'dst' must hold integers, holds string"):
        label_propagation_components(spark, spark.createDataFrame([(1, "x")], "src long, dst string"))

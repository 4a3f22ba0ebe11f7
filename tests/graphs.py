"""Dataflow graphs shared by the differential tests: seed 000 Fig. 2 (WCC), a nested loop, random ones."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pytimely.order import Product
from pytimely.progress import Builder, Increment, ProductSummary, Source, Target
from pytimely.verify.graph import Graph


def reference(builder: Builder[Any, Any]) -> Graph[Any]:
    """The same graph as the reference model sees it: locations and one-step summaries."""
    return Graph(builder.locations(), builder.weights(), builder.identity)


def wcc(iterations: int = 3) -> tuple[Builder[Any, Any], dict[str, Any]]:
    """Seed 000 Fig. 2: a feeds edges to b.2; b.3 -> c.1; c adds (0, 1); c.2 -> b.1."""
    b: Builder[Any, Any] = Builder(ProductSummary(Increment(0), Increment(0)))
    a = b.add_node(0, 1, name="a")
    bb = b.add_node(2, 1, name="b")
    c = b.add_node(1, 1, {(0, 0): ProductSummary(Increment(0), Increment(1, limit=iterations))}, name="c")
    b.add_edge(Source(a, 0), Target(bb, 1))
    b.add_edge(Source(bb, 0), Target(c, 0))
    b.add_edge(Source(c, 0), Target(bb, 0))
    locs = {
        "a.1": Source(a, 0), "b.1": Target(bb, 0), "b.2": Target(bb, 1), "b.3": Source(bb, 0),
        "c.1": Target(c, 0), "c.2": Source(c, 0),
    }
    return b, locs


def nested_loop() -> tuple[Builder[Any, Any], dict[str, Any]]:
    """input -> outer body <-> outer feedback (+i); the outer body feeds an inner loop (+j) back to itself."""
    ident = ProductSummary(ProductSummary(Increment(0), Increment(0)), Increment(0))
    b: Builder[Any, Any] = Builder(ident)
    inp = b.add_node(0, 1, name="input")
    outer = b.add_node(3, 2, {(0, 0): ident, (1, 0): ident, (2, 1): ident, (0, 1): ident}, name="outer")
    inner = b.add_node(2, 1, name="inner")
    inner_fb = b.add_node(
        1, 1, {(0, 0): ProductSummary(ProductSummary(Increment(0), Increment(0)), Increment(1, limit=2))},
        name="inner-feedback",
    )
    outer_fb = b.add_node(
        1, 1, {(0, 0): ProductSummary(ProductSummary(Increment(0), Increment(1, limit=2)), Increment(0))},
        name="outer-feedback",
    )
    out = b.add_node(1, 0, name="output")
    b.add_edge(Source(inp, 0), Target(outer, 0))
    b.add_edge(Source(outer, 0), Target(inner, 0))
    b.add_edge(Source(inner, 0), Target(inner_fb, 0))
    b.add_edge(Source(inner_fb, 0), Target(inner, 1))
    b.add_edge(Source(inner, 0), Target(outer, 2))
    b.add_edge(Source(outer, 1), Target(outer_fb, 0))
    b.add_edge(Source(outer_fb, 0), Target(outer, 1))
    b.add_edge(Source(outer, 1), Target(out, 0))
    return b, {"input": Source(inp, 0), "inner-feedback": Target(inner_fb, 0)}


def product_times(shape_depth: int) -> st.SearchStrategy[Any]:
    """Small timestamps: products of depth 1 (WCC) or 2 (nested loop)."""
    leaf = st.integers(0, 3)
    if shape_depth == 1:
        return st.builds(Product, leaf, leaf)
    return st.builds(Product, st.builds(Product, leaf, leaf), leaf)


@st.composite
def random_graphs(draw: st.DrawFn) -> Builder[int, Increment]:
    """Operators in a row with forward edges, and back edges only through incrementing feedback operators."""
    b: Builder[int, Increment] = Builder()
    n = draw(st.integers(2, 6))
    nodes = []
    for i in range(n):
        inputs = draw(st.integers(1 if i else 0, 2))
        outputs = draw(st.integers(1, 2))
        summary = {}
        for ip in range(inputs):
            for op in range(outputs):
                if draw(st.booleans()) or (ip == 0 and op == 0):
                    summary[(ip, op)] = [Increment(draw(st.integers(0, 1)), draw(st.none() | st.integers(2, 6)))]
        nodes.append((b.add_node(inputs, outputs, summary, name=f"op{i}"), inputs, outputs))
    # Forward edges from earlier to later operators only: no cycles yet.
    for j, (node, inputs, _) in enumerate(nodes):
        for ip in range(inputs):
            if j == 0:
                continue
            src_node, _, src_outputs = nodes[draw(st.integers(0, j - 1))]
            b.add_edge(Source(src_node, draw(st.integers(0, src_outputs - 1))), Target(node, ip))
    # Feedback: a later output back to an earlier operator through an incrementing operator.
    for _ in range(draw(st.integers(0, 2))):
        fb = b.add_node(1, 1, {(0, 0): Increment(draw(st.integers(1, 2)), draw(st.none() | st.integers(3, 8)))},
                        name="feedback")
        later, _, later_outputs = nodes[draw(st.integers(0, n - 1))]
        earlier, earlier_inputs, _ = nodes[draw(st.integers(0, n - 1))]
        if earlier_inputs == 0:
            continue
        b.add_edge(Source(later, draw(st.integers(0, later_outputs - 1))), Target(fb, 0))
        b.add_edge(Source(fb, 0), Target(earlier, draw(st.integers(0, earlier_inputs - 1))))
    return b

"""Graphs, path summaries, could-result-in and the implied frontier, on the seed's examples."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.profiles import examples

from pytimely.order import Product
from pytimely.progress.timestamp import Increment, ProductSummary
from pytimely.verify import propagation as P
from pytimely.verify.configs import (
    chain3_plus,
    chain_graph,
    diamond,
    nested_loop_graph,
    nested_times,
    propagation_config,
    wcc_graph,
    wcc_times,
)
from pytimely.verify.graph import Graph, could_result_in, implied_frontier
from pytimely.verify.poset import Poset
from pytimely.verify.zmset import ZMSet

ID = ProductSummary(Increment(0), Increment(0))


def step(limit: int = 1) -> ProductSummary[Increment, Increment]:
    return ProductSummary(Increment(0), Increment(1, limit=limit))


def test_wcc_path_summaries() -> None:
    g = wcc_graph(1)
    assert g.path_summary("b.3", "b.3") == {ID}  # the empty path; the loop is dominated
    assert g.path_summary("b.3", "c.1") == {ID}
    assert g.path_summary("b.3", "c.2") == {step()}
    assert g.path_summary("b.3", "b.1") == {step()}
    assert g.path_summary("a.1", "b.3") == {ID}
    assert g.path_summary("a.1", "b.1") == {step()}
    assert g.path_summary("c.1", "a.1") == frozenset()  # not reachable
    assert g.path_summary("b.1", "b.3") == {ID}


def test_wcc_example_of_section_6() -> None:
    """§6: a pointstamp (b.3, (0, 0)) forces c.1 ≤ (0, 0) and c.2, b.1 ≤ (0, 1)."""
    g = wcc_graph(3)
    pts = {"b.3": {Product(0, 0): 1}}
    assert implied_frontier(g, pts, "c.1") == {Product(0, 0)}
    assert implied_frontier(g, pts, "c.2") == {Product(0, 1)}
    assert implied_frontier(g, pts, "b.1") == {Product(0, 1)}
    assert implied_frontier(g, pts, "b.3") == {Product(0, 0)}
    assert implied_frontier(g, pts, "a.1") == frozenset()
    assert implied_frontier(g, pts, "b.2") == frozenset()
    # the same with (3, 0) as in the seed's text
    pts = {"b.3": {Product(3, 0): 1}}
    assert implied_frontier(g, pts, "c.1") == {Product(3, 0)}
    assert implied_frontier(g, pts, "b.1") == {Product(3, 1)}
    # could-result-in, §6
    assert could_result_in(g, ("b.3", Product(0, 0)), ("b.1", Product(0, 1)))
    assert not could_result_in(g, ("b.3", Product(0, 0)), ("b.1", Product(0, 0)))
    assert could_result_in(g, ("a.1", Product(0, 0)), ("c.2", Product(1, 5)))
    assert not could_result_in(g, ("c.1", Product(0, 0)), ("a.1", Product(9, 9)))


def test_implied_frontier_takes_minimal_and_positive() -> None:
    g = wcc_graph(3)
    pts = {"a.1": {Product(0, 0): 1}, "b.1": {Product(0, 1): 1, Product(0, 0): -1}}
    # a.1 reaches b.1 with +1 in the iteration; the negative count at b.1 does not count
    assert implied_frontier(g, pts, "b.1") == {Product(0, 1)}
    assert implied_frontier(g, pts, "b.3") == {Product(0, 0)}
    # a ZMSet works as well as a dict
    assert implied_frontier(g, {"b.3": ZMSet({Product(1, 0): 1})}, "c.2") == {Product(1, 1)}


def test_bounded_iteration_reaches_top() -> None:
    g = wcc_graph(1)
    # iteration 1 cannot go round the loop again: (0, 2) does not exist, nothing is required at b.1
    pts = {"b.3": {Product(0, 1): 1}}
    assert implied_frontier(g, pts, "c.1") == {Product(0, 1)}
    assert implied_frontier(g, pts, "b.1") == frozenset()


def test_nested_loop_antichain_of_summaries() -> None:
    g = nested_loop_graph(2, 2)
    inner = ProductSummary(ProductSummary(Increment(0), Increment(0)), Increment(1, limit=2))
    outer = ProductSummary(ProductSummary(Increment(0), Increment(1, limit=2)), Increment(0))
    # x.out reaches x.in through either feedback edge: two incomparable summaries
    assert g.path_summary("x.out", "x.in") == {inner, outer}
    z = Product(Product(0, 0), 0)
    pts = {"x.out": {z: 1}}
    assert implied_frontier(g, pts, "x.in") == {Product(Product(0, 0), 1), Product(Product(0, 1), 0)}
    g.validate(nested_times(2, 2))


def test_chain_and_could_result_in_is_a_partial_order() -> None:
    g = chain_graph()
    assert g.path_summary("a", "c") == {Increment(1)}
    pts = [(l, t) for l in g.locations for t in range(3)]
    Poset(pts, lambda a, b: could_result_in(g, a, b))  # raises if not a partial order
    g2 = wcc_graph(1)
    Poset([(l, t) for l in g2.locations for t in wcc_times(2, 1)], lambda a, b: could_result_in(g2, a, b))


def test_graph_rejects_self_edges_and_unknown_locations() -> None:
    with pytest.raises(ValueError, match="self-edge"):
        Graph(["a"], {("a", "a"): {Increment(1)}}, Increment(0))
    with pytest.raises(ValueError, match="unknown"):
        Graph(["a"], {("a", "b"): {Increment(0)}}, Increment(0))


def test_validate_rejects_a_zero_cycle() -> None:
    g = Graph(["a", "b"], {("a", "b"): {Increment(0)}, ("b", "a"): {Increment(0, limit=5)}}, Increment(0))
    with pytest.raises(ValueError):
        g.validate(range(3))
    wcc_graph(2).validate(wcc_times(1, 2))


def test_without_edge_and_summary() -> None:
    g = nested_loop_graph(1, 1)
    assert g.without_edge("fi", "x.in").summary("fi", "x.in") == frozenset()
    s = next(iter(g.summary("fo", "x.in")))
    assert g.without_summary("fo", "x.in", s).summary("fo", "x.in") == frozenset()


def test_posets() -> None:
    p = chain3_plus()
    assert p.le("p0", "p2") and p.lt("p0", "p2") and not p.lt("p2", "p2") and p.le("q", "q")
    assert not p.le("q", "p2") and not p.le("p2", "q")
    d = diamond()
    assert d.lt("bot", "top") and not d.le("a", "b")
    assert d.below("top") == {"bot", "a", "b", "top"}
    with pytest.raises(ValueError, match="antisymmetric"):
        Poset(["x", "y"], lambda a, b: True)


@settings(max_examples=examples(40), deadline=None)
@given(st.data())
def test_propagation_converges_to_implied_frontier(data: st.DataObject) -> None:
    """Running local propagation to quiescence yields exactly the implied frontier everywhere (§5)."""
    name = data.draw(st.sampled_from(["wcc", "nested", "chain"]))
    cfg = propagation_config(name)
    points = [(l, t) for l in cfg.locations for t in cfg.times]
    chosen = data.draw(st.lists(st.sampled_from(points), min_size=0, max_size=4))
    pts: dict[object, dict[object, int]] = {}
    for l, t in chosen:
        pts.setdefault(l, {})[t] = pts.get(l, {}).get(t, 0) + 1
    c = P.propagate_all(cfg, P.make_state(cfg, pts))
    assert c is not None
    for i, l in enumerate(cfg.locations):
        assert P._frontier(c.imp[i]) == implied_frontier(cfg.graph, pts, l)

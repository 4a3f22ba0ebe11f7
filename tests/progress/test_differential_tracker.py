"""Differential tests: the production Tracker against the reference model of seed 000 §5.

After every propagation the tracker's frontier at every location must equal
``implied_frontier`` computed directly from the accumulated pointstamps, and
the frontier changes it reported must add up to those frontiers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely.progress import Builder, Target
from pytimely.verify.graph import implied_frontier
from tests.graphs import nested_loop, product_times, random_graphs, reference, wcc
from tests.profiles import examples

diffs = st.sampled_from([-1, 1, 1, 2])


def run_trace(builder: Builder[Any, Any], trace: list[list[tuple[int, Any, int]]]) -> None:
    """Apply batches of (location index, time, diff); compare with the model after each propagation."""
    tracker = builder.build()
    graph = reference(builder)
    locations = builder.locations()
    pts: dict[Any, Counter[Any]] = {loc: Counter() for loc in locations}
    reported: dict[Any, Counter[Any]] = {loc: Counter() for loc in locations if isinstance(loc, Target)}
    for batch in trace:
        updates = [(locations[i % len(locations)], t, d) for i, t, d in batch]
        tracker.update_batch(updates)
        for loc, t, d in updates:
            pts[loc][t] += d
        for target, changes in tracker.propagate_all().items():
            for t, d in changes:
                reported[target][t] += d
        for loc in locations:
            expected = implied_frontier(graph, {k: dict(v) for k, v in pts.items()}, loc)
            assert set(tracker.frontier(loc).elements()) == set(expected), (loc, batch)
        for target, counts in reported.items():
            assert {t for t, c in counts.items() if c} == set(tracker.frontier(target).elements())
            assert all(c in (0, 1) for c in counts.values())


def batches(times: st.SearchStrategy[Any]) -> st.SearchStrategy[list[list[tuple[int, Any, int]]]]:
    """Traces of small batches of signed pointstamp changes."""
    return st.lists(st.lists(st.tuples(st.integers(0, 50), times, diffs), min_size=1, max_size=4), max_size=12)


@settings(max_examples=examples(150), deadline=None)
@given(batches(product_times(1)))
def test_wcc_graph_of_seed_fig_2(trace: list[list[tuple[int, Any, int]]]) -> None:
    builder, _ = wcc()
    run_trace(builder, trace)


@settings(max_examples=examples(100), deadline=None)
@given(batches(product_times(2)))
def test_nested_loop(trace: list[list[tuple[int, Any, int]]]) -> None:
    builder, _ = nested_loop()
    run_trace(builder, trace)


@settings(max_examples=examples(150), deadline=None)
@given(random_graphs(), batches(st.integers(0, 6)))
def test_random_graphs(builder: Builder[int, Any], trace: list[list[tuple[int, Any, int]]]) -> None:
    run_trace(builder, trace)


def test_wcc_pointstamp_at_b3_reaches_c_and_b1_one_iteration_later() -> None:
    """Seed 000 §6: a pointstamp (b.3, (0, 0)) forces c.1 <= (0, 0) and c.2, b.1 <= (0, 1)."""
    from pytimely.order import Product

    builder, loc = wcc()
    tracker = builder.build()
    tracker.update(loc["b.3"], Product(0, 0), 1)
    tracker.propagate_all()
    assert tracker.frontier(loc["c.1"]).elements() == [Product(0, 0)]
    assert tracker.frontier(loc["b.1"]).elements() == [Product(0, 1)]
    assert tracker.frontier(loc["c.2"]).elements() == [Product(0, 1)]
    assert tracker.frontier(loc["b.2"]).is_empty()

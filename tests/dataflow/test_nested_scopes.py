"""Nested scopes laid out flat: Enter/Leave summaries change a timestamp's shape inside one tracker."""

from __future__ import annotations

import pytest

from pytimely import Product
from pytimely.errors import NonAdvancingCycleError, TimestampError
from pytimely.order import flat_key
from pytimely.progress import Builder, Increment, ProductSummary, Source, Target
from pytimely.progress.timestamp import Enter, Leave

INNER = ProductSummary(Increment(0), Increment(0))


def loop_graph(limit: int | None = None) -> tuple[Builder[int, Increment], dict[str, int]]:
    """input -> enter -> body <-> feedback, body -> leave -> output."""
    b: Builder[int, Increment] = Builder()
    ops = {
        "input": b.add_node(0, 1, name="input"),
        "enter": b.add_node(1, 1, {(0, 0): Enter(0)}, name="enter", identity=INNER),
        "body": b.add_node(2, 1, name="body", identity=INNER),
        "feedback": b.add_node(
            1, 1, {(0, 0): ProductSummary(Increment(0), Increment(1, limit))}, name="feedback", identity=INNER
        ),
        "leave": b.add_node(1, 1, {(0, 0): Leave()}, name="leave"),
        "output": b.add_node(1, 0, name="output"),
    }
    b.add_edge(Source(ops["input"], 0), Target(ops["enter"], 0))
    b.add_edge(Source(ops["enter"], 0), Target(ops["body"], 0))
    b.add_edge(Source(ops["body"], 0), Target(ops["feedback"], 0))
    b.add_edge(Source(ops["feedback"], 0), Target(ops["body"], 1))
    b.add_edge(Source(ops["body"], 0), Target(ops["leave"], 0))
    b.add_edge(Source(ops["leave"], 0), Target(ops["output"], 0))
    return b, ops


def test_frontiers_cross_scopes_in_both_directions() -> None:
    b, ops = loop_graph()
    tracker = b.build()
    tracker.update(Source(ops["input"], 0), 3, 1)
    tracker.propagate_all()
    assert tracker.frontier(Target(ops["body"], 0)).elements() == [Product(3, 0)]
    assert tracker.frontier(Target(ops["body"], 1)).elements() == [Product(3, 1)]
    assert tracker.frontier(Target(ops["output"], 0)).elements() == [3]
    # A message inside the loop at iteration 5 of epoch 1 holds the output back to epoch 1.
    tracker.update(Target(ops["feedback"], 0), Product(1, 5), 1)
    changes = tracker.propagate_all()
    assert tracker.frontier(Target(ops["output"], 0)).elements() == [1]
    assert (1, 1) in changes[Target(ops["output"], 0)] and (3, -1) in changes[Target(ops["output"], 0)]
    # (1, 6) and (3, 1) are incomparable: both stay in the frontier.
    assert set(tracker.frontier(Target(ops["body"], 1)).elements()) == {Product(1, 6), Product(3, 1)}
    tracker.update(Target(ops["feedback"], 0), Product(1, 5), -1)
    tracker.update(Source(ops["input"], 0), 3, -1)
    tracker.propagate_all()
    assert tracker.frontier(Target(ops["output"], 0)).is_empty()
    assert tracker.is_idle()


def test_iteration_limit_stops_the_feedback_frontier() -> None:
    b, ops = loop_graph(limit=2)
    tracker = b.build()
    tracker.update(Target(ops["body"], 0), Product(0, 2), 1)
    tracker.propagate_all()
    assert tracker.frontier(Target(ops["feedback"], 0)).elements() == [Product(0, 2)]
    assert tracker.frontier(Target(ops["body"], 1)).is_empty()  # iteration 3 is past the limit
    assert tracker.frontier(Target(ops["output"], 0)).elements() == [0]


def test_a_loop_through_enter_and_leave_alone_does_not_advance() -> None:
    b: Builder[int, Increment] = Builder()
    enter = b.add_node(1, 1, {(0, 0): Enter(0)}, name="enter", identity=INNER)
    leave = b.add_node(1, 1, {(0, 0): Leave()}, name="leave")
    b.add_edge(Source(enter, 0), Target(leave, 0))
    b.add_edge(Source(leave, 0), Target(enter, 0))
    with pytest.raises(NonAdvancingCycleError) as info:
        b.build()
    assert set(info.value.operators) == {enter, leave}


def test_scope_changing_summaries_do_not_compose() -> None:
    with pytest.raises(TimestampError):
        Enter(0).followed_by(Leave())


def test_flat_key_orders_outer_times_before_the_inner_times_they_enter() -> None:
    assert flat_key(3) == (3,)
    assert flat_key(Product(Product(3, 1), 2)) == (3, 1, 2)
    assert flat_key(3) < flat_key(Product(3, 0)) < flat_key(Product(3, 1)) < flat_key(4)

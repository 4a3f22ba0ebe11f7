"""Builder validation and Tracker propagation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from pytimely.errors import (
    NonAdvancingCycleError,
    SummaryGoesBackError,
    TimestampError,
    UnknownLocationError,
    UnknownPortError,
)
from pytimely.order import Product
from pytimely.progress import Antichain, Builder, Increment, ProductSummary, Source, Target


def chain(length: int) -> tuple[Builder[int, Increment], list[int]]:
    """``length`` one-in one-out operators in a row, fed by an input operator."""
    b: Builder[int, Increment] = Builder()
    nodes = [b.add_node(0, 1, name="input")]
    for i in range(length):
        nodes.append(b.add_node(1, 1, name=f"op{i}"))
        b.add_edge(Source(nodes[-2], 0), Target(nodes[-1], 0))
    return b, nodes


def loop() -> tuple[Builder[Any, Any], dict[str, int]]:
    """input -> body <-> feedback(+1 iteration, bounded at 5) -> output."""
    b: Builder[Any, Any] = Builder(ProductSummary(Increment(0), Increment(0)))
    ids = {
        "input": b.add_node(0, 1, name="input"),
        "body": b.add_node(2, 1, name="body"),
        "feedback": b.add_node(
            1, 1, {(0, 0): ProductSummary(Increment(0), Increment(1, limit=5))}, name="feedback"
        ),
        "output": b.add_node(1, 0, name="output"),
    }
    b.add_edge(Source(ids["input"], 0), Target(ids["body"], 0))
    b.add_edge(Source(ids["body"], 0), Target(ids["feedback"], 0))
    b.add_edge(Source(ids["feedback"], 0), Target(ids["body"], 1))
    b.add_edge(Source(ids["body"], 0), Target(ids["output"], 0))
    return b, ids


def test_frontier_moves_down_a_chain() -> None:
    b, nodes = chain(3)
    tracker = b.build()
    tracker.update(Source(nodes[0], 0), 0, 1)
    changes = tracker.propagate_all()
    assert changes == {Target(n, 0): [(0, 1)] for n in nodes[1:]}
    tracker.update_batch([(Source(nodes[0], 0), 0, -1), (Source(nodes[0], 0), 4, 1)])
    changes = tracker.propagate_all()
    assert all(sorted(changes[Target(n, 0)]) == [(0, -1), (4, 1)] for n in nodes[1:])
    assert tracker.frontier(Target(nodes[-1], 0)) == Antichain([4])
    tracker.update(Source(nodes[0], 0), 4, -1)
    tracker.propagate_all()
    assert tracker.frontier(Target(nodes[-1], 0)).is_empty()
    assert tracker.is_idle()


def test_loop_frontiers_follow_the_feedback_summary() -> None:
    b, ids = loop()
    tracker = b.build()
    tracker.update(Source(ids["input"], 0), Product(0, 0), 1)
    tracker.propagate_all()
    assert tracker.frontier(Target(ids["body"], 1)) == Antichain([Product(0, 1)])
    # A message circulating at iteration 2 holds the loop back from (1, 3) on.
    tracker.update(Target(ids["feedback"], 0), Product(1, 2), 1)
    tracker.update(Source(ids["input"], 0), Product(0, 0), -1)
    tracker.propagate_all()
    assert tracker.frontier(Target(ids["body"], 1)) == Antichain([Product(1, 3)])
    assert tracker.frontier(Target(ids["output"], 0)) == Antichain([Product(1, 3)])
    # Past the iteration bound nothing can come around again.
    tracker.update(Target(ids["feedback"], 0), Product(1, 2), -1)
    tracker.update(Target(ids["feedback"], 0), Product(1, 5), 1)
    tracker.propagate_all()
    assert tracker.frontier(Target(ids["body"], 1)).is_empty()


def test_missing_internal_summary_means_no_path() -> None:
    b: Builder[int, Increment] = Builder()
    src = b.add_node(0, 2, name="source")
    op = b.add_node(2, 2, {(0, 0): [Increment(0)], (1, 1): [Increment(0)]}, name="split")
    sink_a = b.add_node(1, 0, name="a")
    sink_b = b.add_node(1, 0, name="b")
    b.add_edge(Source(src, 0), Target(op, 0))
    b.add_edge(Source(src, 1), Target(op, 1))
    b.add_edge(Source(op, 0), Target(sink_a, 0))
    b.add_edge(Source(op, 1), Target(sink_b, 0))
    tracker = b.build()
    tracker.update(Source(src, 1), 7, 1)
    tracker.propagate_all()
    assert tracker.frontier(Target(sink_a, 0)).is_empty()
    assert tracker.frontier(Target(sink_b, 0)) == Antichain([7])


def test_non_advancing_cycle_is_refused_naming_its_operators() -> None:
    b: Builder[int, Increment] = Builder()
    a = b.add_node(1, 1, name="map")
    c = b.add_node(2, 1, {(0, 0): [Increment(1)], (1, 0): [Increment(0)]}, name="merge")
    d = b.add_node(1, 1, name="filter")
    b.add_edge(Source(a, 0), Target(c, 1))
    b.add_edge(Source(c, 0), Target(d, 0))
    b.add_edge(Source(d, 0), Target(a, 0))
    with pytest.raises(NonAdvancingCycleError) as err:
        b.build()
    assert sorted(err.value.operators) == [a, c, d]
    for name in ("map", "merge", "filter"):
        assert name in str(err.value)


def test_cycle_through_an_incrementing_summary_is_accepted() -> None:
    b: Builder[int, Increment] = Builder()
    a = b.add_node(1, 1, name="map")
    c = b.add_node(1, 1, {(0, 0): [Increment(1)]}, name="feedback")
    b.add_edge(Source(a, 0), Target(c, 0))
    b.add_edge(Source(c, 0), Target(a, 0))
    b.build()


def test_summary_antichain_with_an_identity_member_still_blocks() -> None:
    b: Builder[int, Increment] = Builder()
    a = b.add_node(1, 1, {(0, 0): [Increment(0, limit=3), Increment(1)]}, name="odd")
    b.add_edge(Source(a, 0), Target(a, 0))
    with pytest.raises(NonAdvancingCycleError, match="odd"):
        b.build()


@dataclass(frozen=True)
class Shift:
    """A summary type that (wrongly) allows negative shifts."""

    by: int

    def results_in(self, t: int) -> int:
        return t + self.by

    def followed_by(self, other: Shift) -> Shift:
        return Shift(self.by + other.by)

    def __le__(self, other: Shift) -> bool:
        return self.by <= other.by


def test_summary_that_goes_back_is_refused() -> None:
    b: Builder[int, Shift] = Builder(Shift(0))
    with pytest.raises(SummaryGoesBackError, match=r"input 0 -> output 0"):
        b.add_node(1, 1, {(0, 0): Shift(-1)}, name="rewind")


def test_summary_of_the_wrong_type_is_refused() -> None:
    b: Builder[int, Increment] = Builder()
    with pytest.raises(TimestampError, match="not comparable"):
        b.add_node(1, 1, {(0, 0): Shift(1)}, name="odd")


def test_unknown_ports_are_refused() -> None:
    b: Builder[int, Increment] = Builder()
    x = b.add_node(1, 1, name="x")
    with pytest.raises(UnknownPortError, match="no output port 3"):
        b.add_edge(Source(x, 3), Target(x, 0))
    with pytest.raises(UnknownPortError, match="no operator 9"):
        b.add_edge(Source(x, 0), Target(9, 0))
    with pytest.raises(UnknownPortError, match="Source to a Target"):
        b.add_edge(Target(x, 0), Source(x, 0))  # type: ignore[arg-type]
    with pytest.raises(UnknownPortError, match="input 2 -> output 0"):
        b.add_node(1, 1, {(2, 0): Increment(0)}, name="y")
    assert b.edges() == []


def test_updates_outside_the_graph_are_refused_and_nothing_is_applied() -> None:
    b, nodes = chain(2)
    tracker = b.build()
    with pytest.raises(UnknownLocationError, match=r"Target\(7, 0\)"):
        tracker.update(Target(7, 0), 0, 1)
    with pytest.raises(UnknownLocationError):
        tracker.update_batch([(Source(nodes[0], 0), 0, 1), (Source(nodes[-1], 5), 0, 1)])
    assert not tracker.has_pending()
    assert tracker.propagate_all() == {}
    with pytest.raises(UnknownLocationError):
        tracker.frontier(("not", "a", "location"))  # type: ignore[arg-type]


def test_work_follows_frontier_changes_not_graph_size() -> None:
    b, nodes = chain(500)
    tracker = b.build()
    head = Source(nodes[0], 0)
    tracker.update(head, 0, 1)
    tracker.propagate_all()
    before = tracker.propagations
    # A count at a time the frontier already covers changes no frontier: no propagation work.
    tracker.update(head, 3, 1)
    assert tracker.propagate_all() == {}
    assert tracker.propagations == before
    # A change near the end of the chain only touches the few locations after it.
    tracker.update(Target(nodes[-2], 0), 0, 1)
    tracker.update(head, 0, -1)
    tracker.update(head, 3, -1)
    tracker.propagate_all()
    before = tracker.propagations
    tracker.update(Target(nodes[-2], 0), 0, -1)
    tracker.propagate_all()
    assert tracker.propagations - before <= 4

"""Builder validation and Tracker propagation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pytimely.errors import (
    NonAdvancingCycleError,
    SummaryGoesBackError,
    TimestampError,
    UnknownLocationError,
    UnknownPortError,
)
from pytimely.order import Product
from pytimely.progress import Antichain, Builder, Increment, ProductSummary, Source, Target
from pytimely.progress.timestamp import Enter, Leave
from tests.profiles import examples


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
        "feedback": b.add_node(1, 1, {(0, 0): ProductSummary(Increment(0), Increment(1, limit=5))}, name="feedback"),
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


# --- cycles through nested scopes (issue 15, item 5) ------------------------------------------------------

INNER = ProductSummary(Increment(0), Increment(0))
ITERATE = ProductSummary(Increment(0), Increment(1))


def leave_and_reenter(outer_step: Increment) -> tuple[Builder[Any, Any], dict[str, int]]:
    """``map -> enter -> feedback (+1 inner) -> leave -> map``: the loop leaves the scope and enters it again."""
    b: Builder[Any, Any] = Builder()
    ops = {
        "map": b.add_node(1, 1, {(0, 0): outer_step}, name="map"),
        "enter": b.add_node(1, 1, {(0, 0): Enter(0)}, name="enter", identity=INNER),
        "feedback": b.add_node(1, 1, {(0, 0): ITERATE}, name="feedback", identity=INNER),
        "leave": b.add_node(1, 1, {(0, 0): Leave()}, name="leave"),
    }
    b.add_edge(Source(ops["map"], 0), Target(ops["enter"], 0))
    b.add_edge(Source(ops["enter"], 0), Target(ops["feedback"], 0))
    b.add_edge(Source(ops["feedback"], 0), Target(ops["leave"], 0))
    b.add_edge(Source(ops["leave"], 0), Target(ops["map"], 0))
    return b, ops


def test_a_loop_leaving_and_reentering_a_scope_is_refused_though_its_feedback_advances() -> None:
    # Leave drops the iteration and Enter resets it to 0: (t, 0) comes back as (t, 0), and (t, 5) as (t, 1).
    b, ops = leave_and_reenter(Increment(0))
    with pytest.raises(NonAdvancingCycleError) as err:
        b.build()
    assert set(err.value.operators) == set(ops.values())
    for name in ops:
        assert name in str(err.value)


def test_the_same_loop_advancing_the_outer_time_is_accepted() -> None:
    b, _ = leave_and_reenter(Increment(1))
    b.build()


def test_an_inner_loop_inside_a_scope_entered_and_left_once_is_accepted() -> None:
    b: Builder[Any, Any] = Builder()
    src = b.add_node(0, 1, name="input")
    enter = b.add_node(1, 1, {(0, 0): Enter(0)}, name="enter", identity=INNER)
    body = b.add_node(2, 1, {(0, 0): INNER, (1, 0): INNER}, name="body", identity=INNER)
    feedback = b.add_node(1, 1, {(0, 0): ITERATE}, name="feedback", identity=INNER)
    leave = b.add_node(1, 1, {(0, 0): Leave()}, name="leave")
    b.add_edge(Source(src, 0), Target(enter, 0))
    b.add_edge(Source(enter, 0), Target(body, 0))
    b.add_edge(Source(body, 0), Target(feedback, 0))
    b.add_edge(Source(feedback, 0), Target(body, 1))
    b.add_edge(Source(body, 0), Target(leave, 0))
    b.build()
    # without the increment the inner loop is stuck, and only it is named
    b2: Builder[Any, Any] = Builder()
    enter = b2.add_node(1, 1, {(0, 0): Enter(0)}, name="enter", identity=INNER)
    body = b2.add_node(2, 1, {(0, 0): INNER, (1, 0): INNER}, name="body", identity=INNER)
    b2.add_edge(Source(enter, 0), Target(body, 0))
    b2.add_edge(Source(body, 0), Target(body, 1))
    with pytest.raises(NonAdvancingCycleError) as err:
        b2.build()
    assert err.value.operators == [body]


Spec = tuple[str, int, int]
"""A node of a random nested graph: kind (``op``, ``enter``, ``leave``), outer increment, inner increment."""


def _in_depth(spec: Spec) -> int:
    return {"op1": 1, "op2": 2, "enter": 1, "leave": 2}[spec[0]]


def _out_depth(spec: Spec) -> int:
    return {"op1": 1, "op2": 2, "enter": 2, "leave": 1}[spec[0]]


@st.composite
def nested_graphs(draw: st.DrawFn) -> tuple[list[Spec], list[tuple[int, int]]]:
    """Up to five one-input one-output operators at depth 1 or 2, enters and leaves, and edges that fit."""
    specs = draw(
        st.lists(
            st.tuples(st.sampled_from(["op1", "op2", "enter", "leave"]), st.integers(0, 1), st.integers(0, 1)),
            min_size=1,
            max_size=5,
        )
    )
    pairs = [
        (a, c) for a in range(len(specs)) for c in range(len(specs)) if _out_depth(specs[a]) == _in_depth(specs[c])
    ]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=8)) if pairs else []
    return specs, edges


def _build(specs: list[Spec], edges: list[tuple[int, int]]) -> Builder[Any, Any]:
    b: Builder[Any, Any] = Builder()
    for n, (kind, outer, inner) in enumerate(specs):
        if kind == "op1":
            b.add_node(1, 1, {(0, 0): Increment(outer)}, name=f"op{n}")
        elif kind == "op2":
            summary = ProductSummary(Increment(outer), Increment(inner))
            b.add_node(1, 1, {(0, 0): summary}, name=f"op{n}", identity=INNER)
        elif kind == "enter":
            b.add_node(1, 1, {(0, 0): Enter(0)}, name=f"enter{n}", identity=INNER)
        else:
            b.add_node(1, 1, {(0, 0): Leave()}, name=f"leave{n}")
    for a, c in edges:
        b.add_edge(Source(a, 0), Target(c, 0))
    return b


def _step(spec: Spec, t: tuple[int, ...]) -> tuple[int, ...]:
    kind, outer, inner = spec
    if kind == "op1":
        return (t[0] + outer,)
    if kind == "op2":
        return (t[0] + outer, t[1] + inner)
    if kind == "enter":
        return (t[0], 0)
    return (t[0],)


def stuck_by_brute_force(specs: list[Spec], edges: list[tuple[int, int]], top: int = 6, cap: int = 14) -> bool:
    """Whether a concrete timestamp at some operator's input comes back there no later than it started.

    Every start time with coordinates up to ``top`` is tried (a reset coordinate comes back as at most the
    number of increments on a simple cycle, below ``top``), following every path while coordinates stay
    under ``cap``.
    """
    succ: dict[int, list[int]] = {}
    for a, c in edges:
        succ.setdefault(a, []).append(c)
    for start, spec in enumerate(specs):
        depth = _in_depth(spec)
        starts = [(x,) for x in range(top + 1)] if depth == 1 else [(x, y) for x in range(3) for y in range(top + 1)]
        for t0 in starts:
            seen: set[tuple[int, tuple[int, ...]]] = set()
            todo = [(start, t0)]
            while todo:
                node, t = todo.pop()
                out = _step(specs[node], t)
                for nxt in succ.get(node, []):
                    if nxt == start and all(a <= b for a, b in zip(out, t0, strict=True)):
                        return True
                    if max(out) <= cap and (nxt, out) not in seen:
                        seen.add((nxt, out))
                        todo.append((nxt, out))
    return False


@settings(max_examples=examples(400), deadline=None)
@given(nested_graphs())
def test_build_refuses_exactly_the_cycles_a_timestamp_travels_without_advancing(
    graph: tuple[list[Spec], list[tuple[int, int]]],
) -> None:
    specs, edges = graph
    stuck = stuck_by_brute_force(specs, edges)
    event("stuck" if stuck else "fine")
    builder = _build(specs, edges)
    if stuck:
        with pytest.raises(NonAdvancingCycleError) as err:
            builder.build()
        # the operators it names form a cycle of the graph
        named = err.value.operators
        assert named and all(isinstance(n, int) for n in named)
        assert all((named[i], named[(i + 1) % len(named)]) in set(edges) for i in range(len(named)))
    else:
        builder.build()


def test_counts_hold_what_was_recorded_and_not_yet_propagated() -> None:
    # A bootstrap server may take in batches and take its state before propagating: the state must count them.
    b, nodes = chain(1)
    tracker = b.build()
    out = Source(nodes[0], 0)
    tracker.update(out, 0, 2)
    tracker.propagate_all()
    tracker.update(out, 0, -2)
    tracker.update(out, 3, 1)
    assert tracker.held() == {out: {0: 2}}
    assert tracker.counts() == {out: {3: 1}}
    tracker.propagate_all()
    assert tracker.held() == tracker.counts() == {out: {3: 1}}

"""Antichain, MutableAntichain and ChangeBatch against brute-force definitions."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pytimely.order import Product
from pytimely.progress.change_batch import ChangeBatch
from pytimely.progress.frontier import Antichain, MutableAntichain, frontier_of

products = st.builds(Product, st.integers(0, 4), st.integers(0, 4))


def minimal(times: list[Any]) -> set[Any]:
    """The definition: elements with nothing strictly below them."""
    return {t for t in times if not any(u < t for u in times)}


@given(st.lists(products, max_size=12))
def test_antichain_keeps_exactly_the_minimal_elements(times: list[Any]) -> None:
    chain = Antichain(times)
    assert set(chain.elements()) == minimal(times)
    assert set(frontier_of(times)) == minimal(times)


@given(st.lists(products, min_size=1, max_size=8), products)
def test_antichain_queries(times: list[Any], t: Any) -> None:
    chain = Antichain(times)
    assert chain.less_equal(t) == any(u <= t for u in times)
    assert chain.less_than(t) == any(u < t for u in times)


def test_antichain_insert_reports_whether_it_changed() -> None:
    chain: Antichain[Any] = Antichain()
    assert chain.insert(Product(1, 1))
    assert not chain.insert(Product(2, 1))
    assert chain.insert(Product(0, 3))
    assert chain.insert(Product(0, 0))
    assert chain.elements() == [Product(0, 0)]
    assert chain == Antichain([Product(0, 0), Product(3, 3)])
    assert chain != Antichain([Product(0, 1)])
    assert Antichain([1, 2]).dominates(Antichain([5]))
    assert not Antichain([3]).dominates(Antichain([2]))


@given(st.lists(st.lists(st.tuples(products, st.integers(-2, 2)), max_size=5), max_size=8))
def test_mutable_antichain_reports_frontier_changes(batches: list[list[tuple[Any, int]]]) -> None:
    tracked: MutableAntichain[Any] = MutableAntichain()
    counts: Counter[Any] = Counter()
    before: set[Any] = set()
    for batch in batches:
        changes = tracked.update_iter(batch)
        for t, d in batch:
            counts[t] += d
        after = minimal([t for t, c in counts.items() if c > 0])
        assert set(tracked.frontier_elements()) == after
        expected = Counter({t: 1 for t in after - before})
        expected.update({t: -1 for t in before - after})
        assert Counter(dict(changes)) == expected
        assert len(changes) == len(set(t for t, _ in changes))
        before = after
        for t in counts:
            assert tracked.count_for(t) == counts[t]


def test_mutable_antichain_ignores_dominated_and_negative_counts() -> None:
    m: MutableAntichain[int] = MutableAntichain([(3, 1)])
    assert m.update(5, 1) == []
    assert m.update(1, -1) == []
    assert m.update(3, -1) == [(3, -1), (5, 1)]
    assert m.update(1, 1) == []  # back to zero: still not positive
    assert m.update(1, 1) == [(5, -1), (1, 1)]
    assert m.less_than(2) and m.less_equal(1) and not m.less_than(1)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(-3, 3))))
def test_change_batch_accumulates_and_drops_zeros(updates: list[tuple[int, int]]) -> None:
    batch: ChangeBatch[int] = ChangeBatch()
    for item, diff in updates:
        batch.update(item, diff)
    total: Counter[int] = Counter()
    for item, diff in updates:
        total[item] += diff
    expected = {k: v for k, v in total.items() if v}
    assert dict(batch.items()) == expected
    assert batch.is_empty() == (not expected)
    assert batch == ChangeBatch(updates)
    assert dict(batch.drain()) == expected
    assert batch.is_empty()


@given(st.lists(st.tuples(products, st.integers(-2, 2)), max_size=30))
def test_single_updates_agree_with_batched_updates(updates: list[tuple[Any, int]]) -> None:
    one: MutableAntichain[Any] = MutableAntichain()
    many: MutableAntichain[Any] = MutableAntichain()
    for t, d in updates:
        assert Counter(dict(one.update(t, d))) == Counter(dict(many.update_iter([(t, d)])))
        assert set(one.frontier_elements()) == set(many.frontier_elements())

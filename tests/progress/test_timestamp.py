"""The laws seed 000 §5 assumes of timestamps and path summaries, checked by property tests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytimely.errors import SummaryGoesBackError, TimestampError
from pytimely.order import Product, comparable, sort_key
from pytimely.progress.timestamp import Increment, ProductSummary, identity_for, minimum_for, strictly_advances
from tests.strategies import shapes, summaries, timestamps


def le(a: Any, b: Any) -> bool:
    """``a <= b`` with ``None`` ("no timestamp") as the top element."""
    if b is None:
        return True
    if a is None:
        return False
    return bool(a <= b)


@st.composite
def shaped(draw: st.DrawFn, n_times: int, n_summaries: int) -> tuple[list[Any], list[Any]]:
    shape = draw(shapes())
    return (
        [draw(timestamps(shape)) for _ in range(n_times)],
        [draw(summaries(shape)) for _ in range(n_summaries)],
    )


@given(shaped(1, 0))
def test_identity_leaves_timestamps_alone(case: tuple[list[Any], list[Any]]) -> None:
    (t,), _ = case
    assert identity_for(t).results_in(t) == t


@given(shaped(1, 2))
def test_followed_by_composes(case: tuple[list[Any], list[Any]]) -> None:
    (t,), (s1, s2) = case
    step = s1.results_in(t)
    two_steps = None if step is None else s2.results_in(step)
    composed = s1.followed_by(s2)
    assert two_steps == (None if composed is None else composed.results_in(t))


@given(shaped(2, 2))
def test_results_in_is_monotone(case: tuple[list[Any], list[Any]]) -> None:
    (t1, t2), (s1, s2) = case
    if t1 <= t2 and s1 <= s2:
        assert le(s1.results_in(t1), s2.results_in(t2))


@given(shaped(1, 1))
def test_results_in_never_goes_back(case: tuple[list[Any], list[Any]]) -> None:
    (t,), (s,) = case
    assert le(t, s.results_in(t))


@given(shaped(4, 2))
def test_summary_order_means_pointwise_order(case: tuple[list[Any], list[Any]]) -> None:
    times, (s1, s2) = case
    if s1 <= s2:
        for t in times:
            assert le(s1.results_in(t), s2.results_in(t))


@given(shaped(3, 0))
def test_product_order_is_a_partial_order(case: tuple[list[Any], list[Any]]) -> None:
    (a, b, c), _ = case
    assert a <= a
    if a <= b and b <= a:
        assert a == b
    if a <= b and b <= c:
        assert a <= c
    assert (a < b) == (a <= b and a != b)


@given(shaped(2, 0))
def test_sort_key_extends_the_partial_order(case: tuple[list[Any], list[Any]]) -> None:
    (a, b), _ = case
    if a < b:
        assert sort_key(a) < sort_key(b)
    assert (sort_key(a) == sort_key(b)) == (a == b)


@given(shaped(1, 0))
def test_minimum_is_below_everything(case: tuple[list[Any], list[Any]]) -> None:
    (t,), _ = case
    assert minimum_for(t) <= t


def test_products_need_not_be_comparable() -> None:
    assert not comparable(Product(0, 1), Product(1, 0))
    assert Product(0, 1) < Product(1, 1)
    assert not Product(1, 0) <= Product(0, 5)
    nested = Product(Product(0, 1), 2)
    assert nested <= Product(Product(0, 2), 2)
    assert repr(nested) == "((0, 1), 2)"


def test_product_is_immutable_and_hashable() -> None:
    p = Product(1, 2)
    with pytest.raises(AttributeError):
        p.outer = 3  # type: ignore[misc]
    assert {p: 1}[Product(1, 2)] == 1


def test_increment_limit_gives_no_timestamp() -> None:
    feedback = Increment(1, limit=3)
    assert feedback.results_in(2) == 3
    assert feedback.results_in(3) is None
    bounded = ProductSummary(Increment(0), feedback)
    assert bounded.results_in(Product(5, 2)) == Product(5, 3)
    assert bounded.results_in(Product(5, 3)) is None


def test_negative_increment_is_refused() -> None:
    with pytest.raises(SummaryGoesBackError, match="back in time"):
        Increment(-1)


def test_non_integer_increment_is_refused() -> None:
    with pytest.raises(TimestampError):
        Increment(1.5)  # type: ignore[arg-type]
    with pytest.raises(TimestampError):
        Increment(1, limit="3")  # type: ignore[arg-type]


def test_unknown_timestamp_type_has_no_minimum() -> None:
    with pytest.raises(TimestampError, match="minimum"):
        minimum_for("x")
    with pytest.raises(TimestampError, match="identity_summary"):
        identity_for(2.5)


@given(shaped(1, 1))
def test_strictly_advancing_summaries_move_every_timestamp(case: tuple[list[Any], list[Any]]) -> None:
    (t,), (s,) = case
    r = s.results_in(t)
    if r is not None:
        assert strictly_advances(s) == (t < r)

"""Hypothesis strategies shared by the tests: timestamps and path summaries of matching shapes."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pytimely.order import Product
from pytimely.progress.timestamp import Increment, ProductSummary

small_ints = st.integers(min_value=0, max_value=20)


def increments() -> st.SearchStrategy[Increment]:
    """Increments with an optional limit."""
    return st.builds(Increment, st.integers(0, 5), st.none() | st.integers(0, 30))


def shapes() -> st.SearchStrategy[Any]:
    """A timestamp shape: ``int``, or a (possibly nested) product of shapes."""
    return st.recursive(st.just("int"), lambda inner: st.tuples(inner, inner), max_leaves=3)


def timestamps(shape: Any) -> st.SearchStrategy[Any]:
    """Timestamps of ``shape``."""
    if shape == "int":
        return small_ints
    return st.builds(Product, timestamps(shape[0]), timestamps(shape[1]))


def summaries(shape: Any) -> st.SearchStrategy[Any]:
    """Path summaries for timestamps of ``shape``."""
    if shape == "int":
        return increments()
    return st.builds(ProductSummary, summaries(shape[0]), summaries(shape[1]))

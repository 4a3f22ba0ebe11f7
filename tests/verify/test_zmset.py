"""Signed multisets and the predicates of §3–§5 of seed ``000_306a8e6bd5c43d47.txt``."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import cast

from hypothesis import given
from hypothesis import strategies as st

from pytimely.verify.configs import chain3_plus
from pytimely.verify.zmset import (
    ZMSet,
    frontier,
    justified,
    multisets_upto,
    nonempty_subsets,
    submultisets,
    supp,
    upright,
    vacant,
)

P = chain3_plus()  # p0 < p1 < p2, q incomparable
le, lt = P.le, P.lt


def z(**counts: int) -> ZMSet[str]:
    return ZMSet(counts)


zmsets = st.dictionaries(st.sampled_from(["p0", "p1", "p2", "q"]), st.integers(-3, 3)).map(ZMSet)


def test_canonical_zero_counts_dropped() -> None:
    m = ZMSet({"a": 0, "b": 2})
    assert dict(m) == {"b": 2}
    assert ZMSet([("a", 1), ("a", -1)]) == ZMSet()
    assert not ZMSet()
    assert m.count("a") == 0 and m.count("b") == 2
    assert "b" in m and "a" not in m


def test_mapping_and_hash() -> None:
    a = ZMSet({"x": 1, "y": -2})
    b = ZMSet([("y", -2), ("x", 1)])
    assert a == b and hash(a) == hash(b)
    assert isinstance(cast(object, a), Mapping)
    assert len({a, b}) == 1
    assert pickle.loads(pickle.dumps(a)) == a


def test_operations() -> None:
    a, b = z(p0=1, p1=-1), z(p1=1, q=2)
    assert a + b == z(p0=1, q=2)
    assert a - a == ZMSet()
    assert -a == z(p0=-1, p1=1)
    assert (a + b).pos() == z(p0=1, q=2)
    assert a.neg() == z(p1=-1)
    assert ZMSet.replicate(3, "q") == z(q=3)
    assert ZMSet.replicate(-2, "q") == z(q=-2)
    assert ZMSet.replicate(0, "q") == ZMSet()
    assert a.filter(lambda p: p == "p1") == z(p1=-1)
    assert ZMSet({1: 1, 2: 1}).image(lambda t: t % 2) == ZMSet({1: 1, 0: 1})
    assert ZMSet({1: 1, -1: -1}).image(abs) == ZMSet()
    assert ZMSet({1: 1, 2: 1}).image(lambda t: None if t == 2 else t) == ZMSet({1: 1})
    assert sorted(a) == ["p0", "p1"]
    assert ZMSet.of("a", "a", "b") == ZMSet({"a": 2, "b": 1})


@given(zmsets, zmsets, zmsets)
def test_group_laws(a: ZMSet[str], b: ZMSet[str], c: ZMSet[str]) -> None:
    assert (a + b) + c == a + (b + c)
    assert a + b == b + a
    assert a - b + b == a
    assert a + ZMSet() == a
    assert all(n != 0 for n in (a + b).values())
    assert hash(a + b) == hash(b + a)


def test_supp_and_upright() -> None:
    # A positive entry is supported by a strictly smaller negative one.
    assert supp(z(p0=-1, p1=1), "p1", lt)
    assert not supp(z(p0=-1, p1=1), "p0", lt)
    assert not supp(z(q=-1, p1=1), "p1", lt)  # q is incomparable
    assert upright(z(p0=-1, p2=1), lt)
    assert upright(z(p0=-1), lt)  # only negative changes: trivially upright
    assert upright(ZMSet(), lt)
    assert not upright(z(p1=1), lt)  # a bare positive change
    assert not upright(z(p1=-1, p0=1), lt)  # going back in time
    assert not upright(z(p1=-1, q=1), lt)  # sideways to an incomparable pointstamp


def test_justified_three_justifications() -> None:
    caps = z(p1=2)
    # 1. supported in M
    assert justified(ZMSet(), z(p0=-1, p2=1), lt)
    # 2. a strictly smaller positive capability
    assert justified(caps, z(p2=5), lt)
    # 3. at the same pointstamp, M's count below C's
    assert justified(caps, z(p1=1), lt)
    assert not justified(caps, z(p1=2), lt)
    # nothing justifies a positive entry at an incomparable or lower pointstamp
    assert not justified(caps, z(q=1), lt)
    assert not justified(caps, z(p0=1), lt)
    # negative entries need no justification
    assert justified(ZMSet(), z(p0=-3), lt)
    # every upright multiset is justified by any capabilities
    assert justified(ZMSet(), z(p0=-1, p1=1), lt)


@given(zmsets)
def test_upright_implies_justified(m: ZMSet[str]) -> None:
    if upright(m, lt):
        assert justified(ZMSet(), m, lt)


def test_vacant_is_downward() -> None:
    # vacant M p = ∀p' ≤ p. M #z p' = 0 — read against §3's safety argument: the pointstamp
    # and every lesser one are absent.
    m = z(p1=1)
    assert vacant(m, "p0", le)
    assert not vacant(m, "p1", le)
    assert not vacant(m, "p2", le)  # p1 ≤ p2 is present
    assert vacant(m, "q", le)
    # negative counts also make a multiset non-vacant
    assert not vacant(z(p0=-1), "p2", le)
    assert vacant(ZMSet(), "p2", le)


def test_frontier_minimal_positive() -> None:
    assert frontier(z(p0=1, p1=1, q=2), lt) == {"p0", "q"}
    assert frontier(z(p0=-1, p1=1), lt) == {"p1"}  # negative counts do not shape the frontier
    assert frontier(ZMSet(), lt) == frozenset()
    assert frontier(ZMSet({1: 1, 3: 1}), lambda a, b: a < b) == {1}


def test_enumeration_helpers() -> None:
    ms = multisets_upto(["a", "b"], 2)
    assert len(ms) == 1 + 2 + 3 and len(set(ms)) == len(ms)
    assert set(submultisets(z(p0=2, p1=-1), 2)) == {ZMSet(), z(p0=1), z(p0=2)}
    assert len(nonempty_subsets("abc")) == 7

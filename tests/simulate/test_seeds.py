"""The suite's seeds: 0-159 with every fault kind enabled break no property, and every kind befell them (apart from
the other simulator tests, so that parallel test processes share the seeds and the rest)."""

from __future__ import annotations

from collections import Counter

import pytest

from pytimely.simulate.run import FAULTS, simulate

pytestmark = pytest.mark.timeout(300)

ALL = frozenset(FAULTS)


@pytest.mark.parametrize("chunk", range(4))
def test_seeds_with_every_fault_kind_enabled_break_no_property(chunk: int) -> None:
    befell: Counter[str] = Counter()
    for seed in range(chunk * 40, chunk * 40 + 40):
        outcome = simulate(seed, ALL)
        assert outcome.ok, "\n".join([str(outcome.violations[0]), *outcome.trace[-40:]])
        befell += outcome.faults
    # The faults did happen (over 40 seeds each kind is drawn many times): the runs were not fault-free.
    for kind in ("delay", "slow", "pause", "partition", "kill", "join", "buggify"):
        assert befell[kind] > 0, (kind, befell)
    assert befell["loss"] + befell["duplicate"] + befell["damage"] > 0, befell

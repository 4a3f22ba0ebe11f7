"""Fluid migration over real TCP: bins move a few per epoch after a join, and the results stay exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytimely.algorithms.rescaling import migration_schedule
from pytimely.membership import RescalePlan
from tests.algorithms.test_union_components import reference_changes
from tests.cluster.elastic_jobs import edges_for
from tests.cluster.test_elastic import EPOCHS, expected_counts, run_elastic


@pytest.mark.parametrize("per", ["2", "all"])
def test_a_join_whose_bins_move_over_every_remaining_epoch_counts_exactly(tmp_path: Path, per: str) -> None:
    """Two bins per epoch: the newcomer's 85 bins are still arriving at the last epoch; counts are Counter's."""
    text = "0:+1"
    plan = RescalePlan.parse(text, initial=2)
    spread = {m.time for m in migration_schedule(plan, EPOCHS, bins_per_epoch=int(per) if per != "all" else None)[1]}
    assert spread == (set(range(1, EPOCHS)) if per == "2" else {1})
    written, _ = run_elastic(tmp_path, text, env={"BINS_PER_EPOCH": per})
    assert written["counts"] == expected_counts(plan)
    assert 2 in {int(w) for w in written["emitters"]}


def test_components_while_bins_move_in_small_groups_then_a_leave(tmp_path: Path) -> None:
    """State across epochs (partitions) moves bin by bin over the epochs between a join and a leave."""
    text, rows = "0:+1,3:-1", 300
    written, plan = run_elastic(tmp_path, text, job="components", rows=rows, env={"BINS_PER_EPOCH": "8"})
    edges = [[tuple(e) for m in plan.members_at(t) for e in edges_for(m, t, rows).tolist()] for t in range(EPOCHS)]
    got = [dict(map(tuple, pairs)) for pairs in written["changes"]]
    assert got == reference_changes(edges)

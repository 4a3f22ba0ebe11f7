"""The snapshot model of ``verify/snapshots.py``: exhaustively safe within its bounds, and its mutants (the fence
lifted for records or for shipped bins) broken, each in a few steps."""

from __future__ import annotations

import pytest

from pytimely.verify.checker import check
from pytimely.verify.snapshots import NO_FENCE, SHIP_EARLY, SnapshotConfig, SnapshotModel

CONFIGS = {
    "two bins": SnapshotConfig(),
    "every second epoch": SnapshotConfig(every=2),
    "three bins, clears": SnapshotConfig(
        bins=3, records=frozenset({(0, 0), (1, 1), (2, 2), (2, 0)}), clears=frozenset({(0, 1), (2, 2)})
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_reachable_state_keeps_the_invariants(name: str) -> None:
    result = check(SnapshotModel(CONFIGS[name]), 60)
    assert result.ok, [str(step.action) for step in result.trace]
    assert result.complete and result.states > 5_000


@pytest.mark.parametrize("mutant", [NO_FENCE, SHIP_EARLY])
def test_without_the_fence_a_committed_snapshot_is_wrong(mutant: str) -> None:
    cfg = SnapshotConfig(mutant=mutant)
    result = check(SnapshotModel(cfg), 60)
    assert result.violation == "SnapshotExact"
    actions = [step.action.name for step in result.trace if step.action is not None]
    assert actions[-1] == "commit" and len(actions) <= 10
    assert ("ship" if mutant == SHIP_EARLY else "apply") in actions


def test_a_restart_resumes_every_bin_from_the_snapshot_on_any_number_of_workers() -> None:
    cfg = SnapshotConfig()
    model = SnapshotModel(cfg)
    states = list(model.initial_states())
    restarted = {}
    # Breadth-first to the first commit, then a restart on each number of workers.
    frontier = states
    for _ in range(12):
        frontier = [s2 for s in frontier for a, s2 in model.successors(s) if a.name != "restart"]
        committed = [s for s in frontier if s.committed is not None]
        if committed:
            break
    for s in committed[:20]:
        for k in range(1, cfg.workers + 1):
            after = next(s2 for a, s2 in model.successors(s) if a.name == "restart" and a.arg("k") == k)
            epoch, counts = s.committed  # type: ignore[misc]
            assert after.counts == counts and after.released == epoch + 1
            assert after.holder == tuple(b % k for b in range(cfg.bins))
            restarted[k] = True
    assert sorted(restarted) == [1, 2, 3]

"""The fluid migration schedule: every bin always on a member, few bins per epoch, the fewest moves in all."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pytimely.algorithms.rescaling import migration_schedule, rebalance
from pytimely.dataflow.bins import BinTable, Move
from pytimely.errors import InvalidArgument
from pytimely.membership import RescalePlan


def replay(plan: RescalePlan, epochs: int, per: int | None) -> tuple[BinTable, dict[int, list]]:
    """Schedule every move of the plan into one table, as every router does."""
    schedule = migration_schedule(plan, epochs, bins_per_epoch=per)
    peers = 1 + max(m for e in range(epochs) for m in plan.members_at(e))
    first = plan.members_at(0)
    table = BinTable([first[b % len(first)] for b in range(256)], peers)
    for moves in schedule.values():
        table.schedule(moves)
    return table, schedule


def random_plan(rng: random.Random, epochs: int) -> RescalePlan:
    """Joins and leaves at random epochs; a leaver is the newest process or any one named (an initial one too)."""
    processes, changes = rng.randint(1, 3), []
    live, fresh = list(range(processes)), processes
    for epoch in sorted(rng.sample(range(epochs - 1), rng.randint(1, 4))):
        if len(live) == 1 or rng.random() < 0.6:
            live.append(fresh)
            fresh += 1
            changes.append(f"{epoch}:+1")
        elif rng.random() < 0.5:
            changes.append(f"{epoch}:-1")
            live.pop()
        else:
            leaver = rng.choice(live)
            live.remove(leaver)
            changes.append(f"{epoch}:-p{leaver}")
    plan = RescalePlan.parse(",".join(changes), initial=processes, workers=rng.randint(1, 2))
    assert plan.processes_at(epochs) == live
    return plan


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("per", [1, 16, None])
def test_every_bin_is_on_a_member_at_every_epoch_and_shares_even_out(seed: int, per: int | None) -> None:
    """No bin is routed to a worker before it joins or after it left; after the last change, shares within one."""
    rng = random.Random(seed)
    epochs = 12
    plan = random_plan(rng, epochs)
    table, schedule = replay(plan, epochs, per)
    first = plan.members_at(0)
    for epoch in range(epochs):
        members = set(plan.members_at(epoch))
        assert set(table.at(epoch)) <= members, (plan, epoch)
    for at in schedule:
        # A newcomer's router starts from the default table and hears only what is sent from its join on.
        if not plan.newcomers_at(at):
            continue
        late = BinTable([first[b % len(first)] for b in range(256)], table.peers)
        for sent, moves in schedule.items():
            if sent >= at:
                late.schedule(moves)
        assert all(late.at(e) == table.at(e) for e in range(at, epochs)), (plan, at)
    for at, moves in schedule.items():
        # Sent at the change epoch, for times from then on, never past the run.
        assert all(at <= m.time < epochs for m in moves)
        if plan.leavers_at(at) or per is None:
            assert {m.time for m in moves} <= {at}
    shares = Counter(table.at(epochs - 1))
    last_change = max(schedule, default=None)
    if last_change is not None:
        assert max(shares.values()) - min(shares.values()) <= 1
        assert set(shares) == set(plan.members_at(epochs - 1))


def test_a_join_moves_the_fewest_bins_a_few_per_epoch() -> None:
    """2 -> 3 workers: the newcomer takes 85 of 256 bins, 16 per epoch, from both members alike."""
    plan = RescalePlan.parse("3:+1", initial=2)
    table, schedule = replay(plan, 20, 16)
    moves = [m for m in schedule[4] if m.worker == 2]
    # Every other bin is restated at the join epoch with its owner (for the newcomer's router).
    assert [m for m in schedule[4] if m.worker != 2] == [Move(4, b, b % 2) for b in range(256) if b not in
                                                        {m.bin for m in moves if m.time == 4}]
    assert len(moves) == 85
    per_epoch = Counter(m.time for m in moves)
    assert per_epoch == {4 + i: 16 for i in range(5)} | {9: 5}
    # The first group draws on both donors.
    assert {m.bin % 2 for m in moves[:16]} == {0, 1}
    assert sorted(Counter(table.at(19)).values()) == [85, 85, 86]
    assert table.at(3) == [b % 2 for b in range(256)]


def test_moves_that_would_outlast_the_next_change_are_done_by_then() -> None:
    """A leave two epochs after a join: the join's moves all take effect before the leave."""
    plan = RescalePlan.parse("3:+1,5:-1", initial=2)
    table, schedule = replay(plan, 12, 8)
    assert max(m.time for m in schedule[4]) == 5
    assert {m.time for m in schedule[6]} == {6}
    assert all(m.time == 4 for m in schedule[4] if m.worker != 2)
    assert 2 not in table.at(6)


def test_rebalance_moves_only_what_it_must() -> None:
    """Already balanced: nothing moves; a leaver's bins all move, and only those."""
    owners = [b % 3 for b in range(256)]
    assert rebalance(owners, [0, 1, 2]) == []
    moved = rebalance(owners, [0, 1])
    assert sorted(b for b, _ in moved) == [b for b in range(256) if b % 3 == 2]
    with pytest.raises(InvalidArgument):
        rebalance(owners, [])


def test_a_bad_group_size_is_refused() -> None:
    plan = RescalePlan.parse("1:+1", initial=1)
    for bad in (0, -3, 2.5):
        with pytest.raises(InvalidArgument, match="bins_per_epoch"):
            migration_schedule(plan, 4, bins_per_epoch=bad)  # type: ignore[arg-type]

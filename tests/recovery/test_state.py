"""KeyedState as operators use it: writes noted per batch, pieces for a snapshot, bins moved away, and a run
without recovery paying nothing that grows with the records."""

from __future__ import annotations

from typing import Any

from pytimely.dataflow.bins import binner
from pytimely.dataflow.state import KeyedState, Tracked

BINS = 16


def _write(state: KeyedState[int, int], keys: list[int]) -> None:
    """What state_machine does: write the dict directly, then name the keys written and those added."""
    added = [k for k in keys if k not in state.data]
    for k in keys:
        state.data[k] = state.data.get(k, 0) + 1
    state.touch_batch(keys, added)


def _bins_of(keys: Any) -> set[int]:
    find = binner(BINS)
    return {find(k) for k in keys}


def test_a_tracked_state_captures_the_bins_written_and_restores_them_elsewhere() -> None:
    state: KeyedState[int, int] = KeyedState(BINS)
    assert isinstance(state, Tracked)
    state.track()
    _write(state, list(range(100)))
    first = state.capture(0, 32)
    assert first and sum(len(bins) for bins, v in first if v is not None) == len(_bins_of(range(100)))
    _write(state, [3])  # one key of a hundred: a piece for its bin alone
    second = state.capture(1, 32)
    assert [bins for bins, _ in second if _bins_of([3]) <= set(bins)] == [tuple(sorted(_bins_of([3])))]
    copy: KeyedState[int, int] = KeyedState(BINS)
    for bins, value in first + second:
        copy.restore_piece(bins, value)
    assert copy.data == state.data


def test_an_untracked_state_keeps_its_index_and_nothing_that_grows_with_the_writes() -> None:
    state: KeyedState[int, int] = KeyedState(BINS)
    for round in range(6000):
        fresh = [10_000 + 2 * round, 10_001 + 2 * round]
        _write(state, list(range(50)) + fresh)
        for k in fresh:
            del state[k]
    # Without recovery no snapshot ever takes the notes: of 12,000 keys added and removed, a bounded part is kept.
    kept = len(state._added) + len(state._touched) + len(state._batches)
    assert kept < 3 * len(state.data) + 2 * 4096 + 2
    moved = state.extract(_bins_of([7]))
    assert set(moved) == {k for k in range(50) if _bins_of([k]) == _bins_of([7])}
    assert 7 not in state.data

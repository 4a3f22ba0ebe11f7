"""KeyedState as operators use it: writes noted per batch, pieces for a snapshot, bins moved away, and a run
without recovery paying nothing that grows with the records."""

from __future__ import annotations

from typing import Any

from pytimely.dataflow.bins import binner
from pytimely.dataflow.state import Delta, KeyedState, Tracked

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
    _write(state, [3])  # one key of a hundred: a delta holding that key alone, standing for every bin held
    [(covered, delta)] = state.capture(1, 32)
    assert isinstance(delta, Delta) and delta.changed == {3: 2} and not delta.removed
    assert set(covered) == _bins_of(range(100))
    copy: KeyedState[int, int] = KeyedState(BINS)
    for bins, value in [*first, (covered, delta)]:
        copy.restore_piece(bins, value)
    assert copy.data == state.data


def test_deltas_hold_the_keys_written_and_removed_until_a_whole_piece_cuts_the_chain() -> None:
    state: KeyedState[int, int] = KeyedState(BINS)
    state.track()
    _write(state, list(range(200)))
    pieces = list(state.capture(0, 4))
    assert not any(isinstance(v, Delta) for _, v in pieces)
    del state[5]  # through the mapping: noted as touched; its bin still holds other keys
    _write(state, [7, 7, 9])
    [(covered, delta)] = state.capture(1, 4)
    assert isinstance(delta, Delta) and delta.changed == {7: 3, 9: 2} and delta.removed == (5,)
    pieces.append((covered, delta))
    kinds = []
    for turn in range(2, 8):
        _write(state, [turn])
        taken = state.capture(turn % 4, 4)
        kinds.append(type(taken[-1][1]).__name__)
        pieces += taken
    # Four captures after a whole piece the chain is cut: the state is written whole again, then deltas go on.
    assert kinds == ["Delta", "Delta", "Delta", "Whole", "Delta", "Delta"], kinds
    copy: KeyedState[int, int] = KeyedState(BINS)
    for bins, value in pieces:
        copy.restore_piece(bins, value)
    assert copy.data == state.data


def test_a_bin_emptied_by_a_delta_stays_in_its_bins_until_a_whole_piece_says_it_is_empty() -> None:
    state: KeyedState[int, int] = KeyedState(BINS)
    state.track()
    _write(state, list(range(200)))
    pieces = list(state.capture(0, 2))
    emptied = min(_bins_of(range(200)))
    for k in [k for k in range(200) if _bins_of([k]) == {emptied}]:
        del state[k]
    [(bins, delta)] = state.capture(1, 2)
    assert isinstance(delta, Delta) and emptied in bins and delta.removed
    pieces.append((bins, delta))
    state.capture(0, 2)
    whole = state.capture(1, 2)  # the chain is cut: the bin is reported empty
    assert ((emptied,), None) in whole
    copy: KeyedState[int, int] = KeyedState(BINS)
    for bins, value in pieces:
        copy.restore_piece(bins, value)
    assert copy.data == state.data


def test_no_delta_after_keys_moved_with_their_bins_or_when_many_keys_changed() -> None:
    state: KeyedState[int, int] = KeyedState(BINS)
    state.track()
    _write(state, list(range(200)))
    state.capture(0, 32)
    state.extract({min(_bins_of(range(200)))})  # a bin moves away: another worker holds it from now on
    _write(state, [150])
    assert not any(isinstance(v, Delta) for _, v in state.capture(1, 32))
    _write(state, list(range(1000, 1060)))  # more than a quarter of the keys: no delta
    assert not any(isinstance(v, Delta) for _, v in state.capture(2, 32))
    _write(state, [150])
    assert any(isinstance(v, Delta) for _, v in state.capture(3, 32))


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

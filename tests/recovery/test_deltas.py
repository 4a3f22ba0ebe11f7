"""Deltas of keyed state from capture to restore: what each worker's snapshots take (whole pieces, pieces per bin,
deltas), encoded, merged into manifests as the committing worker does, and restored on any number of workers,
against the state itself; the chains a manifest keeps; two workers' deltas over one bin refused."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pytimely.dataflow.bins import binner
from pytimely.dataflow.state import Declared, Delta, KeyedState
from pytimely.errors import RecoveryError
from pytimely.recovery import Manifest, Opened, merge
from pytimely.recovery.capture import Assembling, History, capture_states
from pytimely.recovery.parts import Part
from pytimely.recovery.restore import restore_states

BINS = 16
KEY = "0/count#0/states"
REWRITE_EVERY = 4


def _declared(state: KeyedState[Any, Any]) -> list[tuple[str, Declared]]:
    return [(KEY, Declared("states", state, "1", "binned"))]


class _Run:
    """Workers whose keyed states take snapshots every epoch, merged into a manifest as the runtime does."""

    def __init__(self, workers: int) -> None:
        self.find = binner(BINS)
        self.states: list[KeyedState[int, int]] = [KeyedState(BINS) for _ in range(workers)]
        for state in self.states:
            state.track()
        self.histories = [History() for _ in range(workers)]
        self.files: dict[str, bytes] = {}
        self.manifest: Manifest | None = None
        self.taken = 0

    def write(self, key: int, value: int | None) -> None:
        """Write (or, with ``None``, remove) ``key`` on the worker its bin belongs to."""
        state = self.states[self.find(key) % len(self.states)]
        if value is None:
            if key in state:
                del state[key]
        elif key in state.data:
            state.data[key] = value
            state.touch_batch([key], [])
        else:
            state.data[key] = value
            state.touch_batch([key], [key])

    def snapshot(self, epoch: int) -> None:
        parts = []
        turn = self.taken % REWRITE_EVERY
        self.taken += 1
        for w, state in enumerate(self.states):
            into = Assembling(Part(w, 0, epoch), f"snapshots/{epoch}-{w}")
            capture_states(into, "count", _declared(state), self.histories[w], turn, REWRITE_EVERY)
            self.files[into.name] = bytes(into.buffer)
            into.part.files.append((into.name, len(into.buffer), "sha"))
            parts.append(into.part)
        self.manifest = merge(self.manifest, epoch, parts, "id", len(self.states))

    def restored(self, peers: int) -> dict[int, int]:
        """Every key as ``peers`` workers restore it from the last manifest (after a JSON round trip)."""
        assert self.manifest is not None
        manifest = Manifest.from_json(self.manifest.to_json())
        opened = Opened(manifest, self.files)
        out: dict[int, int] = {}
        for me in range(peers):
            state: KeyedState[int, int] = KeyedState(BINS)
            restore_states(opened, "store", _declared(state), peers, me, History())
            assert not set(out) & set(state.data), "a key restored on two workers"
            out.update(state.data)
        return out


def _truth(run: _Run) -> dict[int, int]:
    return {k: v for state in run.states for k, v in state.data.items()}


@pytest.mark.parametrize("seed", range(12))
def test_snapshots_restore_the_state_on_any_number_of_workers(seed: int) -> None:
    rng = random.Random(seed)
    run = _Run(2)
    for k in range(300):
        run.write(k, 0)
    kinds: set[str] = set()
    for epoch in range(20):
        shape = rng.choice(["few", "few", "few", "many", "removals", "new"])
        if shape == "few":
            for _ in range(rng.randrange(1, 20)):
                run.write(rng.randrange(300), epoch)
        elif shape == "many":
            for k in rng.sample(range(300), 200):
                run.write(k, epoch)
        elif shape == "removals":
            for k in rng.sample(range(300), 15):
                run.write(k, None)
        else:
            for _ in range(10):
                run.write(rng.randrange(300, 400), epoch)
        captured_before = len(run.files)
        run.snapshot(epoch)
        assert len(run.files) == captured_before + 2
        assert run.manifest is not None
        kinds |= {"delta"} if run.manifest.deltas else set()
        for peers in (1, 2, 3):
            assert run.restored(peers) == _truth(run), (seed, epoch, peers)
    assert "delta" in kinds


def test_a_bin_written_again_leaves_the_deltas_before_it_and_a_whole_piece_ends_the_chain() -> None:
    run = _Run(1)
    for k in range(400):
        run.write(k, 0)
    run.snapshot(0)
    assert run.manifest is not None and not run.manifest.deltas
    run.write(1, 1)
    run.snapshot(1)
    run.write(2, 1)
    run.snapshot(2)
    chain = run.manifest.deltas[KEY]
    assert len(chain) == 2 and all(mask == (1 << BINS) - 1 for _, mask in chain)
    assert {name for name, _, _ in run.manifest.files} == {"snapshots/0-0", "snapshots/1-0", "snapshots/2-0"}
    for epoch in (3, 4, 5):  # the chain is cut after REWRITE_EVERY captures: a whole piece, no delta before it
        run.write(epoch, epoch)
        run.snapshot(epoch)
    assert [name for name, _, _ in run.manifest.files] == ["snapshots/5-0"]
    assert not run.manifest.deltas
    assert run.restored(2) == _truth(run)


def test_merge_drops_the_bins_given_pieces_of_their_own_from_the_chain() -> None:
    delta = Part(0, 0, 1, files=[("d", 10, "sha")])
    delta.deltas[KEY] = [(("d", 0, 10), 0b1111)]
    first = merge(None, 1, [delta], "id", 1)
    again = Part(0, 0, 2, files=[("p", 5, "sha")])
    again.binned[KEY] = {1: ("p", 0, 5), 3: None}
    second = merge(first, 2, [again], "id", 1)
    assert [mask for _, mask in second.deltas[KEY]] == [0b0101]
    whole = Part(0, 0, 3, files=[("w", 5, "sha")])
    whole.binned[KEY] = {0: ("w", 0, 5), 2: ("w", 0, 5)}
    third = merge(second, 3, [whole], "id", 1)
    assert not third.deltas and "d" not in third.file_names()


def test_two_workers_deltas_over_one_bin_are_refused() -> None:
    parts = [Part(w, 0, 1, files=[(f"d{w}", 10, "sha")]) for w in range(2)]
    parts[0].deltas[KEY] = [(("d0", 0, 10), 0b0011)]
    parts[1].deltas[KEY] = [(("d1", 0, 10), 0b0110)]
    with pytest.raises(RecoveryError, match=r"bin 1 of state .* is held by workers 0 and 1 at once"):
        merge(None, 1, parts, "id", 2)
    parts[1].deltas = {}
    parts[1].binned[KEY] = {0: ("d1", 0, 10)}
    with pytest.raises(RecoveryError, match=r"bin 0 of state .* is held by workers 1 and 0 at once"):
        merge(None, 1, parts, "id", 2)


def test_a_delta_decoded_is_the_delta_encoded() -> None:
    from pytimely.recovery.codec import decode, encode

    delta = Delta({"a": 1, ("b", 2): [3]}, ("gone",))
    assert decode(encode(delta)) == delta
    assert encode(delta)[:1] == b"D"


def test_a_bin_a_delta_emptied_leaves_the_manifest_after_a_restore() -> None:
    run = _Run(1)
    for k in range(400):
        run.write(k, 0)
    run.snapshot(0)
    emptied = run.find(0)
    for k in [k for k in range(400) if run.find(k) == emptied]:
        run.write(k, None)
    run.snapshot(1)
    assert run.manifest is not None and run.manifest.deltas and emptied in run.manifest.binned[KEY]
    again = _Run(1)  # a run started again from that snapshot
    again.files, again.manifest = dict(run.files), run.manifest
    opened = Opened(Manifest.from_json(run.manifest.to_json()), run.files)
    restore_states(opened, "store", _declared(again.states[0]), 1, 0, again.histories[0])
    assert again.restored(1) == _truth(run)
    for epoch in range(2, 2 + REWRITE_EVERY + 1):
        again.write(1000 + epoch, epoch)
        again.snapshot(epoch)
    # The whole piece that cut the new chain said the bin is empty: neither it nor the old deltas are named now.
    assert emptied not in again.manifest.binned[KEY]
    assert not {name for name, _, _ in again.manifest.files} & {"snapshots/0-0", "snapshots/1-0"}
    assert again.restored(2) == _truth(again)

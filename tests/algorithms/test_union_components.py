"""The keyed components stage (:mod:`pytimely.algorithms.rescaling`) against a plain union-find."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimely import Worker, execute
from pytimely.algorithms.rescaling import merge_edges, union_components
from pytimely.membership import balanced_moves
from tests.profiles import examples

edges_st = st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=25)


def reference_labels(batches: list[list[tuple[int, int]]]) -> list[dict[int, int]]:
    """After each batch of edges, every vertex seen so far and the least vertex of its component."""
    parent: dict[int, int] = {}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    out = []
    for batch in batches:
        for u, v in batch:
            parent.setdefault(u, u)
            parent.setdefault(v, v)
            ru, rv = find(u), find(v)
            if ru != rv:
                parent[max(ru, rv)] = min(ru, rv)
        out.append({v: find(v) for v in parent})
    return out


def reference_changes(batches: list[list[tuple[int, int]]]) -> list[dict[int, int]]:
    """Per batch, the vertices whose label is new or changed, with that label."""
    before: dict[int, int] = {}
    out = []
    for labels in reference_labels(batches):
        out.append({v: lab for v, lab in labels.items() if before.get(v) != lab})
        before = labels
    return out


@settings(max_examples=examples(200), deadline=None)
@given(batches=st.lists(edges_st, min_size=1, max_size=6))
def test_merging_batch_by_batch_gives_the_components_and_their_changes(batches: list[list[tuple[int, int]]]) -> None:
    state = None
    for batch, labels, changed in zip(batches, reference_labels(batches), reference_changes(batches), strict=True):
        state, changes = merge_edges(state, np.array(batch, dtype=np.int64).reshape(-1, 2))
        verts, got = state
        assert dict(zip(verts.tolist(), got.tolist(), strict=True)) == labels
        assert list(verts) == sorted(verts)
        pairs = [tuple(r) for r in changes.tolist()]
        assert len(pairs) == len({v for v, _ in pairs}), "a vertex changed twice in one merge"
        assert dict(pairs) == changed


def _run_with_moves(worker: Worker, epochs: list[list[tuple[int, int]]], owners: list[list[int]]) -> Any:
    """Feed epoch ``e``'s edges (split between workers) while the bins go to ``owners[e]``; gather the changes."""
    me, peers = worker.index, worker.peers

    def build(scope: Any) -> Any:
        handle, edges = scope.new_input(name="edges")
        control_handle, control = scope.new_input(name="control")
        out = union_components(edges, control, shards=8).exchange(lambda _: 0)
        return handle, control_handle, out.capture(), out.probe()

    handle, control_handle, captured, probe = worker.dataflow(build)
    for e, batch in enumerate(epochs):
        if me == 0:
            control_handle.send_batch(balanced_moves(e, owners[e]))
        handle.send_batch(np.array(batch[me::peers], dtype=np.int64).reshape(-1, 2))
        handle.advance_to(e + 1)
        control_handle.advance_to(e + 1)
        worker.step_while(lambda: probe.less_than(handle.time))
    handle.close()
    control_handle.close()
    worker.step_while(lambda: not probe.done())
    return [(t, [r for rows in batch for r in rows.tolist()]) for t, batch in captured]


@settings(max_examples=examples(15), deadline=None)
@given(
    epochs=st.lists(edges_st, min_size=1, max_size=4),
    owners=st.lists(st.sampled_from([[0], [1], [0, 1]]), min_size=4, max_size=4),
)
def test_the_stage_gives_each_epochs_changes_while_its_bins_move(
    epochs: list[list[tuple[int, int]]], owners: list[list[int]]
) -> None:
    results = execute(lambda w: _run_with_moves(w, epochs, owners), workers=2)
    per_epoch: list[dict[int, int]] = [{} for _ in epochs]
    for t, rows in results[0]:
        for v, label in rows:
            assert v not in per_epoch[t], f"vertex {v} reported twice at epoch {t}"
            per_epoch[t][v] = label
    assert per_epoch == reference_changes(epochs)
    assert results[1] == []

"""Weakly connected components by label propagation, incrementally per epoch (seed 000, Fig. 2).

Every vertex starts labelled with its own id and adopts the smallest label it
hears from a neighbour; at the fixpoint each vertex carries the smallest vertex
id of its component. Timestamps are ``Product(epoch, iteration)`` inside the
loop: edges of epoch ``e`` enter at ``(e, 0)``, and label proposals travel the
feedback edge one iteration at a time.

Each worker owns the vertices ``v`` with ``v % peers == index`` together with
their out-edges. Batches are numpy arrays and every per-record step is
vectorised. Within an epoch, proposals are applied as they arrive (taking
minima commutes), but an epoch's edges and proposals wait until no earlier epoch
can still deliver anything, so each epoch's labels are exactly those of the
graph of all edges up to it.

The output stream carries ``(vertex, label)`` rows (an ``(n, 2)`` int64 array
per batch) at epoch ``e`` for every vertex whose label is new or changed at
``e``, once per vertex and epoch.

Vertex ``v`` is in bin ``v % 256`` and owned by worker ``bin % peers``. Each
worker's vertices with their labels and out-edges, and what it reported, are
declared state in those bins (:mod:`pytimely.dataflow.state`): with recovery on,
the bins a snapshot finds changed are written, and a restart on any number of
workers gives each bin to its new owner, who sorts its edges into inner and
outer again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pytimely.dataflow.capability import Capability
from pytimely.dataflow.operator import OperatorInfo
from pytimely.dataflow.operators.generic import Notificator
from pytimely.dataflow.ports import InputPort, OutputPort
from pytimely.dataflow.stream import Stream
from pytimely.errors import InputFormatError
from pytimely.order import Product

__all__ = ["connected_components"]

_EMPTY = np.empty((0, 2), dtype=np.int64)
_INT64_MAX = int(np.iinfo(np.int64).max)
_PROPOSAL = 0
_CHANGE = 1


BINS = 256
"""Vertex ``v`` is in bin ``v % BINS``; bin ``b`` is worker ``b % peers``'s."""


def _by_vertex(batch: Any) -> Any:
    # The exchange sends a row to worker ``route % peers``: the owner of the vertex's bin.
    return batch[:, 0] % BINS


def _bins(ids: Any) -> Any:
    return ids % BINS


def _symmetric(edges: Any) -> Any:
    """Both directions of every undirected edge, as ``(owner-side vertex, neighbour)`` rows.

    Anything but ``(n, 2+)`` integers within the 64-bit range is refused: a cast would truncate
    floats and wrap large unsigned ids into other vertices' ids without a word.
    """
    array = np.asarray(edges)
    if array.size == 0:
        return _EMPTY
    if array.dtype.kind not in "iu" or array.ndim != 2 or array.shape[1] < 2:
        why = " (a value outside the 64-bit range, or not a number)" if array.dtype.kind == "O" else ""
        raise InputFormatError(
            f"connected_components: edges must be (n, 2) rows of 64-bit integers, got an array of {array.dtype} "
            f"and shape {array.shape}{why}"
        )
    if array.dtype.kind == "u" and int(array[:, :2].max()) > _INT64_MAX:
        raise InputFormatError(
            f"connected_components: edges must be rows of 64-bit integers, got ids up to {int(array[:, :2].max())}"
        )
    edges = array[:, :2].astype(np.int64, copy=False)
    return np.concatenate([edges, edges[:, ::-1]])


def _distinct(ids: Any) -> Any:
    """The sorted distinct values of ``ids`` (sorting beats ``np.unique``'s hashing on millions of int64s).

    Ids that are non-negative and not much larger than their count are marked in a table instead: one pass.
    """
    if len(ids) > 1024:
        low, high = int(ids.min()), int(ids.max())
        if low >= 0 and high < 4 * len(ids) + (1 << 20):
            seen = np.zeros(high + 1, dtype=bool)
            seen[ids] = True
            return np.flatnonzero(seen)
    ordered = np.sort(ids)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _tagged(tag: int) -> Any:
    """The rows of a ``_Propagate`` batch with ``tag``, without the tag column.

    ``_Propagate`` emits every batch as its proposals followed by its changes, so column 0 is sorted and
    each part is a slice: found by binary search and taken as a view instead of a masked copy.
    """

    def part(rows: Any) -> Any:
        tags = rows[:, 0]
        start = int(np.searchsorted(tags, tag, side="left"))
        end = int(np.searchsorted(tags, tag, side="right"))
        return rows[start:end, 1:]

    return part


def _gather(offsets: Any, targets: Any, rows: Any) -> tuple[Any, Any]:
    """Neighbours of the vertices at local ``rows``: (neighbour ids, index into ``rows`` for each)."""
    starts = offsets[rows]
    counts = offsets[rows + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return targets[:0], rows[:0]
    owner = np.repeat(np.arange(len(rows)), counts)
    position = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(starts, counts)
    return targets[position], owner


def _least_per_target(targets: Any, labels: Any) -> tuple[Any, Any]:
    """Each target once, with the least of the labels offered to it (only the least can matter over there).

    Proposals cross the exchange and are applied on the far side: sending one per target instead of one
    per edge cuts what is serialised, sent and applied by the average number of edges into a target. Done
    with a lookup table when ids are small enough (one pass), else left as they are (a sort would cost
    more than it saves).
    """
    if len(targets) < 2:
        return targets, labels
    dense = _dense_least(targets, labels)
    return (targets, labels) if dense is None else dense


def _dense_least(ids: Any, labels: Any) -> tuple[Any, Any] | None:
    """Sorted distinct ``ids`` and the least label of each, through a lookup table; None if ids are too sparse."""
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= 4 * len(ids) + (1 << 20):
        return None
    least = np.full(high + 1, _INT64_MAX, dtype=np.int64)
    np.minimum.at(least, ids, labels)
    hit = np.flatnonzero(least != _INT64_MAX)
    return hit, least[hit]


def _rows(*parts: tuple[int, Any, Any]) -> Any:
    """One ``(tag, vertex, label)`` array from ``(tag, vertices, labels)`` parts, in order, filled in place."""
    rows = np.empty((sum(len(vertices) for _, vertices, _ in parts), 3), dtype=np.int64)
    at = 0
    for tag, vertices, labels in parts:
        end = at + len(vertices)
        rows[at:end, 0] = tag
        rows[at:end, 1] = vertices
        rows[at:end, 2] = labels
        at = end
    return rows


def _components(n: int, a: Any, b: Any) -> Any:
    """For rows ``0..n-1`` joined by the edges ``a[k] -- b[k]``, each row's component root: its least row.

    Hook and shortcut, vectorised: every edge hooks the larger of its endpoints' parents under the smaller, then
    parents jump to their grandparents until each tree is a star. At a fixpoint every edge joins two rows of the
    same star, so stars are components, and a component's least row is its root because parents only decrease.
    Random graphs settle in a handful of rounds, each a few passes over the edges.
    """
    parent = np.arange(n, dtype=np.int64)
    if not len(a):
        return parent
    while True:
        pa, pb = parent[a], parent[b]
        least = np.minimum(pa, pb)
        before = parent.copy()
        np.minimum.at(parent, pa, least)
        np.minimum.at(parent, pb, least)
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
        if np.array_equal(parent, before):
            return parent


class _LabelBins:
    """Declared state (:mod:`pytimely.dataflow.state`) of sorted vertex ids and their labels, in the vertices' bins:
    which bins changed and are held, each bin's part, the pieces a snapshot writes, and installing a restored part.
    Subclasses add to a bin's part in :meth:`_portable` and :meth:`restore_piece`."""

    vertices: Any
    labels: Any
    _dirty: set[int]

    def _portable(self, bins: set[int]) -> dict[str, Any]:
        wanted = np.fromiter(bins, dtype=np.int64, count=len(bins))
        keep = np.isin(_bins(self.vertices), wanted)
        return {"vertices": self.vertices[keep], "labels": self.labels[keep]}

    def changed(self) -> set[int]:
        """The bins of vertices given new labels (or edges) since the last snapshot."""
        dirty, self._dirty = self._dirty, set()
        return dirty

    def held(self) -> list[int]:
        """The bins this worker holds vertices in."""
        return np.unique(_bins(self.vertices)).tolist()  # type: ignore[no-any-return]

    def snapshot(self, bins: Any) -> dict[int, Any]:
        """Each bin's part on its own."""
        return {b: self._portable({b}) for b in bins}

    def capture(self, turn: int, rewrite_every: int) -> list[tuple[tuple[int, ...], Any]]:
        """One piece for the bins that changed and, in turn, some that did not (:class:`PiecewiseState`)."""
        held = set(self.held())
        bins = (self.changed() | {b for b in held if b % rewrite_every == turn}) & held
        return [(tuple(sorted(bins)), self._portable(bins))] if bins else []

    def restore(self, bin: int, value: Any) -> None:
        """Install one bin's part."""
        self.restore_piece((bin,), value)

    def restore_piece(self, bins: Any, value: Any) -> None:
        """Install the vertices of ``bins`` in ``value`` with their labels."""
        self._install_labels(bins, value)

    def _install_labels(self, bins: Any, value: Any) -> Any:
        """Merge the vertices of ``bins`` in ``value`` and their labels in; the bins, as an array."""
        wanted = np.fromiter(bins, dtype=np.int64, count=len(bins))
        keep = np.isin(_bins(value["vertices"]), wanted)
        vertices = np.concatenate([self.vertices, value["vertices"][keep]])
        labels = np.concatenate([self.labels, value["labels"][keep]])
        order = np.argsort(vertices, kind="stable")
        self.vertices, self.labels = vertices[order], labels[order]
        return wanted


class _Propagate(_LabelBins):
    """The loop body on one worker: owned vertices, their labels, and their out-edges.

    Out-edges whose far end this worker owns too ("inner" edges) never cross the exchange: the worker keeps the
    components they form among its own vertices, and every label it learns spreads through the whole local
    component at once. Only "outer" edges, towards other workers' vertices, carry proposals around the loop, so
    one worker needs a single round and several need a round per hop between workers' local components, not per
    hop between vertices.

    Invariant between calls: the labels of the vertices of one local component are equal.
    """

    def __init__(self, cap: Capability[Any], info: OperatorInfo) -> None:
        cap.drop()
        self.worker = info.worker
        self.peers = info.peers
        self.bins = BINS
        self._dirty: set[int] = set()
        self._restored = False
        info.declare("graph", self, "components/1")
        self.vertices = np.empty(0, dtype=np.int64)  # sorted ids of owned vertices
        self.labels = np.empty(0, dtype=np.int64)
        self.inner = np.empty((0, 2), dtype=np.int64)  # inner edges, each once (ids, smaller end first)
        self.outer_targets = np.empty(0, dtype=np.int64)  # far ends of outer edges, grouped by owned end
        self.outer_sources = np.empty(0, dtype=np.int64)
        self.outer_offsets = np.zeros(1, dtype=np.int64)  # local row -> its outer edges' slice
        self.members = np.empty(0, dtype=np.int64)  # local rows grouped by local component
        self.member_offsets = np.zeros(1, dtype=np.int64)  # component root row -> its members' slice
        self.root = np.empty(0, dtype=np.int64)  # local row -> the least row of its local component
        self.dense: Any = None  # vertex id -> local row, when ids are small enough for a lookup table
        self.edges: dict[Any, tuple[Capability[Any], list[Any]]] = {}
        self.proposals: dict[Any, tuple[Capability[Any], list[Any]]] = {}

    def __call__(
        self, edges_in: InputPort[Any, Any], labels_in: InputPort[Any, Any], out: OutputPort[Any, Any]
    ) -> None:
        if self._restored:
            self._restored = False
            self._rebuild()
        for input_cap, batch in edges_in:
            self._stash(self.edges, input_cap, batch)
        for input_cap, batch in labels_in:
            self._stash(self.proposals, input_cap, batch)
        edge_frontier = edges_in.frontier
        label_frontier = labels_in.frontier
        while self.edges or self.proposals:
            epoch = min((*self.edges, *self.proposals))
            # Nothing from an earlier epoch may still arrive, or this epoch's state would leak into it.
            if any(f.outer < epoch for f in edge_frontier.frontier_elements()):
                return
            if any(f.outer < epoch for f in label_frontier.frontier_elements()):
                return
            if edge_frontier.less_equal(Product(epoch, 0)):
                return  # this epoch's edges are still arriving
            if epoch in self.edges:
                cap, batches = self.edges.pop(epoch)
                self._add_edges(np.concatenate(batches), cap, out)
                cap.drop()
            if epoch in self.proposals:
                cap, batches = self.proposals.pop(epoch)
                self._apply(np.concatenate(batches), cap, out)
                cap.drop()

    @staticmethod
    def _stash(stash: dict[Any, tuple[Capability[Any], list[Any]]], cap: Any, batch: Any) -> None:
        time = cap.time
        entry = stash.get(time.outer)
        if entry is None:
            stash[time.outer] = (cap.retain(), [batch])
            return
        held, batches = entry
        batches.append(batch)
        # Everything stashed for the epoch goes out at the latest iteration seen, never earlier than its own.
        if held.time.inner < time.inner:
            held.downgrade(time)

    def _owned(self, ids: Any) -> Any:
        """Which of ``ids`` this worker owns (the exchange's ``id % BINS % peers`` rule)."""
        return (_bins(ids) % self.peers) == self.worker

    def _add_edges(self, new: Any, cap: Capability[Any], out: OutputPort[Any, Any]) -> None:
        ids = new[:, 0]
        self._dirty.update(np.unique(_bins(ids)).tolist())
        fresh = _distinct(ids)
        if len(self.vertices):
            fresh = np.setdiff1d(fresh, self.vertices, assume_unique=True)
        if len(fresh) and len(self.vertices):
            merged = np.concatenate([self.vertices, fresh])
            order = np.argsort(merged, kind="stable")
            self.vertices = merged[order]
            self.labels = np.concatenate([self.labels, fresh])[order]
        elif len(fresh):
            self.vertices, self.labels = fresh, fresh.copy()
        vertices = self.vertices
        if len(vertices) and vertices[0] >= 0 and vertices[-1] < 4 * len(vertices) + (1 << 20):
            self.dense = np.zeros(int(vertices[-1]) + 1, dtype=np.int64)
            self.dense[vertices] = np.arange(len(vertices))
        else:
            self.dense = None
        # Both directions of an inner edge are this worker's (edges arrive symmetric, each direction with its
        # owned end), so one direction is enough for the components.
        inward = self._owned(new[:, 1])
        inner = new[inward]
        self.inner = np.concatenate([self.inner, inner[inner[:, 0] <= inner[:, 1]]])
        outer = new[~inward]
        sources = np.concatenate([self.outer_sources, outer[:, 0]])
        targets = np.concatenate([self.outer_targets, outer[:, 1]])
        order = np.argsort(sources, kind="stable")
        self.outer_sources, self.outer_targets = sources[order], targets[order]
        n = len(vertices)
        self.outer_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self._local(self.outer_sources), minlength=n), out=self.outer_offsets[1:])
        self.root = _components(n, self._local(self.inner[:, 0]), self._local(self.inner[:, 1]))
        self.members = np.argsort(self.root, kind="stable")
        self.member_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.root, minlength=n), out=self.member_offsets[1:])
        # New inner edges may join components that had different labels: each takes its members' least.
        least = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(least, self.root, self.labels)
        spread = least[self.root]
        changed = np.flatnonzero(spread < self.labels)
        self.labels = spread
        self._dirty.update(np.unique(_bins(vertices[changed])).tolist())
        # All outer edges of relabelled vertices carry the new label across; so do the other new outer edges.
        relabelled = np.zeros(n, dtype=bool)
        relabelled[changed] = True
        rows_of_new = self._local(outer[:, 0])
        unchanged = ~relabelled[rows_of_new]
        neighbours, owner = _gather(self.outer_offsets, self.outer_targets, changed)
        relabelled[self._local(fresh)] = True
        news = np.flatnonzero(relabelled)
        targets, offers = _least_per_target(
            np.concatenate([outer[unchanged, 1], neighbours]),
            np.concatenate([self.labels[rows_of_new[unchanged]], self.labels[changed][owner]]),
        )
        out.give(cap, _rows((_PROPOSAL, targets, offers), (_CHANGE, self.vertices[news], self.labels[news])))

    def _rebuild(self) -> None:
        """The lookups derived from vertices, labels and edges (after a restore)."""
        vertices = self.vertices
        n = len(vertices)
        if n and vertices[0] >= 0 and vertices[-1] < 4 * n + (1 << 20):
            self.dense = np.zeros(int(vertices[-1]) + 1, dtype=np.int64)
            self.dense[vertices] = np.arange(n)
        else:
            self.dense = None
        order = np.argsort(self.outer_sources, kind="stable")
        self.outer_sources, self.outer_targets = self.outer_sources[order], self.outer_targets[order]
        self.outer_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self._local(self.outer_sources), minlength=n), out=self.outer_offsets[1:])
        self.root = _components(n, self._local(self.inner[:, 0]), self._local(self.inner[:, 1]))
        self.members = np.argsort(self.root, kind="stable")
        self.member_offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.root, minlength=n), out=self.member_offsets[1:])

    # -- declared state (pytimely.dataflow.state): vertices, labels and out-edges in the vertices' bins -----

    def _portable(self, bins: set[int]) -> dict[str, Any]:
        """The vertices of ``bins`` with their labels, and every out-edge of them (inner edges both ways)."""
        wanted = np.fromiter(bins, dtype=np.int64, count=len(bins))
        keep = np.isin(_bins(self.vertices), wanted)
        inner = np.concatenate([self.inner, self.inner[:, ::-1]])
        sources = np.concatenate([inner[:, 0], self.outer_sources])
        targets = np.concatenate([inner[:, 1], self.outer_targets])
        edges = np.isin(_bins(sources), wanted)
        return {
            "vertices": self.vertices[keep], "labels": self.labels[keep],
            "sources": sources[edges], "targets": targets[edges],
        }  # fmt: skip

    def restore_piece(self, bins: Any, value: Any) -> None:
        """Install the vertices and out-edges of ``bins`` in ``value``; inner and outer are sorted out anew."""
        wanted = self._install_labels(bins, value)
        edges = np.isin(_bins(value["sources"]), wanted)
        sources, targets = value["sources"][edges], value["targets"][edges]
        inward = self._owned(targets)
        inner = np.column_stack([sources[inward], targets[inward]])
        self.inner = np.concatenate([self.inner, inner[inner[:, 0] <= inner[:, 1]]])
        self.outer_sources = np.concatenate([self.outer_sources, sources[~inward]])
        self.outer_targets = np.concatenate([self.outer_targets, targets[~inward]])
        self._restored = True  # the lookups are rebuilt before the first step, once every piece is in

    def _local(self, ids: Any) -> Any:
        """Local rows of owned vertex ``ids``."""
        if self.dense is not None:
            return self.dense[ids]
        return np.searchsorted(self.vertices, ids)

    def _apply(self, proposals: Any, cap: Capability[Any], out: OutputPort[Any, Any]) -> None:
        local = self._local(proposals[:, 0])
        if 4 * len(proposals) >= len(self.labels):
            # Large batches: take minima over a copy of all labels, cheaper than sorting the batch.
            best = self.labels.copy()
            np.minimum.at(best, local, proposals[:, 1])
            improved = np.flatnonzero(best < self.labels)
            offered = best[improved]
        else:
            touched, inverse = np.unique(local, return_inverse=True)
            least = np.full(len(touched), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(least, inverse, proposals[:, 1])
            better = least < self.labels[touched]
            improved, offered = touched[better], least[better]
        if not len(improved):
            return
        # A component takes the least label offered to any of its members (its members' labels are equal).
        roots, inverse = np.unique(self.root[improved], return_inverse=True)
        least = np.full(len(roots), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(least, inverse, offered)
        changed, owner = _gather(self.member_offsets, self.members, roots)
        self.labels[changed] = least[owner]
        self._dirty.update(np.unique(_bins(self.vertices[changed])).tolist())
        labels = self.labels[changed]
        neighbours, source = _gather(self.outer_offsets, self.outer_targets, changed)
        targets, offers = _least_per_target(neighbours, labels[source])
        out.give(cap, _rows((_PROPOSAL, targets, offers), (_CHANGE, self.vertices[changed], labels)))


class _Report(_LabelBins):
    """Per epoch, the final label of every vertex that changed, compared with what was reported before."""

    def __init__(self, cap: Capability[Any], info: OperatorInfo) -> None:
        cap.drop()
        # What was reported so far, as sorted vertex ids and their labels (searched, never looped over).
        self.vertices = np.empty(0, dtype=np.int64)
        self.labels = np.empty(0, dtype=np.int64)
        self.bins = BINS
        self._dirty: set[int] = set()
        info.declare("reported", self, "components-reported/1")
        self.pending: dict[Any, list[Any]] = {}
        self.notificator: Notificator[Any] = Notificator()

    def __call__(self, changes: InputPort[Any, Any], out: OutputPort[Any, Any]) -> None:
        for input_cap, batch in changes:
            batches = self.pending.get(input_cap.time)
            if batches is None:
                self.pending[input_cap.time] = [batch]
                self.notificator.notify_at(input_cap.retain())
            else:
                batches.append(batch)
        for cap in self.notificator.ready(changes.frontier):
            rows = np.concatenate(self.pending.pop(cap.time))
            # Labels only decrease: a vertex's final label at this epoch is the least one it was given.
            dense = _dense_least(rows[:, 0], rows[:, 1]) if len(rows) else None
            if dense is not None:
                final = self._news(np.column_stack(dense))
            else:
                order = np.argsort(rows[:, 0], kind="stable")
                vertices, labels = rows[order, 0], rows[order, 1]
                first = np.ones(len(vertices), dtype=bool)
                first[1:] = vertices[1:] != vertices[:-1]
                starts = np.flatnonzero(first)
                least = np.minimum.reduceat(labels, starts) if len(starts) else labels[:0]
                final = self._news(np.column_stack([vertices[starts], least]))
            if len(final):
                out.give(cap, final)
            cap.drop()

    def _news(self, final: Any) -> Any:
        """The rows of ``final`` (sorted by vertex) whose label differs from the one reported; record them."""
        at = np.searchsorted(self.vertices, final[:, 0])
        inside = at < len(self.vertices)
        known = np.zeros(len(final), dtype=bool)
        known[inside] = self.vertices[at[inside]] == final[inside, 0]
        same = np.zeros(len(final), dtype=bool)
        same[known] = self.labels[at[known]] == final[known, 1]
        news = final[~same]
        self._dirty.update(np.unique(_bins(news[:, 0])).tolist())
        moved = known & ~same
        self.labels[at[moved]] = final[moved, 1]
        added = final[~known]
        if len(added):
            vertices = np.concatenate([self.vertices, added[:, 0]])
            labels = np.concatenate([self.labels, added[:, 1]])
            order = np.argsort(vertices, kind="stable")
            self.vertices, self.labels = vertices[order], labels[order]
        return news


    # -- declared state: the labels reported, in the vertices' bins ----------------------------------------


def connected_components(edges: Stream[Any]) -> Stream[Any]:
    """Label changes per epoch for the undirected graph whose edges (``(n, 2+)`` int arrays) arrive on ``edges``."""
    scope = edges.scope
    directed = edges.map_batch(_symmetric, name="wcc.symmetric")
    loop = scope.iterative("wcc.loop")
    handle, proposals = loop.feedback(name="wcc.feedback")
    body = directed.enter(loop, name="wcc.enter").binary(
        proposals,
        _Propagate,
        name="wcc.propagate",
        exchange1=_by_vertex,
        exchange2=_by_vertex,
        vectorized=True,
    )
    body.map_batch(_tagged(_PROPOSAL), name="wcc.proposals").connect_loop(handle)
    changes = body.map_batch(_tagged(_CHANGE), name="wcc.changes").leave(name="wcc.leave")
    return changes.unary(_Report, name="wcc.report")

"""Partial aggregates of tumbling and sliding windows over columns, kept as arrays until their windows close.

A window's partial results from many batches are combined in one grouping when it closes, so Python runs
once per window, not once per window and batch. Keys that are not numbers (an Arrow column of strings) are
kept as codes of the operator's own, which hold while any array keeps them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COMPACT_AT", "KeptChunks", "reduceat"]

COMPACT_AT = 1 << 22
"""Rows of kept arrays after which they are grouped (bounds their memory when no window closes for long)."""


def reduceat(aggregate: str, values: Any, starts: Any) -> Any:
    """``aggregate`` (``sum``, ``min`` or ``max``) of each run of ``values`` starting at ``starts``."""
    import numpy as np

    reduce = {"sum": np.add, "min": np.minimum, "max": np.maximum}[aggregate]
    return reduce.reduceat(values, starts)


class KeptChunks:
    """``(window ends, keys, partial aggregates)`` arrays not yet grouped, and the key codes they use."""

    __slots__ = ("aggregate", "chunks", "coded", "codes", "decode", "low", "rows", "step")

    def __init__(self, aggregate: str, step: int) -> None:
        self.aggregate = aggregate
        self.step = step
        """The distance between consecutive window ends."""
        self.chunks: list[tuple[Any, Any, Any]] = []
        self.low: int | None = None
        """The least window end kept (``None``: nothing is kept)."""
        self.rows = 0
        self.codes: dict[Any, int] = {}
        self.decode: list[Any] = []
        """The key of each code."""
        self.coded = False
        """Whether the keys kept are codes."""

    def __bool__(self) -> bool:
        return bool(self.chunks)

    def encode(self, local: Any, distinct: list[Any]) -> Any:
        """Codes for keys given as ``distinct[local]``: a key keeps its code while any array holds it."""
        import numpy as np

        if not self.chunks:  # no code is kept in arrays any more: start afresh (bounds the table's size)
            self.codes, self.decode = {}, []
        codes, decode = self.codes, self.decode
        lookup = np.empty(len(distinct), dtype=np.int64)
        for i, k in enumerate(distinct):
            code = codes.get(k)
            if code is None:
                code = codes[k] = len(decode)
                decode.append(k)
            lookup[i] = code
        return lookup[local]

    def add(self, ends: Any, ks: Any, accs: Any) -> int:
        """Keep one batch's memberships; returns the least window end among them."""
        self.chunks.append((ends, ks, accs))
        low = int(ends.min())
        if self.low is None or low < self.low:
            self.low = low
        self.rows += len(ends)
        if self.rows > COMPACT_AT:
            self.compact()
        return low

    def compact(self) -> None:
        """Group the kept arrays by (window end, key): one row per window and key."""
        import numpy as np

        ends = np.concatenate([c[0] for c in self.chunks])
        ks = np.concatenate([c[1] for c in self.chunks])
        accs = np.concatenate([c[2] for c in self.chunks])
        grid = self._grid(ends, ks)
        if grid is not None and grid[5] and self.aggregate == "count":
            # Few (window, key) cells: count into a dense grid, no sort at all.
            cell, e0, k0, width, step, _ = grid
            totals = np.bincount(cell, weights=accs)
            hit = np.flatnonzero(totals)
            ends, ks, accs = e0 + (hit // width) * step, k0 + hit % width, totals[hit].astype(np.int64)
        else:
            # One argsort of a combined (end, key) number where it fits, else a two-key lexsort.
            order = np.argsort(grid[0], kind="stable") if grid is not None else np.lexsort((ks, ends))
            ends, ks = ends[order], ks[order]
            starts = np.flatnonzero(np.concatenate(([True], (ends[1:] != ends[:-1]) | (ks[1:] != ks[:-1]))))
            accs = reduceat("sum" if self.aggregate == "count" else self.aggregate, accs[order], starts)
            ends, ks = ends[starts], ks[starts]
        self.chunks = [(ends, ks, accs)]
        self.rows = len(ends)

    def _grid(self, ends: Any, ks: Any) -> tuple[Any, int, int, int, int, bool] | None:
        """``(cell, first end, least key, keys per end, step, dense)``: each row's (end, key) as one int64.

        None when it does not fit; ``dense`` when the cells are few enough to count into an array of them.
        """
        if ks.dtype.kind != "i" or not len(ends):
            return None
        step = self.step
        e0, k0 = int(ends.min()), int(ks.min())
        width = int(ks.max()) - k0 + 1
        cells = ((int(ends.max()) - e0) // step + 1) * width
        if cells >= 1 << 62:
            return None
        cell = (ends - e0) // step * width + (ks - k0)
        return cell, e0, k0, width, step, cells <= max(4 * len(ends), 1 << 16)

    def take_closed(self, bound: int | None) -> tuple[list[int], list[Any], list[Any]]:
        """``(ends, keys, aggregates)`` of the windows ``bound`` closes (``None``: all), by end; no longer kept."""
        import numpy as np

        if self.low is None or (bound is not None and self.low > bound):
            return [], [], []
        self.compact()
        ends, ks, accs = self.chunks[0]
        done = np.ones(len(ends), dtype=bool) if bound is None else ends <= bound
        rest = np.flatnonzero(~done)
        if rest.size:
            self.chunks = [(ends[rest], ks[rest], accs[rest])]
            self.low = int(ends[rest].min())
            self.rows = rest.size
        else:
            self.chunks, self.low, self.rows = [], None, 0
        hit = np.flatnonzero(done)
        keys = ks[hit].tolist()
        if self.coded:
            decode = self.decode
            keys = [decode[k] for k in keys]
        return ends[hit].tolist(), keys, accs[hit].tolist()

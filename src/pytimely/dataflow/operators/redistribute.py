"""``redistribute``: spread records evenly over the workers, round robin, whatever their keys."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytimely.dataflow.channels import Exchange

if TYPE_CHECKING:
    from pytimely.dataflow.stream import Stream

__all__ = ["redistribute"]


def redistribute(stream: Stream[Any], name: str) -> Stream[Any]:
    """Record ``i`` sent by a worker goes to worker ``(start + i) % peers``; batches are split, not copied row by row.

    Each worker starts at its own index, so many small batches still spread over every worker.
    """
    import numpy as np

    from pytimely.dataflow.operators.core import passthrough

    offset = [stream.scope.index]

    def route(batch: Any) -> Any:
        start = offset[0]
        offset[0] = start + len(batch)
        return np.arange(start, start + len(batch), dtype=np.int64)

    return passthrough(stream, Exchange(route, vectorized=True), name)

"""The progress-update queues shared by the clocks and exchange protocols.

Seed ``000_306a8e6bd5c43d47.txt`` §4: sending and receiving progress updates
"works precisely as in the clocks protocol" (Fig. 3); only ``send_upd``'s
condition on what stays in ``temp`` differs. The effects live here once.
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["dequeue_update", "enqueue_update"]


C = TypeVar("C")
"""A configuration record with ``msg``, ``temp`` and ``glob`` fields (a ``NamedTuple``)."""


def enqueue_update(c: C, w: int, P: frozenset[Any]) -> C:
    """``send_upd`` effect: ``γ = {#p ∈#z temp c w. p ∈ P#}`` goes to the end of every ``msg c w w'``."""
    c_: Any = c
    gamma = c_.temp[w].filter(P.__contains__)
    msg = list(c_.msg)
    msg[w] = tuple((*q, gamma) for q in c_.msg[w])
    temp = list(c_.temp)
    temp[w] = temp[w] - gamma
    result: C = c_._replace(msg=tuple(msg), temp=tuple(temp))
    return result


def dequeue_update(c: C, w: int, w2: int) -> C:
    """``recv_upd`` effect: the head of ``msg c w w'`` leaves the queue and is added to ``glob c w'``."""
    c_: Any = c
    q = c_.msg[w][w2]
    row = list(c_.msg[w])
    row[w2] = q[1:]
    msg = list(c_.msg)
    msg[w] = tuple(row)
    glob = list(c_.glob)
    glob[w2] = glob[w2] + q[0]
    result: C = c_._replace(msg=tuple(msg), glob=tuple(glob))
    return result

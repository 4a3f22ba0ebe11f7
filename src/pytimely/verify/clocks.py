"""The clocks protocol of Abadi et al. as re-formalised in seed ``000_306a8e6bd5c43d47.txt`` §3 (Fig. 3).

Configurations are records ``rec/msg/temp/glob``; the actions are ``perf_op``,
``send_upd`` and ``recv_upd``. ``Safe`` is temporal ("once ``glob w`` is vacant at
``p``, ``rec`` is vacant at ``p`` forever"); to check it exactly on finite
prefixes, :class:`State` carries a ghost component ``vacated``: every pointstamp
at which some ``glob`` has been vacant so far on the path. ``Safe`` then
requires ``rec`` to be vacant at each of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import Any, NamedTuple

from pytimely.verify.model import Action, Invariant, TransitionInvariant
from pytimely.verify.poset import Poset
from pytimely.verify.updates import dequeue_update, enqueue_update
from pytimely.verify.zmset import (
    ZMSet,
    multisets_upto,
    nonempty_subsets,
    upright,
    vacant,
)

__all__ = [
    "ClocksConfig",
    "ClocksModel",
    "Init",
    "Safe",
    "State",
    "initial_states",
    "perf_op",
    "perf_op_enabled",
    "recv_upd",
    "recv_upd_enabled",
    "send_upd",
    "send_upd_enabled",
]

P = Hashable
Queue = tuple[ZMSet[Any], ...]


class State(NamedTuple):
    """``record conf = rec, msg, temp, glob`` (§3), plus the ghost ``vacated`` used to check ``Safe``."""

    rec: ZMSet[Any]
    msg: tuple[tuple[Queue, ...], ...]
    """``msg[w][w']``: FIFO queue of progress updates from ``w`` to ``w'``."""
    temp: tuple[ZMSet[Any], ...]
    glob: tuple[ZMSet[Any], ...]
    vacated: frozenset[Any]
    """Ghost: pointstamps at which some ``glob`` has been vacant at some point of the history."""


@dataclass(frozen=True)
class ClocksConfig:
    """The bounds that make the clocks protocol finite: workers, pointstamps, sizes, counts, queues."""

    poset: Poset
    workers: int = 2
    init_size: int = 2
    """Initial ``rec``: every multiset of at most this many pointstamps."""
    max_rec: int = 2
    """``perf_op`` is disabled if it would push a count of ``rec`` above this."""
    max_neg: int = 1
    """At most this many elements in ``Δneg``."""
    max_pos: int = 1
    """At most this many elements in ``Δpos``."""
    queue_bound: int = 2
    """``send_upd`` is disabled while a queue from the sender holds this many messages."""
    depth: int = 8
    """Default exploration depth."""
    name: str = ""


def _vacant_points(cfg: ClocksConfig, globs: Sequence[ZMSet[Any]]) -> frozenset[Any]:
    out: frozenset[Any] = frozenset()
    for g in globs:
        out |= _vacant_in(cfg.poset, g)
    return out


@lru_cache(maxsize=1 << 16)
def _vacant_in(poset: Poset, g: ZMSet[Any]) -> frozenset[Any]:
    """The pointstamps at which ``g`` is vacant."""
    return frozenset(p for p in poset.elements if vacant(g, p, poset.le))


def Init(cfg: ClocksConfig, c: State) -> bool:
    """``Init c``: ``rec`` non-negative, queues and ``temp`` empty, every ``glob`` equal to ``rec`` (§3)."""
    w = range(cfg.workers)
    return (
        all(n >= 0 for n in c.rec.values())
        and all(not c.msg[a][b] for a in w for b in w)
        and all(not c.temp[a] for a in w)
        and all(c.glob[a] == c.rec for a in w)
        and c.vacated == _vacant_points(cfg, c.glob)
    )


def initial_states(cfg: ClocksConfig) -> Iterator[State]:
    """Every ``Init`` configuration whose ``rec`` has at most ``init_size`` elements."""
    n = cfg.workers
    empty_msg = tuple(tuple(() for _ in range(n)) for _ in range(n))
    for rec in multisets_upto(cfg.poset.elements, cfg.init_size):
        globs = (rec,) * n
        yield State(rec, empty_msg, (ZMSet(),) * n, globs, _vacant_points(cfg, globs))


def perf_op_enabled(cfg: ClocksConfig, c: State, w: int, d_neg: ZMSet[Any], d_pos: ZMSet[Any]) -> bool:
    """``perf_op w Δneg Δpos``: ``∀p. Δneg #p ≤ rec #z p`` and ``upright (Δpos - Δneg)`` (Fig. 3)."""
    return d_neg.le_counts(c.rec) and upright(d_pos - d_neg, cfg.poset.lt)


def perf_op(cfg: ClocksConfig, c: State, w: int, d_neg: ZMSet[Any], d_pos: ZMSet[Any]) -> State:
    """Effect of ``perf_op``: ``rec`` and ``temp w`` both change by ``Δ = Δpos - Δneg`` (Fig. 3)."""
    delta = d_pos - d_neg
    temp = list(c.temp)
    temp[w] = temp[w] + delta
    return c._replace(rec=c.rec + delta, temp=tuple(temp))


def send_upd_enabled(cfg: ClocksConfig, c: State, w: int, P: frozenset[Any]) -> bool:
    """``send_upd w P``: ``γ ≠ {#}z`` and ``upright (temp c w - γ)`` where ``γ = {#p ∈#z temp c w. p ∈ P#}``."""
    gamma = c.temp[w].filter(P.__contains__)
    return bool(gamma) and upright(c.temp[w] - gamma, cfg.poset.lt)


def send_upd(cfg: ClocksConfig, c: State, w: int, P: frozenset[Any]) -> State:
    """Effect of ``send_upd``: append ``γ`` to every queue ``msg c w w'`` and remove it from ``temp c w``."""
    return enqueue_update(c, w, P)


def recv_upd_enabled(c: State, w: int, w2: int) -> bool:
    """``recv_upd w w'``: the queue ``msg c w w'`` is non-empty (Fig. 3)."""
    return bool(c.msg[w][w2])


def recv_upd(cfg: ClocksConfig, c: State, w: int, w2: int) -> State:
    """Effect of ``recv_upd``: dequeue the head of ``msg c w w'`` into ``glob c w'`` (and extend the ghost)."""
    c2 = dequeue_update(c, w, w2)
    return c2._replace(vacated=c2.vacated | _vacant_points(cfg, (c2.glob[w2],)))


def Safe(cfg: ClocksConfig, c: State) -> bool:
    """``Safe`` (§3) on the history: ``rec`` is vacant at every pointstamp where some ``glob`` was vacant."""
    le = cfg.poset.le
    return all(vacant(c.rec, p, le) for p in c.vacated)


def rec_nonneg(cfg: ClocksConfig, c: State) -> bool:
    """``rec`` only ever holds non-negative counts (§3)."""
    return all(n > 0 for n in c.rec.values())


class ClocksModel:
    """The clocks protocol (Fig. 3) under the bounds of a :class:`ClocksConfig`."""

    name = "clocks"

    def __init__(self, cfg: ClocksConfig) -> None:
        self.cfg = cfg
        # The uprightness of Δ does not depend on the configuration: keep only the candidate
        # (Δneg, Δpos) pairs that can ever be enabled (perf_op_enabled is still the final judge).
        negs = multisets_upto(cfg.poset.elements, cfg.max_neg)
        poss = multisets_upto(cfg.poset.elements, cfg.max_pos)
        self._ops = [
            (d_neg, d_pos, d_pos - d_neg)
            for d_neg in negs
            for d_pos in poss
            if d_pos - d_neg and upright(d_pos - d_neg, cfg.poset.lt)
        ]

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, c: State) -> Iterator[tuple[Action, State]]:
        """Every enabled ``perf_op``, ``send_upd`` and ``recv_upd`` within the bounds."""
        cfg = self.cfg
        workers = range(cfg.workers)
        ops = [
            (d_neg, d_pos)
            for d_neg, d_pos, delta in self._ops
            if d_neg.le_counts(c.rec) and all(c.rec.count(p) + n <= cfg.max_rec for p, n in delta.items())
        ]
        for w in workers:
            for d_neg, d_pos in ops:
                if perf_op_enabled(cfg, c, w, d_neg, d_pos):
                    act = Action("perf_op", (("w", w), ("Δneg", d_neg), ("Δpos", d_pos)))
                    yield act, perf_op(cfg, c, w, d_neg, d_pos)
            if c.temp[w] and all(len(q) < cfg.queue_bound for q in c.msg[w]):
                for P in nonempty_subsets(c.temp[w]):
                    if send_upd_enabled(cfg, c, w, P):
                        yield Action("send_upd", (("w", w), ("P", P))), send_upd(cfg, c, w, P)
        for w, w2 in product(workers, workers):
            if recv_upd_enabled(c, w, w2):
                yield Action("recv_upd", (("w", w), ("w'", w2))), recv_upd(cfg, c, w, w2)

    def invariants(self) -> list[Invariant[State]]:
        """``Safe`` (with the history ghost) and non-negativity of ``rec``."""
        cfg = self.cfg
        return [
            Invariant("Safe", lambda c: Safe(cfg, c)),
            Invariant("rec_nonneg", lambda c: rec_nonneg(cfg, c)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, c: State) -> str:
        """``rec``, ``temp``, non-empty queues and ``glob`` on one line."""
        n = self.cfg.workers
        msgs = [f"{a}->{b}:{list(c.msg[a][b])}" for a in range(n) for b in range(n) if c.msg[a][b]]
        return (
            f"rec={c.rec} temp={list(c.temp)} msg=[{', '.join(msgs)}] glob={list(c.glob)}"
            f" vacated={{{', '.join(sorted(map(repr, c.vacated)))}}}"
        )

"""The exchange protocol of seed ``000_306a8e6bd5c43d47.txt`` §4 (Fig. 4).

Configurations are records ``caps/data/msg/temp/glob``; the actions are
``recv_cap``, ``perf_op``, ``send_upd`` and ``recv_upd``; ``rec c`` is the sum of
every worker's ``caps`` and the pointstamps in flight in ``data``. ``Safe`` is the
temporal property of §3, checked exactly with the history ghost ``vacated``
(every pointstamp at which some ``glob`` has been vacant so far). The ``glob``
lemma of §4 and the justification of ``temp`` are further invariants.

The enabling conditions read the configuration's :class:`~pytimely.verify.mutants.Mutant`
switch, so the deliberately broken variants run through this same code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import product
from typing import Any, NamedTuple

from pytimely.verify.model import Action, Invariant, TransitionInvariant
from pytimely.verify.mutants import EXCHANGE_MUTANTS, Mutant
from pytimely.verify.poset import Poset
from pytimely.verify.updates import dequeue_update, enqueue_update
from pytimely.verify.zmset import (
    ZMSet,
    justified,
    multisets_upto,
    nonempty_subsets,
    submultisets,
    vacant,
)

__all__ = [
    "ExchangeConfig",
    "ExchangeModel",
    "Init",
    "Safe",
    "State",
    "exchange_actions",
    "format_exchange",
    "glob_lemma",
    "initial_states",
    "perf_op",
    "perf_op_enabled",
    "rec",
    "recv_cap",
    "recv_cap_enabled",
    "recv_upd",
    "recv_upd_enabled",
    "send_upd",
    "send_upd_enabled",
    "temp_justified",
]

Queue = tuple[ZMSet[Any], ...]
PerfOption = tuple[Action, ZMSet[Any], ZMSet[tuple[int, Any]], ZMSet[Any], ZMSet[Any]]
"""A cached enabled ``perf_op``: the action, ``Δneg``, ``Δdata``, ``Δself`` and ``snd # Δdata``."""


class State(NamedTuple):
    """``record conf = caps, data, msg, temp, glob`` (§4), plus the ghost ``vacated`` for ``Safe``."""

    caps: tuple[ZMSet[Any], ...]
    data: ZMSet[tuple[int, Any]]
    """In-flight capabilities ``(receiver, pointstamp)`` (an unsigned multiset)."""
    msg: tuple[tuple[Queue, ...], ...]
    temp: tuple[ZMSet[Any], ...]
    glob: tuple[ZMSet[Any], ...]
    vacated: frozenset[Any]
    """Ghost: pointstamps at which some ``glob`` has been vacant at some point of the history."""


@dataclass(frozen=True)
class ExchangeConfig:
    """The bounds that make the exchange protocol finite, and the mutant switch."""

    poset: Poset
    workers: int = 2
    init_caps: int = 1
    """Initial ``caps``: every worker holds a multiset of at most this many pointstamps."""
    init_total: int | None = None
    """If set, at most this many initial capabilities over all workers together."""
    max_caps: int = 2
    """``perf_op`` is disabled if a count of the worker's ``caps`` would exceed this."""
    max_data: int = 1
    """``perf_op`` is disabled if ``data`` would hold more than this many capabilities."""
    max_neg: int = 1
    max_data_delta: int = 1
    """At most this many elements in ``Δdata``."""
    max_self: int = 1
    """At most this many elements in ``Δself``."""
    max_op_size: int | None = None
    """If set, at most this many elements in ``Δneg``, ``Δdata`` and ``Δself`` together."""
    queue_bound: int = 2
    max_temp: int | None = None
    """If set, ``perf_op`` is disabled when a count of ``temp w`` would exceed this in absolute value."""
    mutant: Mutant | None = None
    track_history: bool = True
    """Maintain the ``vacated`` ghost (``Safe`` is only checked when this is on)."""
    depth: int = 6
    name: str = ""

    def __post_init__(self) -> None:
        if self.mutant is not None and self.mutant not in EXCHANGE_MUTANTS:
            raise ValueError(f"mutant {self.mutant} does not apply to the exchange protocol")

    @cached_property
    def perf_op_cache(self) -> dict[tuple[int, ZMSet[Any], ZMSet[Any]], list[PerfOption]]:
        """Memo for the enabled ``perf_op`` choices of a worker (see ``exchange_actions``)."""
        return {}


def rec(c: State) -> ZMSet[Any]:
    """``rec c = (Σ_w caps c w) + snd # data c``: every pointstamp in the system (§4)."""
    total: ZMSet[Any] = ZMSet()
    for m in c.caps:
        total = total + m
    return total + c.data.image(_snd)


def _vacant_points(cfg: ExchangeConfig, globs: Sequence[ZMSet[Any]]) -> frozenset[Any]:
    if not cfg.track_history:
        return frozenset()
    out: frozenset[Any] = frozenset()
    for g in globs:
        out |= _vacant_in(cfg.poset, g)
    return out


@lru_cache(maxsize=1 << 16)
def _vacant_in(poset: Poset, g: ZMSet[Any]) -> frozenset[Any]:
    """The pointstamps at which ``g`` is vacant."""
    return frozenset(p for p in poset.elements if vacant(g, p, poset.le))


def Init(cfg: ExchangeConfig, c: State) -> bool:
    """``Init c``: non-negative ``caps``, no ``data``, empty queues and ``temp``, ``glob = rec`` (§4)."""
    w = range(cfg.workers)
    r = rec(c)
    return (
        all(n >= 0 for m in c.caps for n in m.values())
        and not c.data
        and all(not c.msg[a][b] for a in w for b in w)
        and all(not c.temp[a] for a in w)
        and all(c.glob[a] == r for a in w)
        and c.vacated == _vacant_points(cfg, c.glob)
    )


def initial_states(cfg: ExchangeConfig) -> Iterator[State]:
    """Every ``Init`` configuration with at most ``init_caps`` capabilities per worker."""
    n = cfg.workers
    empty_msg = tuple(tuple(() for _ in range(n)) for _ in range(n))
    options = multisets_upto(cfg.poset.elements, cfg.init_caps)
    for caps in product(options, repeat=n):
        if cfg.init_total is not None and sum(m.total() for m in caps) > cfg.init_total:
            continue
        c = State(tuple(caps), ZMSet(), empty_msg, (ZMSet(),) * n, (), frozenset())
        r = rec(c)
        globs = (r,) * n
        yield c._replace(glob=globs, vacated=_vacant_points(cfg, globs))


def _mint_basis(cfg: ExchangeConfig, c: State, w: int) -> ZMSet[Any]:
    """What ``Δdata``/``Δself`` minting is justified by: ``caps c w`` (or ``glob c w`` under ``mint-by-glob``)."""
    return c.glob[w] if cfg.mutant is Mutant.MINT_BY_GLOB else c.caps[w]


def _may_mint_data(cfg: ExchangeConfig, basis: ZMSet[Any], p: Any) -> bool:
    """``∃p' < p. caps c w #z p' > 0`` (``p' ≤ p`` under ``mint-equal``)."""
    rel = cfg.poset.le if cfg.mutant is Mutant.MINT_EQUAL else cfg.poset.lt
    return any(n > 0 and rel(q, p) for q, n in basis.items())


def _may_mint_self(cfg: ExchangeConfig, basis: ZMSet[Any], p: Any) -> bool:
    """``∃p' ≤ p. caps c w #z p' > 0``."""
    le = cfg.poset.le
    return any(n > 0 and le(q, p) for q, n in basis.items())


def perf_op_enabled(
    cfg: ExchangeConfig,
    c: State,
    w: int,
    d_neg: ZMSet[Any],
    d_data: ZMSet[tuple[int, Any]],
    d_self: ZMSet[Any],
) -> bool:
    """``perf_op w Δneg Δdata Δself`` (Fig. 4): a real change, ``Δneg ≤ caps c w``, and minting justified.

    ``Δdata`` needs a capability strictly below each pointstamp it sends, ``Δself``
    one at or below each pointstamp it adds.
    """
    if not (d_data or d_self - d_neg):
        return False
    if not d_neg.le_counts(c.caps[w]):
        return False
    basis = _mint_basis(cfg, c, w)
    if not all(_may_mint_data(cfg, basis, p) for (_, p) in d_data):
        return False
    return all(_may_mint_self(cfg, basis, p) for p in d_self)


def perf_op(
    cfg: ExchangeConfig,
    c: State,
    w: int,
    d_neg: ZMSet[Any],
    d_data: ZMSet[tuple[int, Any]],
    d_self: ZMSet[Any],
) -> State:
    """Effect of ``perf_op``: ``caps w += Δself - Δneg``, ``data += Δdata``,
    ``temp w += snd # Δdata + Δself - Δneg`` (Fig. 4)."""
    own = d_self - d_neg
    caps = list(c.caps)
    caps[w] = caps[w] + own
    temp = list(c.temp)
    temp[w] = temp[w] + d_data.image(_snd) + own
    return c._replace(caps=tuple(caps), data=c.data + d_data, temp=tuple(temp))


def send_upd_enabled(cfg: ExchangeConfig, c: State, w: int, P: frozenset[Any]) -> bool:
    """``send_upd w P``: ``γ ≠ {#}z`` and ``justified (caps c w) (temp c w - γ)`` (Fig. 4).

    Under ``send-unjustified`` the justification is not required.
    """
    gamma = c.temp[w].filter(P.__contains__)
    if not gamma:
        return False
    if cfg.mutant is Mutant.SEND_UNJUSTIFIED:
        return True
    return justified(c.caps[w], c.temp[w] - gamma, cfg.poset.lt)


def send_upd(cfg: ExchangeConfig, c: State, w: int, P: frozenset[Any]) -> State:
    """Effect of ``send_upd``: append ``γ`` to every queue ``msg c w w'``; ``temp c w -= γ``."""
    return enqueue_update(c, w, P)


def recv_upd_enabled(c: State, w: int, w2: int) -> bool:
    """``recv_upd w w'``: ``msg c w w' ≠ []``."""
    return bool(c.msg[w][w2])


def recv_upd(cfg: ExchangeConfig, c: State, w: int, w2: int) -> State:
    """Effect of ``recv_upd``: dequeue the head of ``msg c w w'`` into ``glob c w'`` (and extend the ghost)."""
    c2 = dequeue_update(c, w, w2)
    return c2._replace(vacated=c2.vacated | _vacant_points(cfg, (c2.glob[w2],)) if cfg.track_history else c2.vacated)


def recv_cap_enabled(c: State, w: int, p: Any) -> bool:
    """``recv_cap w p``: ``(w, p) ∈# data c``."""
    return c.data.count((w, p)) > 0


def recv_cap(cfg: ExchangeConfig, c: State, w: int, p: Any) -> State:
    """Effect of ``recv_cap``: move ``(w, p)`` from ``data`` into ``caps c w``."""
    caps = list(c.caps)
    caps[w] = caps[w].add(p, 1)
    return c._replace(caps=tuple(caps), data=c.data.add((w, p), -1))


def Safe(cfg: ExchangeConfig, c: State) -> bool:
    """``Safe`` (§3/§4) on the history: ``rec`` is vacant wherever some ``glob`` has been vacant."""
    if not c.vacated:
        return True
    r = rec(c)
    le = cfg.poset.le
    return all(vacant(r, p, le) for p in c.vacated)


def glob_lemma(cfg: ExchangeConfig, c: State) -> bool:
    """Lemma ``glob`` (§4): an in-flight update to ``p`` for ``w'`` implies ``∃p' ≤ p. glob c w' #z p' > 0``."""
    le = cfg.poset.le
    n = cfg.workers
    for w2 in range(n):
        pos = [q for q, k in c.glob[w2].items() if k > 0]
        for w in range(n):
            for m in c.msg[w][w2]:
                for p in m:
                    if not any(le(q, p) for q in pos):
                        return False
    return True


def temp_justified(cfg: ExchangeConfig, c: State) -> bool:
    """Auxiliary invariant: ``justified (caps c w) (temp c w)`` for every worker ``w``."""
    lt = cfg.poset.lt
    return all(justified(c.caps[w], c.temp[w], lt) for w in range(cfg.workers))


def caps_nonneg(cfg: ExchangeConfig, c: State) -> bool:
    """Auxiliary invariant: capabilities never have negative counts."""
    return all(n > 0 for m in c.caps for n in m.values())


class ExchangeModel:
    """The exchange protocol (Fig. 4) under the bounds of an :class:`ExchangeConfig`."""

    name = "exchange"

    def __init__(self, cfg: ExchangeConfig) -> None:
        self.cfg = cfg

    @cached_property
    def _targets(self) -> list[tuple[int, Any]]:
        return [(w, p) for w in range(self.cfg.workers) for p in self.cfg.poset.elements]

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, c: State) -> Iterator[tuple[Action, State]]:
        """Every enabled action of Fig. 4 within the bounds."""
        return exchange_actions(self.cfg, self._targets, c, True)

    def invariants(self) -> list[Invariant[State]]:
        """``Safe``, the ``glob`` lemma and the auxiliary ``InvTempJustified`` / ``InvCapsNonneg``."""
        cfg = self.cfg
        out: list[Invariant[State]] = []
        if cfg.track_history:
            out.append(Invariant("Safe", lambda c: Safe(cfg, c)))
        out += [
            Invariant("glob", lambda c: glob_lemma(cfg, c)),
            Invariant("InvTempJustified", lambda c: temp_justified(cfg, c)),
            Invariant("InvCapsNonneg", lambda c: caps_nonneg(cfg, c)),
        ]
        return out

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, c: State) -> str:
        """``caps``, ``data``, ``temp``, non-empty queues and ``glob`` on one line."""
        return format_exchange(self.cfg, c)


def format_exchange(cfg: ExchangeConfig, c: State) -> str:
    """A one-line rendering of an exchange configuration."""
    n = cfg.workers
    msgs = [f"{a}->{b}:{list(c.msg[a][b])}" for a in range(n) for b in range(n) if c.msg[a][b]]
    out = f"caps={list(c.caps)} data={c.data} temp={list(c.temp)} msg=[{', '.join(msgs)}] glob={list(c.glob)}"
    if cfg.track_history:
        out += f" vacated={{{', '.join(sorted(map(repr, c.vacated)))}}}"
    return out


def _perf_op_options(cfg: ExchangeConfig, targets: Sequence[tuple[int, Any]], c: State, w: int) -> list[PerfOption]:
    """Every enabled ``perf_op`` of worker ``w`` within the size bounds and the ``caps`` count bound.

    Enabledness depends on ``c`` only through ``caps c w`` and the minting basis,
    so the list is cached on those (``perf_op_enabled`` decides on a cache miss).
    """
    basis = _mint_basis(cfg, c, w)
    caps_w = c.caps[w]
    key = (w, caps_w, basis)
    cache = cfg.perf_op_cache
    hit = cache.get(key)
    if hit is not None:
        return hit
    data_points = [wp for wp in targets if _may_mint_data(cfg, basis, wp[1])]
    self_points = [p for p in cfg.poset.elements if _may_mint_self(cfg, basis, p)]
    data_options = multisets_upto(data_points, cfg.max_data_delta)
    self_options = multisets_upto(self_points, cfg.max_self)
    out: list[PerfOption] = []
    limit = cfg.max_op_size
    for d_neg in submultisets(caps_w, cfg.max_neg):
        for d_data in data_options:
            if d_data.total() > cfg.max_data:
                continue
            sent = d_data.image(_snd)
            for d_self in self_options:
                if limit is not None and d_neg.total() + d_data.total() + d_self.total() > limit:
                    continue
                own = d_self - d_neg
                if any(caps_w.count(p) + k > cfg.max_caps for p, k in own.items() if k > 0):
                    continue
                if perf_op_enabled(cfg, c, w, d_neg, d_data, d_self):
                    act = Action("perf_op", (("w", w), ("Δneg", d_neg), ("Δdata", d_data), ("Δself", d_self)))
                    out.append((act, d_neg, d_data, d_self, sent))
    cache[key] = out
    return out


def _snd(wp: tuple[int, Any]) -> Any:
    return wp[1]


def exchange_actions(
    cfg: ExchangeConfig, targets: Sequence[tuple[int, Any]], c: State, with_recv_upd: bool
) -> Iterator[tuple[Action, State]]:
    """Enabled actions of Fig. 4; ``targets`` lists every ``(worker, pointstamp)`` a ``Δdata`` may name.

    With ``with_recv_upd`` false, ``recv_upd`` is left out (the combined protocol lifts it itself).
    """
    workers = range(cfg.workers)
    data_size = c.data.total()
    for w in workers:
        for act, d_neg, d_data, d_self, sent in _perf_op_options(cfg, targets, c, w):
            if data_size + d_data.total() > cfg.max_data:
                continue
            if cfg.max_temp is not None:
                tw = c.temp[w] + sent + d_self - d_neg
                if any(abs(k) > cfg.max_temp for k in tw.values()):
                    continue
            yield act, perf_op(cfg, c, w, d_neg, d_data, d_self)
        if c.temp[w] and all(len(q) < cfg.queue_bound for q in c.msg[w]):
            for P in nonempty_subsets(c.temp[w]):
                if send_upd_enabled(cfg, c, w, P):
                    yield Action("send_upd", (("w", w), ("P", P))), send_upd(cfg, c, w, P)
    if with_recv_upd:
        for w, w2 in product(workers, workers):
            if recv_upd_enabled(c, w, w2):
                yield Action("recv_upd", (("w", w), ("w'", w2))), recv_upd(cfg, c, w, w2)
    for w, p in sorted(c.data.keys(), key=repr):
        yield Action("recv_cap", (("w", w), ("p", p))), recv_cap(cfg, c, w, p)

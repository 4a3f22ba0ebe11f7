"""The combined progress tracker of seed ``000_306a8e6bd5c43d47.txt`` §6 (Fig. 7).

A configuration holds one exchange configuration ``exch`` over pointstamps
``(location, timestamp)`` ordered by could-result-in (``≤cri``), one local
propagation configuration ``prop w`` per worker and the flags ``init w``.
``recv_cap``, ``perf_op`` and ``send_upd`` act on ``exch`` alone;
``recv_upd`` (only for an initialised receiver) also applies the received batch
to the receiver's pointstamps with ``cm_all``; ``propagate w`` runs local
propagation until every worklist of ``w`` is empty and marks ``w`` initialised.

``cm_all`` folds ``change_multiplicity`` over the batch. Fig. 6 gives that
action the precondition ``∃t' ∈ frontier (imp c l). t' ≤ t``; here it is not
assumed but checked, both as the state invariant ``InvMsgCMConditions`` (the head
of every queue into an initialised worker is witnessed by its implications)
and as the transition invariant ``cm_precondition`` on every ``recv_upd``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Any, NamedTuple

from pytimely.verify import exchange as E
from pytimely.verify import propagation as P
from pytimely.verify.graph import Graph, could_result_in
from pytimely.verify.model import Action, Invariant, TransitionInvariant
from pytimely.verify.mutants import EXCHANGE_MUTANTS, PROPAGATION_MUTANTS, Mutant
from pytimely.verify.poset import Poset
from pytimely.verify.zmset import ZMSet

__all__ = [
    "CombinedConfig",
    "CombinedModel",
    "Init",
    "Safe",
    "State",
    "cm_all",
    "cm_conditions",
    "glob_pts_eq",
    "initial_states",
    "perf_op",
    "propagate",
    "recv_cap",
    "recv_upd",
    "recv_upd_enabled",
    "send_upd",
]


class State(NamedTuple):
    """``record conf = exch, prop, init`` (§6)."""

    exch: E.State
    prop: tuple[P.State, ...]
    init: tuple[bool, ...]


@dataclass(frozen=True)
class CombinedConfig:
    """A dataflow graph, the pointstamps the exchange part may use, workers, bounds and the mutant switch."""

    graph: Graph[Any]
    times: tuple[Any, ...]
    pointstamps: tuple[tuple[Any, Any], ...]
    """The finite universe of ``(location, timestamp)`` pointstamps for capabilities and updates."""
    workers: int = 2
    init_caps: int = 1
    init_total: int | None = None
    max_caps: int = 1
    max_data: int = 1
    max_neg: int = 1
    max_data_delta: int = 1
    max_self: int = 1
    max_op_size: int | None = 2
    queue_bound: int = 1
    max_temp: int | None = None
    mutant: Mutant | None = None
    dropped_edge: tuple[Any, Any] | None = None
    all_propagation_orders: bool = False
    """``propagate w`` leads to every outcome of every order of minimal propagations (not one choice)."""
    max_propagation_steps: int = 200
    depth: int = 8
    name: str = ""
    exchange: E.ExchangeConfig = field(init=False)
    propagation: P.PropagationConfig = field(init=False)

    def __post_init__(self) -> None:
        if self.mutant is not None and self.mutant not in EXCHANGE_MUTANTS | PROPAGATION_MUTANTS:
            raise ValueError(f"unknown mutant {self.mutant}")
        g = self.graph
        poset = Poset(self.pointstamps, lambda a, b: could_result_in(g, a, b), name=f"cri({self.name})")
        exch = E.ExchangeConfig(
            poset,
            workers=self.workers,
            init_caps=self.init_caps,
            init_total=self.init_total,
            max_caps=self.max_caps,
            max_data=self.max_data,
            max_neg=self.max_neg,
            max_data_delta=self.max_data_delta,
            max_self=self.max_self,
            max_op_size=self.max_op_size,
            queue_bound=self.queue_bound,
            max_temp=self.max_temp,
            mutant=self.mutant if self.mutant in EXCHANGE_MUTANTS else None,
            track_history=False,
            name=self.name,
        )
        prop = P.PropagationConfig(
            g,
            self.times,
            (),
            mutant=self.mutant if self.mutant in PROPAGATION_MUTANTS else None,
            dropped_edge=self.dropped_edge,
            max_propagation_steps=self.max_propagation_steps,
            name=self.name,
        )
        object.__setattr__(self, "exchange", exch)
        object.__setattr__(self, "propagation", prop)

    @cached_property
    def targets(self) -> tuple[tuple[int, Any], ...]:
        """Every ``(worker, pointstamp)`` a ``Δdata`` may name."""
        return tuple((w, p) for w in range(self.workers) for p in self.pointstamps)


def _glob_to_pts(cfg: CombinedConfig, glob: ZMSet[Any]) -> dict[Any, dict[Any, int]]:
    out: dict[Any, dict[Any, int]] = {}
    for (l, t), n in glob.items():
        out.setdefault(l, {})[t] = n
    return out


def Init(cfg: CombinedConfig, c: State) -> bool:
    """``Init c``: nobody initialised, ``E.Init``, every ``P.Init``, and ``P.pts (prop w) = E.glob w`` (§6)."""
    return (
        not any(c.init)
        and E.Init(cfg.exchange, c.exch)
        and all(P.Init(cfg.propagation, p) for p in c.prop)
        and glob_pts_eq(cfg, c)
    )


def initial_states(cfg: CombinedConfig) -> Iterator[State]:
    """One ``Init`` configuration per initial exchange configuration."""
    for e in E.initial_states(cfg.exchange):
        prop = tuple(P.make_state(cfg.propagation, _glob_to_pts(cfg, g)) for g in e.glob)
        yield State(e, prop, (False,) * cfg.workers)


def recv_cap(cfg: CombinedConfig, c: State, w: int, p: Any) -> State:
    """``recv_cap``: ``E.recv_cap`` on ``exch``; ``prop`` and ``init`` unchanged (Fig. 7)."""
    return c._replace(exch=E.recv_cap(cfg.exchange, c.exch, w, p))


def perf_op(cfg: CombinedConfig, c: State, w: int, d_neg: ZMSet[Any], d_data: ZMSet[Any], d_self: ZMSet[Any]) -> State:
    """``perf_op``: ``E.perf_op`` on ``exch``; ``prop`` and ``init`` unchanged (Fig. 7)."""
    return c._replace(exch=E.perf_op(cfg.exchange, c.exch, w, d_neg, d_data, d_self))


def send_upd(cfg: CombinedConfig, c: State, w: int, P_: frozenset[Any]) -> State:
    """``send_upd``: ``E.send_upd`` on ``exch``; ``prop`` and ``init`` unchanged (Fig. 7)."""
    return c._replace(exch=E.send_upd(cfg.exchange, c.exch, w, P_))


def cm_conditions(cfg: CombinedConfig, prop: P.State, delta: ZMSet[Any]) -> bool:
    """Fig. 6's ``change_multiplicity`` precondition for every ``(l, t) ∈#z Δ``: ``∃t' ∈ frontier (imp l). t' ≤ t``."""
    pc = cfg.propagation
    return all(P.change_multiplicity_enabled(pc, prop, l, t, n) for (l, t), n in delta.items())


def cm_all(cfg: CombinedConfig, prop: P.State, delta: ZMSet[Any]) -> P.State:
    """``cm_all c Δ``: fold ``change_multiplicity l t (Δ #z (l, t))`` over the support of ``Δ`` (Fig. 7).

    The effect is applied whether or not the precondition holds (the order of
    the fold does not matter then); ``cm_conditions`` is checked separately.
    """
    pc = cfg.propagation
    for (l, t), n in delta.sorted_items():
        prop = P.change_multiplicity(pc, prop, l, t, n)
    return prop


def recv_upd_enabled(cfg: CombinedConfig, c: State, w: int, w2: int) -> bool:
    """``recv_upd w w'``: ``init c w'`` and ``E.recv_upd`` enabled (Fig. 7)."""
    return c.init[w2] and E.recv_upd_enabled(c.exch, w, w2)


def recv_upd(cfg: CombinedConfig, c: State, w: int, w2: int) -> State:
    """``recv_upd``: ``E.recv_upd`` and ``prop w' := cm_all (prop w') (hd (msg w w'))`` (Fig. 7)."""
    head = c.exch.msg[w][w2][0]
    prop = list(c.prop)
    prop[w2] = cm_all(cfg, prop[w2], head)
    return c._replace(exch=E.recv_upd(cfg.exchange, c.exch, w, w2), prop=tuple(prop))


def propagate(cfg: CombinedConfig, c: State, w: int) -> State | None:
    """``propagate w``: ``prop w`` := repeated local propagation until every worklist is empty; ``init w``.

    ``None`` if that does not terminate within the step bound (the action is then not enabled).
    """
    res = P.propagate_all(cfg.propagation, c.prop[w])
    if res is None:
        return None
    prop = list(c.prop)
    prop[w] = res
    init = list(c.init)
    init[w] = True
    return c._replace(prop=tuple(prop), init=tuple(init))


def Safe(cfg: CombinedConfig, c: State) -> bool:
    """``Safe`` (§6): for an initialised ``w``, ``E.rec #z (l, t) > 0`` and ``s ∈ path_summary l l'``,
    some ``t' ∈ frontier (imp (prop w) l')`` has ``t' ≤ t ⊕ s``."""
    ws = [w for w in range(cfg.workers) if c.init[w]]
    if not ws:
        return True
    pc = cfg.propagation
    for (l, t), n in E.rec(c.exch).items():
        if n <= 0:
            continue
        for j, summaries in pc.paths[pc.index[l]]:
            for s in summaries:
                u = s.results_in(t)
                if u is None:
                    continue
                for w in ws:
                    if not any(f <= u for f in P._frontier(c.prop[w].imp[j])):
                        return False
    return True


def glob_pts_eq(cfg: CombinedConfig, c: State) -> bool:
    """``InvGlobPointstampsEq``: ``P.pts (prop w) l #z t = E.glob w #z (l, t)`` for all ``w, l, t``."""
    pc = cfg.propagation
    for w in range(cfg.workers):
        glob = c.exch.glob[w]
        pts = c.prop[w].pts
        if sum(len(m) for m in pts) != len(glob):
            return False
        for (l, t), n in glob.items():
            if pts[pc.index[l]].count(t) != n:
                return False
    return True


def msg_cm_conditions(cfg: CombinedConfig, c: State) -> bool:
    """``InvMsgCMConditions``: every queue head into an initialised ``w'`` satisfies ``cm_conditions``."""
    n = cfg.workers
    for w2 in range(n):
        if not c.init[w2]:
            continue
        for w in range(n):
            q = c.exch.msg[w][w2]
            if q and not cm_conditions(cfg, c.prop[w2], q[0]):
                return False
    return True


class CombinedModel:
    """The combined protocol (Fig. 7) under the bounds of a :class:`CombinedConfig`."""

    name = "combined"

    def __init__(self, cfg: CombinedConfig) -> None:
        self.cfg = cfg
        self._prop_model = P.PropagationModel(cfg.propagation)
        self._prop_memo: dict[tuple[str, P.State], bool] = {}

    def _per_worker(self, name: str, pred: Any, p: P.State) -> bool:
        """A propagation-level predicate of one worker's state, memoised (worker states recur often)."""
        key = (name, p)
        hit = self._prop_memo.get(key)
        if hit is None:
            hit = self._prop_memo[key] = bool(pred(self.cfg.propagation, p))
        return hit

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def _propagate_outcomes(self, c: State, w: int) -> list[State]:
        cfg = self.cfg
        if not cfg.all_propagation_orders:
            res = propagate(cfg, c, w)
            return [] if res is None else [res]
        outs = P.propagate_all_outcomes(cfg.propagation, c.prop[w])
        if outs is None:
            return []
        init = list(c.init)
        init[w] = True
        result = []
        for o in sorted(outs, key=repr):
            prop = list(c.prop)
            prop[w] = o
            result.append(c._replace(prop=tuple(prop), init=tuple(init)))
        return result

    def successors(self, c: State) -> Iterator[tuple[Action, State]]:
        """Every enabled action of Fig. 7 within the bounds (stutter-free)."""
        cfg = self.cfg
        for act, e in E.exchange_actions(cfg.exchange, cfg.targets, c.exch, False):
            yield act, c._replace(exch=e)
        for w, w2 in product(range(cfg.workers), repeat=2):
            if recv_upd_enabled(cfg, c, w, w2):
                yield Action("recv_upd", (("w", w), ("w'", w2))), recv_upd(cfg, c, w, w2)
        for w in range(cfg.workers):
            for c2 in self._propagate_outcomes(c, w):
                if c2 != c:
                    yield Action("propagate", (("w", w),)), c2

    def invariants(self) -> list[Invariant[State]]:
        """``Safe`` and the invariants its proof rests on, lifted from the two components."""
        cfg = self.cfg
        ec = cfg.exchange
        pm = self._prop_model
        each = self._per_worker
        return [
            Invariant("Safe", lambda c: Safe(cfg, c)),
            Invariant("InvMsgCMConditions", lambda c: msg_cm_conditions(cfg, c)),
            Invariant("InvGlobPointstampsEq", lambda c: glob_pts_eq(cfg, c)),
            Invariant(
                "prop_safe",
                lambda c: all(each("safe", P.safe_strong, c.prop[w]) for w in range(cfg.workers) if c.init[w]),
            ),
            Invariant("InvImpNonneg", lambda c: all(each("nonneg", P.imp_nonneg, p) for p in c.prop)),
            Invariant("InvImpsWorkSum", lambda c: all(each("sum", P.imp_work_sum, p) for p in c.prop)),
            Invariant("glob", lambda c: E.glob_lemma(ec, c.exch)),
            Invariant("InvTempJustified", lambda c: E.temp_justified(ec, c.exch)),
            Invariant("PropagateTerminates", lambda c: all(pm.terminates(p) for p in c.prop)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """``cm_precondition``: every ``recv_upd`` applies only changes its receiver's implications witness;
        ``PropagateMonotone``: every local step inside ``propagate w`` is monotone (see ``propagation``)."""
        cfg = self.cfg

        def cm_precondition(c: State, a: Action, c2: State) -> bool:
            if a.name != "recv_upd":
                return True
            w, w2 = a.arg("w"), a.arg("w'")
            return cm_conditions(cfg, c.prop[w2], c.exch.msg[w][w2][0])

        def monotone(c: State, a: Action, c2: State) -> bool:
            if a.name != "propagate":
                return True
            return self._per_worker("monotone", P.propagate_all_monotone, c.prop[a.arg("w")])

        return [
            TransitionInvariant("cm_precondition", cm_precondition),
            TransitionInvariant("PropagateMonotone", monotone),
        ]

    def format_state(self, c: State) -> str:
        """The exchange part, then each worker's ``init`` flag and propagation state."""
        parts = [E.format_exchange(self.cfg.exchange, c.exch)]
        for w, p in enumerate(c.prop):
            parts.append(f"w{w}{'(init)' if c.init[w] else ''}: {P.format_propagation(self.cfg.propagation, p)}")
        return " | ".join(parts)

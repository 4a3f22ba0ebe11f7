"""The exchange protocol with progress aggregated per process (seed ``002_640294948a1fdfd3.txt`` §3.3, footnote 4).

Fig. 4 of seed ``000_306a8e6bd5c43d47.txt`` has every worker append each batch ``γ`` it sends to a queue
towards every worker. With several workers per process that sends each batch once per remote *worker*,
so progress traffic grows with worker pairs. Here a worker's ``send_upd`` still puts ``γ`` straight on
the queues towards the workers of its own process, but towards other processes it appends ``γ`` to its
process's outbox ``out p``. A new action moves it on:

* ``agg_send p k`` (``1 <= k <= |out p|``): the first ``k`` batches of ``out p`` leave it as *one* batch,
  their sum, appended to the queue ``msg (lead p) w'`` towards every worker ``w'`` of every other process,
  where ``lead p`` is the process's first worker (if they cancel out, nothing is sent). That queue carries
  nothing else: ``lead p``'s own batches to other processes go through ``out p`` too.

``recv_upd`` is Fig. 4's, so a worker adds a combined batch to ``glob`` atomically. Everything else —
``perf_op``, ``recv_cap``, ``Safe``, the ``justified temp`` invariant — is the exchange model's own code
(:mod:`pytimely.verify.exchange`). The ``glob`` lemma is checked over the batches in outboxes as well, as
if each were already on the queues it will reach.

Why this is safe: the batches of one process leave in the order they were sent and reach each receiver
whole, so a receiver's view is one it could have had without aggregation, with some batches applied
together (fewer intermediate views, none new). The mutant ``aggregate-reorders`` lets ``agg_send`` take
any one batch of the outbox instead of the oldest ones: a worker's ``+1`` at a later time can then be
overtaken by its ``-1`` at an earlier time, and ``Safe`` breaks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from pytimely.verify import exchange as E
from pytimely.verify.model import Action, Invariant, TransitionInvariant
from pytimely.verify.mutants import AGGREGATE_MUTANTS, Mutant
from pytimely.verify.zmset import ZMSet

__all__ = ["AggState", "AggregateConfig", "AggregateModel", "agg_send", "agg_send_enabled", "send_upd"]


class AggState(NamedTuple):
    """An exchange configuration (:class:`pytimely.verify.exchange.State`) and each process's outbox."""

    base: E.State
    out: tuple[tuple[ZMSet[Any], ...], ...]


@dataclass(frozen=True)
class AggregateConfig:
    """The exchange bounds, which process each worker runs in, and the mutant switch."""

    exchange: E.ExchangeConfig
    processes: tuple[int, ...]
    """``processes[w]``: the process of worker ``w`` (processes numbered from 0, workers of one contiguous)."""
    mutant: Mutant | None = None
    depth: int = 6
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.processes) != self.exchange.workers:
            raise ValueError("processes must name the process of every worker")
        if list(self.processes) != sorted(self.processes):
            raise ValueError("the workers of a process must be numbered contiguously")
        if self.mutant is not None and self.mutant not in AGGREGATE_MUTANTS:
            raise ValueError(f"mutant {self.mutant} does not apply to the aggregated exchange")

    @cached_property
    def count(self) -> int:
        """How many processes there are."""
        return max(self.processes) + 1

    def lead(self, p: int) -> int:
        """The first worker of process ``p`` (whose queues towards other processes carry the aggregates)."""
        return self.processes.index(p)

    def remote(self, p: int) -> list[int]:
        """The workers of every process but ``p``."""
        return [w for w, q in enumerate(self.processes) if q != p]


def initial_states(cfg: AggregateConfig) -> Iterator[AggState]:
    """Every ``Init`` configuration of the exchange model, with empty outboxes."""
    empty = tuple(() for _ in range(cfg.count))
    for c in E.initial_states(cfg.exchange):
        yield AggState(c, empty)


def send_upd(cfg: AggregateConfig, s: AggState, w: int, P: frozenset[Any]) -> AggState:
    """``send_upd w P`` with aggregation: ``γ`` to the workers of ``w``'s process, and to its outbox."""
    c = s.base
    p = cfg.processes[w]
    gamma = c.temp[w].filter(P.__contains__)
    row = list(c.msg[w])
    for w2, q in enumerate(cfg.processes):
        if q == p:
            row[w2] = (*row[w2], gamma)
    msg = list(c.msg)
    msg[w] = tuple(row)
    temp = list(c.temp)
    temp[w] = temp[w] - gamma
    out = list(s.out)
    if cfg.count > 1:
        out[p] = (*out[p], gamma)
    return AggState(c._replace(msg=tuple(msg), temp=tuple(temp)), tuple(out))


def _taken(cfg: AggregateConfig, s: AggState, p: int, k: int) -> tuple[ZMSet[Any], tuple[ZMSet[Any], ...]]:
    """The batch ``agg_send p k`` sends and the outbox it leaves (``k``: how many, or under the mutant which)."""
    box = s.out[p]
    if cfg.mutant is Mutant.AGGREGATE_REORDERS:
        return box[k - 1], box[: k - 1] + box[k:]
    total: ZMSet[Any] = ZMSet()
    for gamma in box[:k]:
        total = total + gamma
    return total, box[k:]


def agg_send_enabled(cfg: AggregateConfig, s: AggState, p: int, k: int) -> bool:
    """``agg_send p k``: at least ``k`` batches in ``out p``, and room on the queues they may go to."""
    if not 1 <= k <= len(s.out[p]):
        return False
    lead = cfg.lead(p)
    return all(len(s.base.msg[lead][w2]) < cfg.exchange.queue_bound for w2 in cfg.remote(p))


def agg_send(cfg: AggregateConfig, s: AggState, p: int, k: int) -> AggState:
    """Effect of ``agg_send p k``: the first ``k`` batches of ``out p``, summed, to every remote worker."""
    batch, rest = _taken(cfg, s, p, k)
    c = s.base
    out = list(s.out)
    out[p] = rest
    if not batch:
        return AggState(c, tuple(out))  # batches that cancel out: nothing to send
    lead = cfg.lead(p)
    row = list(c.msg[lead])
    for w2 in cfg.remote(p):
        row[w2] = (*row[w2], batch)
    msg = list(c.msg)
    msg[lead] = tuple(row)
    return AggState(c._replace(msg=tuple(msg)), tuple(out))


def glob_lemma(cfg: AggregateConfig, s: AggState) -> bool:
    """Lemma ``glob`` of §4 over the queues and the outboxes (each outbox batch counted towards its receivers)."""
    if not E.glob_lemma(cfg.exchange, s.base):
        return False
    le = cfg.exchange.poset.le
    for p, box in enumerate(s.out):
        for w2 in cfg.remote(p):
            pos = [q for q, k in s.base.glob[w2].items() if k > 0]
            for gamma in box:
                if not all(any(le(q, x) for q in pos) for x in gamma):
                    return False
    return True


class AggregateModel:
    """The exchange protocol with per-process aggregation, under the bounds of an :class:`AggregateConfig`."""

    name = "aggregate"

    def __init__(self, cfg: AggregateConfig) -> None:
        self.cfg = cfg

    @cached_property
    def _targets(self) -> list[tuple[int, Any]]:
        cfg = self.cfg.exchange
        return [(w, p) for w in range(cfg.workers) for p in cfg.poset.elements]

    def initial_states(self) -> Iterator[AggState]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, s: AggState) -> Iterator[tuple[Action, AggState]]:
        """Fig. 4's actions (``send_upd`` aggregating) and ``agg_send``."""
        cfg = self.cfg
        ex = cfg.exchange
        for act, c2 in E.exchange_actions(ex, self._targets, s.base, True):
            if act.name != "send_upd":
                yield act, AggState(c2, s.out)
                continue
            w, P = act.arg("w"), act.arg("P")
            # Fig. 4 bounds every queue of w; here the outbox and the local queues.
            if len(s.out[cfg.processes[w]]) >= ex.queue_bound:
                continue
            yield act, send_upd(cfg, s, w, P)
        for p in range(cfg.count):
            for k in range(1, len(s.out[p]) + 1):
                if agg_send_enabled(cfg, s, p, k):
                    yield Action("agg_send", (("p", p), ("k", k))), agg_send(cfg, s, p, k)

    def invariants(self) -> list[Invariant[AggState]]:
        """``Safe``, the ``glob`` lemma (queues and outboxes), ``InvTempJustified`` and ``InvCapsNonneg``."""
        cfg = self.cfg
        ex = cfg.exchange
        out: list[Invariant[AggState]] = []
        if ex.track_history:
            out.append(Invariant("Safe", lambda s: E.Safe(ex, s.base)))
        out += [
            Invariant("glob", lambda s: glob_lemma(cfg, s)),
            Invariant("InvTempJustified", lambda s: E.temp_justified(ex, s.base)),
            Invariant("InvCapsNonneg", lambda s: E.caps_nonneg(ex, s.base)),
        ]
        return out

    def transition_invariants(self) -> list[TransitionInvariant[AggState]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, s: AggState) -> str:
        """The exchange configuration and the non-empty outboxes on one line."""
        boxes = [f"out{p}:{list(box)}" for p, box in enumerate(s.out) if box]
        return E.format_exchange(self.cfg.exchange, s.base) + (f" {' '.join(boxes)}" if boxes else "")


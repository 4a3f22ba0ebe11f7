"""Progress batches in the rescaling model: a worker's ``send_upd``, ``recv_upd``, and the aggregate sender's
``agg_send``.

Aggregated senders (seed 002 §3.3, footnote 4; the runtime's per-process outbox,
:mod:`pytimely.verify.aggregate` for a fixed cluster): with ``processes`` set,
every worker belongs to a process, and a worker's ``send_upd`` puts its batch on
its links to the workers of its own process and into its process's outbox;
``agg_send p k`` takes the oldest ``k`` batches of the outbox, summed, as the next
batch of the process's *aggregate sender* (a sender of its own, numbered after
the workers, with its own sequence numbers and history), on its links to every
worker of every other process, newcomers included. A newcomer then hears from
the aggregate sender of every other process, and from the workers of its own.
Bootstrapping needs one more rule, because the server receives the batches of
its own process's workers one by one while the newcomer receives them combined:
the server takes its state only when its process's outbox is empty and it has
applied every batch of its process's workers (the runtime flushes the outbox and
takes in what its workers sent, under the process's lock), and the state says it
includes every combined batch its process has sent. The mutant
``state-unflushed`` drops that rule (``BootstrapView`` breaks: a batch counted
twice, or never), ``aggregate-skips-newcomer`` sends combined batches to members
only (``NoGap`` breaks). A leaver is flushed once its outbox holds none of its
batches and its process's combined batches have been applied too.
"""

from __future__ import annotations

from typing import Any

from pytimely.verify import exchange as E
from pytimely.verify.rescale.state import LEAVING, MEMBER, RescaleConfig, State, _set, _targets, _vacated
from pytimely.verify.zmset import ZMSet

# --- progress batches ---------------------------------------------------------------------------------------


def send_upd_enabled(cfg: RescaleConfig, s: State, w: int, P: frozenset[Any]) -> bool:
    """``send_upd w P``: Fig. 4's condition, from a member or a leaver, within the batch, link (and outbox) bounds."""
    if s.status[w] not in (MEMBER, LEAVING) or len(s.hist[w]) >= cfg.max_batches:
        return False
    if any(len(s.links[w][r]) >= cfg.queue_bound for r in _targets(cfg, s, w)):
        return False
    if cfg.aggregated and len(s.out[cfg.process(w)]) >= cfg.queue_bound:
        return False
    return E.send_upd_enabled(cfg.exchange, s.exch, w, P)


def send_upd(cfg: RescaleConfig, s: State, w: int, P: frozenset[Any]) -> State:
    """Effect of ``send_upd``: ``γ`` becomes batch ``k = |hist w|``, appended to every link of ``w`` into a receiver
    (aggregated: of its own process) and, aggregated, to its process's outbox."""
    e = s.exch
    gamma = e.temp[w].filter(P.__contains__)
    k = len(s.hist[w])
    row = list(s.links[w])
    for r in _targets(cfg, s, w):
        row[r] = (*row[r], (k, gamma))
    out = s.out
    if cfg.aggregated:
        p = cfg.process(w)
        out = _set(out, p, (*out[p], (w, gamma)))
    return s._replace(
        exch=e._replace(temp=_set(e.temp, w, e.temp[w] - gamma)),
        links=_set(s.links, w, tuple(row)),
        hist=_set(s.hist, w, (*s.hist[w], gamma)),
        total=s.total + gamma,
        out=out,
    )


def agg_send_enabled(cfg: RescaleConfig, s: State, p: int, k: int) -> bool:
    """``agg_send p k``: at least ``k`` batches in process ``p``'s outbox, and room on the links they go to."""
    if not cfg.aggregated or not 1 <= k <= len(s.out[p]):
        return False
    a = cfg.aggregate(p)
    if len(s.hist[a]) >= cfg.max_batches:
        return False
    return all(len(s.links[a][r]) < cfg.queue_bound for r in _targets(cfg, s, a))


def agg_send(cfg: RescaleConfig, s: State, p: int, k: int) -> State:
    """Effect of ``agg_send p k``: the oldest ``k`` batches of ``p``'s outbox, summed, become the next batch of its
    aggregate sender, on its links to every receiver of every other process (nothing is sent if they cancel out)."""
    a = cfg.aggregate(p)
    total: ZMSet[Any] = ZMSet()
    for _, gamma in s.out[p][:k]:
        total = total + gamma
    out = _set(s.out, p, s.out[p][k:])
    if not total:
        return s._replace(out=out)
    j = len(s.hist[a])
    row = list(s.links[a])
    for r in _targets(cfg, s, a):
        row[r] = (*row[r], (j, total))
    return s._replace(links=_set(s.links, a, tuple(row)), hist=_set(s.hist, a, (*s.hist[a], total)), out=out)


def recv_upd_enabled(s: State, w: int, r: int) -> bool:
    """``recv_upd w r``: a member ``r`` has a batch from ``w`` waiting (a newcomer reads links once a member)."""
    return s.status[r] == MEMBER and bool(s.links[w][r])


def recv_upd(cfg: RescaleConfig, s: State, w: int, r: int) -> State:
    """Effect of ``recv_upd``: dequeue batch ``k``; apply it to ``glob r`` unless ``k`` is below ``recvd[r][w]``.

    A newcomer whose bootstrap state already included batch ``k`` discards it
    here (the state may run ahead of a link's bootstrap message).
    """
    (k, gamma), rest = s.links[w][r][0], s.links[w][r][1:]
    links = _set(s.links, w, _set(s.links[w], r, rest))
    if k < s.recvd[r][w]:
        return s._replace(links=links)
    e = s.exch
    e = _vacated(cfg, e._replace(glob=_set(e.glob, r, e.glob[r] + gamma)), r)
    return s._replace(exch=e, links=links, recvd=_set(s.recvd, r, _set(s.recvd[r], w, k + 1)))

"""The rescaling model's invariants: ``Safe``, ``BootstrapView``, ``NoGap``, the global lemma, accounting and
membership.
"""

from __future__ import annotations

from typing import Any

from pytimely.verify import exchange as E
from pytimely.verify.rescale.state import JOINING, LEAVING, LEFT, MEMBER, OUT, Link, RescaleConfig, State
from pytimely.verify.zmset import ZMSet

# --- invariants -------------------------------------------------------------------------------------------


def _members(s: State) -> list[int]:
    return [w for w, st in enumerate(s.status) if st == MEMBER]


def _due(s: State, w: int, r: int) -> Link:
    """The batches on link ``w → r`` that ``r`` will apply (not those its state already included)."""
    k0 = s.recvd[r][w]
    return tuple(b for b in s.links[w][r] if b[0] >= k0)


def Safe(cfg: RescaleConfig, s: State) -> bool:
    """``Safe`` of the exchange protocol: ``rec`` is vacant wherever some member's view has been vacant."""
    return E.Safe(cfg.exchange, s.exch)


def _coming(cfg: RescaleConfig, s: State, r: int) -> list[ZMSet[Any]]:
    """The batches on their way to member ``r``: due on its links and (aggregated) waiting in the outboxes of other
    processes, whose combined batches will reach it."""
    coming = [gamma for w in range(cfg.senders) if cfg.feeds(w, r) for _, gamma in _due(s, w, r)]
    if cfg.aggregated:
        mine = cfg.process(r)
        coming += [gamma for q, box in enumerate(s.out) if q != mine for _, gamma in box]
    return coming


def BootstrapView(cfg: RescaleConfig, s: State) -> bool:
    """Every member's view plus the batches on their way to it equals the accumulation of every batch ever sent."""
    for r in _members(s):
        view = s.exch.glob[r]
        for gamma in _coming(cfg, s, r):
            view = view + gamma
        if view != s.total:
            return False
    return True


def NoGap(cfg: RescaleConfig, s: State) -> bool:
    """For every member ``r`` and sender ``w``: the batches ``recvd[r][w] ..`` of ``w`` are on the link, once each,
    in order, and nothing beyond what ``w`` sent (none missed, none applied twice)."""
    for r in _members(s):
        for w in range(cfg.senders):
            if not cfg.feeds(w, r):
                continue
            k0 = s.recvd[r][w]
            if [k for k, _ in _due(s, w, r)] != list(range(k0, len(s.hist[w]))):
                return False
    return True


def glob_lemma(cfg: RescaleConfig, s: State) -> bool:
    """Lemma ``glob`` (§4) for members: an update to ``p`` on its way to ``r`` implies ``∃p' ≤ p. glob r #z p' > 0``."""
    le = cfg.poset.le
    for r in _members(s):
        pos = [q for q, k in s.exch.glob[r].items() if k > 0]
        for gamma in _coming(cfg, s, r):
            if not all(any(le(q, p) for q in pos) for p in gamma):
                return False
    return True


def Accounting(cfg: RescaleConfig, s: State) -> bool:
    """Every pointstamp is accounted for: ``rec = total + Σ_w temp w`` (broadcast or still unsent)."""
    unsent: ZMSet[Any] = ZMSet()
    for t in s.exch.temp:
        unsent = unsent + t
    return E.rec(s.exch) == s.total + unsent


def Membership(cfg: RescaleConfig, s: State) -> bool:
    """Only members and a leaver hold capabilities or unsent updates; capabilities travel only to members or the
    newcomer; links run only from workers that joined into members or the newcomer."""
    e = s.exch
    holders = (MEMBER, LEAVING)
    for w, st in enumerate(s.status):
        if st not in holders and (e.caps[w] or e.temp[w]):
            return False
    if any(s.status[r] not in (MEMBER, JOINING) for r, _ in e.data):
        return False
    for w, row in enumerate(s.links):
        for r, q in enumerate(row):
            if not q:
                continue
            # An aggregate sender stands for its process: only the receiving end is judged.
            if (w < cfg.workers and s.status[w] in (OUT, JOINING, LEFT)) or s.status[r] not in (MEMBER, JOINING):
                return False
    return True

"""Leaving in the rescaling model.

Leave (§6.1): ``leave`` agrees on the hand-over (the leaver stops operating, its
incoming links close); once the leaver is flushed (no unsent update, every
batch it sent applied by every member) ``hand_over`` moves its capabilities to
a survivor (its keyed state and pending data travel with them) in one step, so
they never leave ``rec``; ``disconnect`` follows.
"""

from __future__ import annotations

from typing import Any

from pytimely.verify import exchange as E
from pytimely.verify.mutants import Mutant
from pytimely.verify.rescale.capabilities import _mint_for, _transfer
from pytimely.verify.rescale.state import LEAVING, LEFT, MEMBER, Leave, RescaleConfig, State, _quiet, _set, _status
from pytimely.verify.zmset import ZMSet

# --- leave ------------------------------------------------------------------------------------------------


def leave_enabled(cfg: RescaleConfig, s: State, w: int, heir: int) -> bool:
    """``leave w heir``: both members, no membership change in progress, no capability on its way to ``w``."""
    return (
        _quiet(s)
        and s.leaves < cfg.max_leaves
        and w != heir
        and s.status[w] == MEMBER
        and s.status[heir] == MEMBER
        and not any(r == w for r, _ in s.exch.data)
    )


def leave(cfg: RescaleConfig, s: State, w: int, heir: int) -> State:
    """Effect of ``leave``: ``w`` stops operating at the agreed point; its incoming links close, its view goes.

    Under ``leave-drops-early`` ``w`` also drops its capabilities now (reporting
    them in ``temp w``) and keeps a note of them to hand over.
    """
    e = s.exch
    dropped: ZMSet[Any] = ZMSet()
    if cfg.mutant is Mutant.LEAVE_DROPS_EARLY:
        dropped = e.caps[w]
        e = E.perf_op(cfg.exchange, e, w, dropped, ZMSet(), ZMSet())
    links = tuple(_set(row, w, ()) for row in s.links)
    e = e._replace(glob=_set(e.glob, w, ZMSet()))
    return s._replace(
        exch=e,
        status=_status(s, w, LEAVING),
        links=links,
        recvd=_set(s.recvd, w, (0,) * cfg.senders),
        leave=Leave(w, heir, False, dropped),
        leaves=s.leaves + 1,
    )


def hand_over_enabled(cfg: RescaleConfig, s: State) -> bool:
    """``hand_over``: a leave is agreed and not yet handed over, and the leaver is flushed: it has no unsent
    update and every batch it sent has been applied by every member (``leave-drops-early`` waits for no flush).

    The flush is what makes handing a capability at the same pointstamp safe: a
    member that drops an inherited capability reports it on its own links, which
    must not overtake the leaver's earlier report of that capability.
    """
    lv = s.leave
    if lv is None or lv.handed:
        return False
    if cfg.mutant is Mutant.LEAVE_DROPS_EARLY:
        return True
    return not s.exch.temp[lv.leaver] and _delivered(cfg, s, lv.leaver)


def _delivered(cfg: RescaleConfig, s: State, w: int) -> bool:
    """Whether every batch ``w`` sent has been applied by every receiver: none on its links and (aggregated) none
    in its process's outbox, none on its process's aggregate sender's links."""
    if any(s.links[w]):
        return False
    if not cfg.aggregated:
        return True
    p = cfg.process(w)
    return not any(v == w for v, _ in s.out[p]) and not any(s.links[cfg.aggregate(p)])


def hand_over(cfg: RescaleConfig, s: State) -> State:
    """Effect: the leaver's capabilities (with its keyed state and pending data) go to the heir in one step.

    Under ``leave-drops-early`` they were dropped already and are minted again for the heir.
    """
    lv = s.leave
    assert lv is not None
    if cfg.mutant is Mutant.LEAVE_DROPS_EARLY:
        e = _mint_for(cfg, s.exch, lv.leaver, lv.heir, lv.dropped)
    else:
        e = _transfer(cfg, s.exch, lv.leaver, lv.heir, s.exch.caps[lv.leaver])
    return s._replace(exch=e, leave=lv._replace(handed=True, dropped=ZMSet()))


def disconnect_enabled(s: State, cfg: RescaleConfig | None = None) -> bool:
    """``disconnect``: handed over, nothing left to report, and every batch of the leaver delivered (with aggregated
    senders, ``cfg`` says so: through its process's outbox and aggregate sender too)."""
    lv = s.leave
    if lv is None or not lv.handed:
        return False
    w = lv.leaver
    if s.exch.caps[w] or s.exch.temp[w]:
        return False
    return not any(s.links[w]) if cfg is None else _delivered(cfg, s, w)


def disconnect(cfg: RescaleConfig, s: State) -> State:
    """Effect: the leaver has left; the others carry on."""
    lv = s.leave
    assert lv is not None
    return s._replace(status=_status(s, lv.leaver, LEFT), leave=None)

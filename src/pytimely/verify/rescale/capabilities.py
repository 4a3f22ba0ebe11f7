"""Capabilities handed over in the rescaling model: a leaver's moved to its heir (§6.1), and the ones a server
mints for a newcomer (§6.2, ``announce``).
"""

from __future__ import annotations

from typing import Any

from pytimely.verify import exchange as E
from pytimely.verify.mutants import Mutant
from pytimely.verify.rescale.state import RescaleConfig, State, _boot_of, _with_boot
from pytimely.verify.zmset import ZMSet, frontier

# --- capabilities handed over (§6.1, §6.2) ----------------------------------------------------------------


def _transfer(cfg: RescaleConfig, e: E.State, w: int, to: int, C: ZMSet[Any]) -> E.State:
    """``perf_op w C {(to, p) | p ∈ C} {}``: ``caps w`` loses ``C``, ``data`` gains it, ``temp w`` is unchanged."""
    return E.perf_op(cfg.exchange, e, w, C, C.image(lambda p: (to, p)), ZMSet())


def _mint_for(cfg: RescaleConfig, e: E.State, w: int, to: int, C: ZMSet[Any]) -> E.State:
    """``perf_op w {} {(to, p) | p ∈ C} {}``: ``data`` and ``temp w`` gain ``C`` (the broken variants)."""
    return E.perf_op(cfg.exchange, e, w, ZMSet(), C.image(lambda p: (to, p)), ZMSet())


def announce_enabled(cfg: RescaleConfig, s: State, p: Any, n: int | None = None) -> bool:
    """``announce p``: during a bootstrap the server mints a capability at ``p`` for the newcomer (§6.2).

    It is Fig. 4's ``perf_op server {} {(newcomer, p)} {}``: the server holds a
    capability strictly below ``p``. Under ``announce-at-view-frontier`` (§6.2 as
    worded) ``p`` need only be at the frontier of the server's view; under ``announce-clone`` (the runtime's rule
    before issue 15) the server need only hold a capability at or below ``p``.
    """
    b = _boot_of(s, n)
    if b is None or b.announced >= cfg.max_announce:
        return False
    e = s.exch
    if cfg.mutant is Mutant.ANNOUNCE_AT_VIEW_FRONTIER:
        return p in frontier(e.glob[b.server], cfg.poset.lt)
    if cfg.mutant is Mutant.ANNOUNCE_CLONE:
        return any(cfg.poset.le(q, p) for q, c in e.caps[b.server].items() if c > 0)
    return E.perf_op_enabled(cfg.exchange, e, b.server, ZMSet(), ZMSet.of((b.newcomer, p)), ZMSet())


def announce(cfg: RescaleConfig, s: State, p: Any, n: int | None = None) -> State:
    """Effect: ``data`` gains ``(newcomer, p)`` and ``temp server`` gains ``p`` (the server's ``(p, +1)``); the
    newcomer takes it with ``recv_cap`` once a member and retires it with ``perf_op`` (its ``(p, -1)``)."""
    b = _boot_of(s, n)
    assert b is not None
    e = _mint_for(cfg, s.exch, b.server, b.newcomer, ZMSet.of(p))
    return _with_boot(s._replace(exch=e), b._replace(announced=b.announced + 1))

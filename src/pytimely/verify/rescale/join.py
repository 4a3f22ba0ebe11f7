"""Joining in the rescaling model: the bootstrap protocol.

Join (§3.1, §3.4): the newcomer connects to every member and each link into it
starts with a bootstrap message carrying the next number on that link;
``bootstrap_state`` is the server's progress state (its view and, per sender,
the number of batches it includes); the newcomer requests each missing range
[state's number, link's number) from the server (``range_request``), which
answers once it has received them itself (``range_reply``); ``bootstrap_done``
makes the newcomer a member. During bootstrap the server announces a
capability for the newcomer (§6.2), minted the way Fig. 4 lets a worker send
one to another (it holds a capability strictly below); once a member the
newcomer receives it and retires it with an ordinary ``perf_op``.
"""

from __future__ import annotations

from pytimely.verify.mutants import Mutant
from pytimely.verify.rescale.state import (
    JOINING,
    MEMBER,
    OUT,
    Boot,
    RescaleConfig,
    State,
    _boot_of,
    _set,
    _status,
    _vacated,
    _with_boot,
)

# --- join: the bootstrap protocol -------------------------------------------------------------------------


def join_enabled(cfg: RescaleConfig, s: State, n: int, server: int) -> bool:
    """``join n server``: ``n`` has not joined yet, ``server`` is a member, no leave in progress and fewer than
    ``max_boots`` bootstraps."""
    return s.leave is None and len(s.boots) < cfg.max_boots and s.status[n] == OUT and s.status[server] == MEMBER


def join(cfg: RescaleConfig, s: State, n: int, server: int) -> State:
    """Effect of ``join``: ``n`` connects to every member and newcomer; each link ``m → n`` starts with ``m``'s
    next number.

    A newcomer still bootstrapping greets ``n`` too (it has sent nothing: its
    number is 0), and ``n``'s link into it starts at 0 with no message (the
    runtime's ``Bootstrap.joined``): recorded as a bootstrap message of 0.
    Under ``no-bootstrap-message`` the links start without it.
    """
    if cfg.mutant is Mutant.NO_BOOTSTRAP_MESSAGE:
        hello: tuple[int | None, ...] = (None,) * cfg.senders
    else:
        greeters = _greeters(cfg, s, n)
        hello = tuple(len(s.hist[m]) if m in greeters else None for m in range(cfg.senders))
    # Aggregated, ``n``'s batches reach an earlier newcomer of another process through ``n``'s aggregate sender.
    boots = tuple(b._replace(hello=_set(b.hello, _stream(cfg, n, b.newcomer), 0)) for b in s.boots)
    boot = Boot(n, server, hello, None, frozenset(), frozenset(), 0)
    return s._replace(status=_status(s, n, JOINING), boots=(*boots, boot))


def _greeters(cfg: RescaleConfig, s: State, n: int) -> set[int]:
    """The senders whose links into newcomer ``n`` start with a bootstrap message: every member and newcomer (worker
    senders), or aggregated the workers of ``n``'s process and the aggregate senders of the other processes with a
    member or newcomer."""
    joined = [m for m, st in enumerate(s.status) if st in (MEMBER, JOINING)]
    if not cfg.aggregated:
        return set(joined)
    return {m for m in joined if cfg.feeds(m, n)} | {
        cfg.aggregate(cfg.process(m)) for m in joined if cfg.feeds(cfg.aggregate(cfg.process(m)), n)
    }


def _member_senders(cfg: RescaleConfig, s: State, n: int) -> set[int]:
    """The senders with a member behind them whose links reach ``n`` (a worker, or the aggregate sender of a
    process with a member)."""
    members = [m for m, st in enumerate(s.status) if st == MEMBER]
    return {_stream(cfg, m, n) for m in members}


def _stream(cfg: RescaleConfig, w: int, r: int) -> int:
    """The sender id whose links carry worker ``w``'s batches to worker ``r``."""
    return w if cfg.feeds(w, r) else cfg.aggregate(cfg.process(w))


def bootstrap_state_enabled(s: State, n: int | None = None, cfg: RescaleConfig | None = None) -> bool:
    """``bootstrap_state``: ``n``'s bootstrap (default: the oldest) is in progress, its state not sent yet; with
    aggregated senders (``cfg``) also the server's process's outbox is empty and the server has applied every batch
    of its process's workers (unless ``state-unflushed``)."""
    b = _boot_of(s, n)
    if b is None or b.base is not None:
        return False
    if cfg is None or not cfg.aggregated or cfg.mutant is Mutant.STATE_UNFLUSHED:
        return True
    p = cfg.process(b.server)
    mine = [w for w in range(cfg.workers) if cfg.process(w) == p]
    return not s.out[p] and not any(s.links[w][b.server] for w in mine)


def bootstrap_state(cfg: RescaleConfig, s: State, n: int | None = None) -> State:
    """Effect: the newcomer's view becomes the server's, and ``base`` the server's ``recvd`` (step 3 of §3.4); with
    aggregated senders the server's state includes every combined batch its own process has sent."""
    b = _boot_of(s, n)
    assert b is not None
    e = s.exch
    e = e._replace(glob=_set(e.glob, b.newcomer, e.glob[b.server]))
    base = s.recvd[b.server]
    if cfg.aggregated:
        a = cfg.aggregate(cfg.process(b.server))
        base = _set(base, a, len(s.hist[a]))
    return _with_boot(s._replace(exch=e), b._replace(base=base))


def missing_range(cfg: RescaleConfig, b: Boot, m: int) -> tuple[int, int] | None:
    """The range ``[lo, hi)`` of ``m``'s batches neither in the state nor on the link, if the newcomer can tell.

    ``lo`` is the state's number for ``m`` (one more under ``range-off-by-one``),
    ``hi`` the link's bootstrap message; ``None`` without both.
    """
    hi = b.hello[m]
    if b.base is None or hi is None:
        return None
    lo = b.base[m] + (1 if cfg.mutant is Mutant.RANGE_OFF_BY_ONE else 0)
    return lo, hi


def _needs_range(cfg: RescaleConfig, b: Boot, m: int) -> bool:
    rng = missing_range(cfg, b, m)
    return rng is not None and rng[0] < rng[1]


def range_request_enabled(cfg: RescaleConfig, s: State, m: int, n: int | None = None) -> bool:
    """``range_request m``: the range of ``m`` is non-empty and not yet requested (steps 6–7)."""
    b = _boot_of(s, n)
    if b is None or not _needs_range(cfg, b, m) or m in b.filled:
        return False
    return not any(x == m for x, _, _ in b.pending)


def range_request(cfg: RescaleConfig, s: State, m: int, n: int | None = None) -> State:
    """Effect: the request ``(m, lo, hi)`` goes to the server."""
    b = _boot_of(s, n)
    assert b is not None
    rng = missing_range(cfg, b, m)
    assert rng is not None
    return _with_boot(s, b._replace(pending=b.pending | {(m, *rng)}))


def range_reply_enabled(s: State, m: int, lo: int, hi: int, n: int | None = None) -> bool:
    """``range_reply``: the request is pending and the server has received ``m``'s batches up to ``hi`` (step 8).

    (Aggregated, no range of the server's own process's aggregate sender is ever missing: the state includes every
    combined batch it sent, the link's bootstrap message was taken earlier.)"""
    b = _boot_of(s, n)
    return b is not None and (m, lo, hi) in b.pending and s.recvd[b.server][m] >= hi


def range_reply(cfg: RescaleConfig, s: State, m: int, lo: int, hi: int, n: int | None = None) -> State:
    """Effect: the batches ``lo .. hi-1`` of ``m`` the server recorded are added to the newcomer's view."""
    b = _boot_of(s, n)
    assert b is not None
    e = s.exch
    view = e.glob[b.newcomer]
    for gamma in s.hist[m][lo:hi]:
        view = view + gamma
    b2 = b._replace(pending=b.pending - {(m, lo, hi)}, filled=b.filled | {m})
    return _with_boot(s._replace(exch=e._replace(glob=_set(e.glob, b.newcomer, view))), b2)


def bootstrap_done_enabled(cfg: RescaleConfig, s: State, n: int | None = None) -> bool:
    """``bootstrap_done``: the state arrived, every member's link has its bootstrap message, every range is answered.

    Under ``no-bootstrap-message`` a link without one counts as nothing missing.
    """
    b = _boot_of(s, n)
    if b is None or b.base is None or b.pending:
        return False
    for m in sorted(_member_senders(cfg, s, b.newcomer)):
        if b.hello[m] is None and cfg.mutant is not Mutant.NO_BOOTSTRAP_MESSAGE:
            return False
        if _needs_range(cfg, b, m) and m not in b.filled:
            return False
    return True


def bootstrap_done(cfg: RescaleConfig, s: State, n: int | None = None) -> State:
    """Effect: the newcomer becomes a member expecting from each sender the later of the state's and the link's
    number."""
    b = _boot_of(s, n)
    assert b is not None and b.base is not None
    n = b.newcomer
    nxt = tuple(b.base[m] if h is None else max(b.base[m], h) for m, h in enumerate(b.hello))
    e = _vacated(cfg, s.exch, n)
    boots = tuple(x for x in s.boots if x.newcomer != n)
    return s._replace(exch=e, status=_status(s, n, MEMBER), recvd=_set(s.recvd, n, nxt), boots=boots)

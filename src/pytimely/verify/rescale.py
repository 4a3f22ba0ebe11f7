"""Rescaling (seed ``002_640294948a1fdfd3.txt``): the exchange protocol of Fig. 4 with workers that join and leave.

Workers have stable ids ``0 .. workers-1``; the first ``members`` start in the
cluster, the others may join later, one membership change at a time. Each
worker numbers the progress batches it sends (``hist[w][k]`` is its batch
``k``: its retained history, and the ghost history the invariants compare
against); every link ``s → r`` is a FIFO of ``(k, batch)``; ``recvd[r][s]`` is
the next number ``r`` expects from ``s``. Capabilities, in-flight
capabilities, unsent updates, views and the ``Safe`` ghost are one exchange
configuration (:class:`pytimely.verify.exchange.State`, over every id), moved by
the exchange protocol's own ``perf_op`` and ``recv_cap``.

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

Leave (§6.1): ``leave`` agrees on the hand-over (the leaver stops operating, its
incoming links close); once the leaver is flushed (no unsent update, every
batch it sent applied by every member) ``hand_over`` moves its capabilities to
a survivor (its keyed state and pending data travel with them) in one step, so
they never leave ``rec``; ``disconnect`` follows.

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

Every enabling condition reads the configuration's
:class:`~pytimely.verify.mutants.Mutant` switch, so the deliberately broken
variants run through this same code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Any, NamedTuple

from pytimely.verify import exchange as E
from pytimely.verify.model import Action, Invariant, TransitionInvariant, fmt_value
from pytimely.verify.mutants import RESCALE_MUTANTS, Mutant
from pytimely.verify.poset import Poset
from pytimely.verify.zmset import ZMSet, frontier, multisets_upto, nonempty_subsets

__all__ = [
    "JOINING",
    "LEAVING",
    "LEFT",
    "MEMBER",
    "OUT",
    "Accounting",
    "Boot",
    "BootstrapView",
    "Leave",
    "Membership",
    "NoGap",
    "RescaleConfig",
    "RescaleModel",
    "Safe",
    "State",
    "agg_send",
    "agg_send_enabled",
    "announce",
    "announce_enabled",
    "bootstrap_done",
    "bootstrap_done_enabled",
    "bootstrap_state",
    "bootstrap_state_enabled",
    "disconnect",
    "disconnect_enabled",
    "glob_lemma",
    "hand_over",
    "hand_over_enabled",
    "initial_states",
    "join",
    "join_enabled",
    "leave",
    "leave_enabled",
    "missing_range",
    "range_reply",
    "range_reply_enabled",
    "range_request",
    "range_request_enabled",
    "recv_upd",
    "recv_upd_enabled",
    "send_upd",
    "send_upd_enabled",
]

OUT, JOINING, MEMBER, LEAVING, LEFT = "-", "j", "m", "l", "x"
"""A worker's status, one character per id in ``State.status``: not joined yet, bootstrapping, member, leaving, left."""

Batch = tuple[int, ZMSet[Any]]
"""A progress batch on a link: the sender's sequence number and the updates."""
Link = tuple[Batch, ...]


class Boot(NamedTuple):
    """A bootstrap in progress (§3.4): the newcomer, its server and what the newcomer has learnt so far."""

    newcomer: int
    server: int
    hello: tuple[int | None, ...]
    """Per sender: the bootstrap message at the head of its link to the newcomer (the next number), if any."""
    base: tuple[int, ...] | None
    """Per sender: how many of its batches the server's state includes (``None`` until the state arrived)."""
    pending: frozenset[tuple[int, int, int]]
    """Range requests ``(sender, lo, hi)`` the server has not answered yet."""
    filled: frozenset[int]
    """Senders whose missing range the server has answered."""
    announced: int
    """How many capabilities the server has handed to the newcomer (§6.2)."""


class Leave(NamedTuple):
    """A leave in progress (§6.1): who leaves, who inherits its capabilities, whether they were handed over."""

    leaver: int
    heir: int
    handed: bool
    dropped: ZMSet[Any]
    """Under ``leave-drops-early``: the capabilities the leaver dropped before handing its state over."""


class State(NamedTuple):
    """The exchange configuration over every id, plus membership, sequenced links and the ghosts."""

    exch: E.State
    """``caps``, ``data``, ``temp``, ``glob`` and the ghost ``vacated`` (its ``msg`` stays empty: see ``links``)."""
    status: str
    links: tuple[tuple[Link, ...], ...]
    """``links[s][r]``: the batches on their way from sender ``s`` (a worker, or an aggregate sender numbered after the
    workers) to worker ``r``, oldest first."""
    recvd: tuple[tuple[int, ...], ...]
    """``recvd[r][s]``: the number of the next batch ``r`` will apply from ``s``."""
    hist: tuple[tuple[ZMSet[Any], ...], ...]
    """``hist[s][k]``: batch ``k`` of ``s`` (what ``s`` retains; also the ghost history)."""
    total: ZMSet[Any]
    """Ghost: the initial capabilities plus every batch ever sent."""
    boots: tuple[Boot, ...]
    """The bootstraps in progress, oldest first (more than one: newcomers joining at once)."""
    leave: Leave | None
    leaves: int
    """How many workers have started to leave (bounded by ``max_leaves``)."""
    out: tuple[tuple[tuple[int, ZMSet[Any]], ...], ...] = ()
    """With aggregated senders: per process, the ``(worker, batch)`` pairs in its outbox, oldest first."""

    @property
    def boot(self) -> Boot | None:
        """The oldest bootstrap in progress, if any."""
        return self.boots[0] if self.boots else None


@dataclass(frozen=True)
class RescaleConfig:
    """Initial members, joiners, leaves, the exchange bounds and the mutant switch."""

    poset: Poset
    members: int = 2
    """Workers ``0 .. members-1`` start in the cluster."""
    joiners: int = 1
    """Workers ``members .. members+joiners-1`` may join (``max_boots`` bootstraps at a time)."""
    max_leaves: int = 0
    init_caps: int = 1
    init_total: int | None = 1
    max_caps: int = 2
    max_data: int = 1
    max_neg: int = 1
    max_data_delta: int = 1
    max_self: int = 1
    max_op_size: int | None = 1
    """At most this many elements in one ``perf_op`` (``Δneg``, ``Δdata`` and ``Δself`` together)."""
    max_batches: int = 2
    """``send_upd`` is disabled once a worker has sent this many batches."""
    queue_bound: int = 2
    """``send_upd`` is disabled while a link of the sender holds this many batches."""
    max_announce: int = 1
    """At most this many capabilities the bootstrap server hands to one newcomer."""
    max_boots: int = 1
    """At most this many bootstraps at once: above 1, newcomers join while others still bootstrap."""
    processes: tuple[int, ...] | None = None
    """With aggregated senders: the process of every worker id (``None``: every batch goes to every worker)."""
    mutant: Mutant | None = None
    depth: int = 10
    name: str = ""
    exchange: E.ExchangeConfig = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.mutant is not None and self.mutant not in RESCALE_MUTANTS:
            raise ValueError(f"mutant {self.mutant} does not apply to the rescaling model")
        if self.members < 1:
            raise ValueError("at least one initial member is needed")
        if self.processes is not None:
            if len(self.processes) != self.members + self.joiners:
                raise ValueError("processes must name the process of every worker id")
            if set(self.processes[: self.members]) & set(self.processes[self.members :]):
                raise ValueError("a worker that joins comes in a process of its own, not one of an initial member")
        # queue_bound=0 switches the exchange part's own send_upd off: batches go out on the sequenced links
        exch = E.ExchangeConfig(
            self.poset,
            workers=self.workers,
            init_caps=self.init_caps,
            init_total=self.init_total,
            max_caps=self.max_caps,
            max_data=self.max_data,
            max_neg=self.max_neg,
            max_data_delta=self.max_data_delta,
            max_self=self.max_self,
            max_op_size=self.max_op_size,
            queue_bound=0,
            name=self.name,
        )
        object.__setattr__(self, "exchange", exch)

    @property
    def workers(self) -> int:
        """Every worker id that may ever take part: initial members and joiners."""
        return self.members + self.joiners

    @property
    def aggregated(self) -> bool:
        """Whether batches to other processes go through per-process outboxes and aggregate senders."""
        return self.processes is not None

    @property
    def process_count(self) -> int:
        """How many processes there are (0 without aggregated senders)."""
        return 0 if self.processes is None else max(self.processes) + 1

    @property
    def senders(self) -> int:
        """Every sender id: the workers, then (aggregated) one aggregate sender per process."""
        return self.workers + self.process_count

    def process(self, w: int) -> int:
        """The process of worker ``w`` (every worker its own without aggregated senders)."""
        return w if self.processes is None else self.processes[w]

    def aggregate(self, p: int) -> int:
        """The sender id of process ``p``'s combined batches."""
        return self.workers + p

    def feeds(self, sender: int, r: int) -> bool:
        """Whether ``sender``'s batches reach worker ``r`` at all: every worker's without aggregated senders; else
        those of the workers of ``r``'s own process and of the aggregate senders of the others."""
        if self.processes is None:
            return sender < self.workers
        if sender < self.workers:
            return self.processes[sender] == self.processes[r]
        return sender - self.workers != self.processes[r]

    @cached_property
    def targets(self) -> tuple[tuple[int, Any], ...]:
        """Every ``(worker, pointstamp)`` a ``Δdata`` may name (members only are let through)."""
        return tuple((w, p) for w in range(self.workers) for p in self.poset.elements)


# --- helpers ----------------------------------------------------------------------------------------------


def _set(t: tuple[Any, ...], i: int, v: Any) -> tuple[Any, ...]:
    return (*t[:i], v, *t[i + 1 :])


def _status(s: State, w: int, st: str) -> str:
    return s.status[:w] + st + s.status[w + 1 :]


def _receivers(s: State) -> list[int]:
    """Who a batch goes to: members and the newcomer (a leaver's incoming links are closed)."""
    return [r for r, st in enumerate(s.status) if st in (MEMBER, JOINING)]


def _targets(cfg: RescaleConfig, s: State, sender: int) -> list[int]:
    """The receivers ``sender``'s next batch goes to (``aggregate-skips-newcomer``: an aggregate sender's, to
    members only)."""
    targets = [r for r in _receivers(s) if cfg.feeds(sender, r)]
    if sender >= cfg.workers and cfg.mutant is Mutant.AGGREGATE_SKIPS_NEWCOMER:
        return [r for r in targets if s.status[r] == MEMBER]
    return targets


def _vacated(cfg: RescaleConfig, e: E.State, w: int) -> E.State:
    """Extend the ``Safe`` ghost with the pointstamps at which member ``w``'s view is vacant."""
    return e._replace(vacated=e.vacated | E._vacant_in(cfg.poset, e.glob[w]))


def _quiet(s: State) -> bool:
    """No membership change in progress."""
    return not s.boots and s.leave is None


def _boot_of(s: State, n: int | None) -> Boot | None:
    """The bootstrap of newcomer ``n`` (``None``: the oldest), if in progress."""
    if n is None:
        return s.boot
    return next((b for b in s.boots if b.newcomer == n), None)


def _with_boot(s: State, b: Boot) -> State:
    """``s`` with the bootstrap of ``b.newcomer`` replaced by ``b``."""
    return s._replace(boots=tuple(b if x.newcomer == b.newcomer else x for x in s.boots))


# --- Init -------------------------------------------------------------------------------------------------


def initial_states(cfg: RescaleConfig) -> Iterator[State]:
    """Every initial configuration: members hold at most ``init_caps`` capabilities, every member's view is ``rec``."""
    n = cfg.workers
    empty_msg = tuple(tuple(() for _ in range(n)) for _ in range(n))
    links: tuple[tuple[Link, ...], ...] = tuple(tuple(() for _ in range(n)) for _ in range(cfg.senders))
    recvd = tuple((0,) * cfg.senders for _ in range(n))
    out: tuple[tuple[tuple[int, ZMSet[Any]], ...], ...] = ((),) * cfg.process_count
    for caps in product(multisets_upto(cfg.poset.elements, cfg.init_caps), repeat=cfg.members):
        if cfg.init_total is not None and sum(m.total() for m in caps) > cfg.init_total:
            continue
        allcaps = (*caps, *(ZMSet() for _ in range(cfg.joiners)))
        e = E.State(allcaps, ZMSet(), empty_msg, (ZMSet(),) * n, (), frozenset())
        r = E.rec(e)
        e = e._replace(glob=(r,) * cfg.members + (ZMSet(),) * cfg.joiners)
        e = _vacated(cfg, e, 0)
        status = MEMBER * cfg.members + OUT * cfg.joiners
        yield State(e, status, links, recvd, ((),) * cfg.senders, r, (), None, 0, out)


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
        hello = tuple(len(s.hist[m]) if m in _greeters(cfg, s, n) else None for m in range(cfg.senders))
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


# --- the model --------------------------------------------------------------------------------------------


class RescaleModel:
    """The exchange protocol with join (bootstrap) and leave under the bounds of a :class:`RescaleConfig`."""

    name = "rescale"

    def __init__(self, cfg: RescaleConfig) -> None:
        self.cfg = cfg

    def initial_states(self) -> Iterator[State]:
        """See :func:`initial_states`."""
        return initial_states(self.cfg)

    def successors(self, s: State) -> Iterator[tuple[Action, State]]:
        """Every enabled action within the bounds (no stutter)."""
        cfg = self.cfg
        n = cfg.workers
        for act, e2 in E.exchange_actions(cfg.exchange, cfg.targets, s.exch, False):
            if s.status[act.arg("w")] != MEMBER:
                continue
            if act.name == "perf_op" and any(s.status[r] != MEMBER for r, _ in act.arg("Δdata")):
                continue
            yield act, s._replace(exch=e2)
        for w in range(n):
            if s.exch.temp[w]:
                for P in nonempty_subsets(s.exch.temp[w]):
                    if send_upd_enabled(cfg, s, w, P):
                        yield Action("send_upd", (("w", w), ("P", P))), send_upd(cfg, s, w, P)
        for w, r in product(range(cfg.senders), range(n)):
            if recv_upd_enabled(s, w, r):
                yield Action("recv_upd", (("w", w), ("w'", r))), recv_upd(cfg, s, w, r)
        for p in range(cfg.process_count):
            for k in range(1, len(s.out[p]) + 1):
                if agg_send_enabled(cfg, s, p, k):
                    yield Action("agg_send", (("p", p), ("k", k))), agg_send(cfg, s, p, k)
        yield from self._membership(s)

    def _membership(self, s: State) -> Iterator[tuple[Action, State]]:
        cfg = self.cfg
        n = cfg.workers
        for b in s.boots:
            c = b.newcomer
            if bootstrap_state_enabled(s, c, cfg):
                act = Action("bootstrap_state", (("n", c), ("server", b.server)))
                yield act, bootstrap_state(cfg, s, c)
            for m in range(cfg.senders):
                if range_request_enabled(cfg, s, m, c):
                    lo, hi = missing_range(cfg, b, m) or (0, 0)
                    act = Action("range_request", (("n", c), ("w", m), ("lo", lo), ("hi", hi)))
                    yield act, range_request(cfg, s, m, c)
            for m, lo, hi in sorted(b.pending):
                if range_reply_enabled(s, m, lo, hi, c):
                    act = Action("range_reply", (("server", b.server), ("w", m), ("lo", lo), ("hi", hi)))
                    yield act, range_reply(cfg, s, m, lo, hi, c)
            for p in cfg.poset.elements:
                if announce_enabled(cfg, s, p, c):
                    act = Action("announce", (("server", b.server), ("n", c), ("p", p)))
                    yield act, announce(cfg, s, p, c)
            if bootstrap_done_enabled(cfg, s, c):
                yield Action("bootstrap_done", (("n", c),)), bootstrap_done(cfg, s, c)
        lv = s.leave
        if lv is not None:
            if hand_over_enabled(cfg, s):
                yield Action("hand_over", (("w", lv.leaver), ("heir", lv.heir))), hand_over(cfg, s)
            if disconnect_enabled(s, cfg):
                yield Action("disconnect", (("w", lv.leaver),)), disconnect(cfg, s)
        if s.leave is not None:
            return
        for w, r in product(range(n), range(n)):
            if join_enabled(cfg, s, w, r):
                yield Action("join", (("n", w), ("server", r))), join(cfg, s, w, r)
            if leave_enabled(cfg, s, w, r):
                yield Action("leave", (("w", w), ("heir", r))), leave(cfg, s, w, r)

    def invariants(self) -> list[Invariant[State]]:
        """``Safe``, ``BootstrapView``, ``NoGap``, lemma ``glob``, ``Accounting``, ``InvTempJustified``,
        ``InvCapsNonneg`` and ``Membership`` (with aggregated senders, the outboxes count as on their way)."""
        cfg = self.cfg
        ec = cfg.exchange
        return [
            Invariant("Safe", lambda s: Safe(cfg, s)),
            Invariant("BootstrapView", lambda s: BootstrapView(cfg, s)),
            Invariant("NoGap", lambda s: NoGap(cfg, s)),
            Invariant("glob", lambda s: glob_lemma(cfg, s)),
            Invariant("Accounting", lambda s: Accounting(cfg, s)),
            Invariant("InvTempJustified", lambda s: E.temp_justified(ec, s.exch)),
            Invariant("InvCapsNonneg", lambda s: E.caps_nonneg(ec, s.exch)),
            Invariant("Membership", lambda s: Membership(cfg, s)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[State]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, s: State) -> str:
        """Status, capabilities, data, unsent updates, non-empty links, member views and the bootstrap on one line."""
        return format_rescale(self.cfg, s)


def format_rescale(cfg: RescaleConfig, s: State) -> str:
    """A one-line rendering of a rescaling configuration."""
    e = s.exch
    n = cfg.workers

    def name(w: int) -> str:
        return str(w) if w < n else f"a{w - n}"

    links = [f"{name(w)}->{r}:{list(s.links[w][r])}" for w in range(cfg.senders) for r in range(n) if s.links[w][r]]
    views = [f"{w}:{e.glob[w]}" for w in range(n) if s.status[w] in (MEMBER, JOINING)]
    out = (
        f"status={s.status} caps={list(e.caps)} data={e.data} temp={list(e.temp)} "
        f"links=[{', '.join(links)}] glob=[{', '.join(views)}] recvd={[list(r) for r in s.recvd]}"
    )
    for b in s.boots:
        out += f" boot(n={b.newcomer}, server={b.server}, hello={list(b.hello)}, base={b.base}"
        out += f", pending={fmt_value(b.pending)}, filled={fmt_value(b.filled)})"
    if s.leave is not None:
        out += f" leave({s.leave.leaver}->{s.leave.heir}, handed={s.leave.handed})"
    boxes = [f"out{p}:{[(w, g) for w, g in box]}" for p, box in enumerate(s.out) if box]
    if boxes:
        out += " " + " ".join(boxes)
    return out + f" vacated={fmt_value(e.vacated)}"


# --- snapshots and restarts (issue 28) ----------------------------------------------------------------------------
#
# The model above follows progress; this one follows keyed state through the same membership changes and adds
# what recovery does with it: snapshots at epoch boundaries, commits, a crash and a restart on any number of
# workers. Bins hold a count of the records applied to them; the records of epoch ``e`` for bin ``b`` are fixed by
# the configuration, so the right count after epoch ``e`` (``truth``) is known. Records reach the owner of their
# bin's at their epoch; a join or a leave moves bins at an epoch (Megaphone's moves, seed 002 §3.5): the old
# owner ships the bin once it has applied every earlier record, the new owner installs it. Each worker snapshots
# at its fence once nothing at or before the fence is left anywhere, reports the bins it holds (and those it
# held and gave away), and moves the fence on; a snapshot is committed once every member has reported, folded
# into the one before. A crash loses everything but the committed snapshot; a restart on ``k`` workers gives bin
# ``b`` to worker ``b % k`` and resumes at the epoch after the snapshot.
#
# The runtime's rule that the model exists to check is the fence: while a worker's fence stands at ``f`` it
# applies no record and installs no bin of a later epoch (the runtime holds those messages back), and ships no
# bin at a later epoch (``OperatorInfo.may_change``). ``SnapshotExact`` fails without it (mutants ``no-fence``
# and ``ship-early``).

NO_FENCE = "no-fence"
"""Mutant: records and installs of later epochs are taken while a snapshot is pending."""
SHIP_EARLY = "ship-early"
"""Mutant: a bin moving at a later epoch is shipped while a snapshot is pending."""
SNAPSHOT_MUTANTS = (NO_FENCE, SHIP_EARLY)


@dataclass(frozen=True)
class SnapshotConfig:
    """Bins, epochs and which bins have records at which epochs; workers; joins, leaves, restarts; a mutant."""

    bins: int = 2
    epochs: int = 3
    records: frozenset[tuple[int, int]] = frozenset({(0, 0), (1, 0), (0, 1), (1, 2)})
    """``(bin, epoch)``: a record for the bin at that epoch."""
    clears: frozenset[tuple[int, int]] = frozenset()
    """``(bin, epoch)``: a record that empties the bin (its keys are deleted: the bin goes from the snapshot)."""
    workers: int = 3
    """Worker ids ``0 .. workers-1`` (a restart starts ids again from 0)."""
    members: int = 2
    every: int = 1
    """Snapshot epochs ``e`` with ``e % every == every - 1`` (:class:`pytimely.recovery.SnapshotPolicy`)."""
    max_joins: int = 1
    max_leaves: int = 1
    max_restarts: int = 1
    mutant: str | None = None

    def truth(self, b: int, epoch: int) -> int:
        """The count of bin ``b`` once every record at an epoch ``<= epoch`` is applied."""
        # A clear empties the bin before the record of its own epoch is applied.
        cleared = max((ce for cb, ce in self.clears if cb == b and ce <= epoch), default=-1)
        return sum(1 for (rb, re) in self.records if rb == b and cleared <= re <= epoch)

    def changes(self, b: int, epoch: int) -> bool:
        """Whether a record changes bin ``b`` at ``epoch``."""
        return (b, epoch) in self.records or (b, epoch) in self.clears

    def first_at_or_after(self, epoch: int) -> int:
        """The first snapshot epoch ``>= epoch``."""
        return epoch + (self.every - 1 - epoch % self.every)


IN_FLIGHT = -1
"""``SnapState.holder[b]`` while bin ``b`` is shipped and not yet installed."""


class SnapState(NamedTuple):
    """A configuration of the snapshot model (module comment above)."""

    status: str
    """Per worker id: ``OUT``, ``MEMBER``, ``LEAVING`` or ``LEFT`` (joins and leaves are moves of bins here)."""
    released: int
    """Epochs the sources have sent: records of epochs ``< released`` exist."""
    holder: tuple[int, ...]
    """Per bin: the worker holding its state, or :data:`IN_FLIGHT`."""
    counts: tuple[int, ...]
    """Per bin: its count (where it is held, or in flight)."""
    done: tuple[int, ...]
    """Per bin: the last epoch applied to it (``-1``: none)."""
    moves: frozenset[tuple[int, int, int]]
    """``(bin, epoch, new owner)`` not yet installed (shipped or not)."""
    flight: frozenset[tuple[int, int, int]]
    """``(bin, epoch, new owner)`` shipped and not yet installed."""
    table: tuple[int, ...]
    """Per bin: its owner (a pending move names the owner from the move's epoch on)."""
    fence: tuple[int | None, ...]
    """Per worker: its fence (``None``: no more snapshots)."""
    stop: tuple[int | None, ...]
    """Per worker: the epoch it leaves at, if it leaves."""
    reported: tuple[frozenset[int], ...]
    """Per worker: the non-empty bins it held at its last snapshot, and those installed since (each reported
    empty at its next snapshot if it no longer holds it)."""
    parts: frozenset[tuple[int, int, tuple[tuple[int, int | None], ...]]]
    """``(epoch, worker, ((bin, count or None), ...))`` reported and not yet committed."""
    joined_at: tuple[int | None, ...]
    """Per worker: the epoch it joined at (``None``: a member from the start of the run)."""
    committed: tuple[int, tuple[int, ...]] | None
    """The newest committed snapshot: its epoch and every bin's count."""
    joins: int
    leaves: int
    restarts: int


def _snap_status(s: SnapState, w: int, st: str) -> str:
    return s.status[:w] + st + s.status[w + 1 :]


def snap_initial_states(cfg: SnapshotConfig) -> Iterator[SnapState]:
    """The one initial configuration: bin ``b`` on worker ``b % members``, fences at the first snapshot epoch."""
    n = cfg.workers
    yield SnapState(
        status=MEMBER * cfg.members + OUT * (n - cfg.members),
        released=0,
        holder=tuple(b % cfg.members for b in range(cfg.bins)),
        counts=(0,) * cfg.bins,
        done=(-1,) * cfg.bins,
        moves=frozenset(),
        flight=frozenset(),
        table=tuple(b % cfg.members for b in range(cfg.bins)),
        fence=tuple(cfg.first_at_or_after(0) if w < cfg.members else None for w in range(n)),
        stop=(None,) * n,
        reported=(frozenset(),) * n,
        parts=frozenset(),
        joined_at=(None,) * n,
        committed=None,
        joins=0,
        leaves=0,
        restarts=0,
    )


def _may(cfg: SnapshotConfig, s: SnapState, w: int, epoch: int, *, ship: bool = False) -> bool:
    """The fence rule: worker ``w`` may change state at ``epoch`` (a mutant lifts it)."""
    if cfg.mutant == (SHIP_EARLY if ship else NO_FENCE):
        return True
    fence = s.fence[w]
    return fence is None or epoch <= fence


def _owner_at(s: SnapState, b: int, epoch: int) -> int:
    """The owner of bin ``b`` at ``epoch``: a pending move's new owner from its epoch on, else the table's."""
    for mb, me, to in s.moves:
        if mb == b and me <= epoch:
            return to
    return s.table[b]


def snap_lows(s: SnapState, cfg: SnapshotConfig) -> list[int]:
    """The epochs of the pointstamps left: the sources' next epoch, records not yet applied, moves not done."""
    lows = [s.released] if s.released < cfg.epochs else []
    lows += [s.done[b] + 1 for b in range(cfg.bins) if s.done[b] + 1 < s.released]
    lows += [e for _, e, _ in s.moves]
    return lows


def release_enabled(cfg: SnapshotConfig, s: SnapState) -> bool:
    """``release``: the sources send the next epoch (none while a membership change waits to be made)."""
    return s.released < cfg.epochs


def release(cfg: SnapshotConfig, s: SnapState) -> SnapState:
    """Effect: records of one more epoch exist."""
    return s._replace(released=s.released + 1)


def apply_enabled(cfg: SnapshotConfig, s: SnapState, b: int) -> bool:
    """``apply b``: bin ``b``'s next epoch is released, its holder owns it then, and (with a record) may change."""
    e = s.done[b] + 1
    if e >= s.released:
        return False
    w = s.holder[b]
    if w == IN_FLIGHT or _owner_at(s, b, e) != w:
        return False
    return not cfg.changes(b, e) or _may(cfg, s, w, e)


def apply(cfg: SnapshotConfig, s: SnapState, b: int) -> SnapState:
    """Effect: the records of bin ``b`` at its next epoch (if any) are applied; the epoch is done for ``b``."""
    e = s.done[b] + 1
    count = 0 if (b, e) in cfg.clears else s.counts[b]
    count += 1 if (b, e) in cfg.records else 0
    return s._replace(counts=_set(s.counts, b, count), done=_set(s.done, b, e))


def ship_enabled(cfg: SnapshotConfig, s: SnapState, b: int) -> bool:
    """``ship b``: a move of ``b`` at ``e`` waits, every earlier epoch is applied, the holder may change at ``e``."""
    for move in s.moves:
        if move[0] == b and move not in s.flight:
            w = s.holder[b]
            return w != IN_FLIGHT and s.done[b] == move[1] - 1 and _may(cfg, s, w, move[1], ship=True)
    return False


def ship(cfg: SnapshotConfig, s: SnapState, b: int) -> SnapState:
    """Effect: the bin leaves its holder (its count travels with it)."""
    move = next(m for m in s.moves if m[0] == b)
    return s._replace(holder=_set(s.holder, b, IN_FLIGHT), flight=s.flight | {move})


def install_enabled(cfg: SnapshotConfig, s: SnapState, b: int) -> bool:
    """``install b``: a shipped bin reaches its new owner, which may change at the move's epoch."""
    return any(mb == b and _may(cfg, s, w, e) for mb, e, w in s.flight)


def install(cfg: SnapshotConfig, s: SnapState, b: int) -> SnapState:
    """Effect: the new owner holds the bin; the move is done. The new owner answers for the bin at its next
    snapshot even if it has emptied it by then (its last report of the bin was another worker's)."""
    move = next(m for m in s.flight if m[0] == b)
    to = move[2]
    return s._replace(
        holder=_set(s.holder, b, to), table=_set(s.table, b, to), flight=s.flight - {move},
        moves=s.moves - {move}, reported=_set(s.reported, to, s.reported[to] | {b}),
    )


def _rebalanced(s: SnapState, members: list[int]) -> dict[int, int]:
    """Bins that change owner when the members become ``members``: as few as keep shares within one."""
    from pytimely.algorithms.rescaling import rebalance

    return dict(rebalance(list(s.table), members))


def snap_join_enabled(cfg: SnapshotConfig, s: SnapState, n: int) -> bool:
    """``join n``: ``n`` is not in the run yet, no move is pending, joins left, epochs left to take part in."""
    return s.status[n] == OUT and not s.moves and s.joins < cfg.max_joins and s.released < cfg.epochs


def snap_join(cfg: SnapshotConfig, s: SnapState, n: int) -> SnapState:
    """Effect: ``n`` takes part from the next epoch; bins move to it then; its fence is the first at or after it."""
    at = s.released
    members = [w for w, st in enumerate(s.status) if st == MEMBER] + [n]
    moves = frozenset((b, at, w) for b, w in _rebalanced(s, members).items())
    return s._replace(
        status=_snap_status(s, n, MEMBER), moves=moves, joins=s.joins + 1,
        fence=_set(s.fence, n, cfg.first_at_or_after(at)), joined_at=_set(s.joined_at, n, at),
    )  # fmt: skip


def snap_leave_enabled(cfg: SnapshotConfig, s: SnapState, w: int) -> bool:
    """``leave w``: a member other than worker 0, no move pending, leaves left, epochs left."""
    return (
        w != 0 and s.status[w] == MEMBER and not s.moves and s.leaves < cfg.max_leaves and s.released < cfg.epochs
    )


def snap_leave(cfg: SnapshotConfig, s: SnapState, w: int) -> SnapState:
    """Effect: from the next epoch ``w``'s bins are the others'; it takes no snapshot at or after that epoch."""
    at = s.released
    members = [m for m, st in enumerate(s.status) if st == MEMBER and m != w]
    moves = frozenset((b, at, to) for b, to in _rebalanced(s, members).items())
    fence = s.fence[w]
    return s._replace(
        status=_snap_status(s, w, LEAVING), moves=moves, leaves=s.leaves + 1,
        stop=_set(s.stop, w, at), fence=_set(s.fence, w, None if fence is not None and fence >= at else fence),
    )  # fmt: skip


def gone_enabled(cfg: SnapshotConfig, s: SnapState, w: int) -> bool:
    """``gone w``: a leaver holds no bin, has shipped everything and taken its last snapshot."""
    return s.status[w] == LEAVING and w not in s.holder and s.fence[w] is None


def gone(cfg: SnapshotConfig, s: SnapState, w: int) -> SnapState:
    """Effect: the leaver has left."""
    return s._replace(status=_snap_status(s, w, LEFT))


def capture_plan(cfg: SnapshotConfig, s: SnapState, w: int) -> tuple[bool, int | None]:
    """Whether ``w`` snapshots now, and its fence after: its fence is passed once nothing at or before it is
    left; the next fence is the next snapshot epoch (none if nothing is left, or if ``w`` leaves by then)."""
    fence = s.fence[w]
    assert fence is not None
    lows = snap_lows(s, cfg)
    if not lows:
        return True, None
    if min(lows) <= fence:
        return False, fence
    after = cfg.first_at_or_after(fence + 1)
    stop = s.stop[w]
    return True, None if stop is not None and after >= stop else after


def capture_enabled(cfg: SnapshotConfig, s: SnapState, w: int) -> bool:
    """``capture w``: ``w``'s fence is passed (nothing at or before it is left anywhere)."""
    if s.status[w] not in (MEMBER, LEAVING) or s.fence[w] is None:
        return False
    return capture_plan(cfg, s, w)[0]


def snap_capture(cfg: SnapshotConfig, s: SnapState, w: int) -> SnapState:
    """Effect: ``w`` reports every bin it holds and every bin it held at its last snapshot and no longer does;
    its fence moves on (or ends: the run finished, or ``w`` leaves)."""
    fence = s.fence[w]
    assert fence is not None
    _, after = capture_plan(cfg, s, w)
    held = frozenset(b for b in range(cfg.bins) if s.holder[b] == w and s.counts[b])
    report: list[tuple[int, int | None]] = [(b, s.counts[b]) for b in sorted(held)]
    report += [(b, None) for b in sorted(s.reported[w] - held)]
    parts = s.parts | {(fence, w, tuple(report))}
    return s._replace(parts=parts, fence=_set(s.fence, w, after), reported=_set(s.reported, w, held))


def _expected_reporters(s: SnapState, epoch: int) -> list[int]:
    """The workers whose report of ``epoch`` a commit waits for: in the run at ``epoch`` and taking snapshots."""
    out = []
    for w, st in enumerate(s.status):
        if st not in (MEMBER, LEAVING, LEFT):
            continue
        joined, stop = s.joined_at[w], s.stop[w]
        if (joined is not None and joined > epoch) or (stop is not None and stop <= epoch):
            continue
        out.append(w)
    return out


def commit_enabled(cfg: SnapshotConfig, s: SnapState, epoch: int) -> bool:
    """``commit epoch``: reports of ``epoch`` are in, from every worker expected (the commit dataflow's frontier)."""
    if not any(e == epoch for e, _, _ in s.parts) or any(e < epoch for e, _, _ in s.parts):
        return False
    for w in _expected_reporters(s, epoch):
        fence = s.fence[w]
        if not any(e == epoch and r == w for e, r, _ in s.parts) and fence is not None and fence <= epoch:
            return False
    return True


def snap_commit(cfg: SnapshotConfig, s: SnapState, epoch: int) -> SnapState:
    """Effect: the reports of ``epoch`` are folded into the newest committed snapshot (a bin named by no report
    stays as it was; one reported empty and held by no report goes)."""
    counts = list(s.committed[1]) if s.committed is not None else [0] * cfg.bins
    reports = [r for e, _, r in s.parts if e == epoch]
    held = {b for report in reports for b, c in report if c is not None}
    for report in reports:
        for b, c in report:
            if c is not None:
                counts[b] = c
            elif b not in held:
                counts[b] = 0
    return s._replace(parts=frozenset(p for p in s.parts if p[0] != epoch), committed=(epoch, tuple(counts)))


def restart_enabled(cfg: SnapshotConfig, s: SnapState, k: int) -> bool:
    """``restart k``: the run crashes (anything but the committed snapshot is lost) and starts on ``k`` workers."""
    return s.restarts < cfg.max_restarts and 1 <= k <= cfg.workers


def restart(cfg: SnapshotConfig, s: SnapState, k: int) -> SnapState:
    """Effect: bin ``b`` restored on worker ``b % k`` with the snapshot's count; the sources resume at the epoch
    after the snapshot (what they send of earlier epochs is dropped)."""
    n = cfg.workers
    if s.committed is None:
        epoch, counts = -1, (0,) * cfg.bins
    else:
        epoch, counts = s.committed
    owners = tuple(b % k for b in range(cfg.bins))
    first = cfg.first_at_or_after(epoch + 1)
    return SnapState(
        status=MEMBER * k + OUT * (n - k),
        released=epoch + 1,
        holder=owners,
        counts=counts,
        done=(epoch,) * cfg.bins,
        moves=frozenset(),
        flight=frozenset(),
        table=owners,
        fence=tuple(first if w < k else None for w in range(n)),
        stop=(None,) * n,
        # What a worker restored it answers for: emptying a restored bin must reach the next snapshot.
        reported=tuple(frozenset(b for b in range(cfg.bins) if owners[b] == w and counts[b]) for w in range(n)),
        parts=frozenset(),
        joined_at=(None,) * n,
        committed=s.committed,
        joins=s.joins,
        leaves=s.leaves,
        restarts=s.restarts + 1,
    )


def SnapshotExact(cfg: SnapshotConfig, s: SnapState) -> bool:
    """The committed snapshot of epoch ``e`` holds every bin's count after exactly the records at epochs ``<= e``."""
    if s.committed is None:
        return True
    epoch, counts = s.committed
    return all(counts[b] == cfg.truth(b, epoch) for b in range(cfg.bins))


def CountsExact(cfg: SnapshotConfig, s: SnapState) -> bool:
    """Every bin's count (held or in flight) is its truth after the epochs applied to it: no record lost or twice."""
    return all(s.counts[b] == cfg.truth(b, s.done[b]) for b in range(cfg.bins))


def ReportsDisjoint(cfg: SnapshotConfig, s: SnapState) -> bool:
    """No two reports of one epoch hold the same bin (the runtime's merge refuses that)."""
    for epoch in {e for e, _, _ in s.parts}:
        seen: set[int] = set()
        for e, _, report in s.parts:
            if e != epoch:
                continue
            held = {b for b, c in report if c is not None}
            if held & seen:
                return False
            seen |= held
    return True


class SnapshotModel:
    """Keyed state through joins, leaves, snapshots, commits and a restart (see the comment above this section)."""

    name = "snapshots"

    def __init__(self, cfg: SnapshotConfig) -> None:
        self.cfg = cfg

    def initial_states(self) -> Iterator[SnapState]:
        """See :func:`snap_initial_states`."""
        return snap_initial_states(self.cfg)

    def successors(self, s: SnapState) -> Iterator[tuple[Action, SnapState]]:
        """Every enabled action."""
        cfg = self.cfg
        if release_enabled(cfg, s):
            yield Action("release", (("epoch", s.released),)), release(cfg, s)
        for b in range(cfg.bins):
            if apply_enabled(cfg, s, b):
                yield Action("apply", (("b", b), ("epoch", s.done[b] + 1))), apply(cfg, s, b)
            if ship_enabled(cfg, s, b):
                yield Action("ship", (("b", b),)), ship(cfg, s, b)
            if install_enabled(cfg, s, b):
                yield Action("install", (("b", b),)), install(cfg, s, b)
        for w in range(cfg.workers):
            if capture_enabled(cfg, s, w):
                yield Action("capture", (("w", w), ("epoch", s.fence[w]))), snap_capture(cfg, s, w)
            if snap_join_enabled(cfg, s, w):
                yield Action("join", (("n", w),)), snap_join(cfg, s, w)
            if snap_leave_enabled(cfg, s, w):
                yield Action("leave", (("w", w),)), snap_leave(cfg, s, w)
            if gone_enabled(cfg, s, w):
                yield Action("gone", (("w", w),)), gone(cfg, s, w)
        for epoch in sorted({e for e, _, _ in s.parts}):
            if commit_enabled(cfg, s, epoch):
                yield Action("commit", (("epoch", epoch),)), snap_commit(cfg, s, epoch)
        for k in range(1, cfg.workers + 1):
            if restart_enabled(cfg, s, k):
                yield Action("restart", (("k", k),)), restart(cfg, s, k)

    def invariants(self) -> list[Invariant[SnapState]]:
        """``SnapshotExact``, ``CountsExact`` and ``ReportsDisjoint``."""
        cfg = self.cfg
        return [
            Invariant("SnapshotExact", lambda s: SnapshotExact(cfg, s)),
            Invariant("CountsExact", lambda s: CountsExact(cfg, s)),
            Invariant("ReportsDisjoint", lambda s: ReportsDisjoint(cfg, s)),
        ]

    def transition_invariants(self) -> list[TransitionInvariant[SnapState]]:
        """None beyond the state invariants."""
        return []

    def format_state(self, s: SnapState) -> str:
        """A one-line rendering."""
        return (
            f"status={s.status} released={s.released} holder={list(s.holder)} count={list(s.counts)} "
            f"done={list(s.done)} moves={sorted(s.moves)} flight={sorted(s.flight)} fence={list(s.fence)} "
            f"parts={sorted(s.parts)} committed={s.committed}"
        )
